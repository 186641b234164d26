"""Kafka topic helpers: creating topics and reading their end offsets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# librdkafka logs connection churn at info level; keep the console for real errors.
CLIENT_DEFAULTS: dict[str, Any] = {"log_level": 3, "log.connection.close": False}


def create_topics(
    bootstrap: str, topics: Sequence[str], partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    """Create the topics that do not exist yet (one replica: a single broker)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_DEFAULTS})
    existing = set(admin.list_topics(timeout=30).topics)
    new = [
        NewTopic(t, num_partitions=partitions, replication_factor=1, config=config or {})
        for t in topics
        if t not in existing
    ]
    if not new:
        return
    for topic, future in admin.create_topics(new, operation_timeout=30).items():
        try:
            future.result()
        except Exception as err:  # a concurrent creation is fine
            if "TOPIC_ALREADY_EXISTS" not in str(err):
                raise RuntimeError(f"creating topic {topic} failed: {err}") from err


def end_offsets(bootstrap: str, topics: Sequence[str]) -> dict[tuple[str, int], int]:
    """The end offset (high watermark) of every partition of ``topics``."""
    return {tp: high for tp, (_low, high) in watermarks(bootstrap, topics).items()}


def watermarks(bootstrap: str, topics: Sequence[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """``(low, high)`` offsets of every partition of ``topics``: the first record still held (retention
    moves it up) and the end."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "ivm-end-offsets", "enable.auto.commit": False, **CLIENT_DEFAULTS}
    )
    try:
        metadata = consumer.list_topics(timeout=30)
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in topics:
            if topic not in metadata.topics:
                continue
            for partition in metadata.topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                out[(topic, partition)] = (low, high)
        return out
    finally:
        consumer.close()


def partitions_of(bootstrap: str, topics: Sequence[str]) -> dict[str, list[int]]:
    """The partition ids of each existing topic."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_DEFAULTS}).list_topics(timeout=30)
    return {t: sorted(metadata.topics[t].partitions) for t in topics if t in metadata.topics}
