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


def read_until(bootstrap: str, topic: str, until, idle_timeout: float = 60) -> list[dict]:
    """Records of ``topic`` (read_committed) until ``until(records so far)`` holds, or
    ``idle_timeout`` seconds pass without one."""
    out: list[dict] = []
    for record in follow(bootstrap, topic, poll_timeout=0.5, idle_timeout=idle_timeout):
        out.append(record)
        if until(out):
            break
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
