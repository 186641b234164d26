"""``ivm subscribe`` against the real broker: every kind of topic a pipeline writes or reads, as JSON
and plain lines; unknown and nonexistent topics fail fast (exit 2) naming the pipeline's topics."""

from __future__ import annotations

import base64
import datetime
import json
import time
from pathlib import Path
from typing import Any

import pytest

import ivm
from ivm.apps import LinearRegression
from ivm.processor.cli import main
from ivm.processor.codecs.avro import OutputCodec, RelationCodec, load_schema, result_to_json
from ivm.processor.kafka.clients import CLIENT_DEFAULTS
from ivm.processor.kafka.topics import create_topics

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WHEN = datetime.datetime(2024, 5, 1, 12, 30, 45, 123000, tzinfo=datetime.UTC)
WHEN_MS = int(WHEN.timestamp() * 1000)
WHEN_TEXT = "2024-05-01T12:30:45.123Z"


def write_config(path: Path, bootstrap: str, p: str) -> Path:
    """A pipeline whose topics all live under the prefix ``p``; relation S's topic is never created."""
    path.write_text(
        f"""
[processor]
name = "{p}pipe"

[kafka]
bootstrap = "{bootstrap}"
dead_letter_topic = "{p}dead-letter"

[[relations]]
name = "R"
topic = "{p}R"
schema = "{ROOT / "schemas/relations/R.avsc"}"

[[relations]]
name = "S"
topic = "{p}S"
schema = "{ROOT / "schemas/relations/S.avsc"}"

[[queries]]
name = "{p}cov"
query = "Q(COVAR(a, b)) :- R(a, b)"
model = "linear_regression"
label = "b"

[[queries]]
name = "{p}pairs"
query = "Q(a, c) :- R(a, b), S(b, c)"
"""
    )
    return path


def produce(bootstrap: str, messages: list[tuple[str, bytes | None, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **CLIENT_DEFAULTS})
    for topic, key, value in messages:
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0


def subscribe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str, float]:
    """``ivm subscribe ARGS`` in-process: (exit code, stdout lines, stderr, seconds)."""
    capsys.readouterr()
    started = time.monotonic()
    code = main(["subscribe", *args])
    seconds = time.monotonic() - started
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err, seconds


def test_every_kind_of_topic_as_json(kafka, topic_prefix: str, tmp_path: Path, capsys) -> None:
    p = topic_prefix
    cfg = str(write_config(tmp_path / "pipeline.toml", kafka.bootstrap, p))
    view = ivm.maintain("Q(COVAR(a, b)) :- R(a, b)", engine="fivm")
    view.apply([("R", (10**12, 3), 1), ("R", (2, 5), 1), ("R", (3, 7), 1)])
    cov = view.result()
    model = LinearRegression(view, ("a", "b"), "b", method="closed_form").update()
    offsets = [{"topic": f"{p}R", "partition": 0, "offset": 3}]
    r_key, r_value = RelationCodec.from_schema(load_schema(ROOT / "schemas/relations/R.avsc")).encode((7, -8), -1)
    records: dict[str, tuple[str, dict[str, Any]]] = {
        f"{p}cov.result": (
            "result",
            {
                "query": f"{p}cov",
                "batch_id": 3,
                "value": result_to_json(cov, view.query),
                "offsets": offsets,
                "applied": 3,
                "rejected": 0,
                "engine": "fivm",
                "timestamp_ms": WHEN_MS,
            },
        ),
        f"{p}pairs.delta": ("delta", {"query": f"{p}pairs", "batch_id": 3, "answer": "[1, 4]", "mult": 1}),
        f"{p}cov.model": (
            "model",
            {"query": f"{p}cov", "batch_id": 3, "model": json.dumps(model, default=float), "timestamp_ms": WHEN_MS},
        ),
        f"{p}pipe.progress": (
            "progress",
            {"pipeline": f"{p}pipe", "batch_id": 3, "offsets": offsets, "timestamp_ms": WHEN_MS},
        ),
        f"{p}dead-letter": (
            "dead_letter",
            {
                "reason": "malformed Avro for relation R",
                "topic": f"{p}R",
                "partition": 0,
                "offset": 4,
                "key": b"\x00k",
                "value": b"\x01\xff",
                "query": None,
                "timestamp_ms": WHEN_MS,
            },
        ),
    }
    create_topics(kafka.bootstrap, [*records, f"{p}R"])
    produce(
        kafka.bootstrap,
        [(topic, b"k", OutputCodec(kind).encode(record)) for topic, (kind, record) in records.items()]
        + [(f"{p}R", r_key, r_value)],
    )

    docs = {}
    for topic in [*records, f"{p}R"]:
        code, lines, err, _ = subscribe(capsys, topic, "-c", cfg, "--json", "--idle-timeout", "5")
        assert code == 0, err
        assert len(lines) == 1, (topic, lines, err)
        docs[topic] = json.loads(lines[0])

    result = docs[f"{p}cov.result"]
    assert result["timestamp_ms"] == WHEN_TEXT and result["offsets"] == offsets and result["batch_id"] == 3
    value = result["value"]
    assert value["type"] == "covariance" and value["variables"] == ["a", "b"] and value["count"] == cov.c
    assert [value["sums"][v] for v in "ab"] == cov.s.tolist()
    assert [[value["products"][x][y] for y in "ab"] for x in "ab"] == cov.Q.tolist()
    assert docs[f"{p}pairs.delta"] == {
        "query": f"{p}pairs", "batch_id": 3, "answer": [1, 4], "mult": 1, "before": None, "after": None
    }  # fmt: skip
    assert docs[f"{p}cov.model"]["model"] == json.loads(json.dumps(model, default=float))
    assert docs[f"{p}cov.model"]["timestamp_ms"] == WHEN_TEXT
    progress = docs[f"{p}pipe.progress"]
    assert progress["pipeline"] == f"{p}pipe" and progress["offsets"] == offsets
    dead = docs[f"{p}dead-letter"]
    assert base64.b64decode(dead["key"]) == b"\x00k" and base64.b64decode(dead["value"]) == b"\x01\xff"
    assert dead["reason"] == "malformed Avro for relation R" and dead["timestamp_ms"] == WHEN_TEXT
    assert docs[f"{p}R"] == {"relation": "R", "A": 7, "B": -8, "mult": -1}

    # plain lines, and without a configuration the output kinds come from the names
    code, lines, err, _ = subscribe(capsys, f"{p}cov.result", "--bootstrap", kafka.bootstrap, "--idle-timeout", "5")
    assert code == 0, err
    assert lines[0].startswith(f"batch      3  {p}cov = {{") and WHEN_TEXT in lines[0]


def test_unknown_and_nonexistent_topics_fail_fast(kafka, topic_prefix: str, tmp_path: Path, capsys) -> None:
    p = topic_prefix
    cfg = str(write_config(tmp_path / "pipeline.toml", kafka.bootstrap, p))
    create_topics(kafka.bootstrap, [f"{p}R", f"{p}cov.result"])

    # not one of the pipeline's topics
    code, lines, err, seconds = subscribe(capsys, f"{p}other.result", "-c", cfg, "--idle-timeout", "5")
    assert code == 2 and not lines and seconds < 10
    assert f"{p}other.result" in err
    for topic in (
        f"{p}cov.result",
        f"{p}cov.model",
        f"{p}pairs.delta",
        f"{p}pipe.progress",
        f"{p}dead-letter",
        f"{p}S",
    ):
        assert topic in err, topic

    # the pipeline's, but not on the broker: an error, not a silent wait
    code, lines, err, seconds = subscribe(capsys, f"{p}S", "-c", cfg, "--idle-timeout", "30")
    assert code == 2 and not lines and seconds < 10
    assert "does not exist" in err and f"{p}cov.result" in err and "not created yet" in err

    # without a configuration: a name that tells no kind, and an output topic that does not exist
    code, lines, err, seconds = subscribe(capsys, f"{p}R", "--bootstrap", kafka.bootstrap, "--idle-timeout", "30")
    assert code == 2 and seconds < 10 and "-c" in err and f"{p}cov.result" in err
    code, lines, err, seconds = subscribe(
        capsys, f"{p}ghost.result", "--bootstrap", kafka.bootstrap, "--idle-timeout", "30"
    )
    assert code == 2 and seconds < 10 and "does not exist" in err and f"{p}cov.result" in err
