"""Where the processor's outputs go: Kafka topics, through one producer.

A batch's outputs are sent between ``begin()`` and ``commit()``.  With
:class:`TransactionalKafkaSink` they form one Kafka transaction: consumers
reading with ``isolation.level=read_committed`` see all of a batch or none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from processor.kafka_clients import Kafka


class Sink(Protocol):
    """Output topics: one batch's records between ``begin`` and ``commit``."""

    def begin(self) -> None: ...

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None: ...

    def commit(self) -> None: ...


class KafkaSink:
    """An idempotent producer; ``commit`` flushes and raises on any delivery failure (at least once)."""

    def __init__(self, bootstrap: Kafka, flush_timeout: float = 60, **conf: Any) -> None:
        from processor.kafka_clients import producer

        self.flush_timeout = flush_timeout
        self._queued = 0
        self._errors: list[str] = []
        self._producer = producer(
            bootstrap, {"enable.idempotence": True, "linger.ms": 5, "compression.type": "lz4", **conf}
        )

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is not None:
            self._errors.append(str(err))

    def begin(self) -> None:
        pass

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain
                self._producer.poll(0.05)
        self._queued += 1
        if self._queued % 10_000 == 0:  # serve delivery reports during long batches
            self._producer.poll(0)

    def commit(self) -> None:
        remaining = self._producer.flush(self.flush_timeout)
        if remaining:
            raise RuntimeError(f"{remaining} output records not delivered after {self.flush_timeout:.0f} s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise RuntimeError(f"output delivery failed: {errors[:3]}")


class TransactionalKafkaSink(KafkaSink):
    """Each batch's outputs in one Kafka transaction (exactly once with read_committed readers).

    ``transactional_id`` is the pipeline's name: a restarted processor's
    ``init_transactions`` fences the previous instance and aborts its open
    transaction, so a batch cut short by a crash is never visible.
    """

    def __init__(self, bootstrap: Kafka, transactional_id: str, **conf: Any) -> None:
        super().__init__(bootstrap, **{"transactional.id": transactional_id, "transaction.timeout.ms": 60000, **conf})
        self._producer.init_transactions(60)

    def begin(self) -> None:
        self._producer.begin_transaction()

    def commit(self) -> None:
        if self._errors:
            errors, self._errors = self._errors, []
            self._producer.abort_transaction(60)
            raise RuntimeError(f"output delivery failed, transaction aborted: {errors[:3]}")
        self._producer.commit_transaction(120)
