"""``ivm demo``: the facebook triangle count under inserts and deletes, end to end."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_EDGES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "graphs" / "facebook_combined.edges"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("demo", help="stream the facebook graph through a local broker and the processor")
    p.add_argument("--edges", type=Path, default=DEFAULT_EDGES, help="edge list (default: SNAP ego-Facebook)")
    p.add_argument("--delete-fraction", type=float, default=0.5, help="fraction of edges deleted afterwards")
    p.add_argument("--seed", type=int, default=42, help="seed of the deleted sample")
    p.add_argument(
        "--expected-triangles", type=int, default=None,
        help="published triangle count of the graph (default: 1,612,010 for facebook, else recounted)",
    )  # fmt: skip
    return p


def run(args: argparse.Namespace) -> int:
    from processor.demo import FACEBOOK_TRIANGLES, run_demo

    if not args.edges.exists():
        print(f"ivm demo: edge file {args.edges} not found")
        return 2
    expected = args.expected_triangles
    if expected is None and args.edges.name == "facebook_combined.edges":
        expected = FACEBOOK_TRIANGLES
    ok = run_demo(args.edges, delete_fraction=args.delete_fraction, seed=args.seed, expected_triangles=expected)
    return 0 if ok else 1
