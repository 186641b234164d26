"""A pipeline on a three-broker KRaft cluster (three combined broker and controller JVMs, a 3-voter quorum)
whose topics are replicated three times with ``min.insync.replicas = 2`` (``[topics.KIND]``): the leader of
the result topic's partition is killed with SIGKILL while updates are being produced and the stream runs.

The stream continues on the two brokers left (new batches are committed after the kill), every batch
appears exactly once and in order in ``<query>.result`` read with read_committed, and the final count equals
an independent recount over everything the relation topics hold.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from ivm.processor.config import TopicsConfig, TopicSettings, dump_config
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_kind, end_offsets, watermarks
from ivm.processor.local.kafka import KafkaCluster
from ivm.processor.local.stack import ProcessorProcess
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import pipeline_config, read_until
from tests.integration.test_reliability import LOGS
from tests.integration.test_stops import CODECS, _triangles, _wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPLICATED = TopicSettings(partitions=2, replication_factor=3, config=(("min.insync.replicas", "2"),))


def _produce(bootstrap: str, topics: dict[str, str], n: int, domain: int, seed: int, pause: float = 0) -> None:
    rng = random.Random(seed)
    producer = UpdateProducer(bootstrap, CODECS, topics)
    for i in range(n):
        rel = rng.choice("RST")
        producer.send_raw(topics[rel], *CODECS[rel].encode((rng.randrange(domain), rng.randrange(domain)), 1))
        if pause and i % 200 == 199:
            producer.flush()
            time.sleep(pause)
    producer.flush()


def test_a_killed_partition_leader_on_a_three_broker_cluster(tmp_path) -> None:
    domain = 60
    cluster = KafkaCluster.start(LOGS / f"kafka-cluster-{uuid.uuid4().hex[:6]}", nodes=3, heap="384m")
    try:
        bootstrap = cluster.bootstrap
        prefix = "c3."
        topics = {r: f"{prefix}{r}" for r in "RST"}
        config = pipeline_config(
            bootstrap, prefix, tmp_path / "state", max_offsets_per_trigger=500, snapshot_every=5,
            topics=TopicsConfig(
                relations=REPLICATED, outputs=REPLICATED, dead_letters=REPLICATED,
                progress=TopicSettings(1, 3, REPLICATED.config), control=TopicSettings(1, 3, REPLICATED.config),
            ),
        )  # fmt: skip
        q = config.queries[0]
        create_kind(bootstrap, list(topics.values()), config.topics.relations)
        _produce(bootstrap, topics, 3000, domain, seed=41)
        path = tmp_path / "pipeline.toml"
        path.write_text(dump_config(config))
        proc = ProcessorProcess(path, bootstrap, tmp_path / "run.log", metrics_port=0)
        try:
            _wait_for(lambda: proc.batches_logged() >= 2 or not proc.alive(), "no batch committed", 300)
            assert proc.alive(), proc.tail()
            # what the processor created: three replicas of every partition, min.insync.replicas = 2
            admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
            created = [*topics.values(), q.result_topic, config.progress_topic]
            metadata = admin.list_topics(timeout=30).topics
            for topic in created:
                assert all(len(p.replicas) == 3 for p in metadata[topic].partitions.values()), topic
            from confluent_kafka.admin import ConfigResource

            resource = ConfigResource(ConfigResource.Type.TOPIC, q.result_topic)
            described = admin.describe_configs([resource])[resource].result(30)
            assert described["min.insync.replicas"].value == "2"

            producing = threading.Thread(target=_produce, args=(bootstrap, topics, 6000, domain, 42, 0.2))
            producing.start()
            time.sleep(2)
            # the partition that holds the count (keyed by the query's name): its leader dies
            (partition,) = [p for (_t, p), (_low, high) in watermarks(bootstrap, [q.result_topic]).items() if high]
            victim = cluster.leader(q.result_topic, partition)
            before = proc.batches_logged()
            assert producing.is_alive(), "the updates were all produced before the kill"
            cluster.node(victim).stop(kill=True)  # SIGKILL, mid-stream
            producing.join(300)
            assert not producing.is_alive(), "producing stalled after the leader was killed"
            _produce(bootstrap, topics, 1000, domain, seed=43)
            final = end_offsets(bootstrap, list(topics.values()))
            _wait_for(
                lambda: (
                    not proc.alive()
                    or ((c := read_committed_progress(bootstrap, config.progress_topic)) is not None
                        and reflects(c, final))
                ),
                "the stream did not complete on the two brokers left",
                timeout=400,
            )  # fmt: skip
            assert proc.alive(), proc.tail()
            assert proc.batches_logged() > before + 1, "no batch was committed after the kill"
            assert cluster.leader(q.result_topic, partition) != victim
        finally:
            proc.stop()
        results = read_until(bootstrap, q.result_topic, lambda rs: reflects(rs[-1], final))
        ids = [r["batch_id"] for r in results]
        assert ids == list(range(len(results))), "a batch is missing or duplicated"
        assert int(results[-1]["value"]) == _triangles(bootstrap, topics, domain)
    finally:
        cluster.stop(kill=True)
