"""``ivm status``: where a pipeline stands: running or not, last committed batch, lag, current results."""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka

DESCRIPTION = """\
Whether the pipeline's `ivm run` is running (its heartbeat file,
<state_dir>/running.json, refreshed every few seconds) and whether its metrics
endpoint answers; the last committed batch and its age (from its
<pipeline>.progress topic); the input lag per relation topic (end offset minus
the committed position, summed over the partitions; per partition with
-v/--partitions); the current value of each scalar query (the last committed
record of <query>.result) and the number of groups of each query with free
variables (its compacted result topic); the state snapshots.

Running: "running (pid P on HOST, heartbeat 2s ago)" when the heartbeat is
fresh (younger than 3 intervals) and, on this host, the process is alive;
"not running (...)" when it is stale, the process is gone, or the last run
stopped cleanly; "never ran here" when the state folder holds no trace of one.

--json prints one JSON object: pipeline, running (true/false), process
({state, summary, reason, pid, host, started_at, heartbeat_at,
heartbeat_age_seconds, stopped_at, metrics_url, file}), metrics (null without
a metrics endpoint, else {url, answering, error}), last_committed_batch (null
if none),
committed_at (ISO-8601 UTC with milliseconds, "2024-05-01T12:00:00.250Z", or
null), committed_age_seconds, committed_offsets ([{topic, partition, offset}],
the positions the last batch consumed up to), lag ({"topic[partition]": records
behind}), lag_by_topic ({topic: records behind}), total_lag, results ([{query,
topic, keyed, value, batch_id, produced_at, groups, error}]: value, batch_id
and produced_at for a scalar query, groups for a keyed one, null when nothing
is published yet), snapshots (file names), state_dir, queries (the configured
names), dead_letters ({topic, total, by_reason: {reason: count}, error}: the
records of the pipeline's relation and control topics its dead-letter topic
holds, per reason up to its first colon), kernels ([{module, compiled, path,
error}]: the compiled kernels of this installation, ivm.kernels); with
placement = "executors" also slice_snapshots ([{slice, fingerprint, snapshots}]:
each slice's snapshot file names, per configuration fingerprint) and
process.slices (each slice's shard host, pid, executor, batch, tuples, last
snapshot, rebuilds).  A partition whose position is short of its end only by
transaction markers (or an aborted transaction's records) has a lag of 0.

A broker that cannot be reached ends the command within seconds with one line
naming its address (exit 1).
"""

#: Seconds the metrics endpoint has to answer.
METRICS_TIMEOUT = 2.0
#: Seconds a result topic has to be read (its last committed record, or its groups).
RESULT_TIMEOUT = 30.0
#: Seconds the broker has to say which of the pipeline's result and control topics exist.
METADATA_TIMEOUT = 5.0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "status",
        help="show whether a pipeline runs, its last committed batch, input lag and current results",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", required=True, help="pipeline configuration (TOML)")
    p.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT",
        help="Kafka bootstrap servers, host:port[,host:port...] (default: the configuration's [kafka].bootstrap, "
        "else 127.0.0.1:9092)",
    )  # fmt: skip
    p.add_argument(
        "-v", "--partitions", action="store_true",
        help="the lag of every partition, not only per topic (also with ivm -v status)",
    )  # fmt: skip
    p.add_argument(
        "--json", action="store_true", help="print one JSON object (timestamps ISO-8601 UTC with milliseconds)"
    )
    return p


def status_document(
    config: Any,
    committed: Mapping[str, Any] | None,
    ends: Mapping[tuple[str, int], int],
    snapshots: Sequence[str],
) -> dict[str, Any]:
    """The committed progress as plain JSON data, every value through :func:`ivm.processor.codecs.avro.json_value`.

    ``committed`` is the last progress record (``schemas/progress.avsc``, as decoded), ``ends``
    the end offset of every relation topic partition, ``snapshots`` the snapshot file names.
    :func:`watch_document` adds what a user watching the pipeline needs besides.
    """
    from ivm.processor.codecs.avro import json_value
    from ivm.processor.job import state_dir

    offsets = list((committed or {}).get("offsets", []))
    positions = {(o["topic"], o["partition"]): o["offset"] for o in offsets}
    lag = {f"{t}[{p}]": end - positions.get((t, p), 0) for (t, p), end in sorted(ends.items())}
    return json_value(
        {
            "pipeline": config.name,
            "last_committed_batch": committed["batch_id"] if committed else None,
            "committed_at": committed["timestamp_ms"] if committed else None,
            "committed_offsets": offsets,
            "lag": lag,
            "total_lag": sum(lag.values()),
            "snapshots": list(snapshots),
            "state_dir": str(state_dir(config)),
            "queries": [q.name for q in config.queries],
        }
    )


def settled_ends(
    kafka: Any,
    positions: Mapping[tuple[str, int], int],
    ends: Mapping[tuple[str, int], int],
    isolation: str = "read_committed",
    timeout: float = 10.0,
) -> dict[tuple[str, int], int]:
    """``ends`` with every partition whose committed position is short of its end only by offsets that hold
    no record a reader sees (a committed transaction's marker, an aborted transaction's records) moved back
    to that position: its lag is 0, not the number of markers.  A pipeline's position is the offset after
    its last record (either placement), so a transactional producer's input ends one marker past it.

    One consumer over the partitions behind, each read from its position until its first record (a
    real lag: left as it is) or its end; a partition not settled within ``timeout`` keeps its end."""
    from confluent_kafka import KafkaError, TopicPartition

    from ivm.processor.kafka.clients import consumer

    behind = {tp: position for tp, position in positions.items() if tp in ends and 0 <= position < ends[tp]}
    out = dict(ends)
    if not behind:
        return out
    reader = consumer(
        kafka,
        {"group.id": "ivm-status", "enable.auto.commit": False, "isolation.level": isolation,
         "enable.partition.eof": True},
    )  # fmt: skip
    try:
        reader.assign([TopicPartition(t, p, position) for (t, p), position in behind.items()])
        pending = set(behind)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            msg = reader.poll(0.2)
            if msg is None:
                continue
            tp = (msg.topic(), msg.partition())
            if tp not in pending:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and msg.offset() >= ends[tp]:
                    out[tp] = behind[tp]  # nothing readable between the position and the end
                    pending.discard(tp)
                continue
            pending.discard(tp)
            if msg.offset() >= ends[tp]:  # the first record after the position is past the end read before
                out[tp] = behind[tp]
    finally:
        reader.close()
    return out


def slice_snapshots(location: str) -> list[dict[str, Any]]:
    """The snapshots of every slice of a ``placement = "executors"`` pipeline under its snapshot location:
    per slice folder, its configuration fingerprint, slice index and snapshot names (oldest first)."""
    from ivm.processor.placement.host import slice_stores, slices_root

    out = []
    prefix = slices_root(location) + "/"
    for store in slice_stores(location):
        fingerprint, _, index = store.location[len(prefix) :].rpartition("/")
        names = [path.rsplit("/", 1)[-1] for path in store.snapshots()]
        out.append({"slice": int(index) if index.isdigit() else index, "fingerprint": fingerprint, "snapshots": names})
    return sorted(out, key=lambda s: (str(s["fingerprint"]), str(s["slice"]).zfill(6)))


@dataclass
class QueryResult:
    """A query's current result as its result topic holds it (see :func:`read_results`).

    A scalar query (no free variables): ``value`` (JSON data), ``batch_id`` and ``produced_at``
    (POSIX seconds) of the last committed record.  A keyed one: ``groups``, the number of keys
    the compacted topic holds.  ``None`` where nothing is published yet; ``error`` when the
    topic could not be read.
    """

    query: str
    topic: str
    keyed: bool
    value: Any = None
    batch_id: int | None = None
    produced_at: float | None = None
    groups: int | None = None
    error: str | None = None


@dataclass
class MetricsCheck:
    """Whether the metrics endpoint at ``url`` answered ``GET`` with 200 (``error``: why not)."""

    url: str
    answering: bool
    error: str | None = None


def watch_document(
    status: Mapping[str, Any],
    committed: Mapping[str, Any] | None,
    process: Any,
    metrics: MetricsCheck | None,
    results: Sequence[QueryResult],
    now: float | None = None,
) -> dict[str, Any]:
    """``status`` (:func:`status_document`) with the fields for a user who watches the pipeline:
    ``running``, ``process`` (a :class:`ivm.processor.operations.heartbeat.Liveness`), ``metrics``,
    ``committed_age_seconds``, ``lag_by_topic`` and ``results``, as plain JSON data."""
    from ivm.processor.codecs.avro import json_value
    from ivm.processor.operations.heartbeat import iso

    now = time.time() if now is None else now
    age = None
    if committed is not None and hasattr(committed.get("timestamp_ms"), "timestamp"):
        age = round(max(0.0, now - committed["timestamp_ms"].timestamp()), 3)
    by_topic: dict[str, int] = {}
    for partition, behind in status["lag"].items():
        topic = partition.rpartition("[")[0]
        by_topic[topic] = by_topic.get(topic, 0) + behind
    return json_value(
        {
            **status,
            "running": process.running,
            "process": process.as_json(),
            "metrics": None if metrics is None else vars(metrics),
            "committed_age_seconds": age,
            "lag_by_topic": by_topic,
            "results": [
                {**vars(r), "produced_at": None if r.produced_at is None else iso(r.produced_at)} for r in results
            ],
        }
    )


def render_text(status: Mapping[str, Any], partitions: bool = False, now: float | None = None) -> list[str]:
    """The status (:func:`watch_document`) in lines for a terminal; ``partitions``: the lag of each
    partition under its topic's."""
    from ivm.processor.operations.heartbeat import ago, parse_iso

    now = time.time() if now is None else now
    lines = [f"pipeline {status['pipeline']}: {status['process']['summary']}"]
    if (metrics := status.get("metrics")) is not None:
        answer = "answering" if metrics["answering"] else f"not answering ({metrics['error']})"
        lines.append(f"  metrics {metrics['url']}: {answer}")
    if status["last_committed_batch"] is None:
        lines.append("last committed batch: none yet")
    else:
        age = status.get("committed_age_seconds")
        when = f"{ago(age)} ago, " if age is not None else ""
        lines.append(f"last committed batch {status['last_committed_batch']} ({when}{status['committed_at']})")
    lines.append(f"input lag: {status['total_lag']:,} records")
    for topic, behind in status.get("lag_by_topic", {}).items():
        lines.append(f"  {topic:<30} {behind:>12,}")
        if partitions:
            for partition, n in status["lag"].items():
                if partition.rpartition("[")[0] == topic:
                    lines.append(f"    {partition:<28} {n:>12,}")
    if (dead := status.get("dead_letters")) is not None:
        if dead["error"] is not None:
            lines.append(f"dead letters: cannot read {dead['topic']}: {dead['error']}")
        else:
            lines.append(f"dead letters in {dead['topic']}: {dead['total']:,}")
            for reason, n in dead["by_reason"].items():
                lines.append(f"  {n:>10,}  {reason}")
    if status.get("results"):
        lines.append("results:")
    for r in status.get("results", []):
        if r["error"] is not None:
            lines.append(f"  {r['query']}: cannot read {r['topic']}: {r['error']}")
        elif r["keyed"]:
            groups = "nothing published yet" if r["groups"] is None else f"{r['groups']:,} groups"
            lines.append(f"  {r['query']}: {groups}")
        elif r["batch_id"] is None:
            lines.append(f"  {r['query']}: nothing published yet")
        else:
            text = json.dumps(r["value"], separators=(",", ":"))
            text = text if len(text) <= 100 else text[:97] + "..."
            age = f", {ago(now - parse_iso(r['produced_at']))} ago" if r["produced_at"] else ""
            lines.append(f"  {r['query']} = {text}  (batch {r['batch_id']}{age})")
    slices = status.get("process", {}).get("slices")
    if slices:
        lines.append("slices of the state (placement = executors):")
        for s in slices:
            snapshot = "none yet" if s.get("snapshot") is None else f"batch {s['snapshot']}"
            lines.append(
                f"  slice {s['slice']}: shard host {s['host']} (pid {s.get('pid')}), executor {s['executor']}, "
                f"batch {s['batch']}, {s['tuples']:,} tuples, last snapshot {snapshot}, {s['rebuilds']} rebuilds"
            )
    for s in status.get("slice_snapshots", []):
        lines.append(f"  slice {s['slice']} snapshots ({s['fingerprint']}): {', '.join(s['snapshots']) or 'none'}")
    lines.append(f"snapshots in {status['state_dir']}: {', '.join(status['snapshots']) or 'none'}")
    if status.get("kernels") is not None:
        from ivm.kernels import Kernel, summary

        lines.append(summary([Kernel(**k) for k in status["kernels"]]) + " (this installation)")
    return lines


def kernels_document() -> list[dict[str, Any]]:
    """The compiled kernels of this installation (:func:`ivm.kernels.kernels`): ``[{module, compiled, path,
    error}]``; the running job's are its metric ``ivm_kernel_compiled``."""
    from ivm.kernels import installed_kernels

    return [k.as_json() for k in installed_kernels()]


def dead_letter_document(config: Any, timeout: float = RESULT_TIMEOUT) -> dict[str, Any]:
    """The pipeline's dead letters in its dead-letter topic: ``{topic, total, by_reason, error}``
    (``ivm.processor.kafka.deadletters``: the records of its relation and control topics)."""
    from confluent_kafka import KafkaException

    from ivm.processor.control import control_topic
    from ivm.processor.kafka.deadletters import read_dead_letters
    from ivm.processor.kafka.topics import kafka_reason

    inputs = [r.topic for r in config.relations] + [control_topic(config)]
    try:
        held = read_dead_letters(config.kafka, config.dead_letter_topic, inputs, timeout)
    except (KafkaException, RuntimeError, TimeoutError) as err:
        reason = f"Kafka: {kafka_reason(err)}" if isinstance(err, KafkaException) else str(err)
        return {"topic": config.dead_letter_topic, "total": None, "by_reason": {}, "error": reason}
    by_reason = dict(sorted(held.by_reason.items(), key=lambda kv: (-kv[1], kv[0])))
    return {"topic": held.topic, "total": held.total, "by_reason": by_reason, "error": None}


def check_metrics(url: str, timeout: float = METRICS_TIMEOUT) -> MetricsCheck:
    """``GET url``: whether it answers with 200 within ``timeout`` seconds, and why not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            if response.status == 200:
                return MetricsCheck(url, True)
            return MetricsCheck(url, False, f"HTTP {response.status}")
    except urllib.error.HTTPError as err:
        return MetricsCheck(url, False, f"HTTP {err.code}")
    except urllib.error.URLError as err:
        reason = err.reason
        text = getattr(reason, "strerror", None) or str(reason)
        return MetricsCheck(url, False, text.lower())
    except (TimeoutError, OSError) as err:
        return MetricsCheck(url, False, (getattr(err, "strerror", None) or str(err) or "timed out").lower())


def metrics_url(config: Any, process: Any) -> str | None:
    """The metrics endpoint to check: the running job's (its heartbeat says where it serves), else the
    configuration's when it has a metrics port; a wildcard address is reached on loopback."""
    url = process.metrics_url if process.running and process.metrics_url else None
    if url is None and config.metrics_port:
        url = f"http://{config.metrics_address}:{config.metrics_port}/metrics"
    if url is None:
        return None
    for wildcard in ("//0.0.0.0:", "//[::]:"):
        url = url.replace(wildcard, "//127.0.0.1:")
    return url


def relation_attributes(config: Any) -> dict[str, list[str]]:
    """The attributes of each relation whose schema file reads (what SQL queries are parsed against)."""
    out: dict[str, list[str]] = {}
    for rel in config.relations:
        try:
            fields = json.loads(rel.schema_file().read_text())["fields"]
            out[rel.name] = [f["name"] for f in fields if f["name"] != "mult"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def read_results(bootstrap: Kafka, config: Any, timeout: float = RESULT_TIMEOUT) -> list[QueryResult]:
    """The current result of each query of the pipeline (the configured ones as ``<pipeline>.control``
    leaves them), read_committed from its result topic: the last record of a scalar query's topic, the
    number of groups of a keyed one's (:func:`ivm.processor.publish.materialize`).

    A topic that cannot be read is that query's ``error``, not the command's: the rest of the status
    still tells where the pipeline stands.
    """
    from confluent_kafka import KafkaException

    import ivm
    from ivm.processor.codecs.avro import OutputCodec
    from ivm.processor.control import control_topic, effective, read_overrides
    from ivm.processor.kafka.clients import admin as new_admin
    from ivm.processor.kafka.topics import kafka_reason, watermarks
    from ivm.processor.publish import materialize

    queries = list(config.queries)
    failure = None
    try:  # one short metadata request first: which of the pipeline's topics exist
        metadata = new_admin(bootstrap).list_topics(timeout=METADATA_TIMEOUT)
        existing = set(metadata.topics)
        if control_topic(config) in existing:
            queries = list(effective(config, read_overrides(bootstrap, control_topic(config), timeout)[0]).queries)
        marks = watermarks(bootstrap, [q.result_topic for q in queries if q.result_topic in existing])
    except (KafkaException, RuntimeError, TimeoutError) as err:
        failure = f"Kafka: {kafka_reason(err)}" if isinstance(err, KafkaException) else str(err)
        marks = {}
    attributes = relation_attributes(config)
    codec = OutputCodec("result")
    out = []
    for q in queries:
        try:
            keyed = bool(ivm.parse(q.query, attributes).free)
        except Exception as err:  # checked when it was configured or added: only an edited schema gets here
            out.append(QueryResult(q.name, q.result_topic, False, error=f"its query does not parse: {err}"))
            continue
        result = QueryResult(q.name, q.result_topic, keyed, error=failure)
        out.append(result)
        held = [(low, high) for (topic, _p), (low, high) in marks.items() if topic == q.result_topic]
        if not any(high > low for low, high in held):
            continue  # no topic yet, or nothing in it
        try:
            if keyed:
                result.groups = len(materialize(bootstrap, q.result_topic, timeout=timeout))
                continue
            last = last_record(bootstrap, q.result_topic, timeout)
        except (KafkaException, TimeoutError) as err:
            result.error = f"Kafka: {kafka_reason(err)}" if isinstance(err, KafkaException) else str(err)
            continue
        if last is not None:
            record = codec.decode(last)
            result.value = json.loads(record["value"]) if record["value"] else None
            result.batch_id = record["batch_id"]
            stamp = record.get("timestamp_ms")
            result.produced_at = stamp.timestamp() if hasattr(stamp, "timestamp") else None
    return out


def last_record(bootstrap: Kafka, topic: str, timeout: float = RESULT_TIMEOUT) -> bytes | None:
    """The value of the last record of ``topic`` a read_committed consumer sees (the highest offset over
    its partitions' last records), or ``None``.

    Reads each partition's tail, from a window before the end that doubles until it holds a record:
    every committed batch adds one record and one transaction marker, so the first window usually does.
    A transaction still open is not waited for: a read_committed reader sees up to its start.
    """
    from confluent_kafka import KafkaError, TopicPartition

    from ivm.processor.kafka.clients import consumer as new_consumer
    from ivm.processor.kafka.topics import watermarks

    consumer = new_consumer(
        bootstrap,
        {
            "group.id": "ivm-status",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        },
    )
    deadline = time.monotonic() + timeout
    best: tuple[int, int, bytes] | None = None  # (timestamp, offset, value)
    try:
        for (t, p), (low, high) in sorted(watermarks(bootstrap, [topic]).items()):
            window = 16
            while high > low:
                start = max(low, high - window)
                consumer.assign([TopicPartition(t, p, start)])
                last = None
                while True:
                    msg = consumer.poll(0.5)
                    if msg is None:
                        if consumer.position([TopicPartition(t, p)])[0].offset >= high:
                            break
                    elif msg.error():
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            break  # the end, or the start of a transaction still open
                    elif msg.value() is not None:
                        last = msg
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"could not read the end of {topic} within {timeout:.0f} s")
                if last is not None:
                    candidate = (last.timestamp()[1], last.offset(), last.value())
                    best = candidate if best is None or candidate[:2] > best[:2] else best
                    break
                if start == low:
                    break
                window *= 4
        return None if best is None else best[2]
    finally:
        consumer.close()


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from ivm.processor.cli import CommandError
    from ivm.processor.config import load_config
    from ivm.processor.job import snapshot_location, state_dir
    from ivm.processor.kafka.topics import end_offsets, kafka_reason, require_broker
    from ivm.processor.operations.heartbeat import liveness
    from ivm.processor.state.recovery import read_committed_progress
    from ivm.processor.state.snapshots import StateStore

    config = load_config(args.config).with_overrides(bootstrap=args.bootstrap)
    folder = state_dir(config)
    process = liveness(folder)
    require_broker(config.kafka)
    try:
        committed = read_committed_progress(config.kafka, config.progress_topic)
        ends = end_offsets(config.kafka, [r.topic for r in config.relations], config.isolation_level)
    except (KafkaException, RuntimeError) as err:  # read_committed_progress wraps Kafka's in RuntimeError
        reason = kafka_reason(err) if isinstance(err, KafkaException) else str(err)
        raise CommandError(f"cannot read from Kafka at {config.bootstrap}: {reason}", 1) from err
    results = read_results(config.kafka, config)
    url = metrics_url(config, process)
    metrics = check_metrics(url) if url is not None else None
    snapshots = [path.rsplit("/", 1)[-1] for path in StateStore(snapshot_location(config)).snapshots()]
    positions = {(o["topic"], o["partition"]): o["offset"] for o in (committed or {}).get("offsets", [])}
    ends = settled_ends(config.kafka, positions, ends, config.isolation_level)  # no lag of a marker
    status = watch_document(status_document(config, committed, ends, snapshots), committed, process, metrics, results)
    if config.placement == "executors":
        status["slice_snapshots"] = slice_snapshots(snapshot_location(config))
    status["dead_letters"] = dead_letter_document(config)
    status["kernels"] = kernels_document()
    if args.json:
        print(json.dumps(status, indent=2, allow_nan=False))
    else:
        print("\n".join(render_text(status, args.partitions or getattr(args, "verbose", False))))
    return 0
