"""``ivm status``: where a pipeline stands: last committed batch, lag per partition, snapshots."""

from __future__ import annotations

import argparse
import json
import sys
import time


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("status", help="show a pipeline's committed progress, input lag and snapshots")
    p.add_argument("--config", "-c", required=True, help="pipeline configuration (TOML)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides [kafka].bootstrap)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def run(args: argparse.Namespace) -> int:
    from processor.config import ConfigError, load_config
    from processor.job import state_dir
    from processor.recovery import read_committed_progress
    from processor.topics import end_offsets

    try:
        config = load_config(args.config).with_overrides(bootstrap=args.bootstrap)
    except ConfigError as err:
        print(f"ivm status: {err}", file=sys.stderr)
        return 2
    try:
        committed = read_committed_progress(config.bootstrap, config.progress_topic)
        ends = end_offsets(config.bootstrap, [r.topic for r in config.relations])
    except Exception as err:
        print(f"ivm status: cannot read from Kafka at {config.bootstrap}: {err}", file=sys.stderr)
        return 1
    positions = {(o["topic"], o["partition"]): o["offset"] for o in (committed or {}).get("offsets", [])}
    lag = {f"{t}[{p}]": end - positions.get((t, p), 0) for (t, p), end in sorted(ends.items())}
    snapshots = sorted(state_dir(config).glob("snapshot-*.pkl")) if state_dir(config).exists() else []
    status = {
        "pipeline": config.name,
        "last_committed_batch": committed["batch_id"] if committed else None,
        "committed_at": committed["timestamp_ms"].isoformat() if committed else None,
        "lag": lag,
        "total_lag": sum(lag.values()),
        "snapshots": [p.name for p in snapshots],
        "queries": [q.name for q in config.queries],
    }
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    print(f"pipeline {config.name}: ", end="")
    if committed is None:
        print("no batch committed yet")
    else:
        age = time.time() - committed["timestamp_ms"].timestamp()  # a datetime (timestamp-millis)
        print(f"last committed batch {committed['batch_id']} ({age:.0f}s ago)")
    for partition, behind in lag.items():
        print(f"  {partition:<30} lag {behind:>10,}")
    print(f"snapshots in {state_dir(config)}: {', '.join(status['snapshots']) or 'none'}")
    return 0
