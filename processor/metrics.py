"""The processor's Prometheus metrics (prometheus-client).

Names follow the Prometheus conventions: an ``ivm_`` prefix, base units
(seconds, bytes, records), ``_total`` for counters, and labels of bounded
cardinality only (query, relation, view, shard, reason, topic, partition: all
fixed by the configuration and the query, never by the data).  The dashboards
and alert rules in ``monitoring/`` use these names; ``tests/unit/test_deployment.py``
and ``tests/integration/test_prometheus.py`` check that every expression there
still finds its metrics.

The pipeline calls :meth:`Metrics.observe_view` after each batch (result,
state size, engine internals) and :meth:`Metrics.observe_inputs` with the
batch's input records (consumed records, end-to-end latency); the job runs a
:class:`LagMonitor` thread for the consumer lag per partition.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from ivm.kernels import Kernel
    from ivm.processor.kafka.clients import Kafka

log = logging.getLogger(__name__)

LAG_INTERVAL_SECONDS = 5.0  # how often the lag monitor reads the input topics' end offsets

# Engine stats (flat numbers of ``view.stats()``) that are exported as named metrics.
# The key that stands for the state's tuples and for its view entries differs per engine.
_TUPLE_STATS = ("state_tuples", "base_tuples")
_VIEW_ENTRY_STATS = ("view_entries", "view_keys", "items", "tuples")
_DOWNGRADE_STATS = {
    "pattern_downgrades_relation": "relation",
    "pattern_downgrades_pair": "pair",
    "pattern_downgrades_deletion_only": "deletion_only",
}
# How a stat of several shards combines into one number for the whole view (default: sum).
_COMBINE_MAX = re.compile(
    r"^(threshold_base|tree_height|update_exponent|pattern_level\..*|pattern_.*|plan_changes|rebuilds)$"
)
_COMBINE_MIN = re.compile(r"^constant_time$")


# Histogram buckets chosen from what bench/e2e.py measured (bench/README.md, "The whole pipeline"):
# produce-to-commit latency p50 0.32-0.47 s and p99 0.88-1.29 s at half the full rate, so the buckets
# are dense between 0.1 and 2 s (steps of 0.05-0.25 s) and coarse beyond, for outages and backlogs;
# a micro-batch takes 0.02-0.8 s to decode, apply and publish (1,000 to 200,000 records).
LATENCY_SECONDS_BUCKETS = (
    0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3, 5, 10, 30, 60, 300, 900,
)  # fmt: skip
BATCH_SECONDS_BUCKETS = (
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.5, 5, 10, 30,
)  # fmt: skip


class _Record(Protocol):
    topic: str
    timestamp_ms: int


class Metrics:
    """All metrics of one processor, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # -- updates and batches ---------------------------------------------------------------
        self.updates_applied = Counter(
            "ivm_updates_applied_total",
            "Updates applied to a query's state",
            ["query", "relation"],
            registry=r,
        )
        self.updates_rejected = Counter(
            "ivm_updates_rejected_total",
            "Inputs rejected to the dead-letter topic",
            ["query", "relation", "reason"],
            registry=r,
        )
        self.batch_duration = Histogram(
            "ivm_batch_duration_seconds",
            "Time to decode, apply and publish one micro-batch",
            buckets=BATCH_SECONDS_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "ivm_batch_records",
            "Input records per micro-batch",
            buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000),
            registry=r,
        )
        self.latency = Histogram(
            "ivm_end_to_end_latency_seconds",
            "Per batch: from the Kafka timestamp of its oldest input record to its outputs being committed",
            buckets=LATENCY_SECONDS_BUCKETS,
            registry=r,
        )
        self.batches = Counter("ivm_batches_total", "Micro-batches processed", registry=r)
        self.last_batch_id = Gauge("ivm_last_batch_id", "Id of the last processed micro-batch", registry=r)
        self.last_batch_time = Gauge(
            "ivm_last_batch_timestamp_seconds", "Unix time the last micro-batch was committed", registry=r
        )
        self.dead_letters = Counter(
            "ivm_dead_letters_total", "Messages written to the dead-letter topic", ["topic"], registry=r
        )
        # -- per relation: consumed = applied + dead-lettered -------------------------------------
        self.relation_consumed = Counter(
            "ivm_relation_records_consumed_total",
            "Input records of a relation's topic taken into a batch (redeliveries excluded)",
            ["relation"],
            registry=r,
        )
        self.relation_applied = Counter(
            "ivm_relation_updates_applied_total",
            "Input records applied to a relation's contents, and so to every query over it",
            ["relation"],
            registry=r,
        )
        self.relation_dead_lettered = Counter(
            "ivm_relation_dead_letters_total",
            "Input records of a relation sent to the dead-letter topic (once each, with the reason)",
            ["relation"],
            registry=r,
        )
        self.rebuilds = Counter(
            "ivm_query_rebuilds_total",
            "Queries built from the relations' contents at start-up (new, changed or reset queries)",
            ["query"],
            registry=r,
        )
        # -- Kafka input ---------------------------------------------------------------------------
        self.records_consumed = Counter(
            "ivm_records_consumed_total",
            "Input records read from a relation topic (redeliveries excluded)",
            ["topic"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "ivm_consumer_lag_records",
            "Records of an input partition not yet applied: its end offset minus the processor's position",
            ["topic", "partition"],
            registry=r,
        )
        # -- results and state ---------------------------------------------------------------------
        self.result_value = Gauge(
            "ivm_result_value", "Current scalar result of a query (counts, sums)", ["query"], registry=r
        )
        self.state_tuples = Gauge("ivm_state_tuples", "Base tuples a query's state holds", ["query"], registry=r)
        self.state_view_entries = Gauge(
            "ivm_state_view_entries", "Entries of a query's materialized views", ["query"], registry=r
        )
        self.state_bytes_per_tuple = Gauge(  # issue 38: state_bytes over base tuples (shards summed)
            "ivm_state_bytes_per_tuple", "Bytes of a query's state per stored base tuple", ["query"], registry=r
        )
        self.engine_stat = Gauge(
            "ivm_engine_stat", "Engine internals as reported by Engine.stats()", ["query", "engine", "stat"],
            registry=r,
        )  # fmt: skip
        self.constant_time = Gauge(
            "ivm_constant_time",
            "1 while the query's plan guarantees O(1) amortized updates with O(1)-delay enumeration",
            ["query"],
            registry=r,
        )
        self.model_not_converged = Counter(
            "ivm_model_not_converged_total",
            "Model records published whose gradient descent stopped at its iteration cap, unconverged",
            ["query"],
            registry=r,
        )
        self.plan_changes = Counter(
            "ivm_plan_changes_total", "Maintenance plan changes (a new tree after a pattern change)", ["query"],
            registry=r,
        )  # fmt: skip
        # -- IVM^eps -------------------------------------------------------------------------------
        self.eps_heavy_keys = Gauge(
            "ivm_eps_heavy_keys", "IVM^eps: keys in the heavy part of a relation", ["query", "relation"], registry=r
        )
        self.eps_light_keys = Gauge(
            "ivm_eps_light_keys", "IVM^eps: keys in the light part of a relation", ["query", "relation"], registry=r
        )
        self.eps_threshold_base = Gauge(
            "ivm_eps_threshold_base", "IVM^eps: the threshold base N (N/4 <= |D| < N)", ["query"], registry=r
        )
        self.eps_threshold = Gauge(
            "ivm_eps_heavy_threshold", "IVM^eps: the heavy/light degree threshold N^eps of a relation",
            ["query", "relation"], registry=r,
        )  # fmt: skip
        self.rebalances = Counter(
            "ivm_rebalances_total", "IVM^eps rebalancing steps, by kind (minor, major)", ["query", "kind"],
            registry=r,
        )  # fmt: skip
        self.tuples_moved = Counter(
            "ivm_eps_tuples_moved_total", "IVM^eps: tuples moved between heavy and light parts", ["query"],
            registry=r,
        )  # fmt: skip
        # -- F-IVM -----------------------------------------------------------------------------------
        self.fivm_views = Gauge(
            "ivm_fivm_materialized_views", "F-IVM: materialized views of the view tree", ["query"], registry=r
        )
        self.fivm_view_keys = Gauge(
            "ivm_fivm_view_keys", "F-IVM: keys (payload entries) of one materialized view", ["query", "view"],
            registry=r,
        )  # fmt: skip
        # -- update patterns ---------------------------------------------------------------------
        self.pattern_level = Gauge(
            "ivm_pattern_level",
            "Current update pattern of a relation: 0 insert-only, 1 FIFO, 2 arbitrary",
            ["query", "relation"],
            registry=r,
        )
        self.pattern_downgrades = Counter(
            "ivm_pattern_downgrades_total",
            "Update-pattern downgrades seen by the monitors, by kind (relation, pair, deletion_only)",
            ["query", "kind"],
            registry=r,
        )
        # -- shards ------------------------------------------------------------------------------
        self.shard_tuples = Gauge(
            "ivm_shard_tuples", "Tuples held by one shard of a query's state", ["query", "shard"], registry=r
        )
        self.shard_updates = Counter(
            "ivm_shard_updates_applied_total", "Updates applied by one shard (replicas included)",
            ["query", "shard"], registry=r,
        )  # fmt: skip
        # -- slices on the executors (placement = "executors") ---------------------------------------------
        self.slice_tuples = Gauge(
            "ivm_slice_tuples", "Relation tuples kept by one slice of the state in its shard host",
            ["slice", "host", "executor"], registry=r,
        )  # fmt: skip
        self.slice_apply_seconds = Histogram(
            "ivm_slice_apply_seconds", "Time a shard host took to apply one batch to one slice (rebuilds included)",
            ["slice"], buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30), registry=r,
        )  # fmt: skip
        self.slice_rebuilds = Counter(
            "ivm_slice_rebuilds_total", "Slices rebuilt from a snapshot and a replay (a lost shard host or task)",
            ["slice"], registry=r,
        )  # fmt: skip
        self.slice_replayed = Counter(
            "ivm_slice_replayed_records_total", "Input records replayed by slice rebuilds", ["slice"], registry=r
        )
        # -- recovery and snapshots ------------------------------------------------------------------
        self.recovery_seconds = Gauge(
            "ivm_recovery_seconds", "Time the last start took to restore the snapshot and replay", registry=r
        )
        self.replayed_records = Counter(
            "ivm_replayed_records_total", "Input records applied again during recovery", registry=r
        )
        self.snapshot_seconds = Histogram(
            "ivm_snapshot_seconds",
            "Time to write one state snapshot (in a forked child, beside the stream)",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60),
            registry=r,
        )
        self.snapshot_pause_seconds = Histogram(
            "ivm_snapshot_pause_seconds",
            "Time the stream stopped to start one snapshot (the fork; the write itself runs beside the stream)",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=r,
        )
        self.snapshots_skipped = Counter(
            "ivm_snapshots_skipped_total",
            "Snapshots not taken because the previous one was still being written",
            registry=r,
        )
        self.snapshots_failed = Counter("ivm_snapshots_failed_total", "Snapshot writes that failed", registry=r)
        self.snapshot_bytes = Gauge("ivm_snapshot_bytes", "Size of the last state snapshot", registry=r)
        # -- Python's cyclic collector (ivm/processor/state/collector.py) --------------------------------------
        self.gc_pause_seconds = Histogram(
            "ivm_gc_pause_seconds",
            "Pauses of Python's cyclic garbage collector, by generation (the frozen state is never walked)",
            ["generation"],
            buckets=(0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=r,
        )
        self.gc_frozen_objects = Gauge(
            "ivm_gc_frozen_objects", "Objects moved out of the collector's reach by the last gc.freeze()", registry=r
        )
        # -- the installation (ivm/kernels.py) ---------------------------------------------------------
        self.kernel_compiled = Gauge(
            "ivm_kernel_compiled",
            "Whether a compiled kernel loads (1) or its Python loop runs instead, 5-10x slower (0)",
            ["kernel"],
            registry=r,
        )
        self.observe_kernels()
        self._seen: dict[tuple[Any, ...], float] = {}  # last value of each engine-side cumulative count
        self._slice_places: dict[tuple[str, str, str], bool] = {}  # (slice, host, executor) exported

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Expose ``/metrics`` on ``addr:port``; returns the bound port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server.server_port

    # -- observations ----------------------------------------------------------------------------

    def observe_kernels(self, report: Sequence[Kernel] | None = None) -> None:
        """``ivm_kernel_compiled{kernel}`` for each kernel of the installation (:func:`ivm.kernels.kernels`)."""
        from ivm.kernels import installed_kernels

        for kernel in installed_kernels() if report is None else report:
            self.kernel_compiled.labels(kernel.module).set(1 if kernel.compiled else 0)

    def observe_inputs(self, records: Iterable[_Record], now: float | None = None) -> None:
        """A committed batch's input records: consumed records per topic and the end-to-end latency
        (now minus the Kafka timestamp of the batch's oldest record)."""
        per_topic: dict[str, int] = {}
        oldest = 0
        for record in records:
            per_topic[record.topic] = per_topic.get(record.topic, 0) + 1
            if record.timestamp_ms > 0 and (oldest == 0 or record.timestamp_ms < oldest):
                oldest = record.timestamp_ms
        self.observe_input_counts(per_topic, oldest, now)

    def observe_relations(self, relations: Iterable[str]) -> None:
        """Export the per-relation counters from 0 (so that ``increase()`` sees the first records)."""
        for relation in relations:
            self.relation_consumed.labels(relation)
            self.relation_applied.labels(relation)
            self.relation_dead_lettered.labels(relation)

    def observe_input_counts(self, per_topic: Mapping[str, int], oldest_ms: int, now: float | None = None) -> None:
        """:meth:`observe_inputs` from the batch's counts per topic and its oldest Kafka timestamp (0: none)."""
        now = time.time() if now is None else now
        for topic, n in per_topic.items():
            self.records_consumed.labels(topic).inc(n)
        if oldest_ms:
            self.latency.observe(max(0.0, now - oldest_ms / 1000))
        self.last_batch_time.set(now)

    def observe_lag(
        self,
        ends: Mapping[tuple[str, int], int],
        positions: Mapping[tuple[str, int], int],
        from_earliest: bool = True,
    ) -> None:
        """Consumer lag per input partition.  A partition the processor has not read yet
        counts from offset 0 when the job starts at the earliest offsets, else it is skipped."""
        for (topic, partition), end in ends.items():
            position = positions.get((topic, partition))
            if position is None and not from_earliest:
                continue
            self.consumer_lag.labels(topic, str(partition)).set(max(0, end - (position or 0)))

    def observe_view(self, query: str, view: Any, value: Any = None) -> None:
        """A query's result (``value``, read from the view when not given), state size and
        engine internals (a ``View`` or ``ShardedView``)."""
        value = view.result() if value is None else value
        if isinstance(value, int | float) and not isinstance(value, bool):
            self.result_value.labels(query).set(value)
        shards = list(getattr(view, "shards", None) or [view])
        per_shard = [s.stats() for s in shards]
        stats = _combine(per_shard) if len(per_shard) > 1 else dict(per_shard[0])
        engine = view.engine.name
        for stat, number in stats.items():
            if isinstance(number, int | float):
                self.engine_stat.labels(query, engine, stat).set(number)
        if (tuples := _first(stats, _TUPLE_STATS)) is not None:
            self.state_tuples.labels(query).set(tuples)
        if (entries := _first(stats, _VIEW_ENTRY_STATS)) is not None:
            self.state_view_entries.labels(query).set(entries)
        if "state_bytes" in stats and (tuples := _first(stats, _TUPLE_STATS)):
            self.state_bytes_per_tuple.labels(query).set(stats["state_bytes"] / tuples)
        for i, s in enumerate(per_shard):
            shard = str(i)
            if (tuples := _first(s, _TUPLE_STATS + _VIEW_ENTRY_STATS)) is not None:
                self.shard_tuples.labels(query, shard).set(tuples)
            if "updates_applied" in s:
                self._count(self.shard_updates, (query, shard), s["updates_applied"])
        if "constant_time" in stats:
            self.constant_time.labels(query).set(stats["constant_time"])
        if "plan_changes" in stats:
            self._count(self.plan_changes, (query,), stats["plan_changes"])
        for stat, kind in _DOWNGRADE_STATS.items():
            if stat in stats:
                self._count(self.pattern_downgrades, (query, kind), stats[stat])
        for stat, number in stats.items():
            if stat.startswith("pattern_level."):
                self.pattern_level.labels(query, stat.removeprefix("pattern_level.")).set(number)
        if "major_rebalances" in stats:
            self._count(self.rebalances, (query, "major"), stats["major_rebalances"])
            self._count(self.rebalances, (query, "minor"), stats.get("minor_rebalances", 0))
            self._count(self.tuples_moved, (query,), stats.get("tuples_moved", 0))
            self.eps_threshold_base.labels(query).set(stats.get("threshold_base", 0))
        engines = [s.engine for s in shards]
        self._observe_ivm_eps(query, engines)
        self._observe_fivm(query, engines)

    def observe_slice(self, response: Any) -> None:
        """One slice's answer to a batch (``ivm.processor.placement.slices.SliceResponse``): where it lives,
        its tuples, its apply time, whether it was rebuilt."""
        index = str(response.index)
        for (slice_, host, executor), _child in list(self._slice_places.items()):
            if slice_ == index and (host, executor) != (response.host, response.executor):
                self.slice_tuples.remove(slice_, host, executor)  # the slice moved
                del self._slice_places[(slice_, host, executor)]
        self._slice_places[(index, response.host, response.executor)] = True
        self.slice_tuples.labels(index, response.host, response.executor).set(response.tuples)
        self.slice_apply_seconds.labels(index).observe(response.seconds)
        rebuilds, replayed = self.slice_rebuilds.labels(index), self.slice_replayed.labels(index)  # exported at 0
        if response.rebuilt:
            rebuilds.inc()
            replayed.inc(response.replayed)

    def _observe_ivm_eps(self, query: str, engines: Sequence[Any]) -> None:
        """Heavy and light keys and the threshold per relation (summed over shards)."""
        heavy: dict[str, int] = {}
        light: dict[str, int] = {}
        threshold: dict[str, float] = {}
        for engine in engines:
            n = getattr(engine, "N", None)
            for relation, part in _partitions(engine):
                relation = relation.split("#")[0]  # a self-joined relation's per-atom copy
                heavy[relation] = heavy.get(relation, 0) + len(part.hf)
                light[relation] = light.get(relation, 0) + len(part.lf)
                if n is not None:
                    threshold[relation] = max(threshold.get(relation, 0.0), float(n) ** part.eps)
        for relation in heavy:
            self.eps_heavy_keys.labels(query, relation).set(heavy[relation])
            self.eps_light_keys.labels(query, relation).set(light[relation])
            if relation in threshold:
                self.eps_threshold.labels(query, relation).set(threshold[relation])

    def _observe_fivm(self, query: str, engines: Sequence[Any]) -> None:
        """The materialized views of the F-IVM view tree and their sizes (summed over shards)."""
        sizes: dict[str, int] = {}
        for engine in engines:
            tree = getattr(engine, "tree", None)
            materialized = getattr(tree, "materialized", None)
            if engine.name != "fivm" or materialized is None:
                continue
            for node in materialized():
                if node.store is not None:
                    sizes[node.name] = sizes.get(node.name, 0) + len(node.store)
        if not sizes:
            return
        self.fivm_views.labels(query).set(len(sizes))
        for name, size in sizes.items():
            self.fivm_view_keys.labels(query, name).set(size)

    def _count(self, counter: Counter, labels: tuple[str, ...], total: float) -> None:
        """Advance a counter to an engine-side cumulative count (a lower count, e.g. after a
        rebuild, only resets the baseline: Prometheus counters never go down)."""
        key = (counter._name, *labels)
        child = counter.labels(*labels)
        last = self._seen.get(key)
        self._seen[key] = total
        if last is None:
            child.inc(total)
        elif total > last:
            child.inc(total - last)


def _first(stats: Mapping[str, Any], keys: Sequence[str]) -> float | None:
    for key in keys:
        if isinstance(stats.get(key), int | float):
            return stats[key]
    return None


def _combine(per_shard: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """One view's stats from its shards': sums, except levels, bases and flags."""
    out: dict[str, float] = {}
    for stats in per_shard:
        for key, value in stats.items():
            if not isinstance(value, int | float):
                continue
            if key not in out:
                out[key] = value
            elif _COMBINE_MAX.match(key):
                out[key] = max(out[key], value)
            elif _COMBINE_MIN.match(key):
                out[key] = min(out[key], value)
            else:
                out[key] += value
    out["shards"] = len(per_shard)
    return out


def _partitions(engine: Any) -> list[tuple[str, Any]]:
    """(relation, heavy/light partition) pairs of an IVM^eps engine; empty for other engines."""
    if not engine.name.startswith("ivm_eps"):
        return []
    parts = getattr(engine, "parts", None)
    occurrences = getattr(engine, "occurrences", None)
    if parts is not None and occurrences is not None:
        return [(relation, parts[i]) for relation, occs in occurrences.items() for i, _flipped in occs]
    part = getattr(engine, "part", None)
    relation = getattr(engine, "relation", None)
    return [(relation, part)] if part is not None and relation is not None else []


class LagMonitor:
    """A background thread: every ``interval`` seconds, the end offset of every input partition
    minus the pipeline's position, as ``ivm_consumer_lag_records``."""

    def __init__(
        self,
        bootstrap: Kafka,
        topics: Sequence[str],
        positions: Callable[[], Mapping[tuple[str, int], int]],
        metrics: Metrics,
        interval: float = LAG_INTERVAL_SECONDS,
        from_earliest: bool = True,
        isolation: str = "read_committed",
    ) -> None:
        self.bootstrap = bootstrap
        self.isolation = isolation
        self.from_earliest = from_earliest
        self.topics = list(topics)
        self.positions = positions
        self.metrics = metrics
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ivm-lag-monitor", daemon=True)

    def start(self) -> LagMonitor:
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop polling; wait at most ``timeout`` seconds (default: one poll) for a read in progress,
        which a broker that is down can hold for its own timeouts (the thread is a daemon)."""
        self._stop.set()
        self._thread.join(timeout=self.interval + 35 if timeout is None else timeout)

    def poll(self) -> None:
        """Read the end offsets once and update the lag gauges."""
        from ivm.processor.kafka.topics import end_offsets

        ends = end_offsets(self.bootstrap, self.topics, self.isolation)
        for _attempt in range(3):  # the batch thread may add a partition while we copy
            try:
                positions = dict(self.positions())
                break
            except RuntimeError:
                continue
        else:
            return
        self.metrics.observe_lag(ends, positions, self.from_earliest)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as err:  # a broker hiccup must not end the job
                log.warning("consumer lag: %s", err)
            self._stop.wait(self.interval)
