"""Exactly-once recovery: the last snapshot, plus a replay of the inputs committed after it.

A batch's outputs and the input positions it consumed are committed in one
Kafka transaction (``pipeline.py``); the positions go to ``<pipeline>.progress``.
On start, after ``init_transactions`` has fenced any previous instance and
aborted its open transaction, the processor

1. loads the newest snapshot of its state (views and positions), if any;
2. reads the last committed progress record (``read_committed``);
3. replays the input records between the snapshot's positions and the committed
   ones, publishing nothing (their outputs are already committed);
4. resumes the stream exactly at the committed positions, numbering batches
   after the last committed one.

So every batch's outputs appear once, in order, whatever point a crash hit.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.codec import OutputCodec
from processor.pipeline import Pipeline, PipelineState, Positions, Record
from processor.topics import CLIENT_DEFAULTS

log = logging.getLogger(__name__)
SNAPSHOT_FORMAT = 3  # bump whenever PipelineState, a view or an engine changes shape (3: ShardedView routes per batch)


class StateStore:
    """Snapshots of a pipeline's state in a folder, written atomically, the newest two kept."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def save(self, state: PipelineState, queries: list[str]) -> tuple[Path, int]:
        """Write a snapshot; returns its path and size in bytes."""
        blob = pickle.dumps(
            {"format": SNAPSHOT_FORMAT, "queries": sorted(queries), "state": state}, protocol=pickle.HIGHEST_PROTOCOL
        )
        path = self.directory / f"snapshot-{state.last_batch_id:012d}.pkl"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        tmp.rename(path)
        for old in sorted(self.directory.glob("snapshot-*.pkl"))[:-2]:
            old.unlink(missing_ok=True)
        return path, len(blob)

    def load(self, queries: list[str]) -> PipelineState | None:
        """The newest readable snapshot taken with the same queries, or None."""
        for path in sorted(self.directory.glob("snapshot-*.pkl"), reverse=True):
            try:
                data = pickle.loads(path.read_bytes())
            except Exception as err:  # a torn or foreign file: try the older one
                log.warning("snapshot %s unreadable (%s); trying an older one", path, err)
                continue
            if data.get("format") != SNAPSHOT_FORMAT or data.get("queries") != sorted(queries):
                log.warning("snapshot %s was taken with other queries or another format; not used", path)
                continue
            return data["state"]
        return None


def read_committed_progress(bootstrap: str, topic: str) -> dict[str, Any] | None:
    """The last progress record of ``topic`` visible to read_committed readers."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ivm-recovery",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **CLIENT_DEFAULTS,
        }
    )
    codec = OutputCodec("progress")
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            return None
        last = None
        for partition in metadata.topics[topic].partitions:
            tp = TopicPartition(topic, partition, 0)
            _low, high = consumer.get_watermark_offsets(tp, timeout=30)
            if high == 0:
                continue
            consumer.assign([TopicPartition(topic, partition, 0)])
            deadline = time.monotonic() + 120
            while consumer.position([TopicPartition(topic, partition)])[0].offset < high:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    record = codec.decode(msg.value())
                    if last is None or record["batch_id"] >= last["batch_id"]:
                        last = record
                elif time.monotonic() > deadline:  # an open transaction that nobody aborted
                    raise TimeoutError(f"could not read {topic} to its end")
        return last
    except KafkaException as err:
        raise RuntimeError(f"reading {topic}: {err}") from err
    finally:
        consumer.close()


def replay(pipeline: Pipeline, bootstrap: str, end: Positions, chunk: int = 100_000) -> int:
    """Apply the input records from the pipeline's positions up to ``end`` (exclusive)."""
    from confluent_kafka import Consumer, TopicPartition

    todo = {tp: stop for tp, stop in end.items() if stop > pipeline.positions.get(tp, 0)}
    if not todo:
        return 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "ivm-replay", "enable.auto.commit": False, **CLIENT_DEFAULTS}
    )
    consumer.assign([TopicPartition(t, p, pipeline.positions.get((t, p), 0)) for (t, p) in todo])
    replayed, pending = 0, []
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
                replayed += pipeline.replay(pending)
                pending = []
        replayed += pipeline.replay(pending)
    finally:
        consumer.close()
    for tp, stop in todo.items():  # records compacted away or control markers: the position is the end
        pipeline.positions[tp] = max(pipeline.positions.get(tp, 0), stop)
    return replayed


@dataclass
class RecoveryReport:
    seconds: float
    snapshot_batch: int | None  # the batch the snapshot reflected, None without one
    committed_batch: int | None  # the last committed batch, None on a first start
    replayed: int  # input records applied again


def recover(pipeline: Pipeline, store: StateStore | None, bootstrap: str) -> RecoveryReport:
    """Bring ``pipeline`` to the state of its last committed batch."""
    started = time.perf_counter()
    queries = list(pipeline.views)
    committed = read_committed_progress(bootstrap, pipeline.config.progress_topic)
    snapshot = store.load(queries) if store is not None else None
    if snapshot is not None and committed is None:
        # nothing committed on this cluster: the snapshot belongs to another run
        log.warning("a snapshot exists but no batch was committed on this cluster: starting empty")
        snapshot = None
    snapshot_batch = snapshot.last_batch_id if snapshot is not None else None
    if snapshot is not None:
        pipeline.state = snapshot
    replayed = 0
    if committed is not None:
        end = {(o["topic"], o["partition"]): o["offset"] for o in committed["offsets"]}
        if snapshot is not None and snapshot.last_batch_id > committed["batch_id"]:
            raise RuntimeError(
                f"snapshot of batch {snapshot.last_batch_id} is ahead of the last committed batch "
                f"{committed['batch_id']}: the progress topic was deleted or belongs to another pipeline"
            )
        replayed = replay(pipeline, bootstrap, end)
        pipeline.state.last_batch_id = committed["batch_id"]
    report = RecoveryReport(
        time.perf_counter() - started,
        snapshot_batch,
        committed["batch_id"] if committed is not None else None,
        replayed,
    )
    log.info(
        "recovered in %.2fs: snapshot of batch %s, last committed batch %s, %d records replayed",
        report.seconds, report.snapshot_batch, report.committed_batch, report.replayed,
    )  # fmt: skip
    return report
