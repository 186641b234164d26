"""The Spark plan of one micro-batch when the state lives on the executors.

Per micro-batch, one Spark stage, no shuffle and no record through the driver:

1. ``mapInArrow`` over the Kafka source's partitions (on the executors): each
   task decodes its records, routes each to the slices holding its tuple
   (``routes.py``) and sends each slice's records, a :class:`Piece`, to the
   shard host that holds the slice (``host.py``), directly; it returns one small
   row per piece and per input partition (counts, offsets, the oldest time);
2. the driver *seals* the batch: it tells each slice's host that the batch is
   complete (its positions, and how many records of each partition the tasks
   routed to the slice), every host at once, each on its own thread; a host
   applies its slices' pieces in (topic, partition, offset) order, exactly as
   the driver's placement would, and answers with the slices' parts of the
   results and their dead letters;
3. the driver adds the parts up (``driver.py``), publishes and commits.

Pieces are data, not state: a host that lost some (it was restarted, or a slice
moved) reads those partitions' part of the batch from Kafka when it is sealed,
and a slice whose host died is sealed on another host, which rebuilds it from
its snapshot and a replay first.  A Spark task that fails (an executor lost, a
Python worker killed) is retried by Spark and sends its pieces again; they
replace the first attempt's.  The hosts are started at the first batch by a
small job with one task per core (:func:`start_hosts`), and again whenever none
answers; the slices are spread over them.  When the executors change (one added,
one gone) the hosts are looked for again and the fewest slices move to spread
them evenly (:func:`rebalance`): a moved slice is rebuilt on its new host at the
next seal, as a lost host's is.  Speculative execution is off
(``spark_session``): a second attempt would only cost.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ivm.processor.pipeline import Positions, RecordBatch
from ivm.processor.placement.driver import PartitionSummary, PlacedPipeline, assemble
from ivm.processor.placement.host import HostSpec, connect, executor_name, request, stage
from ivm.processor.placement.slices import Piece, Seal, SliceResponse

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
SENT = "slice int, topic string, partition int, last long, n long, oldest long, host string, updates long"
SEAL_TIMEOUT = 600.0  # a host that does not answer a seal this long is taken for lost
_ROUTERS: dict[bytes, Any] = {}  # per worker process: the router of each configuration
_SUMMARY = -1  # the slice column of a partition's summary row

Address = tuple[str, int]


class RouteFn:
    """``mapInArrow``'s function: route the task's records and send each slice its piece (step 1)."""

    def __init__(self, spec: HostSpec, version: int, positions: Positions, owners: dict[int, Address]) -> None:
        self.spec = spec
        self.version = version
        self.positions = positions
        self.owners = owners

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from ivm.processor.placement.routes import Router

        key = pickle.dumps(self.spec.config)
        router = _ROUTERS.get(key)
        if router is None:
            router = _ROUTERS[key] = Router(self.spec.config)
        arrow = list(batches)
        if not arrow:
            return
        batch = RecordBatch.from_arrow(pa.Table.from_batches(arrow))
        routed = router.split(batch, self.positions)
        rows: dict[str, list[Any]] = {
            name: [] for name in ("slice", "topic", "partition", "last", "n", "oldest", "host", "updates")
        }

        def row(index: int, tp: tuple[str, int], last: int, n: int, oldest: int, host: str, updates: int = -1) -> None:
            for name, value in zip(rows, (index, tp[0], tp[1], last, n, oldest, host, updates), strict=True):
                rows[name].append(value)

        for s in routed.summaries:  # updates: -1 for one-update records, else those the packed records carry
            updates = -1 if s.updates is None else s.updates
            row(_SUMMARY, (s.topic, s.partition), s.last_offset, s.records, s.oldest_ms, "", updates)
        for index, where in sorted(routed.rows.items()):
            quiet = routed.quiet.get(index, set())
            pieces = []
            by_partition: dict[tuple[str, int], list[int]] = {}
            for i in where:
                by_partition.setdefault((batch.topic[i], batch.partition[i]), []).append(i)
            for tp, members in sorted(by_partition.items()):
                records = batch.take(members)
                pieces.append(Piece(index, self.version, tp, records, {batch.offset[i] for i in members if i in quiet}))
            address = stage(self.spec, pieces, self.owners.get(index))
            for piece in pieces:
                row(index, piece.tp, piece.records.offset[-1], len(piece.records), 0, f"{address[0]}:{address[1]}")
        yield pa.RecordBatch.from_pydict(
            rows,
            schema=pa.schema(
                [
                    ("slice", pa.int32()),
                    ("topic", pa.string()),
                    ("partition", pa.int32()),
                    ("last", pa.int64()),
                    ("n", pa.int64()),
                    ("oldest", pa.int64()),
                    ("host", pa.string()),
                    ("updates", pa.int64()),
                ]
            ),
        )


class HostFn:
    """``mapInArrow``'s function of :func:`start_hosts`: this executor's shard host, started if needed."""

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for _ in batches:
            pass
        _conn, address = connect(self.spec)
        yield pa.RecordBatch.from_pydict(
            {"host": [f"{address[0]}:{address[1]}"], "executor": [executor_name()]},
            schema=pa.schema([("host", pa.string()), ("executor", pa.string())]),
        )


def start_hosts(spark: SparkSession, spec: HostSpec) -> list[Address]:
    """One task per core: each executor's shard host, started where it is not running; their addresses."""
    tasks = max(1, spark.sparkContext.defaultParallelism)
    found = spark.range(tasks, numPartitions=tasks).mapInArrow(HostFn(spec), "host string, executor string")
    return sorted({_address(row["host"]) for row in found.collect()})


def _address(text: str) -> Address:
    host, _, port = text.rpartition(":")
    return host, int(port)


@dataclass
class SentBatch:
    """A micro-batch routed and sent to the shard hosts, not sealed yet (step 1 done)."""

    version: int
    before: Positions
    after: Positions
    summaries: list[PartitionSummary]
    expected: dict[int, dict[tuple[str, int], int]]  # slice -> input partition -> records sent
    moved: dict[int, Address]  # slices whose records went to another host than their owner: where
    seconds: float

    def __len__(self) -> int:
        return sum(s.records for s in self.summaries)


def send_batch(
    spark: SparkSession,
    df: DataFrame,
    spec: HostSpec,
    version: int,
    before: Positions,
    slices: int,
    owners: dict[int, Address],
    known: set[Address],
) -> SentBatch:
    """Step 1 for the micro-batch ``df`` (module docstring): its records routed and sent to the hosts of
    their slices.  ``owners`` (slice -> host) gets a host for every slice that has none (the hosts are
    started), ``known`` every host seen."""
    if len(owners) < slices:
        hosts = start_hosts(spark, spec)
        known.update(hosts)
        _spread(owners, slices, hosts)
        _BALANCE[spec.run] = (_executors(spark), time.monotonic())
    elif _unbalanced(spark, spec, owners, slices):
        hosts = start_hosts(spark, spec)
        known.update(hosts)
        moves = rebalance(owners, slices, hosts)
        if moves:
            log.warning(
                "batch %d: slices moved to spread them over the live executors' hosts: %s",
                version, ", ".join(f"{i} {a[0]}:{a[1]} -> {b[0]}:{b[1]}" for i, (a, b) in sorted(moves.items())),
            )  # fmt: skip
            retired = _RETIRED.setdefault(spec.run, {})
            for index, (old, _new) in moves.items():
                retired.setdefault(index, old)
    started = time.perf_counter()
    sent = df.mapInArrow(RouteFn(spec, version, before, dict(owners)), SENT).toArrow().to_pylist()
    summaries = [
        PartitionSummary(
            r["topic"], r["partition"], r["last"], r["n"], r["oldest"], None if r["updates"] < 0 else r["updates"]
        )
        for r in sent
        if r["slice"] < 0
    ]
    after = dict(before)
    for s in summaries:
        after[(s.topic, s.partition)] = max(after.get((s.topic, s.partition), 0), s.last_offset + 1)
    expected: dict[int, dict[tuple[str, int], int]] = {index: {} for index in range(slices)}
    received: dict[int, dict[Address, int]] = {}
    for r in sent:
        if r["slice"] >= 0:
            tp, where = (r["topic"], r["partition"]), _address(r["host"])
            expected[r["slice"]][tp] = expected[r["slice"]].get(tp, 0) + r["n"]
            known.add(where)
            took = received.setdefault(r["slice"], {})
            took[where] = took.get(where, 0) + r["n"]
    # a slice whose records went elsewhere (its host did not answer) moves to the host that took most
    moved = {
        index: max(took, key=lambda a: (took[a], a))
        for index, took in received.items()
        if owners.get(index) not in took
    }
    return SentBatch(version, before, after, summaries, expected, moved, time.perf_counter() - started)


def seal_batch(
    spark: SparkSession,
    sent: SentBatch,
    pipeline: PlacedPipeline,
    spec: HostSpec,
    owners: dict[int, Address],
    known: set[Address],
) -> tuple[Any, list[SliceResponse]]:
    """Steps 2 and 3 (module docstring): seal batch ``sent`` on every slice's host; returns the batch's
    :class:`~ivm.processor.pipeline.Applied` and the slices' responses.  ``owners`` is updated with where
    each slice now lives; the hosts that held a slice that moved are told to drop it."""
    started = time.perf_counter()
    previous = dict(owners)
    owners.update(sent.moved)
    holding = {s for s in range(pipeline.slices) if any(not v.has_part(s) for v in _holding(pipeline, s))}
    origin = dict(pipeline.state.origin)
    seals = {
        index: Seal(index, sent.version, sent.before, sent.after, sent.expected[index], origin, index in holding)
        for index in range(pipeline.slices)
    }
    responses = _seal(spark, spec, seals, owners, known)
    log.info(
        "batch %d: routed and sent in %.3fs, sealed in %.3fs (slowest slice %.3fs)",
        sent.version, sent.seconds, time.perf_counter() - started, max(r.seconds for r in responses),
    )  # fmt: skip
    _forget_moved(spec, previous, owners)
    retired = _RETIRED.pop(spec.run, {})
    if retired:  # slices a rebalance moved: their earlier hosts drop them (they hold an older version)
        _forget_moved(spec, retired, owners)
    return assemble(pipeline, responses, sent.summaries), responses


def _forget_moved(spec: HostSpec, previous: dict[int, Address], owners: dict[int, Address]) -> None:
    """Tell the hosts that held slices now held elsewhere to drop them (their state is stale)."""
    moved: dict[Address, list[int]] = {}
    for index, address in previous.items():
        if owners.get(index) != address:
            moved.setdefault(address, []).append(index)
    for address, indexes in moved.items():
        with contextlib.suppress(OSError, EOFError, TimeoutError):  # a host that is gone holds nothing
            request(address, spec.authkey, "drop", indexes, 5.0)


def _seal(
    spark: SparkSession, spec: HostSpec, seals: dict[int, Seal], owners: dict[int, Address], known: set[Address]
) -> list[SliceResponse]:
    """Seal every slice on its host, all hosts at once; a slice whose host does not answer is sealed on
    another (which rebuilds it), and when no host answers, new ones are started."""
    todo = dict(seals)
    out: dict[int, SliceResponse] = {}
    for _attempt in range(3):
        by_host: dict[Address, list[Seal]] = {}
        for index, seal in todo.items():
            by_host.setdefault(owners[index], []).append(seal)
        replies: dict[Address, Any] = {}
        threads = [
            threading.Thread(target=_seal_on, args=(spec, address, batch, replies), daemon=True)
            for address, batch in by_host.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        lost = []
        for address, reply in replies.items():
            if isinstance(reply, BaseException):
                lost.append(address)
                continue
            for seal, response in zip(by_host[address], reply, strict=True):
                if isinstance(response, BaseException):
                    raise RuntimeError(f"slice {seal.index}, batch {seal.version}: {response}") from response
                out[seal.index] = response
                todo.pop(seal.index)
        if not todo:
            return [out[i] for i in sorted(out)]
        alive = sorted(set(owners.values()) - set(lost))
        known.difference_update(lost)
        if not alive:
            alive = start_hosts(spark, spec)
            known.update(alive)
        for index in todo:  # the slices of lost hosts go to the others, round robin
            owners[index] = alive[index % len(alive)]
    raise RuntimeError(f"batch {next(iter(seals.values())).version}: no shard host could seal slices {sorted(todo)}")


def _seal_on(spec: HostSpec, address: Address, seals: list[Seal], replies: dict[Address, Any]) -> None:
    """Seal ``seals`` on the host at ``address``; its reply (or the error) goes to ``replies``."""
    try:
        replies[address] = request(address, spec.authkey, "seal", seals, SEAL_TIMEOUT)
    except (OSError, EOFError, TimeoutError) as err:
        replies[address] = err


#: per run: the executors seen when the slices were last spread, and when (``_unbalanced``)
_BALANCE: dict[str, tuple[frozenset[str], float]] = {}
#: per run: slices moved by a rebalance whose earlier host is told to drop them after the next seal
_RETIRED: dict[str, dict[int, Address]] = {}
RESPREAD_SECONDS = 30.0  # at most this often, hosts are looked for while fewer hold slices than could


def _executors(spark: SparkSession) -> frozenset[str]:
    """The live executors (``host:port`` of each; the driver's entry included), from Spark's status tracker."""
    try:
        infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()  # type: ignore[union-attr]
        return frozenset(f"{i.host()}:{i.port()}" for i in infos)
    except Exception as err:  # a session being stopped
        log.debug("executors: %s", err)
        return frozenset()


def _unbalanced(spark: SparkSession, spec: HostSpec, owners: dict[int, Address], slices: int) -> bool:
    """Whether the slices should be spread again: the executors changed since they last were (one came or
    went), or fewer hosts hold slices than there are executors (a host was lost and its slices went to the
    others; looked at once per ``RESPREAD_SECONDS``)."""
    executors = _executors(spark)
    seen, when = _BALANCE.get(spec.run, (frozenset(), 0.0))
    if not executors:
        return False
    workers = max(1, len(executors) - 1)  # the driver's entry is not an executor (but in local mode)
    crowded = len(set(owners.values())) < min(slices, workers) and time.monotonic() - when > RESPREAD_SECONDS
    if executors != seen or crowded:
        _BALANCE[spec.run] = (executors, time.monotonic())
        return True
    return False


def rebalance(owners: dict[int, Address], slices: int, hosts: list[Address]) -> dict[int, tuple[Address, Address]]:
    """Spread the slices evenly over ``hosts`` (the live ones) moving as few as possible: a slice whose host
    is not among them moves to the least loaded one, then one slice at a time from the most loaded host to
    the least loaded until their counts differ by at most one.  Returns the moves (slice -> (from, to));
    each moved slice is rebuilt on its new host from its snapshot and a replay, at the next seal."""
    if not hosts:
        return {}
    live = sorted(set(hosts))
    held: dict[Address, list[int]] = {h: [] for h in live}
    moves: dict[int, tuple[Address, Address]] = {}
    orphans = []
    for index in range(slices):
        owner = owners.get(index)
        if owner in held:
            held[owner].append(index)  # type: ignore[index]
        else:
            orphans.append(index)
    for index in orphans:
        target = min(live, key=lambda h: (len(held[h]), h))
        held[target].append(index)
        if index in owners:
            moves[index] = (owners[index], target)
        owners[index] = target
    while True:
        most = max(live, key=lambda h: (len(held[h]), h))
        least = min(live, key=lambda h: (len(held[h]), h))
        if len(held[most]) - len(held[least]) <= 1:
            break
        index = held[most].pop()
        held[least].append(index)
        moves[index] = (moves[index][0] if index in moves else most, least)
        owners[index] = least
    return {i: m for i, m in moves.items() if m[0] != m[1]}


def _spread(owners: dict[int, Address], slices: int, hosts: list[Address]) -> None:
    """Give every slice without a host one, round robin over ``hosts``."""
    for index in range(slices):
        if index not in owners:
            owners[index] = hosts[index % len(hosts)]


def _holding(pipeline: PlacedPipeline, index: int) -> list[Any]:
    return [v for v in pipeline.views.values() if index < len(v.shards)]
