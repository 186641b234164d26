"""Packed records (``encoding = "avro-packed"``) through the real broker and real Spark.

A random stream of inserts and deletes is produced by :class:`ivm.processor.kafka.produce.PackedProducer`
(the packer of ``ivm produce --pack``) to three-partition relation topics while the job runs, with
a few bad updates inside otherwise good packed records and one record that is not packed at all.
Every published result must equal the brute-force count of exactly the updates of the records its
offsets say it reflects, and every bad update must be in the dead-letter topic once, named by its
record's offset and its index inside it.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace

import pytest

from ivm.processor.codecs.avro import PackedCodec, load_relation_codecs
from ivm.processor.kafka.produce import PackedProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.query import parse
from ivm.updates import Update
from tests.integration.helpers import consume_raw, pipeline_config, read_until
from tests.integration.test_stops import _start
from tests.oracles import apply_stream, count

pytestmark = pytest.mark.integration

TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"
PACKED = {name: PackedCodec(codec) for name, codec in load_relation_codecs().items()}


@pytest.mark.parametrize(
    "placement", ["driver", pytest.param("executors", marks=pytest.mark.slow)], ids=["driver", "executors"]
)
def test_packed_pipeline_matches_a_recount(kafka, topic_prefix, tmp_path, monkeypatch, request, placement) -> None:
    """In both placements; in the executors' one over 3 slices on two executor JVMs (a packed record's
    updates spread over several slices, each reporting the dead letters it is primary for)."""
    rng = random.Random(37)
    extra = {"placement": "executors", "shards": 3, "spark_master": "local-cluster[2,1,1024]", "engine": "auto"}
    config = pipeline_config(
        kafka.bootstrap, topic_prefix, tmp_path / "state", max_offsets_per_trigger=40,
        **(extra if placement == "executors" else {}),
    )  # fmt: skip
    config = replace(config, relations=tuple(replace(r, encoding="avro-packed") for r in config.relations))
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    create_topics(kafka.bootstrap, [*topics.values(), config.dead_letter_topic], partitions=3)
    if placement == "executors":
        monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
        job = _start(tmp_path, config, kafka.bootstrap, "run", monkeypatch)
        request.addfinalizer(lambda: job.alive() and job.stop(kill=True))  # a failed test leaves no job behind
    else:  # the in-process job of the shared Spark session (local[2])
        job = request.getfixturevalue("start_job")(config)
    producer = PackedProducer(kafka.bootstrap, PACKED, topics, pack=25, buckets=dict.fromkeys(topics.values(), 3))
    live: dict[tuple[str, tuple], int] = {}
    for _chunk in range(4):
        for _ in range(700):
            if live and rng.random() < 0.3:
                rel, row = rng.choice(sorted(live))
                mult = -live[(rel, row)] if rng.random() < 0.5 else -1
            elif rng.random() < 0.01:  # a delete of an absent tuple, inside a packed record: refused alone
                rel, row, mult = rng.choice("RST"), (99, 99), -1
            else:
                rel, row, mult = rng.choice("RST"), (rng.randrange(12), rng.randrange(12)), 1
            if row != (99, 99):
                live[(rel, row)] = live.get((rel, row), 0) + mult
                if live[(rel, row)] == 0:
                    del live[(rel, row)]
            producer.send(Update(rel, row, mult))
        producer.flush()
        time.sleep(rng.random())
    # a bad update (multiplicity 0) between good ones, and a record that is not a packed record at all
    producer.send_raw(topics["S"], None, PACKED["S"].encode_many([((50, 51), 1), ((0, 0), 0), ((51, 50), 1)]))
    producer.send_raw(topics["T"], None, b"\x03garbage")
    producer.flush()
    final = end_offsets(kafka.bootstrap, list(topics.values()))
    results = read_until(
        kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final), idle_timeout=300
    )
    if placement == "executors":
        assert job.alive(), job.tail()
    job.stop()
    assert reflects(results[-1], final), "the last result does not reflect all input"

    inputs: dict[tuple[str, int], list] = {}  # per partition: (offset, relation, index, update or None)
    for rel, topic in topics.items():
        for partition, offset, _key, value in consume_raw(kafka.bootstrap, topic):
            try:
                items = PACKED[rel].items(value)
            except ValueError:
                items = [None]
            for index, item in enumerate(items):
                update = None if item is None or isinstance(item, str) else (rel, *item)
                inputs.setdefault((topic, partition), []).append((offset, index, update))
    assert sum(len(v) for v in inputs.values()) > 2800
    assert max(index for v in inputs.values() for _o, index, _u in v) > 0, "the records should be packed"
    query = parse(TRIANGLE)
    assert len(results) >= 3, "expected several micro-batches"
    for result in results:
        positions = {(o["topic"], o["partition"]): o["offset"] for o in result["offsets"]}
        prefix = [u for tp, items in inputs.items() for offset, _i, u in items if offset < positions.get(tp, 0) and u]
        db, _rejected = apply_stream(prefix)  # per-tuple order is per-partition order: one bucket per tuple
        assert json.loads(result["value"]) == count(query, db), f"batch {result['batch_id']}"

    # every refused or bad update once, by (topic, partition, offset, index), in one place
    all_input = [(tp, o, i, u) for tp, items in inputs.items() for o, i, u in items]
    _db, rejected = apply_stream([u for _tp, _o, _i, u in all_input if u])
    valid = [(tp, o, i) for tp, o, i, u in all_input if u]
    expected = {(tp[0], tp[1], o, i) for n, (tp, o, i) in enumerate(valid) if n in set(rejected)}
    expected |= {(tp[0], tp[1], o, i) for tp, o, i, u in all_input if u is None and tp[0] == topics["T"]}
    s_bad = [(tp, o) for tp, o, i, u in all_input if u is None and tp[0] == topics["S"]]
    assert len(s_bad) == 1
    expected.add((s_bad[0][0][0], s_bad[0][0][1], s_bad[0][1], 1))
    dead = read_until(kafka.bootstrap, config.dead_letter_topic, lambda rs: len(rs) >= len(expected))
    got = {(d["topic"], d["partition"], d["offset"], d["index"] if d["index"] is not None else 0): d for d in dead}
    assert len(dead) == len(got) == len(expected)
    assert set(got) == expected
    for (topic, _p, _o, index), d in got.items():
        if d["index"] is None:
            assert topic == topics["T"] and "malformed Avro" in d["reason"]
        else:
            assert d["index"] == index and d["reason"].startswith(f"update {index} of the packed record: ")
            assert "absent tuple" in d["reason"] or "multiplicity 0 in an update" in d["reason"]
    zero = [(d["topic"], d["partition"], d["offset"], d["index"]) for d in dead if "multiplicity 0 in" in d["reason"]]
    assert zero == [(*s_bad[0][0], s_bad[0][1], 1)]
