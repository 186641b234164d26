"""``ivm produce -c CONFIG RELATION FILE`` into the real broker, then the pipeline applies every update.

A configured relation ``visits`` whose schema has a string, a double, a boolean, a nullable string, a
timestamp-millis and a date beside its long id, on a topic of its own: inserts from a CSV file, changes
from a CSV file with a ``mult`` column (more copies, deletes), deletes from JSON lines on standard input
with ``--delete``.  The job (``start_job``, the configuration as ``ivm run`` reads it) ends at the
brute-force count of the self-join on ``user`` over the rows produced, and nothing is dead-lettered.
"""

from __future__ import annotations

import datetime
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ivm.processor.config import load_config
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import end_offsets
from tests.integration.helpers import read_until

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "record",
    "name": "Visit",
    "namespace": "test.relations",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "ok", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "mult", "type": "long"},
    ],
}
HEADER = "id,user,amount,ok,note,at,day"
USERS = ["ada", "alan", "grace, hopper", 'edsger "ewd"', "bārbara"]
QUERY = "Q() :- visits(i, u, x, o, n, t, d), visits(j, u, y, p, m, s, e)"  # pairs of visits by one user


def ivm(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ivm.processor.cli", *args], input=stdin, capture_output=True, text=True, timeout=300
    )


def csv_field(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"') else text


def visit(i: int, rng: random.Random) -> dict:
    """A row as JSON would give it (the CSV row is written from it)."""
    at = datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=rng.randrange(10**9))
    return {
        "id": i,
        "user": rng.choice(USERS),
        "amount": rng.randrange(-1000, 1000) / 8,
        "ok": rng.random() < 0.5,
        "note": None if rng.random() < 0.3 else f"note {i}",
        "at": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "day": str(at.date()),
    }


def csv_row(v: dict) -> str:
    note = "" if v["note"] is None else csv_field(v["note"])
    return ",".join([str(v["id"]), csv_field(v["user"]), str(v["amount"]), str(v["ok"]).lower(), note, v["at"],
                     v["day"]])  # fmt: skip


def test_produce_to_a_configured_relation_then_the_pipeline_applies_every_update(
    kafka, start_job, topic_prefix: str, tmp_path: Path
) -> None:
    (tmp_path / "visits.avsc").write_text(json.dumps(SCHEMA))
    config_path = tmp_path / "pipeline.toml"
    config_path.write_text(
        f'[processor]\nname = "{topic_prefix}pipe"\nstate_dir = "{tmp_path / "state"}"\n'
        f'[kafka]\nbootstrap = "{kafka.bootstrap}"\ndead_letter_topic = "{topic_prefix}dead-letter"\n'
        "[spark]\ntrigger_ms = 100\n"
        f'[[relations]]\nname = "visits"\ntopic = "{topic_prefix}visits"\nschema = "visits.avsc"\n'
        f'[[queries]]\nname = "{topic_prefix}same_user"\nquery = "{QUERY}"\n'
    )
    rng = random.Random(7)
    rows = [visit(i, rng) for i in range(60)]
    present: Counter = Counter()  # the relation's contents: the row's id -> multiplicity

    # inserts, from a CSV file (the broker is the configuration's)
    (tmp_path / "visits.csv").write_text("\n".join([HEADER, *(csv_row(v) for v in rows)]) + "\n")
    out = ivm("produce", "-c", str(config_path), "visits", str(tmp_path / "visits.csv"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"produced 60 updates (60 inserts, 0 deletes) to {topic_prefix}visits from ")
    present.update({v["id"]: 1 for v in rows})

    # changes, from a CSV file with a mult column: a second and third copy of some rows, deletes of others
    changes = [(v, rng.choice([2, -1])) for v in rng.sample(rows, 20)]
    (tmp_path / "changes.csv").write_text(
        "\n".join([f"mult,{HEADER}", *(f"{m},{csv_row(v)}" for v, m in changes)]) + "\n"
    )
    out = ivm("produce", "-c", str(config_path), "visits", str(tmp_path / "changes.csv"), "--rate", "200")
    assert out.returncode == 0, out.stderr
    for v, m in changes:
        present[v["id"]] += m

    # deletes, as JSON lines on standard input, with --delete
    gone = [v for v in rows if present[v["id"]] > 0][:10]
    out = ivm("produce", "-c", str(config_path), "visits", "-", "--delete",
              stdin="".join(json.dumps(v) + "\n" for v in gone))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "(0 inserts, 10 deletes)" in out.stdout and "from <stdin> (jsonl)" in out.stdout
    for v in gone:
        present[v["id"]] -= 1

    per_user: Counter = Counter()
    by_id = {v["id"]: v for v in rows}
    for i, m in present.items():
        per_user[by_id[i]["user"]] += m
    expected = sum(n * n for n in per_user.values())

    config = load_config(config_path)
    job = start_job(config)
    final = end_offsets(kafka.bootstrap, [f"{topic_prefix}visits"])
    assert sum(final.values()) == 60 + 20 + 10
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    job.stop()
    assert reflects(results[-1], final)
    assert int(results[-1]["value"]) == expected
    assert sum(end_offsets(kafka.bootstrap, [f"{topic_prefix}dead-letter"]).values()) == 0  # none refused
