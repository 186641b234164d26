"""Read a query's output topics as they change (``ivm subscribe``)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

from processor.codec import OutputCodec
from processor.topics import CLIENT_DEFAULTS


def _codec_for(topic: str) -> OutputCodec:
    if topic.endswith(".result"):
        return OutputCodec("result")
    if topic.endswith(".delta"):
        return OutputCodec("delta")
    return OutputCodec("dead_letter")


def follow(
    bootstrap: str,
    topic: str,
    *,
    from_beginning: bool = True,
    poll_timeout: float = 1.0,
    idle_timeout: float | None = None,
    stop: threading.Event | None = None,
) -> Iterator[dict[str, Any]]:
    """Decoded records of an output topic, read with isolation.level=read_committed.

    Stops after ``idle_timeout`` seconds without a record (never, if ``None``), or
    once ``stop`` is set.
    """
    import time

    from confluent_kafka import Consumer

    codec = _codec_for(topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ivm-subscribe-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest" if from_beginning else "latest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **CLIENT_DEFAULTS,
        }
    )
    consumer.subscribe([topic])
    last = time.monotonic()
    try:
        while stop is None or not stop.is_set():
            msg = consumer.poll(poll_timeout)
            if msg is None:
                if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                    return
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    continue
                if "UNKNOWN_TOPIC" in str(msg.error()):
                    continue
                raise RuntimeError(f"reading {topic}: {msg.error()}")
            last = time.monotonic()
            yield codec.decode(msg.value())
    finally:
        consumer.close()


def reflects(result: dict[str, Any], offsets: dict[tuple[str, int], int]) -> bool:
    """Whether a result record reflects every input before ``offsets``."""
    seen = {(o["topic"], o["partition"]): o["offset"] for o in result["offsets"]}
    return all(seen.get(tp, 0) >= end for tp, end in offsets.items() if end > 0)
