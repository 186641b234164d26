"""Exactly-once recovery: the last snapshot, plus a replay of the inputs committed after it.

A batch's outputs and the input positions it consumed are committed in one
Kafka transaction (``pipeline.py``); the positions go to ``<pipeline>.progress``.
On start, after ``init_transactions`` has fenced any previous instance and
aborted its open transaction, the processor

1. loads the newest snapshot of its state (views and positions), if any;
2. reads the last committed progress record (``read_committed``);
3. replays the input records between the snapshot's positions and the committed
   ones, publishing nothing (their outputs are already committed), read with
   the isolation level the live stream reads with (``[kafka] isolation_level``,
   ``read_committed`` by default: never a record of an aborted transaction);
4. resumes the stream exactly at the committed positions, numbering batches
   after the last committed one.

So every batch's outputs appear once, in order, whatever point a crash hit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ivm.processor.codecs.avro import OutputCodec
from ivm.processor.config import ConfigError
from ivm.processor.kafka.clients import Kafka
from ivm.processor.kafka.clients import consumer as new_consumer
from ivm.processor.pipeline import Pipeline, PipelineState, Positions, Record
from ivm.processor.state.snapshots import RESET, StateStore

log = logging.getLogger(__name__)
FIX = "ivm reset -c CONFIG --yes"


class RecoveryError(RuntimeError):
    """The stored state cannot serve the configured pipeline; the message says why and what fixes it."""


@dataclass
class Adoption:
    """What a restart did with a snapshot's state: per query kept, rebuilt (and why) or dropped."""

    kept: list[str] = field(default_factory=list)
    rebuilt: dict[str, str] = field(default_factory=dict)  # query -> "new" | "changed" | "reset"
    dropped: list[str] = field(default_factory=list)
    relations_added: list[str] = field(default_factory=list)
    relations_dropped: list[str] = field(default_factory=list)


def adopt(pipeline: Pipeline, snapshot: PipelineState) -> Adoption:
    """Take over ``snapshot`` for the pipeline as now configured.

    Per relation, the contents are reused when its definition (topic, attributes, window) is the
    one they were built under; a relation new to the configuration starts empty (its topic is read
    from ``starting_offsets``); a relation no longer configured is dropped with its positions.  A
    changed relation cannot be reused: :class:`RecoveryError`.  Per query, the view is reused when
    its fingerprint matches; otherwise (a new query, a changed one, one whose state was reset) it
    is built from the relations' contents, so it is the query over every update ever committed.
    Queries no longer configured are dropped.  Pure: no Kafka.
    """
    before = snapshot.fingerprints
    report = Adoption()
    for name, q in snapshot.control.items():  # queries added or removed through the control topic
        if q is None:
            pipeline.retract(name)
            continue
        try:
            pipeline.declare(q)
        except (ConfigError, ValueError) as err:
            log.warning("query %s, added through the control topic, cannot be served any more: %s; dropped", name, err)
            pipeline.retract(name)
            snapshot.control[name] = None
    now = pipeline.fingerprints
    changed = [
        rel.name
        for rel in pipeline.config.relations
        if f"relation:{rel.name}" in before and before[f"relation:{rel.name}"] != now[f"relation:{rel.name}"]
    ]
    if changed:
        raise RecoveryError(
            f"relation(s) {changed} changed since the state was saved (topic, attributes or window): the "
            f"contents kept for them were built under the old definition. Restore the old definition, or "
            f"start the pipeline over from its relation topics with `{FIX}`"
        )
    if before.get("windows", now["windows"]) != now["windows"]:
        raise RecoveryError(
            f"the sliding windows changed since the state was saved: restore them, or start the pipeline over "
            f"with `{FIX}`"
        )
    configured = {rel.name: rel.topic for rel in pipeline.config.relations}
    topics = set(configured.values())
    for relation in list(snapshot.relations):
        if relation not in configured:
            del snapshot.relations[relation]
            report.relations_dropped.append(relation)
    for relation in configured:
        if relation not in snapshot.relations:
            snapshot.relations[relation] = {}
            report.relations_added.append(relation)
    snapshot.positions = {tp: o for tp, o in snapshot.positions.items() if tp[0] in topics}
    snapshot.origin = {tp: o for tp, o in snapshot.origin.items() if tp[0] in topics}
    views, models = {}, {}
    rebuild: dict[str, str] = {}
    for name in pipeline.query_configs:
        key = f"query:{name}"
        if name in snapshot.views and before.get(key) == now[key]:
            views[name] = snapshot.views[name]
            if name in snapshot.models:
                models[name] = snapshot.models[name]
            report.kept.append(name)
        else:
            rebuild[name] = "new" if key not in before else "reset" if before[key] == RESET else "changed"
    report.dropped = sorted(set(snapshot.views) - set(pipeline.query_configs))
    fingerprints = {k: v for k, v in now.items() if not k.startswith("query:")}
    fingerprints.update({f"query:{n}": now[f"query:{n}"] for n in views})
    pipeline.state = PipelineState(
        views,
        snapshot.positions,
        snapshot.last_batch_id,
        windows=snapshot.windows if snapshot.windows is not None else pipeline.state.windows,
        models=models,
        relations=snapshot.relations,
        fingerprints=fingerprints,
        origin=snapshot.origin,
        bootstrapped=snapshot.bootstrapped,
        control=snapshot.control,
    )
    for name, why in rebuild.items():
        pipeline.build_query(name)
        report.rebuilt[name] = why
    return report


def read_committed_progress(bootstrap: Kafka, topic: str) -> dict[str, Any] | None:
    """The last progress record of ``topic`` visible to read_committed readers."""
    from confluent_kafka import KafkaException, TopicPartition

    consumer = new_consumer(
        bootstrap,
        {
            "group.id": "ivm-recovery",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        },
    )
    codec = OutputCodec("progress")
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            return None
        last = None
        for partition in metadata.topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            if high <= low:
                continue
            # from the first record still held: retention may have deleted offset 0, and a reset to the
            # end would read no record and take the pipeline for a new one
            consumer.assign([TopicPartition(topic, partition, low)])
            deadline = time.monotonic() + 120
            while consumer.position([TopicPartition(topic, partition)])[0].offset < high:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    record = decode_progress(codec, msg.value())
                    if last is None or record["batch_id"] >= last["batch_id"]:
                        last = record
                elif time.monotonic() > deadline:  # an open transaction that nobody aborted
                    raise TimeoutError(f"could not read {topic} to its end")
        return last
    except KafkaException as err:
        raise RuntimeError(f"reading {topic}: {err}") from err
    finally:
        consumer.close()


def decode_progress(codec: OutputCodec, value: bytes) -> dict[str, Any]:
    """A progress record; one written by an earlier version, before records carried the history's origin
    (snapshot format 3), comes back with ``legacy = True``."""
    record, missing = codec.decode_versioned(value)
    return {**record, "legacy": True} if missing else record


def missing_history(bootstrap: Kafka, start: Positions, topics: list[str]) -> list[str]:
    """The input partitions of ``topics`` that no longer hold every record from ``start`` (absent: 0)
    on: retention or a deletion moved their first offset past it."""
    from ivm.processor.kafka.topics import watermarks

    out = []
    for (topic, partition), (low, _high) in sorted(watermarks(bootstrap, topics).items()):
        need = start.get((topic, partition), 0)
        if low > need:
            out.append(f"{topic}[{partition}] starts at offset {low}, the state needs it from {need}")
    return out


def replay(pipeline: Pipeline, bootstrap: Kafka, end: Positions, chunk: int = 100_000) -> int:
    """Apply the input records from the pipeline's positions up to ``end`` (exclusive).

    :class:`RecoveryError` if a partition no longer holds the records between them (retention):
    they would be missing from the state without a word.
    """
    todo = {tp: stop for tp, stop in end.items() if stop > pipeline.positions.get(tp, 0)}
    if not todo:
        return 0
    replayed = 0
    start = {tp: pipeline.positions.get(tp, 0) for tp in todo}
    for records in read_range(bootstrap, start, todo, chunk, isolation=pipeline.config.isolation_level):
        replayed += pipeline.replay(records)
    for tp, stop in todo.items():  # records compacted away or control markers: the position is the end
        pipeline.positions[tp] = max(pipeline.positions.get(tp, 0), stop)
    return replayed


def read_range(
    bootstrap: Kafka, start: Positions, end: Positions, chunk: int = 100_000, *, isolation: str = "read_committed"
) -> Iterator[list[Record]]:
    """The input records from ``start`` (absent: 0) up to ``end`` (exclusive) of each partition in ``end``,
    in chunks, each partition's in offset order.

    ``isolation`` is the pipeline's ``[kafka] isolation_level``, the one the live stream reads with: a
    replay then applies exactly the records the stream applied (with ``read_committed``, none of an
    aborted transaction: the gap it leaves ends a partition by position, as a control marker does).

    :class:`RecoveryError` if a partition no longer holds them (retention deleted some): never a
    silent jump over the gap (Spark's ``failOnDataLoss``).
    """
    from confluent_kafka import TopicPartition

    todo = {tp: stop for tp, stop in end.items() if stop > start.get(tp, 0)}
    if not todo:
        return
    gone = missing_history(bootstrap, {tp: start.get(tp, 0) for tp in todo}, sorted({t for t, _ in todo}))
    if gone:
        raise RecoveryError(
            f"the committed inputs after the state's snapshot are no longer in Kafka: {'; '.join(gone)}. "
            f"Restore a newer snapshot, or start the pipeline over with `{FIX}`"
        )
    consumer = new_consumer(
        bootstrap,
        {
            "group.id": "ivm-replay",
            "enable.auto.commit": False,
            # an offset retention deleted after the check above is an error, never a silent jump to the end
            "auto.offset.reset": "error",
            "isolation.level": isolation,
        },
    )
    consumer.assign([TopicPartition(t, p, start.get((t, p), 0)) for (t, p) in todo])
    pending: list[Record] = []
    remaining = set(todo)
    deadline = time.monotonic() + 600
    try:
        while remaining:
            msg = consumer.poll(0.5)
            if msg is None:
                # gaps (compaction, control markers) end a partition by position, not by a record
                for t, p in list(remaining):
                    if consumer.position([TopicPartition(t, p)])[0].offset >= todo[(t, p)]:
                        remaining.discard((t, p))
                if remaining and time.monotonic() > deadline:
                    raise TimeoutError(f"replay did not reach {todo}")
                continue
            if msg.error():
                _raise_lost(msg, start)
                continue
            tp = (msg.topic(), msg.partition())
            if tp not in remaining or msg.offset() >= todo[tp]:
                if tp in remaining and msg.offset() >= todo[tp] - 1:
                    remaining.discard(tp)
                continue
            pending.append(Record(tp[0], tp[1], msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
            if msg.offset() >= todo[tp] - 1:
                remaining.discard(tp)
            if len(pending) >= chunk:
                yield pending
                pending = []
        if pending:
            yield pending
    finally:
        consumer.close()


def _raise_lost(msg: Any, positions: Positions) -> None:
    """:class:`RecoveryError` for a replay whose offsets are gone (Spark's ``failOnDataLoss``), the error
    itself if it is fatal; a transient client error (a broker reconnecting) is only logged."""
    from confluent_kafka import KafkaError, KafkaException

    err = msg.error()
    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
        tp = (msg.topic(), msg.partition())
        raise RecoveryError(
            f"{tp[0]}[{tp[1]}] no longer holds offset {positions.get(tp, 0)}, which the replay needs "
            f"({err.str()}): retention deleted committed inputs while the processor started. "
            f"Restore a newer snapshot, or start the pipeline over with `{FIX}`"
        )
    if err.fatal():
        raise KafkaException(err)
    log.debug("replay: %s", err)


@dataclass
class RecoveryReport:
    seconds: float
    snapshot_batch: int | None  # the batch the snapshot reflected, None without one
    committed_batch: int | None  # the last committed batch, None on a first start
    replayed: int  # input records applied again
    adoption: Adoption = field(default_factory=Adoption)


def recover(pipeline: Pipeline, store: StateStore | None, bootstrap: Kafka) -> RecoveryReport:
    """Bring ``pipeline`` to the state of its last committed batch, for the queries as now configured.

    With a snapshot: :func:`adopt` it (queries new, changed or reset are built from the relations'
    contents, removed ones dropped), then replay the inputs committed after it.  Without one but with
    committed batches: replay the relation topics from the history's origin, if they still hold it and
    no bootstrap loaded tuples outside them; otherwise :class:`RecoveryError` with the reason and the
    commands that fix it.  Partitions the pipeline never read get their origin here: where
    ``starting_offsets`` puts the stream (their first or their end offset).
    """
    started = time.perf_counter()
    committed = read_committed_progress(bootstrap, pipeline.config.progress_topic)
    snapshot = store.load() if store is not None else None
    if snapshot is not None and committed is None:
        # nothing committed on this cluster: the snapshot belongs to another run
        log.warning("a snapshot exists but no batch was committed on this cluster: starting empty")
        snapshot = None
    if snapshot is not None and committed is not None and snapshot.last_batch_id > committed["batch_id"]:
        raise RuntimeError(
            f"snapshot of batch {snapshot.last_batch_id} is ahead of the last committed batch "
            f"{committed['batch_id']}: the progress topic was deleted or belongs to another pipeline"
        )
    where = store.directory if store is not None else "(no state folder)"
    adoption = Adoption()
    if snapshot is not None:
        adoption = adopt(pipeline, snapshot)
    elif committed is not None:
        _rebuild_from_topics(pipeline, bootstrap, committed, where)
    replayed = 0
    if committed is not None:
        end = {(o["topic"], o["partition"]): o["offset"] for o in committed["offsets"]}
        end = {tp: o for tp, o in end.items() if tp[0] in set(pipeline.topics)}
        replayed = replay(pipeline, bootstrap, end)
        pipeline.state.last_batch_id = committed["batch_id"]
    _fix_origins(pipeline, bootstrap)
    for name, why in adoption.rebuilt.items():
        view = pipeline.views[name]
        log.warning(
            "query %s is %s: built from the relations' contents of the snapshot of batch %s (%d tuples), "
            "then the %d records committed after it",
            name, why, snapshot.last_batch_id if snapshot else None,
            pipeline.store.count(view.query.relations), replayed,
        )  # fmt: skip
        pipeline.metrics.rebuilds.labels(name).inc()
    for name in adoption.dropped:
        log.warning("query %s is no longer configured: its state is dropped", name)
    for relation in adoption.relations_dropped:
        log.warning("relation %s is no longer configured: its contents are dropped", relation)
    report = RecoveryReport(
        time.perf_counter() - started,
        snapshot.last_batch_id if snapshot is not None else None,
        committed["batch_id"] if committed is not None else None,
        replayed,
        adoption,
    )
    log.info(
        "recovered in %.2fs: snapshot of batch %s, last committed batch %s, %d records replayed",
        report.seconds, report.snapshot_batch, report.committed_batch, report.replayed,
    )  # fmt: skip
    return report


def _rebuild_from_topics(pipeline: Pipeline, bootstrap: Kafka, committed: dict[str, Any], where: Any) -> None:
    """No usable snapshot but committed batches: the state from the relation topics' whole history."""
    name = pipeline.config.name
    reasons = []
    if committed.get("legacy"):
        reasons.append("its committed progress was written by an earlier version of the processor")
    if committed.get("bootstrapped"):
        reasons.append("batch 0 was a bulk bootstrap (`ivm bootstrap`) whose tuples are in no topic")
    origin = {(o["topic"], o["partition"]): o["offset"] for o in committed.get("origin", [])}
    if not reasons:
        reasons += missing_history(bootstrap, origin, pipeline.topics)
    if reasons:
        raise RecoveryError(
            f"pipeline {name!r} has committed batch {committed['batch_id']}, but its state folder {where} holds "
            f"no usable snapshot and the state cannot be rebuilt from the relation topics: {'; '.join(reasons)}. "
            f"Restore the snapshots (snapshot-*.pkl) into {where}, or start over with `{FIX}` (the pipeline then "
            f"reads the relation topics from `starting_offsets` again, without what retention deleted or a "
            f"bootstrap loaded: run `ivm bootstrap` again for that)"
        )
    log.warning(
        "pipeline %s: no usable snapshot in %s: every query is rebuilt from the relation topics' history "
        "up to committed batch %d", name, where, committed["batch_id"],
    )  # fmt: skip
    pipeline.state.positions = dict(origin)
    pipeline.state.origin = dict(origin)


def _fix_origins(pipeline: Pipeline, bootstrap: Kafka) -> None:
    """Give every input partition the pipeline has never read its origin: where the stream will start."""
    from ivm.processor.kafka.topics import watermarks

    state = pipeline.state
    latest = pipeline.config.starting_offsets == "latest"
    for tp, (low, high) in watermarks(bootstrap, pipeline.topics).items():
        if tp in state.positions or tp in state.origin:
            continue
        if tp[0] == pipeline.control_topic:  # every command counts, whatever starting_offsets says
            state.origin[tp] = state.positions[tp] = low
            continue
        state.origin[tp] = high if latest else low
        if latest:
            state.positions[tp] = high
