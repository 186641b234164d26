"""Where the processor's outputs go: Kafka topics, through one producer."""

from __future__ import annotations

from typing import Protocol


class Sink(Protocol):
    """Output topics: ``send`` queues a record, ``flush`` makes all queued records durable."""

    def send(self, topic: str, key: bytes | None, value: bytes) -> None: ...

    def flush(self) -> None: ...


class KafkaSink:
    """A confluent-kafka producer with idempotence; ``flush`` raises on any delivery failure."""

    def __init__(self, bootstrap: str, **conf: object) -> None:
        from confluent_kafka import Producer

        from processor.topics import CLIENT_DEFAULTS

        self._errors: list[str] = []
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "compression.type": "lz4",
                **CLIENT_DEFAULTS,
                **conf,
            }
        )

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is not None:
            self._errors.append(str(err))

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                return
            except BufferError:  # local queue full: let deliveries drain
                self._producer.poll(0.1)

    def flush(self) -> None:
        remaining = self._producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} output records not delivered after 60 s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise RuntimeError(f"output delivery failed: {errors[:3]}")
