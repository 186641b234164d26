"""Input of upstream transactions: only committed records count, live and in every replay.

A real transactional producer (``transactional.id``, as Flink, Kafka Streams or Debezium write) sends
the relation topics' updates in transactions and aborts every third one.  ``ivm run`` runs as a child
process and is killed with ``kill -9`` mid-stream (in the executors' placement a shard host is killed
first, so slices rebuild from Kafka), more transactions arrive while it is down, and a new ``ivm run``
recovers and finishes.  Every published batch, before and after the kill, must equal the triangle count
recomputed (``trace(R·S·T)``, dense numpy) over the *committed* records before the offsets that batch
names; batch ids run 0, 1, 2, ... once each.  A processor that reads ``read_uncommitted`` live (Spark's
default, the code before ``[kafka] isolation_level``) counts aborted records and fails at the first batch
that holds one; the test also checks that the aborted records change the count, so it can fail.  The
pipeline's consumer group must hold the last batch's positions (read with ``kafka-consumer-groups``).
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.kafka.clients import CLIENT_DEFAULTS
from ivm.processor.kafka.topics import create_topics
from tests.integration.helpers import pipeline_config, read_until
from tests.integration.test_consumer_group_lag import describe_group
from tests.integration.test_placement_cluster import _hosts
from tests.integration.test_stops import _start, _wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CODECS = load_relation_codecs()
DOMAIN = 12


@dataclass(frozen=True)
class Sent:
    topic: str
    offset: int
    relation: str
    row: tuple[int, int]
    committed: bool


def produce_transactions(
    bootstrap: str, topics: dict[str, str], transactions: int, size: int, seed: int, tid: str
) -> list[Sent]:
    """``transactions`` transactions of ``size`` inserts each over ``topics``; every third one aborted.
    Each record with the offset the broker gave it and whether its transaction committed."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **CLIENT_DEFAULTS})
    producer.init_transactions(60)
    out: list[Sent] = []
    for i in range(transactions):
        delivered: list[tuple[str, int, str, tuple[int, int]]] = []
        producer.begin_transaction()
        for _ in range(size):
            rel = rng.choice("RST")
            row = (rng.randrange(DOMAIN), rng.randrange(DOMAIN))
            key, value = CODECS[rel].encode(row, 1)

            def report(err, msg, rel=rel, row=row, delivered=delivered) -> None:
                assert err is None, err
                delivered.append((msg.topic(), msg.offset(), rel, row))

            producer.produce(topics[rel], key=key, value=value, on_delivery=report)
        assert producer.flush(60) == 0
        commit = i % 3 != 1
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
        assert len(delivered) == size
        out += [Sent(t, o, rel, row, commit) for t, o, rel, row in delivered]
    return out


def triangles(sent: list[Sent], positions: dict[str, int], committed_only: bool = True) -> int:
    """The triangle count of the records before ``positions`` (per topic; one partition each)."""
    m = {rel: np.zeros((DOMAIN, DOMAIN), dtype=np.int64) for rel in "RST"}
    for s in sent:
        if s.offset < positions.get(s.topic, 0) and (s.committed or not committed_only):
            m[s.relation][s.row] += 1
    return int(np.einsum("ab,bc,ca->", m["R"], m["S"], m["T"]))


@pytest.mark.parametrize("placement", ["driver", "executors"])
def test_aborted_transactions_never_count_across_kill_dash_nine(
    kafka, topic_prefix, tmp_path: Path, monkeypatch, placement: str
) -> None:
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    extra = {"placement": "executors", "shards": 2, "spark_master": "local-cluster[1,1,1024]", "engine": "auto"}
    config = pipeline_config(
        kafka.bootstrap, topic_prefix, tmp_path / "state", max_offsets_per_trigger=90, snapshot_every=3,
        **(extra if placement == "executors" else {}),
    )  # fmt: skip
    if placement == "executors":
        monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
        monkeypatch.setenv("IVM_SHARD_HOST_IDLE_SECONDS", "30")  # the killed driver's hosts leave soon
    create_topics(kafka.bootstrap, list(topics.values()))
    tid = f"{topic_prefix}upstream"
    sent = produce_transactions(kafka.bootstrap, topics, 24, 40, seed=1, tid=tid)
    proc = _start(tmp_path, config, kafka.bootstrap, "run0", monkeypatch)
    try:
        _wait_for(lambda: proc.batches_logged() >= 3 or not proc.alive(), "no batch before the kill", 300)
        assert proc.alive(), proc.tail()
        if placement == "executors":  # a lost slice is rebuilt from Kafka (the replay of host.py)
            victims = _hosts(tmp_path / "tmp")
            assert victims, "no shard host to kill"
            os.kill(victims[0], signal.SIGKILL)
            seen = proc.batches_logged()
            _wait_for(lambda: proc.batches_logged() >= seen + 2 or not proc.alive(), "no batch after the host", 300)
            assert proc.alive(), proc.tail()
        killed_after = proc.batches_logged()
    finally:
        proc.stop(kill=True)
    sent += produce_transactions(kafka.bootstrap, topics, 12, 40, seed=2, tid=tid)  # while it is down
    final = {}
    for s in sent:
        if s.committed:
            final[s.topic] = max(final.get(s.topic, 0), s.offset + 1)
    proc = _start(tmp_path, config, kafka.bootstrap, "run1", monkeypatch)
    try:

        def done(results: list[dict]) -> bool:
            positions = {o["topic"]: o["offset"] for o in results[-1]["offsets"]}
            return all(positions.get(t, 0) >= end for t, end in final.items())

        results = read_until(kafka.bootstrap, config.queries[0].result_topic, done, idle_timeout=240)
        assert results and done(results), proc.tail()
    finally:
        proc.stop()
    assert killed_after >= 3
    assert [r["batch_id"] for r in results] == list(range(len(results))), "a batch is missing or duplicated"
    assert len(results) > killed_after, "no batch published after the restart"
    for r in results:
        positions = {o["topic"]: o["offset"] for o in r["offsets"]}
        assert int(r["value"]) == triangles(sent, positions), f"batch {r['batch_id']} counts aborted records"
    positions = {o["topic"]: o["offset"] for o in results[-1]["offsets"]}
    assert triangles(sent, positions, committed_only=False) != triangles(sent, positions), "aborts changed nothing"
    # the pipeline's consumer group holds the last batch's positions, committed with it (both placements)
    group = describe_group(kafka.bootstrap, config.group_id)
    assert {t: group[(t, 0)][0] for t in topics.values()} == {t: positions[t] for t in topics.values()}
    if placement == "driver":
        assert "recovered in" in (tmp_path / "run1.log").read_text()
