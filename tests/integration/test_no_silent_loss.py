"""No message is lost silently, on the real broker and Spark: every consumed message is applied to every
query over its relation or dead-lettered once, and the exported counters say so per relation."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from prometheus_client import generate_latest

from ivm.processor.codecs.avro import RelationCodec, load_relation_codecs
from ivm.processor.config import QueryConfig, RelationConfig
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.operations.metrics import Metrics
from ivm.query import parse
from tests.integration.helpers import TRIANGLE, consume_raw, pipeline_config, read_until
from tests.oracles import count

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()
TWO_PATH = "Q() :- R(a,b), S(b,c)"


def test_mixed_bad_input_two_queries_one_relation(kafka, start_job, topic_prefix, tmp_path) -> None:
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path)
    config = replace(
        config, queries=(QueryConfig(f"{topic_prefix}tri", TRIANGLE), QueryConfig(f"{topic_prefix}path", TWO_PATH))
    )
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    create_topics(kafka.bootstrap, [*topics.values(), config.dead_letter_topic])
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    rng = random.Random(31)
    present: dict[str, dict[tuple, int]] = {r: {} for r in "RST"}
    bad = 0
    for i in range(900):
        rel = rng.choice("RST")
        row = (rng.randrange(8), rng.randrange(8))
        kind = rng.random()
        if kind < 0.05:
            producer.send_raw(topics[rel], b"k", b"\x02")  # truncated Avro
            bad += 1
        elif kind < 0.08:
            producer.send_raw(topics[rel], b"k", b"\x02\x04\x00")  # multiplicity 0
            bad += 1
        elif kind < 0.2 and not present[rel].get(row):
            producer.send_raw(topics[rel], *CODECS[rel].encode(row, -1))  # delete of an absent tuple
            bad += 1
        else:
            mult = -1 if present[rel].get(row) and rng.random() < 0.3 else 1
            present[rel][row] = present[rel].get(row, 0) + mult
            producer.send_raw(topics[rel], *CODECS[rel].encode(row, mult))
        if i % 300 == 299:
            producer.flush()
    producer.flush()
    metrics = Metrics()
    job = start_job(config, metrics)
    final = end_offsets(kafka.bootstrap, list(topics.values()))
    values = {}
    for q in config.queries:
        records = read_until(kafka.bootstrap, q.result_topic, lambda rs: reflects(rs[-1], final))
        values[q.name] = json.loads(records[-1]["value"])
    dead = read_until(kafka.bootstrap, config.dead_letter_topic, lambda rs: len(rs) >= bad)
    job.stop()

    assert len(dead) == bad  # once each, though two queries read R and S
    assert len({(d["topic"], d["offset"]) for d in dead}) == bad
    db = {r: {row: m for row, m in rows.items() if m} for r, rows in present.items()}
    assert values == {
        f"{topic_prefix}tri": count(parse(TRIANGLE), db),
        f"{topic_prefix}path": count(parse(TWO_PATH), db),
    }
    for rel, topic in topics.items():
        consumed = metrics.relation_consumed.labels(rel)._value.get()
        applied = metrics.relation_applied.labels(rel)._value.get()
        dead_lettered = metrics.relation_dead_lettered.labels(rel)._value.get()
        assert consumed == len(consume_raw(kafka.bootstrap, topic)) == final[(topic, 0)]
        assert consumed == applied + dead_lettered
        assert dead_lettered == sum(1 for d in dead if d["topic"] == topic)
    exposition = generate_latest(metrics.registry).decode()
    for name in ("records_consumed", "updates_applied", "dead_letters"):
        assert f'ivm_relation_{name}_total{{relation="R"}}' in exposition


def test_a_record_named_otherwise_than_its_relation(kafka, start_job, topic_prefix, tmp_path) -> None:
    schema = {
        "type": "record",
        "name": "Edge",
        "namespace": "com.example",
        "fields": [{"name": "src", "type": "long"}, {"name": "dst", "type": "long"}, {"name": "mult", "type": "long"}],
    }
    path = tmp_path / "edge.avsc"
    path.write_text(json.dumps(schema))
    topic = f"{topic_prefix}edges"
    config = replace(
        pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state"),
        relations=(RelationConfig("edges", topic, path),),
        queries=(QueryConfig(f"{topic_prefix}paths", "Q() :- edges(a,b), edges(b,c)"),),
    )
    create_topics(kafka.bootstrap, [topic])
    codec = RelationCodec.from_schema(schema, "edges")
    producer = UpdateProducer(kafka.bootstrap, {"edges": codec}, {"edges": topic})
    for row in [(1, 2), (2, 3), (2, 4), (3, 1)]:
        producer.send_raw(topic, *codec.encode(row, 1))
    producer.flush()
    metrics = Metrics()
    job = start_job(config, metrics)
    final = end_offsets(kafka.bootstrap, [topic])
    records = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    job.stop()
    assert json.loads(records[-1]["value"]) == 4  # 1-2-3, 1-2-4, 2-3-1, 3-1-2
    assert metrics.relation_applied.labels("edges")._value.get() == 4
