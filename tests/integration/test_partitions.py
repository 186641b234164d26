"""Relation topics of several partitions, in both placements, and the topics the processor creates as
``[topics.KIND]`` says.

``ivm run`` (a child process) creates the relation topics with 3 partitions and the outputs with 2
(``[topics.relations]``, ``[topics.outputs]``), the progress and control topics with one; updates are then
produced while it runs, keyed by tuple (a tuple's insert and its later delete share a partition, so the input
policy, which refuses a delete of an absent tuple, sees them in order).  The published triangle count equals
an independent recount over everything the topics hold, every batch appears once in order (read_committed),
and no update was dead-lettered: a processor that lost the order within a partition, dropped a partition or
read one twice would fail one of these.  The run's ``[spark.conf]`` is read back from its Spark session (the
start-up log line).
"""

from __future__ import annotations

import random

import pytest

from ivm.processor.config import TopicsConfig, TopicSettings
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import end_offsets, partitions_of, watermarks
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import pipeline_config, read_until
from tests.integration.test_stops import CODECS, _start, _triangles, _wait_for

pytestmark = pytest.mark.integration


def _produce_with_deletes(bootstrap: str, topics: dict[str, str], n: int, domain: int, seed: int) -> None:
    """``n`` inserts spread over the relations, then deletes of a third of them (each after its insert)."""
    rng = random.Random(seed)
    producer = UpdateProducer(bootstrap, CODECS, topics)
    inserted = []
    for _ in range(n):
        rel, row = rng.choice("RST"), (rng.randrange(domain), rng.randrange(domain))
        producer.send_raw(topics[rel], *CODECS[rel].encode(row, 1))
        inserted.append((rel, row))
    for rel, row in rng.sample(inserted, n // 3):
        producer.send_raw(topics[rel], *CODECS[rel].encode(row, -1))
    producer.flush()


@pytest.mark.parametrize(
    ("placement", "master"),
    [("driver", "local[2]"), pytest.param("executors", "local-cluster[2,1,1024]", marks=pytest.mark.slow)],
    ids=["driver", "executors"],
)
def test_relation_topics_of_three_partitions(kafka, topic_prefix, tmp_path, monkeypatch, placement, master) -> None:
    domain = 40
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    kinds = TopicsConfig(relations=TopicSettings(3), outputs=TopicSettings(2, 1))
    config = pipeline_config(
        kafka.bootstrap, topic_prefix, tmp_path / "state", spark_master=master, placement=placement,
        max_offsets_per_trigger=1500, snapshot_every=3, shards=2 if placement == "executors" else 1, topics=kinds,
        spark_conf=(("spark.sql.shuffle.partitions", "3"), ("spark.task.maxFailures", "6")),
    )  # fmt: skip
    q = config.queries[0]
    if placement == "executors":
        monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    proc = _start(tmp_path, config, kafka.bootstrap, placement, monkeypatch)
    try:
        created = [*topics.values(), q.result_topic, q.delta_topic, config.progress_topic, f"{config.name}.control"]
        created.append(config.dead_letter_topic)
        _wait_for(
            lambda: len(partitions_of(kafka.bootstrap, created)) == len(created) or not proc.alive(),
            "ivm run did not create its topics",
            240,
        )
        assert proc.alive(), proc.tail()
        parts = partitions_of(kafka.bootstrap, created)
        assert all(parts[t] == [0, 1, 2] for t in topics.values()), parts
        assert parts[q.result_topic] == parts[q.delta_topic] == [0, 1]
        assert parts[config.progress_topic] == parts[f"{config.name}.control"] == [0]
        _produce_with_deletes(kafka.bootstrap, topics, 6000, domain, seed=5)
        final = end_offsets(kafka.bootstrap, list(topics.values()))
        assert all(final[(t, p)] > 0 for t in topics.values() for p in range(3)), "every partition holds updates"
        _wait_for(
            lambda: (
                not proc.alive()
                or ((c := read_committed_progress(kafka.bootstrap, config.progress_topic)) is not None
                    and reflects(c, final))
            ),
            f"the {placement} run did not read every partition to its end",
            timeout=400,
        )  # fmt: skip
        assert proc.alive(), proc.tail()
    finally:
        proc.stop()
    # [spark.conf] reached the session: read back from it
    assert "spark.conf: spark.sql.shuffle.partitions=3, spark.task.maxFailures=6" in proc.log_path.read_text()
    results = read_until(kafka.bootstrap, q.result_topic, lambda rs: reflects(rs[-1], final))
    assert [r["batch_id"] for r in results] == list(range(len(results))), "a batch is missing or duplicated"
    assert int(results[-1]["value"]) == _triangles(kafka.bootstrap, topics, domain)
    dead = watermarks(kafka.bootstrap, [config.dead_letter_topic])
    assert sum(high - low for low, high in dead.values()) == 0, "an update was dead-lettered (out of order?)"
