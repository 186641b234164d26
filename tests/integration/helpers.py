"""Shared pieces of the integration tests: pipeline configurations and topic readers."""

from __future__ import annotations

import time
from pathlib import Path

from ivm.policy import Policy
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.kafka.clients import CLIENT_DEFAULTS
from ivm.processor.kafka.subscribe import follow

TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"


def pipeline_config(
    bootstrap: str,
    prefix: str,
    state_dir: Path,
    query: str = TRIANGLE,
    engine: str = "first_order",
    relations: str = "RST",
    **overrides,
) -> PipelineConfig:
    """A pipeline of its own (topics, name, state) on the shared broker."""
    settings = {
        "bootstrap": bootstrap,
        "dead_letter_topic": f"{prefix}dead-letter",
        "relations": tuple(RelationConfig(r, f"{prefix}{r}", Path(f"relations/{r}.avsc")) for r in relations),
        "queries": (QueryConfig(f"{prefix}q", query, engine),),
        "policy": Policy(),
        "trigger_ms": 100,
        "name": f"{prefix}pipe",
        "state_dir": str(state_dir),
    }
    return PipelineConfig(**{**settings, **overrides})


#: how long :func:`read_until` waits for a next record by default: a hang guard, not a speed check.  A loaded
#: machine (CI, parallel workers) can keep a processor from publishing for a minute (a JVM starting, a recovery),
#: and the wait ends as soon as ``until`` holds, so a generous bound costs a passing test nothing.
READ_IDLE_TIMEOUT = 300.0


def read_until(bootstrap: str, topic: str, until, idle_timeout: float = READ_IDLE_TIMEOUT) -> list[dict]:
    """Records of ``topic`` (read_committed) until ``until(records so far)`` holds, or
    ``idle_timeout`` seconds pass without one (then the caller's assertions on the records fail)."""
    out: list[dict] = []
    for record in follow(bootstrap, topic, poll_timeout=0.5, idle_timeout=idle_timeout):
        out.append(record)
        if until(out):
            break
    return out


def read_all(bootstrap: str, topic: str, timeout: float = READ_IDLE_TIMEOUT) -> list[dict]:
    """Every committed record ``topic`` holds (read_committed, decoded as ``follow`` decodes them, a keyed
    result's tombstones with their group), read to the end of each partition: the end is what stops the
    reading, not a pause between records, which a loaded machine can make.  For a topic whose writer has
    stopped; ``TimeoutError`` if the end is not reached within ``timeout`` seconds (a hang guard)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from ivm.processor.kafka.subscribe import decoder_for, resolve_topic
    from ivm.processor.kafka.topics import watermarks

    decoder = decoder_for(resolve_topic(topic))
    marks = watermarks(bootstrap, [topic])
    assert marks, f"no topic {topic}"
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "read-all", "enable.auto.commit": False,
         "isolation.level": "read_committed", "enable.partition.eof": True, **CLIENT_DEFAULTS}
    )  # fmt: skip
    consumer.assign([TopicPartition(t, p, low) for (t, p), (low, _high) in marks.items()])
    waiting = {p for (_t, p), (low, high) in marks.items() if high > low}
    out: list[dict] = []
    groups: dict[bytes, object] = {}
    deadline = time.monotonic() + timeout
    try:
        while waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(waiting)} not read to their end in {timeout:.0f}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    waiting.discard(msg.partition())
                    continue
                raise RuntimeError(f"reading {topic}: {msg.error()}")
            if msg.value() is None and msg.key() is not None:
                out.append({"tombstone": True, "key": msg.key(), "group": groups.pop(msg.key(), None), "value": None})
                continue
            record = decoder(msg.value())
            if record.get("group") is not None and msg.key() is not None:
                groups[msg.key()] = record["group"]
            out.append(record)
    finally:
        consumer.close()
    return out


def consume_raw(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every message ``topic`` holds (from its first offset still held)."""
    from confluent_kafka import Consumer, TopicPartition

    from ivm.processor.kafka.topics import watermarks

    marks = watermarks(bootstrap, [topic])
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "raw", "enable.auto.commit": False, **CLIENT_DEFAULTS}
    )
    consumer.assign([TopicPartition(t, p, low) for (t, p), (low, _high) in marks.items()])
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    want = sum(high - low for low, high in marks.values())
    deadline = time.monotonic() + 60
    while len(out) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    consumer.close()
    assert len(out) == want, f"read {len(out)} of {want} messages of {topic}"
    return out
