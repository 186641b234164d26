"""``ivm subscribe``: print an output topic as it changes."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("subscribe", help="print a result, delta or dead-letter topic as it changes")
    p.add_argument("topic", help="e.g. triangle.result, triangle.delta or ivm.dead-letter")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--latest", action="store_true", help="start at the end instead of the beginning")
    p.add_argument("--idle-timeout", type=float, help="exit after this many seconds without a record")
    p.add_argument("--json", action="store_true", help="print each record as one JSON line")
    return p


def run(args: argparse.Namespace) -> int:
    from processor.subscribe import follow

    for record in follow(args.bootstrap, args.topic, from_beginning=not args.latest, idle_timeout=args.idle_timeout):
        if args.json:
            print(json.dumps({k: v.hex() if isinstance(v, bytes) else v for k, v in record.items()}), flush=True)
        elif "batch_id" in record and "value" in record:
            print(f"batch {record['batch_id']:>6}  {record['query']} = {record['value']}", flush=True)
        elif "answer" in record:
            print(f"batch {record['batch_id']:>6}  {record['mult']:+d} {record['answer']}", flush=True)
        else:
            print(f"{record['topic']}[{record['partition']}]@{record['offset']}: {record['reason']}", flush=True)
    return 0
