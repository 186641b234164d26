"""The Spark Structured Streaming job (DESIGN §5): a thin adapter around :class:`Pipeline`.

Spark's own Kafka source reads the relation topics; each micro-batch is
collected to the driver as an Arrow table and handed to the pipeline, which
decodes, applies and publishes.  With ``[processor] placement = "driver"`` (the
default) the engines' state lives in the driver, split into shards when the
configuration asks for them; with ``"executors"`` it lives in shard hosts on
Spark's executors and the driver only seals, merges and commits each batch
(:mod:`ivm.processor.placement`).

In exactly-once mode the pipeline runs on a worker thread (:class:`Handoff`):
``foreachBatch`` returns as soon as the batch is in Python, so Spark reads the
next micro-batch from Kafka while the engines apply this one.  At most one
batch waits; Spark's bookkeeping may run one batch ahead of the committed
outputs, which is harmless because the positions committed with the outputs,
not Spark's, decide where a restart resumes.

Exactly once (``[processor] exactly_once``, the default): each batch's outputs
and its input positions are committed in one Kafka transaction; on start the
state comes back from the newest snapshot plus a replay of the inputs
committed after it (``recovery.py``), and the stream resumes exactly at the
committed positions.  Spark's own checkpoint is not needed for this.
"""

from __future__ import annotations

import json
import logging
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ivm.processor.config import PipelineConfig, QueryConfig, TopicSettings, shown
from ivm.processor.control import Command, control_topic, effective, fold, read_log, refusals
from ivm.processor.kafka.clients import spark_kafka_options
from ivm.processor.kafka.deadletters import read_dead_letters
from ivm.processor.kafka.sink import KafkaSink, TransactionalKafkaSink
from ivm.processor.kafka.topics import create_kind, partitions_of
from ivm.processor.local.spark import spark_session, stop_session, temporary_checkpoint
from ivm.processor.operations.heartbeat import Heartbeat
from ivm.processor.operations.metrics import LagMonitor, Metrics
from ivm.processor.pipeline import BatchReport, Pipeline, Positions, RecordBatch
from ivm.processor.state import leftovers
from ivm.processor.state.collector import CollectorWatch, freeze_state
from ivm.processor.state.recovery import StateStore, recover
from ivm.processor.state.snapshots import BackgroundSnapshots, SnapshotWritten

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ivm.processor.kafka.clients import Kafka

log = logging.getLogger(__name__)
STOP_GRACE_SECONDS = 5.0  # how long a stop waits for the batch in flight to commit before abandoning it
SNAPSHOT_WAIT = 10.0  # and then for a snapshot being written (afterwards it finishes on its own)


@dataclass
class StopReport:
    """How a job ended: the last committed batch, and the batch in flight, committed or abandoned."""

    last_committed: int
    abandoned: int | None = None  # a batch whose transaction was left open (never visible; replayed at restart)
    dropped: int = 0  # records Spark had handed over that no batch applied (read again at restart)

    def __str__(self) -> str:
        if self.abandoned is not None:
            return (
                f"stopped: abandoned batch {self.abandoned} in flight (its transaction is not committed, so none of "
                f"its outputs are visible; the next start fences it and applies its inputs again); last committed "
                f"batch {self.last_committed}"
            )
        return f"stopped: last committed batch {self.last_committed}, nothing left open"


def state_dir(config: PipelineConfig) -> Path:
    from ivm.processor.local.stack import local_dir

    return Path(config.state_dir) if config.state_dir else local_dir() / "state" / config.name


def snapshot_location(config: PipelineConfig) -> str:
    """Where the pipeline's snapshots go: ``[processor] snapshot_location`` (a folder or a ``pyarrow.fs``
    URL every node can read), else the state folder."""
    return config.snapshot_location or str(state_dir(config))


def starting_offsets(config: PipelineConfig, topics: list[str], positions: Positions) -> str:
    """Spark's ``startingOffsets``: the committed positions, the configured default elsewhere."""
    if not positions:
        return config.starting_offsets
    default = -2 if config.starting_offsets == "earliest" else -1
    spec: dict[str, dict[str, int]] = {}
    for topic, partitions in partitions_of(config.kafka, topics).items():
        spec[topic] = {str(p): positions.get((topic, p), default) for p in partitions}
    return json.dumps(spec)


def create_outputs(bootstrap: Kafka, q: QueryConfig, view, settings: TopicSettings | None = None) -> None:
    """The output topics of query ``q`` (``[topics.outputs]``): ``<q>.result`` compacted when the query has
    free variables (one record per group: the topic holds the current result), ``<q>.delta`` and
    ``<q>.model``."""
    keyed = bool(view.query.free)
    settings = settings or TopicSettings()
    create_kind(bootstrap, [q.result_topic], settings, **({"cleanup.policy": "compact"} if keyed else {}))
    create_kind(bootstrap, [q.delta_topic] + ([q.model_topic] if q.model else []), settings)


def prepare(config: PipelineConfig, metrics: Metrics) -> Pipeline:
    """Create the topics, build the pipeline, recover its state (exactly-once mode) and read what the
    keyed result topics hold."""
    kinds = config.topics  # [topics.KIND]: the cluster's defaults unless configured
    create_kind(config.kafka, [r.topic for r in config.relations], kinds.relations)
    create_kind(config.kafka, [config.dead_letter_topic], kinds.dead_letters)
    # the control topic keeps every command: a rebuild from the topics replays them with the updates
    create_kind(config.kafka, [control_topic(config)], kinds.control, **{"retention.ms": "-1"})

    def on_new_query(q: QueryConfig, view) -> None:
        create_outputs(config.kafka, q, view, kinds.outputs)

    commands = read_log(config.kafka, control_topic(config))
    if config.placement == "executors":
        from ivm.processor.placement.driver import PlacedPipeline, recover_positions

        # the queries are fixed for the run: the configuration's with every command not refused (control.py)
        config = served_at_start(config, commands)
        create_kind(config.kafka, [config.progress_topic], kinds.progress, **{"cleanup.policy": "compact"})
        pipeline = PlacedPipeline(
            config, TransactionalKafkaSink(config.kafka, f"ivm-{config.name}", config.group_id), metrics
        )
        recover_positions(pipeline, config.kafka)
    elif not config.exactly_once:
        pipeline = Pipeline(config, KafkaSink(config.kafka, consumer_group=config.group_id), metrics)
        pipeline.refused_commands = refusals(commands)
    else:
        create_kind(config.kafka, [config.progress_topic], kinds.progress, **{"cleanup.policy": "compact"})
        pipeline = Pipeline(
            config, TransactionalKafkaSink(config.kafka, f"ivm-{config.name}", config.group_id), metrics
        )
        pipeline.refused_commands = refusals(commands)  # a replay never applies what was refused
        report = recover(pipeline, StateStore(snapshot_location(config)), config.kafka)
        metrics.recovery_seconds.set(report.seconds)
        metrics.replayed_records.inc(report.replayed)
    # the pipeline's dead letters the topic holds: the counter goes on from them, and a history that starts
    # over does not write them again (ivm.processor.kafka.deadletters)
    held = read_dead_letters(config.kafka, config.dead_letter_topic, pipeline.topics)
    metrics.dead_letters.labels(config.dead_letter_topic).inc(held.total)
    pipeline.dead_lettered = held.keys
    pipeline.on_new_query = on_new_query
    for name, q in pipeline.query_configs.items():  # the configured ones and those of the control topic
        on_new_query(q, pipeline.views[name])
    pipeline.load_published(config.kafka)
    return pipeline


def served_at_start(config: PipelineConfig, commands: list[Command]) -> PipelineConfig:
    """The queries a run of ``placement = "executors"`` serves: the configuration's, with every command of
    the control topic that was not refused (``control.fold``), so a query added at run time under the
    driver's placement is still maintained.  A query the executors cannot serve stops the start with its
    name, the reason and the fix (``RecoveryError``: ``ivm run`` prints it and exits 2)."""
    from ivm.processor.config import ConfigError
    from ivm.processor.planning import plan_pipeline
    from ivm.processor.state.recovery import RecoveryError

    overrides = fold(commands)
    if not overrides:
        return config
    served = effective(config, overrides)
    try:
        plan_pipeline(served)
    except ConfigError as err:
        added = sorted(n for n, q in overrides.items() if q is not None)
        raise RecoveryError(
            f"pipeline {config.name!r}: the queries added through {control_topic(config)} ({', '.join(added)}) "
            f'cannot be served with placement = "executors": {err}; remove them with `ivm query remove NAME -c CONFIG` '
            '(taken by the next start), or run with placement = "driver"'
        ) from err
    for name, q in overrides.items():
        what = "removed" if q is None else "added"
        log.info("query %s: %s through %s (served by this run)", name, what, control_topic(config))
    return served


def summary(config: PipelineConfig, pipeline: Pipeline, metrics_url: str | None) -> list[str]:
    """What the job runs, in a few lines: relations and topics, queries with engine and guarantee, where
    its metrics are, where it resumes."""
    lines = [f"pipeline {config.name}: Kafka {config.bootstrap}, Spark {config.spark_master}"]
    for rel in config.relations:
        window = ""
        if rel.window_count is not None:
            window = f", window of the last {rel.window_count} tuples"
        elif rel.window_seconds is not None:
            window = f", window of the last {rel.window_seconds} s"
        tuples = len(pipeline.state.relations.get(rel.name, {}))
        lines.append(f"  relation {rel.name} <- topic {rel.topic} ({rel.encoding}{window}; {tuples:,} tuples now)")
    for name, view in pipeline.views.items():
        try:
            update = view.explain()["guarantee"]["update"]
        except Exception:  # the guarantee is for the reader; never a reason not to run
            update = "?"
        q = pipeline.query_configs[name]
        lines.append(f"  query {name}: {view.query} -- engine {view.engine.name}, update {update} -> {q.result_topic}")
    if metrics_url:
        lines.append(f"  metrics: {metrics_url}")
    lines.append(f"  resuming after batch {pipeline.state.last_batch_id} (exactly once: {config.exactly_once})")
    return lines


def run_job(
    config: PipelineConfig,
    *,
    stop: threading.Event | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
    metrics: Metrics | None = None,
    spark: SparkSession | None = None,
    stop_grace: float = STOP_GRACE_SECONDS,
) -> StopReport:
    """Run the streaming job until ``stop`` is set (or forever); returns how it stopped.

    A stop is prompt whatever the state of Kafka: the streaming query stops (a micro-batch
    Spark is still reading is dropped: its records are read again at the next start), a batch
    handed over but not started is dropped likewise, and the batch being applied gets
    ``stop_grace`` seconds to commit.  If its transaction cannot commit by then (a broker that is
    down), it is abandoned: never visible to read_committed readers, fenced and replayed by the
    next start.  A ``spark`` session given by the caller is left running; otherwise the job starts
    its own, stops it at the end and removes its temporary folder.
    """
    metrics = metrics or Metrics()
    metrics_url = None
    if config.metrics_port:
        port = metrics.serve(config.metrics_port, config.metrics_address)
        metrics_url = f"http://{config.metrics_address}:{port}/metrics"
    pipeline = prepare(config, metrics)
    metrics.gc_frozen_objects.set(freeze_state(collect=True))  # the recovered state: never walked again
    for line in summary(config, pipeline, metrics_url):
        log.info("%s", line)
    if stop is not None and stop.is_set():  # stopped during recovery: nothing is running yet
        report = StopReport(pipeline.state.last_batch_id)
        log.warning("%s", report)
        return report
    heartbeat = Heartbeat(state_dir(config), metrics_url, pipeline=config.name).start()  # for ivm status
    collections = CollectorWatch(lambda gen, seconds: metrics.gc_pause_seconds.labels(str(gen)).observe(seconds))
    collections.start()
    placed = config.placement == "executors"  # the state lives in shard hosts (ivm.processor.placement)
    store = (
        StateStore(snapshot_location(config)) if config.exactly_once and config.snapshot_every and not placed else None
    )
    snapshots = BackgroundSnapshots(store) if store is not None else None
    own_session = spark is None
    leftovers.clean(config.name)  # a killed run's scratch folders (ivm.processor.state.leftovers)
    if spark is None:
        spark = spark_session("ivm-processor", config.spark_master, conf=config.spark_conf)
        scratch = spark.conf.get("spark.local.dir", None)
        if scratch:
            leftovers.claim(scratch, config.name)
        if stop is not None and threading.current_thread() is threading.main_thread():
            # pyspark's SparkContext installs a SIGINT handler that cancels every job and raises
            # KeyboardInterrupt; Ctrl-C stops the job like SIGTERM instead: cleanly, with a report
            signal.signal(signal.SIGINT, lambda *_: stop.set())
    if config.spark_conf:  # [spark.conf] as the session has it (read back: what Spark runs with)
        effective = ", ".join(shown(k, str(spark.conf.get(k, "(unset)"))) for k, _ in config.spark_conf)
        log.info("spark.conf: %s", effective)
    stream = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(config.kafka))  # the brokers and [kafka.properties], Java names
        .option("subscribe", ",".join(pipeline.topics))
        .option("startingOffsets", starting_offsets(config, pipeline.topics, pipeline.positions))
        .option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
        .option("kafka.max.partition.fetch.bytes", str(config.fetch_bytes))
        .option("kafka.fetch.max.bytes", str(max(config.fetch_bytes, 64 << 20)))
        .option("kafka.isolation.level", config.isolation_level)
        .option("failOnDataLoss", "true")
        .load()
        .selectExpr(
            "topic",
            "partition",
            "offset",
            "key",
            "value",
            "CAST(CAST(timestamp AS DOUBLE) * 1000 AS LONG) AS timestamp_ms",
        )
    )

    def apply(batch: RecordBatch) -> None:
        log.info("applying batch %d: %d records", pipeline.state.last_batch_id + 1, len(batch))
        report = pipeline.process(batch)
        log.info(
            "batch %d: %d records, %s applied, %d dead letters, %.3fs",
            report.batch_id, report.records, report.applied, report.dead_letters, report.seconds,
        )  # fmt: skip
        if snapshots is not None:
            _snapshot_written(snapshots.poll())
            if report.batch_id % config.snapshot_every == 0:
                started = time.perf_counter()
                metrics.gc_frozen_objects.set(freeze_state())  # the parent's collections leave the child's pages alone
                failed = snapshots.failed
                if snapshots.take(pipeline.state):
                    metrics.snapshot_pause_seconds.observe(time.perf_counter() - started)
                else:
                    metrics.snapshots_skipped.inc()
                metrics.snapshots_failed.inc(snapshots.failed - failed)
        if on_batch is not None:
            on_batch(report)

    def _snapshot_written(written: SnapshotWritten | None) -> None:
        if written is not None:
            metrics.snapshot_seconds.observe(written.seconds)
            metrics.snapshot_bytes.set(written.size)
            log.info("snapshot %s (%d bytes, %.2fs)", written.path.rsplit("/", 1)[-1], written.size, written.seconds)

    executors = Executors(pipeline.config, pipeline, metrics, heartbeat) if placed else None
    if executors is not None:  # the hosts seal batch v while Spark routes v + 1

        def seal(sent) -> None:
            report = executors.seal(spark, sent)
            if on_batch is not None:
                on_batch(report)

        handoff: Handoff | None = Handoff(seal)
    else:
        handoff = Handoff(apply) if config.exactly_once else None

    stopping = threading.Event()

    def process(df, spark_batch_id: int) -> None:
        started = time.perf_counter()
        if executors is not None:
            if not stopping.is_set():
                sent = executors.send(spark, df)
                if not stopping.is_set():
                    handoff.put(sent, stopping)  # type: ignore[union-attr]
            return
        try:
            batch = RecordBatch.from_arrow(df.toArrow())
        except Exception:
            if stopping.is_set():  # the stop cancelled Spark's job: its records are read again at restart
                log.debug("spark batch %d dropped by the stop", spark_batch_id)
                return
            raise
        log.debug(
            "spark batch %d: %d records handed over in %.3fs", spark_batch_id, len(batch), time.perf_counter() - started
        )
        if stopping.is_set():
            return
        if handoff is None:
            apply(batch)
        else:
            handoff.put(batch, stopping)

    checkpoint = temporary_checkpoint()
    leftovers.claim(checkpoint, config.name)
    writer = (
        stream.writeStream.foreachBatch(process)
        .trigger(processingTime=f"{config.trigger_ms} milliseconds")
        .option("checkpointLocation", checkpoint)
    )
    query = writer.start()
    lag = LagMonitor(
        config.kafka, pipeline.topics, lambda: pipeline.positions, metrics,
        from_earliest=config.starting_offsets == "earliest", isolation=config.isolation_level,
    ).start()  # fmt: skip
    try:
        while query.isActive:
            if stop is not None and stop.wait(0.5):
                break
            if stop is None:
                query.awaitTermination(1)
            if handoff is not None and handoff.error is not None:
                break
        if query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {query.exception()}")
    finally:
        # every step is bounded, and they overlap: the query stops while the batch in flight commits
        stopping.set()
        deadline = time.monotonic() + stop_grace
        lag.stop(timeout=0)
        stopper = _bounded(query.stop, "stopping the streaming query")
        report = StopReport(pipeline.state.last_batch_id)
        if handoff is not None:
            report.dropped = handoff.drop_waiting()
            if not handoff.close(max(0.0, deadline - time.monotonic())):
                report.abandoned = pipeline.state.last_batch_id + 1
        report.last_committed = pipeline.state.last_batch_id
        if snapshots is not None and snapshots.in_flight:  # a clean stop leaves the newest snapshot complete
            _snapshot_written(snapshots.wait(max(1.0, deadline + SNAPSHOT_WAIT - time.monotonic())))
        stopper.join(max(0.5, deadline + 1 - time.monotonic()))
        if executors is not None:
            executors.stop()
        if own_session:
            _bounded(lambda: stop_session(spark, jvm_exit_timeout=4), "stopping Spark").join(5)
        shutil.rmtree(checkpoint, ignore_errors=True)
        log.warning("%s", report)
        heartbeat.stop()
        collections.stop()
    if handoff is not None and handoff.error is not None:
        raise RuntimeError(f"a batch failed: {handoff.error}") from handoff.error
    return report


class Executors:
    """The batches of ``placement = "executors"``: applied by the slices in their shard hosts on Spark's
    executors (``ivm.processor.placement.spark``), then published and committed by the driver."""

    def __init__(self, config: PipelineConfig, pipeline: Pipeline, metrics: Metrics, heartbeat: Heartbeat) -> None:
        import os
        import uuid

        from ivm.processor.placement.host import IDLE_SECONDS, HostSpec

        self.pipeline = pipeline
        self.metrics = metrics
        self.heartbeat = heartbeat
        self.rebuilds: dict[int, int] = {}
        # a host no request reached this long exits: its driver is gone (IVM_SHARD_HOST_IDLE_SECONDS, default 300)
        idle = float(os.environ.get("IVM_SHARD_HOST_IDLE_SECONDS", IDLE_SECONDS))
        self.spec = HostSpec(config, uuid.uuid4().hex[:12], os.urandom(16), snapshot_location(config), idle)
        self.owners: dict[int, tuple[str, int]] = {}  # slice -> the shard host holding it
        self.hosts: set[tuple[str, int]] = set()  # every shard host of this run
        # the next batch to route: it starts where the batch routed last ends (sealed or not yet)
        self.version = pipeline.state.last_batch_id + 1
        self.positions = dict(pipeline.positions)
        self.slices = getattr(pipeline, "slices", 1)

    def send(self, spark: SparkSession, df):
        """Route and send the micro-batch ``df`` to the shard hosts (on the executors)."""
        from ivm.processor.placement.spark import send_batch

        log.info("routing batch %d on the executors", self.version)
        sent = send_batch(spark, df, self.spec, self.version, self.positions, self.slices, self.owners, self.hosts)
        self.version += 1
        self.positions = dict(sent.after)
        return sent

    def seal(self, spark: SparkSession, sent) -> BatchReport:
        """Seal a sent batch on the hosts, publish the slices' merged parts and commit."""
        from ivm.processor.placement.spark import seal_batch

        started = time.perf_counter()
        applied, responses = seal_batch(spark, sent, self.pipeline, self.spec, self.owners, self.hosts)  # type: ignore[arg-type]
        report = self.pipeline.publish(applied, sent.version, started)
        for r in responses:
            self.metrics.observe_slice(r)
            self.rebuilds[r.index] = self.rebuilds.get(r.index, 0) + int(r.rebuilt)
        self.heartbeat.set_slices([
            {"slice": r.index, "host": r.host, "pid": r.pid, "executor": r.executor, "batch": r.version,
             "tuples": r.tuples, "snapshot": r.snapshot, "rebuilds": self.rebuilds[r.index]}
            for r in sorted(responses, key=lambda r: r.index)
        ])  # fmt: skip
        log.info(
            "batch %d: %d records, %s applied, %d dead letters, %.3fs (slices: %s)",
            report.batch_id, report.records, report.applied, report.dead_letters, report.seconds,
            ", ".join(f"{r.index}@{r.host}{' rebuilt' if r.rebuilt else ''}" for r in responses),
        )  # fmt: skip
        return report

    def stop(self) -> None:
        """Stop the shard hosts of this run (their slices are in their snapshots and the topics)."""
        from ivm.processor.placement.host import tell

        for address in self.hosts | set(self.owners.values()):
            try:
                tell(address, self.spec.authkey, "stop", timeout=2.0)
            except Exception as err:  # a host already gone exits on its own when idle
                log.debug("stopping shard host %s: %s", address, err)


def _bounded(step: Callable[[], object], what: str) -> threading.Thread:
    """Run ``step`` on a daemon thread (the caller joins it with a timeout); its failure is logged."""

    def run() -> None:
        try:
            step()
        except Exception as err:  # a stop timeout, a batch cancelled by the stop
            log.debug("%s: %s", what, err)

    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    return thread


class Handoff:
    """Apply micro-batches on a worker thread, in the order they are put, at most one waiting.

    ``put`` blocks while a batch waits (back-pressure on Spark) and raises the
    worker's error, if it had one, so that the streaming query fails with it.
    """

    def __init__(self, apply: Callable[[RecordBatch], None]) -> None:
        self.error: BaseException | None = None
        self._apply = apply
        self._queue: queue.Queue[RecordBatch | None] = queue.Queue(maxsize=1)
        self._worker = threading.Thread(target=self._run, name="ivm-pipeline", daemon=True)
        self._worker.start()

    def put(self, batch: RecordBatch, stopping: threading.Event | None = None) -> None:
        """Hand ``batch`` over; gives up (dropping it) once ``stopping`` is set."""
        while self.error is None:
            if stopping is not None and stopping.is_set():
                return
            try:
                self._queue.put(batch, timeout=0.5)
                return
            except queue.Full:
                continue
        raise RuntimeError(f"the pipeline failed on an earlier batch: {self.error}") from self.error

    def drop_waiting(self) -> int:
        """Drop the batch handed over but not started (a stop); returns its number of records."""
        try:
            batch = self._queue.get_nowait()
        except queue.Empty:
            return 0
        return len(batch) if batch is not None else 0

    def close(self, timeout: float | None = None) -> bool:
        """Apply what was handed over, then stop the worker; False if it is still busy after ``timeout``
        seconds (its batch is abandoned: the worker is a daemon thread)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._worker.is_alive():
            try:
                self._queue.put(None, timeout=0.5)
                break
            except queue.Full:
                if deadline is not None and time.monotonic() > deadline:
                    return False
        self._worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self._worker.is_alive()

    def _run(self) -> None:
        """Apply batches until ``close`` or the first failure (reported by ``put`` and ``run_job``)."""
        while (batch := self._queue.get()) is not None:
            try:
                self._apply(batch)
            except BaseException as err:
                log.exception("the pipeline failed")
                self.error = err
                return
