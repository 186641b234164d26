"""Where the processor's outputs go: Kafka topics, through one producer.

A batch's outputs are sent between ``begin()`` and ``commit()``.  With
:class:`TransactionalKafkaSink` they form one Kafka transaction: consumers
reading with ``isolation.level=read_committed`` see all of a batch or none.

Keyed records go to the partition Java clients choose for the same key bytes
(murmur2, librdkafka's ``murmur2_random``: :data:`PARTITIONER`), so an update
sent by a Java service and one sent by ``ivm produce`` for the same tuple land
on the same partition and keep their order.

A sink given a ``consumer_group`` also commits the input positions a batch
consumed up to (:meth:`KafkaSink.send_offsets`, the next offset to read, as
Kafka's convention is) to that group, asynchronously, once the batch's
outputs are visible: :class:`TransactionalKafkaSink` right after the
transaction commits (why not inside it: its docstring), :class:`KafkaSink`
after the outputs are delivered.  ``kafka-consumer-groups --describe`` and lag
exporters then show the processor's lag.  The processor itself never resumes
from the group: it resumes from ``<pipeline>.progress`` (DESIGN §5).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka

#: librdkafka's partitioner that is the Java clients' default for keyed records (murmur2 of the key
#: bytes, positive, modulo the partition count); records without a key go to a random partition
PARTITIONER = {"partitioner": "murmur2_random"}

#: input positions: the next offset to read per (topic, partition)
Offsets = Mapping[tuple[str, int], int]


class Sink(Protocol):
    """Output topics: one batch's records between ``begin`` and ``commit``.

    A sink may also have ``send_offsets(offsets)`` (the Kafka sinks): the pipeline calls it with the
    batch's input positions before ``commit``, which commits them to the sink's consumer group.
    """

    def begin(self) -> None: ...

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None: ...

    def commit(self) -> None: ...


class KafkaSink:
    """An idempotent producer; ``commit`` flushes and raises on any delivery failure (at least once).

    With a ``consumer_group``, :meth:`send_offsets` positions are committed to that group once the
    batch's outputs are delivered (after them: a crash in between leaves the group's offsets behind,
    never ahead of the outputs).
    """

    def __init__(
        self, bootstrap: Kafka, flush_timeout: float = 60, consumer_group: str | None = None, **conf: Any
    ) -> None:
        from ivm.processor.kafka.clients import producer

        self.flush_timeout = flush_timeout
        self._queued = 0
        self._errors: list[str] = []
        self._offsets: list[Any] = []  # TopicPartitions for the group, from send_offsets until the commit
        self._producer = producer(
            bootstrap, {"enable.idempotence": True, "linger.ms": 5, "compression.type": "lz4", **PARTITIONER, **conf}
        )
        self._group = None
        if consumer_group:
            from ivm.processor.kafka.clients import consumer

            # never subscribes: it only names the group (its metadata, its offset commits)
            self._group = consumer(bootstrap, {"group.id": consumer_group, "enable.auto.commit": False})

    def send_offsets(self, offsets: Offsets) -> None:
        """Commit ``offsets`` (the next offset to read per input partition) to the consumer group with this
        batch; nothing without a group."""
        if self._group is None or not offsets:
            return
        from confluent_kafka import TopicPartition

        self._offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]

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
        self._commit_offsets()

    def _commit_offsets(self) -> None:
        """Commit the batch's input positions to the group, once its outputs are visible.  Asynchronous:
        the group's offsets only report the lag (the processor resumes from ``<pipeline>.progress``), so a
        broker outage must not stall the batch on them; the next batch's commit carries the positions on."""
        if self._offsets:
            offsets, self._offsets = self._offsets, []
            self._group.commit(offsets=offsets, asynchronous=True)  # type: ignore[union-attr]


class TransactionalKafkaSink(KafkaSink):
    """Each batch's outputs in one Kafka transaction (exactly once with read_committed readers).

    ``transactional_id`` is the pipeline's name: a restarted processor's
    ``init_transactions`` fences the previous instance and aborts its open
    transaction, so a batch cut short by a crash is never visible.  With a
    ``consumer_group``, the batch's input positions (:meth:`send_offsets`) are
    committed to the group right after the transaction commits: the group never
    shows a batch ahead of the visible outputs, and after a crash it is at most the
    last batch behind until the next commit.  Not inside the transaction
    (``send_offsets_to_transaction``): with the broker restarted mid-transaction that
    call was seen to block for minutes past its timeout (librdkafka), stalling the
    pipeline, while the group's offsets only report the lag (the processor resumes
    from ``<pipeline>.progress``).
    """

    def __init__(self, bootstrap: Kafka, transactional_id: str, consumer_group: str | None = None, **conf: Any) -> None:
        super().__init__(
            bootstrap,
            consumer_group=consumer_group,
            **{"transactional.id": transactional_id, "transaction.timeout.ms": 60000, **conf},
        )
        self._producer.init_transactions(60)

    def begin(self) -> None:
        self._producer.begin_transaction()

    def commit(self) -> None:
        if self._errors:
            errors, self._errors = self._errors, []
            self._offsets = []
            self._producer.abort_transaction(60)
            raise RuntimeError(f"output delivery failed, transaction aborted: {errors[:3]}")
        self._producer.commit_transaction(120)
        self._commit_offsets()
