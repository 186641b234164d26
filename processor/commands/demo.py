"""``ivm demo``: the facebook triangle count under inserts and deletes, end to end."""

from __future__ import annotations

import argparse
from pathlib import Path

from ivm.processor.data import sample_graph


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "demo",
        help="stream the facebook graph through a local broker and the processor",
        description="Start a Kafka broker of its own (on a free port) and the processor (config/demo.toml, Spark in "
        "local mode), stream every edge of --edges into R, S and T in both directions, then delete a seeded random "
        "fraction of the edges, printing the live triangle count against the expected one. Exit 1 if a count is "
        "wrong.",
    )
    p.add_argument(
        "--edges", type=Path, default=sample_graph(),
        help="edge list, plain or gzipped (default: SNAP ego-Facebook, data/graphs/ in the repository)",
    )  # fmt: skip
    p.add_argument("--delete-fraction", type=float, default=0.5, help="fraction of edges deleted afterwards")
    p.add_argument("--seed", type=int, default=42, help="seed of the deleted sample")
    p.add_argument(
        "--expected-triangles", type=int, default=None,
        help="published triangle count of the graph (default: 1,612,010 for facebook, else recounted)",
    )  # fmt: skip
    return p


def run(args: argparse.Namespace) -> int:
    from ivm.processor.cli import CommandError
    from ivm.processor.data import FACEBOOK_TRIANGLES
    from ivm.processor.demo import run_demo

    if not args.edges.exists():
        raise CommandError(f"--edges {args.edges}: no such file")
    expected = args.expected_triangles
    if expected is None and args.edges.resolve() == sample_graph().resolve():
        expected = FACEBOOK_TRIANGLES
    # a line of the edge file that does not parse is an InputError: one line, exit 2 (ivm/processor/cli.py)
    ok = run_demo(args.edges, delete_fraction=args.delete_fraction, seed=args.seed, expected_triangles=expected)
    return 0 if ok else 1
