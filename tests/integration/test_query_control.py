"""Queries added and removed in a running pipeline (`ivm query add|remove|list`), on the real broker and
Spark, checked against an oracle recomputed from the relation topics; the change survives a restart."""

from __future__ import annotations

import json
import random
import socket
import time
from dataclasses import replace

import pytest

from ivm.processor.cli import main
from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.config import dump_config
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.query import parse
from tests.integration.helpers import TRIANGLE, consume_raw, pipeline_config, read_until
from tests.oracles import count

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()
TWO_PATH = "Q() :- R(a,b), S(b,c)"


def _produce(kafka, topics, rng, n: int) -> None:
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    for _ in range(n):
        rel = rng.choice("RST")
        producer.send_raw(topics[rel], *CODECS[rel].encode((rng.randrange(10), rng.randrange(10)), 1))
    producer.flush()


def _oracle(kafka, topics) -> dict[str, dict[tuple, int]]:
    db: dict[str, dict[tuple, int]] = {}
    for rel, topic in topics.items():
        db[rel] = {}
        for *_, value in consume_raw(kafka.bootstrap, topic):
            row, mult = CODECS[rel].decode(value)
            db[rel][row] = db[rel].get(row, 0) + mult
    return db


def _caught_up(kafka, topic: str, inputs: list[str]) -> dict:
    final = end_offsets(kafka.bootstrap, inputs)
    records = read_until(kafka.bootstrap, topic, lambda rs: reflects(rs[-1], final))
    assert reflects(records[-1], final)
    return records[-1]


def _pipeline(kafka, topic_prefix: str, tmp_path):
    """The triangle pipeline on topics of its own: its configuration, relation topics (created), their
    names and the TOML file the ``ivm`` commands read."""
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state", snapshot_every=2)
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    inputs = list(topics.values())
    toml = tmp_path / "pipeline.toml"
    toml.write_text(dump_config(config))
    create_topics(kafka.bootstrap, inputs)
    return config, topics, inputs, toml


def test_add_and_remove_queries_in_a_running_pipeline(kafka, start_job, topic_prefix, tmp_path, capsys) -> None:
    rng = random.Random(41)
    config, topics, inputs, toml = _pipeline(kafka, topic_prefix, tmp_path)
    tri = config.queries[0]
    _produce(kafka, topics, rng, 200)
    job = start_job(config)
    _caught_up(kafka, tri.result_topic, inputs)

    path = f"{topic_prefix}path"
    assert main(["query", "add", path, TWO_PATH, "-c", str(toml)]) == 0
    assert main(["query", "add", f"{topic_prefix}bad", "Q() :- R(a,b), X(b)", "-c", str(toml)]) == 2
    _produce(kafka, topics, rng, 200)
    added = _caught_up(kafka, f"{path}.result", inputs)
    db = _oracle(kafka, topics)
    assert json.loads(added["value"]) == count(parse(TWO_PATH), db)
    assert json.loads(_caught_up(kafka, tri.result_topic, inputs)["value"]) == count(parse(TRIANGLE), db)

    assert main(["query", "remove", tri.name, "-c", str(toml)]) == 0
    _produce(kafka, topics, rng, 100)
    _caught_up(kafka, f"{path}.result", inputs)
    assert tri.name not in job.reports[-1].applied
    capsys.readouterr()
    assert main(["query", "list", "-c", str(toml), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [(q["name"], q["source"]) for q in listing["queries"]] == [(path, "control")]
    assert listing["removed"] == [tri.name]
    job.stop()

    # a restart keeps the added query's state and the removal
    _produce(kafka, topics, rng, 100)
    job = start_job(config)
    last = _caught_up(kafka, f"{path}.result", inputs)
    job.stop()
    db = _oracle(kafka, topics)
    assert json.loads(last["value"]) == count(parse(TWO_PATH), db)
    assert all(tri.name not in r.applied for r in job.reports)
    batches = [r["batch_id"] for r in read_until(kafka.bootstrap, f"{path}.result", lambda rs: rs[-1] == last)]
    assert batches == sorted(set(batches))  # exactly once: each batch once, in order


DISTINCT = "SELECT COUNT(DISTINCT S.C) FROM R JOIN S USING (B)"


def _distinct(db: dict[str, dict[tuple, int]]) -> int:
    bs = {b for (_a, b), m in db["R"].items() if m > 0}
    return len({c for (b, c), m in db["S"].items() if m > 0 and b in bs})


def _send_rows(kafka, topics, rel: str, rows) -> None:
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    for row in rows:
        producer.send_raw(topics[rel], *CODECS[rel].encode(row, 1))
    producer.flush()


@pytest.mark.slow
def test_executors_placement_serves_run_time_queries_and_refusals_stay(
    kafka, start_job, topic_prefix, tmp_path, capsys
) -> None:
    """Issue 36 points 3 and 4: a COUNT(DISTINCT) added at run time (driver placement) is maintained after a
    restart with placement = "executors" (it was silently dropped: the executors built the file's queries
    only); a command sent to the executors' run is refused, `ivm query add` says so (exit 1, the reason),
    `ivm query list` shows it, and a later start in the driver placement does not apply it either."""
    config, topics, inputs, toml = _pipeline(kafka, topic_prefix, tmp_path)
    tri = config.queries[0]
    _send_rows(kafka, topics, "R", [(a, b) for a in range(3) for b in range(5)])
    _send_rows(kafka, topics, "S", [(b, c) for b in range(10) for c in range(4)])
    job = start_job(config)
    _caught_up(kafka, tri.result_topic, inputs)
    distinct = f"{topic_prefix}distinct"
    assert main(["query", "add", distinct, DISTINCT, "-c", str(toml)]) == 0
    assert "applied by the running job" in capsys.readouterr().out
    assert int(json.loads(_caught_up(kafka, f"{distinct}.result", inputs)["value"])) == 4
    capsys.readouterr()  # point 5e: `ivm subscribe -c` knows the topics of a query added at run time
    assert main(["subscribe", f"{distinct}.result", "-c", str(toml), "--snapshot", "--idle-timeout", "1"]) == 0
    assert f"{distinct} after batch " in capsys.readouterr().out
    job.stop()

    placed = replace(config, placement="executors")
    toml.write_text(dump_config(placed))
    job = start_job(placed)
    _send_rows(kafka, topics, "S", [(b, 100 + b) for b in range(8)])  # B 0..4 join R: five new C values
    assert (
        int(json.loads(_caught_up(kafka, f"{distinct}.result", inputs)["value"]))
        == _distinct(_oracle(kafka, topics))
        == 9
    )
    slices = None  # point 5f: the status names each slice's executor (it printed `executor ,`)
    for _ in range(30):  # the heartbeat writes the slices with its next beat (every 3 s)
        capsys.readouterr()
        assert main(["status", "-c", str(toml), "--json"]) == 0
        if slices := json.loads(capsys.readouterr().out)["process"]["slices"]:
            break
        time.sleep(1)
    assert slices and all(s["executor"].endswith(f"@{socket.gethostname()}") for s in slices), slices
    refused = f"{topic_prefix}refused"
    capsys.readouterr()
    assert main(["query", "add", refused, TWO_PATH, "-c", str(toml)]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "placement executors" in err and "stop the pipeline" in err
    assert main(["query", "list", "-c", str(toml), "--json"]) == 0
    states = {q["name"]: (q["state"], q["reason"]) for q in json.loads(capsys.readouterr().out)["queries"]}
    assert states[distinct] == ("maintained", None) and states[tri.name] == ("maintained", None)
    assert states[refused][0] == "refused" and "placement executors" in states[refused][1]
    job.stop()

    toml.write_text(dump_config(config))
    job = start_job(config)  # the driver placement replays the refused command: it stays refused
    _send_rows(kafka, topics, "S", [(0, 200)])
    assert int(json.loads(_caught_up(kafka, f"{distinct}.result", inputs)["value"])) == 10
    job.stop()
    assert all(refused not in r.applied for r in job.reports)
    assert all(distinct in r.applied for r in job.reports)
