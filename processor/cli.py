"""The ``ivm`` command line.

Each subcommand is a module of ``processor/commands/`` with two functions,
``add_parser(subparsers)`` and ``run(args) -> int``; this file only finds and
dispatches them.  Exit codes: 0 success, 1 runtime failure, 2 bad usage or
configuration.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

import processor.commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ivm",
        description="Incremental view maintenance over Kafka relation topics, on Spark.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(processor.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"processor.commands.{info.name}")
        if hasattr(module, "add_parser") and hasattr(module, "run"):
            sub = module.add_parser(subparsers)
            sub.set_defaults(handler=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
