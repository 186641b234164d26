"""The Spark plan of one micro-batch when the state lives on the executors.

Per micro-batch, one Spark job and no record through the driver:

1. ``mapInArrow`` (on the executors): decode and route each fresh record to the
   slices holding its tuple (``routes.py``), and summarize each input partition;
2. a heartbeat row per slice is added, so that every slice takes part in every
   batch (its version moves on even when no record went to it);
3. ``groupBy("slice").applyInArrow`` (on the executors): each slice's records go
   to the shard host that holds the slice (``host.py``), which applies them and
   answers with the slice's part of each result and its dead letters;
4. the driver collects one small row per slice and the summaries, adds the
   parts up (``driver.py``), publishes and commits the batch's transaction.

A task that fails (an executor lost, a Python worker killed, a shard host gone)
is retried by Spark: the slice's host answers a repeated batch with the outputs
it stored, or rebuilds the slice first.  Speculative execution must be off (a
second attempt of the same batch may run anywhere; the versions make it
harmless, but it costs a second apply); ``spark_session`` sets it off.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from processor.pipeline import Positions, RecordBatch
from processor.placement.driver import PartitionSummary, PlacedPipeline, assemble
from processor.placement.host import HostSpec, call, executor_name
from processor.placement.slices import SliceRequest, SliceResponse

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

ROUTED = (
    "slice int, topic string, partition int, offset long, key binary, value binary, timestamp_ms long, "
    "primary boolean, n long"
)
ANSWERS = "slice int, payload binary"
_SUMMARY = -1  # the slice column of a partition's summary row

_ROUTERS: dict[bytes, Any] = {}  # per worker process: the router of each configuration


class RouteFn:
    """``mapInArrow``'s function: route a batch's records to their slices (step 1)."""

    def __init__(self, spec: HostSpec, positions: Positions) -> None:
        self.spec = spec
        self.positions = positions

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from processor.placement.routes import Router

        key = pickle.dumps(self.spec.config)
        router = _ROUTERS.get(key)
        if router is None:
            router = _ROUTERS[key] = Router(self.spec.config)
        for arrow in batches:
            table = pa.Table.from_batches([arrow])
            routed = router.split(RecordBatch.from_arrow(table), self.positions)
            for s, rows in routed.rows.items():
                part = table.take(pa.array(rows, pa.int64()))
                quiet = routed.quiet.get(s, set())
                yield from _with(part, s, [i not in quiet for i in rows], 1).to_batches()
            if routed.summaries:
                yield _summaries(routed.summaries)


def _with(part: pa.Table, index: int, primary: list[bool], n: int) -> pa.Table:
    import pyarrow as pa

    size = part.num_rows
    return pa.table(
        {
            "slice": pa.array([index] * size, pa.int32()),
            "topic": part.column("topic"),
            "partition": part.column("partition").cast(pa.int32()),
            "offset": part.column("offset").cast(pa.int64()),
            "key": part.column("key").cast(pa.binary()),
            "value": part.column("value").cast(pa.binary()),
            "timestamp_ms": part.column("timestamp_ms").cast(pa.int64()),
            "primary": pa.array(primary, pa.bool_()),
            "n": pa.array([n] * size, pa.int64()),
        }
    )


def _summaries(summaries: list[PartitionSummary]) -> pa.RecordBatch:
    import pyarrow as pa

    size = len(summaries)
    return pa.RecordBatch.from_pydict(
        {
            "slice": pa.array([_SUMMARY] * size, pa.int32()),
            "topic": pa.array([s.topic for s in summaries], pa.string()),
            "partition": pa.array([s.partition for s in summaries], pa.int32()),
            "offset": pa.array([s.last_offset for s in summaries], pa.int64()),
            "key": pa.array([None] * size, pa.binary()),
            "value": pa.array([None] * size, pa.binary()),
            "timestamp_ms": pa.array([s.oldest_ms for s in summaries], pa.int64()),
            "primary": pa.array([True] * size, pa.bool_()),
            "n": pa.array([s.records for s in summaries], pa.int64()),
        }
    )


class SliceFn:
    """``applyInArrow``'s function: one slice's records to its shard host (step 3)."""

    def __init__(
        self,
        spec: HostSpec,
        version: int,
        before: Positions,
        origin: Positions,
        owners: dict[int, tuple[str, int]],
        full: set[int],
    ) -> None:
        self.spec = spec
        self.version = version
        self.before = before
        self.origin = origin
        self.owners = owners
        self.full = full

    def __call__(self, table: pa.Table) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        index = table.column("slice")[0].as_py()
        if index == _SUMMARY:
            rows = table.to_pylist()
            summaries = [
                PartitionSummary(r["topic"], r["partition"], r["offset"], r["n"], r["timestamp_ms"]) for r in rows
            ]
            return pa.table({"slice": pa.array([index], pa.int32()), "payload": [pickle.dumps(summaries)]})
        records = table.filter(pc.equal(table.column("n"), 1))
        records = records.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
        batch = RecordBatch.from_arrow(records)
        primary = records.column("primary").to_pylist()
        quiet = {(batch.topic[i], batch.partition[i], batch.offset[i]) for i, p in enumerate(primary) if not p}
        request = SliceRequest(index, self.version, batch, self.before, self.origin, quiet, index in self.full)
        response = call(self.spec, request, self.owners.get(index))
        response.executor = executor_name()
        return pa.table({"slice": pa.array([index], pa.int32()), "payload": [pickle.dumps(response)]})


def apply_batch(
    spark: SparkSession,
    df: DataFrame,
    pipeline: PlacedPipeline,
    spec: HostSpec,
    owners: dict[int, tuple[str, int]],
) -> tuple[Any, list[SliceResponse]]:
    """Apply the micro-batch ``df`` on the executors (module docstring); returns the batch's
    :class:`~processor.pipeline.Applied` and the slices' responses.  ``owners`` (slice -> host address)
    is updated with where each slice now lives."""
    version = pipeline.state.last_batch_id + 1
    before = dict(pipeline.positions)
    full = {s for s in range(pipeline.slices) if any(not v.has_part(s) for v in _holding(pipeline, s))}
    routed = df.mapInArrow(RouteFn(spec, before), ROUTED)
    beats = spark.createDataFrame([(s, "", 0, -1, None, None, 0, True, 0) for s in range(pipeline.slices)], ROUTED)
    answers = (
        routed.unionByName(beats)
        .groupBy("slice")
        .applyInArrow(
            _one_argument(SliceFn(spec, version, before, dict(pipeline.state.origin), dict(owners), full)), ANSWERS
        )
        .toArrow()
    )
    responses: list[SliceResponse] = []
    summaries: list[PartitionSummary] = []
    for index, payload in zip(answers.column("slice").to_pylist(), answers.column("payload").to_pylist(), strict=True):
        if index == _SUMMARY:
            summaries += pickle.loads(payload)
        else:
            responses.append(pickle.loads(payload))
    missing = set(range(pipeline.slices)) - {r.index for r in responses}
    if missing:
        raise RuntimeError(f"batch {version}: no answer from slices {sorted(missing)}")
    for response in responses:
        host, _, port = response.host.rpartition(":")
        owners[response.index] = (host, int(port))
    return assemble(pipeline, responses, summaries), responses


def _one_argument(fn: SliceFn) -> Any:
    """``applyInArrow`` tells ``f(table)`` from ``f(key, table)`` by the arguments it sees, and counts a
    callable object's ``self``: hand it a plain function."""

    def call(table: pa.Table) -> pa.Table:
        return fn(table)

    return call


def _holding(pipeline: PlacedPipeline, index: int) -> list[Any]:
    return [v for v in pipeline.views.values() if index < len(v.shards)]
