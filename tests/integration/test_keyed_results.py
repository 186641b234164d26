"""Keyed result topics on the real broker and Spark: a Kafka Connect style consumer (last value per key,
tombstones delete) of a compacted result topic matches the query recomputed from the relation topics, after
a random insert/delete stream and a restart; a late subscriber gets the current result, then the changes."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from dataclasses import replace

import pytest

from ivm.processor.cli import main
from ivm.processor.codecs.avro import load_relation_codecs, load_schema, schemas_dir
from ivm.processor.config import QueryConfig
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.publish import GroupKeyCodec, group_key_schema, materialize, snapshot_then_changes
from ivm.processor.state.recovery import read_committed_progress
from ivm.query import parse
from tests.integration.helpers import consume_raw, pipeline_config

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()
SUMS = "Q(a, SUM(c)) :- R(a,b), S(b,c)"
PAIRS = "Q(a, c) :- R(a,b), S(b,c)"
SCHEMAS = {r: load_schema(schemas_dir() / "relations" / f"{r}.avsc") for r in "RS"}


def _produce(kafka, topics, present: dict, rng: random.Random, n: int) -> None:
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    for _ in range(n):
        rel = rng.choice("RS")
        row = (rng.randrange(6), rng.randrange(6))
        mult = -1 if present[rel].get(row) and rng.random() < 0.45 else 1
        present[rel][row] = present[rel].get(row, 0) + mult
        producer.send_raw(topics[rel], *CODECS[rel].encode(row, mult))
    producer.flush()


def _oracle(kafka, topics) -> tuple[dict, dict]:
    db: dict[str, dict[tuple, int]] = {}
    for rel, topic in topics.items():
        db[rel] = defaultdict(int)
        for *_, value in consume_raw(kafka.bootstrap, topic):
            row, mult = CODECS[rel].decode(value)
            db[rel][row] += mult
    sums: dict = defaultdict(int)
    rows: dict = defaultdict(int)
    pairs: dict = defaultdict(int)
    for (a, b), m in db["R"].items():
        for (b2, c), n in db["S"].items():
            if b == b2 and m and n:
                sums[(a,)] += m * n * c
                rows[(a,)] += m * n
                pairs[(a, c)] += m * n
    # SQL: a group with rows is a row, even when its SUM is 0
    return {k: v for k, v in sums.items() if rows[k]}, {k: v for k, v in pairs.items() if v}


def _consumer_view(kafka, name: str, query: str) -> dict:
    """What a Kafka Connect sink would hold: the compacted topic decoded by its key schema."""
    codec = GroupKeyCodec(group_key_schema(parse(query), SCHEMAS, name))
    from ivm.processor.codecs.avro import OutputCodec

    result = OutputCodec("result")
    table = materialize(kafka.bootstrap, f"{name}.result", lambda v: json.loads(result.decode(v)["value"]))
    return {codec.decode(k): v for k, v in table.items()}


def _wait_committed(kafka, config, inputs) -> None:
    final = end_offsets(kafka.bootstrap, inputs)
    deadline = time.monotonic() + 120
    while not ((c := read_committed_progress(kafka.bootstrap, config.progress_topic)) and reflects(c, final)):
        if time.monotonic() > deadline:  # a hang, not a speed check
            raise TimeoutError("the job did not catch up")
        time.sleep(0.5)


def test_compacted_result_topics_through_a_restart(kafka, start_job, topic_prefix, tmp_path, capsys) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    rng = random.Random(51)
    sums, pairs = f"{topic_prefix}sums", f"{topic_prefix}pairs"
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state", relations="RS", snapshot_every=3)
    config = replace(config, queries=(QueryConfig(sums, SUMS), QueryConfig(pairs, PAIRS)))
    topics = {r: f"{topic_prefix}{r}" for r in "RS"}
    inputs = list(topics.values())
    create_topics(kafka.bootstrap, inputs)
    present: dict = {"R": {}, "S": {}}
    _produce(kafka, topics, present, rng, 400)
    job = start_job(config)
    _wait_committed(kafka, config, inputs)
    job.stop()
    _produce(kafka, topics, present, rng, 400)
    job = start_job(config)
    _wait_committed(kafka, config, inputs)

    want_sums, want_pairs = _oracle(kafka, topics)
    assert want_sums and want_pairs
    assert _consumer_view(kafka, sums, SUMS) == want_sums
    assert _consumer_view(kafka, pairs, PAIRS) == want_pairs
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, f"{sums}.result")
    described = admin.describe_configs([resource])[resource].result()
    assert described["cleanup.policy"].value == "compact"

    # ivm subscribe: --snapshot prints the current result; following the topic with tombstones ends there too
    capsys.readouterr()
    args = ["--json", "--idle-timeout", "3", "--bootstrap", kafka.bootstrap]
    assert main(["subscribe", f"{sums}.result", "--snapshot", *args]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert {tuple(json.loads(g)): v for g, v in first["result"].items()} == want_sums
    assert main(["subscribe", f"{pairs}.result", *args]) == 0
    followed: dict = {}
    for line in capsys.readouterr().out.splitlines():
        doc = json.loads(line)
        if doc.get("tombstone"):
            followed.pop(tuple(doc["group"]), None)
        else:
            followed[tuple(doc["group"])] = doc["value"]
    assert followed == want_pairs

    # a late subscriber: the current result first, then the changes as they commit
    events: list[dict] = []
    stop = threading.Event()

    def subscribe() -> None:
        for event in snapshot_then_changes(kafka.bootstrap, f"{sums}.result", poll_timeout=0.5, stop=stop):
            events.append(event)

    reader = threading.Thread(target=subscribe, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not events and time.monotonic() < deadline:
        time.sleep(0.1)
    snapshot = events[0]
    assert snapshot["type"] == "snapshot"
    assert {tuple(json.loads(g)): v for g, v in snapshot["result"].items()} == want_sums
    _produce(kafka, topics, present, rng, 200)
    _wait_committed(kafka, config, inputs)
    job.stop()
    time.sleep(2)
    stop.set()
    reader.join(10)
    state = {tuple(json.loads(g)): v for g, v in snapshot["result"].items()}
    for event in events[1:]:
        assert event["type"] == "change"
        if event["value"] is None:
            state.pop(tuple(event["group"]), None)
        else:
            state[tuple(event["group"])] = event["value"]
    want_sums, _ = _oracle(kafka, topics)
    assert len(events) > 1 and state == want_sums
