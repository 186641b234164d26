"""``ivm bootstrap``: load an initial database from CSV or Parquet with Spark, then stream."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bootstrap",
        help="load initial relations from CSV/Parquet (Spark) as batch 0; `ivm run` continues from the topics",
    )
    p.add_argument("--config", "-c", required=True, help="pipeline configuration (TOML)")
    p.add_argument(
        "--load", "-l", action="append", required=True, metavar="RELATION=PATH",
        help="a relation and its CSV (with a header) or Parquet file; repeat per relation",
    )  # fmt: skip
    p.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT",
        help="Kafka bootstrap servers, host:port[,host:port...] (default: the configuration's [kafka].bootstrap, "
        "else 127.0.0.1:9092)",
    )  # fmt: skip
    p.add_argument("--state-dir", help="folder of the state snapshots")
    return p


def run(args: argparse.Namespace) -> int:
    from ivm.processor.bootstrap import BootstrapError, bootstrap
    from ivm.processor.cli import CommandError
    from ivm.processor.config import load_config
    from ivm.processor.kafka.topics import require_broker

    config = load_config(args.config).with_overrides(bootstrap=args.bootstrap, state_dir=args.state_dir)
    configured = [r.name for r in config.relations]
    files = {}
    for item in args.load:
        relation, sep, path = item.partition("=")
        if not sep or not path:
            raise CommandError(f"--load takes RELATION=PATH, got {item!r}")
        if relation not in configured:
            raise CommandError(f"--load {item}: no relation {relation!r} in {args.config} ({', '.join(configured)})")
        if not Path(path).exists():
            raise CommandError(f"--load {item}: {path} does not exist")
        files[relation] = Path(path)
    require_broker(config.kafka)
    try:
        results = bootstrap(config, files)
    except BootstrapError as err:
        raise CommandError(str(err), 1) from err
    for query, value in results.items():
        print(f"{query}: {value}  (committed as batch 0)")
    return 0
