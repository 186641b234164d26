"""The pipeline with the real broker and real Spark.

A random stream of inserts and deletes is produced to multi-partition relation
topics while the job runs; every published result must equal the brute-force
count of exactly the input prefix its offsets say it reflects.  Malformed
messages must land in the dead-letter topic with their reason and position
while the good ones are applied.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.query import parse
from tests.integration.helpers import consume_raw, pipeline_config, read_until
from tests.oracles import apply_stream, count

pytestmark = pytest.mark.integration

TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"
CODECS = load_relation_codecs()


def test_every_published_result_matches_the_oracle(kafka, start_job, topic_prefix, tmp_path) -> None:
    rng = random.Random(11)
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path, max_offsets_per_trigger=700)
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    create_topics(kafka.bootstrap, list(topics.values()), partitions=3)
    job = start_job(config)
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    live: dict[tuple[str, tuple], int] = {}
    n_updates = 0
    for _chunk in range(6):
        for _ in range(800):
            if live and rng.random() < 0.3:
                rel, row = rng.choice(sorted(live))
                mult = -live[(rel, row)] if rng.random() < 0.5 else -1
            elif rng.random() < 0.02:  # a delete of an absent tuple: rejected by the default policy
                rel, row, mult = rng.choice("RST"), (99, 99), -1
            else:
                rel, row, mult = rng.choice("RST"), (rng.randrange(12), rng.randrange(12)), 1
            if mult < 0 and (rel, row) not in live and row != (99, 99):
                continue
            if row != (99, 99):
                live[(rel, row)] = live.get((rel, row), 0) + mult
                if live[(rel, row)] == 0:
                    del live[(rel, row)]
            producer.send_raw(topics[rel], *CODECS[rel].encode(row, mult))
            n_updates += 1
        producer.flush()
        time.sleep(rng.random())
    final = end_offsets(kafka.bootstrap, list(topics.values()))
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    job.stop()
    assert reflects(results[-1], final), "the last result does not reflect all input"

    # the input, per partition, in offset order
    inputs = {}
    for rel, topic in topics.items():
        for partition, offset, _key, value in consume_raw(kafka.bootstrap, topic):
            inputs.setdefault((topic, partition), []).append((offset, rel, CODECS[rel].decode(value)))
    query = parse(TRIANGLE)
    assert len(results) >= 3, "expected several micro-batches"
    batch_ids = [r["batch_id"] for r in results]
    assert batch_ids == sorted(batch_ids)
    for result in results:
        positions = {(o["topic"], o["partition"]): o["offset"] for o in result["offsets"]}
        prefix = []
        for tp, messages in inputs.items():
            prefix += [(rel, row, mult) for offset, rel, (row, mult) in messages if offset < positions.get(tp, 0)]
        # per-tuple order is per-partition order, so any interleaving of partitions gives the same state
        db, _rejected = apply_stream(prefix)
        assert json.loads(result["value"]) == count(query, db), f"batch {result['batch_id']}"
    all_input = [(rel, row, mult) for messages in inputs.values() for _o, rel, (row, mult) in messages]
    _db, rejected = apply_stream(all_input)
    assert rejected, "the stream should contain deletes of absent tuples"
    dead = read_until(kafka.bootstrap, config.dead_letter_topic, lambda rs: len(rs) >= len(rejected))
    assert len(dead) == len(rejected)
    assert all("absent tuple" in d["reason"] for d in dead)


def test_malformed_messages_go_to_the_dead_letter_topic(kafka, start_job, topic_prefix, tmp_path) -> None:
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path)
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    create_topics(kafka.bootstrap, [*topics.values(), config.dead_letter_topic])
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    good = [("R", (1, 2)), ("S", (2, 3)), ("T", (3, 1)), ("R", (4, 2)), ("T", (3, 4))]
    bad = [
        ("R", b"\x02"),  # truncated
        ("S", b""),  # empty
        ("T", CODECS["T"].encode((3, 1), 1)[1] + b"\x00\x00"),  # trailing bytes
        ("S", b"\x02\x04\x00"),  # multiplicity 0
        ("R", CODECS["R"].encode((7, 7), -1)[1]),  # delete of an absent tuple
    ]
    expected_dead = {}
    for (rel, row), (bad_rel, value) in zip(good, bad, strict=True):
        producer.send_raw(topics[rel], *CODECS[rel].encode(row, 1))
        producer.send_raw(topics[bad_rel], b"key", value)
        producer.flush()
        expected_dead[(topics[bad_rel], end_offsets(kafka.bootstrap, [topics[bad_rel]])[(topics[bad_rel], 0)] - 1)] = (
            value
        )
    job = start_job(config)
    final = end_offsets(kafka.bootstrap, list(topics.values()))
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    dead = read_until(kafka.bootstrap, config.dead_letter_topic, lambda rs: len(rs) >= len(expected_dead))
    job.stop()
    assert json.loads(results[-1]["value"]) == 2  # triangles (1,2,3) and (4,2,3)
    got = {(d["topic"], d["offset"]): d for d in dead}
    assert set(got) == set(expected_dead)
    for position, value in expected_dead.items():
        assert got[position]["value"] == value
        assert got[position]["partition"] == 0
    reasons = sorted(d["reason"].split(":")[0] for d in dead)
    assert any("absent tuple" in r for r in reasons)
    assert sum("malformed Avro" in d["reason"] for d in dead) == 2
    assert any("empty message" in d["reason"] for d in dead)
    assert any("multiplicity 0" in d["reason"] for d in dead)
