"""``ivm status``: where a pipeline stands: last committed batch, lag per partition, snapshots."""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

DESCRIPTION = """\
The pipeline's last committed batch (from its <pipeline>.progress topic), the
input lag per relation topic partition (end offset minus the committed
position), and the state snapshots in its state folder.

--json prints one JSON object: pipeline, last_committed_batch (null if none),
committed_at (ISO-8601 UTC with milliseconds, "2024-05-01T12:00:00.250Z", or
null), committed_offsets ([{topic, partition, offset}], the positions the last
batch consumed up to), lag ({"topic[partition]": records behind}), total_lag,
snapshots (file names), state_dir, queries (the configured names).

A broker that cannot be reached ends the command within seconds with one line
naming its address (exit 1).
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "status",
        help="show a pipeline's committed progress, input lag and snapshots",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", required=True, help="pipeline configuration (TOML)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides [kafka].bootstrap)")
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
    """The status as plain JSON data, every value through :func:`processor.codec.json_value`.

    ``committed`` is the last progress record (``schemas/progress.avsc``, as decoded), ``ends``
    the end offset of every relation topic partition, ``snapshots`` the snapshot file names.
    """
    from processor.codec import json_value
    from processor.job import state_dir

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


def render_text(status: Mapping[str, Any], committed: Mapping[str, Any] | None) -> list[str]:
    """The status in lines for a terminal."""
    head = f"pipeline {status['pipeline']}: "
    if committed is None:
        head += "no batch committed yet"
    else:
        when = committed["timestamp_ms"]  # a datetime (timestamp-millis)
        age = time.time() - when.timestamp() if isinstance(when, datetime.datetime) else float("nan")
        head += f"last committed batch {committed['batch_id']} ({age:.0f}s ago, {status['committed_at']})"
    lines = [head]
    lines += [f"  {partition:<30} lag {behind:>10,}" for partition, behind in status["lag"].items()]
    lines.append(f"snapshots in {status['state_dir']}: {', '.join(status['snapshots']) or 'none'}")
    return lines


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from processor.cli import CommandError
    from processor.config import load_config
    from processor.job import state_dir
    from processor.recovery import read_committed_progress
    from processor.topics import end_offsets, kafka_reason, require_broker

    config = load_config(args.config).with_overrides(bootstrap=args.bootstrap)
    require_broker(config.bootstrap)
    try:
        committed = read_committed_progress(config.bootstrap, config.progress_topic)
        ends = end_offsets(config.bootstrap, [r.topic for r in config.relations])
    except (KafkaException, RuntimeError) as err:  # read_committed_progress wraps Kafka's in RuntimeError
        reason = kafka_reason(err) if isinstance(err, KafkaException) else str(err)
        raise CommandError(f"cannot read from Kafka at {config.bootstrap}: {reason}", 1) from err
    folder = state_dir(config)
    snapshots = sorted(p.name for p in folder.glob("snapshot-*.pkl")) if folder.exists() else []
    status = status_document(config, committed, ends, snapshots)
    if args.json:
        print(json.dumps(status, indent=2, allow_nan=False))
    else:
        print("\n".join(render_text(status, committed)))
    return 0
