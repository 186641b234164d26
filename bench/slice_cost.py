"""Benchmark: the cost per slice record of the triangle's shards (``ivm.maintain(query, shards=p)``).

On more than one shard each HyperCube slice holds a part of the database
(IVM^eps per slice; the slices' counts add up to the triangle count), and
``engine="auto"``'s adaptive engine partitions a relation in a slice as soon
as one of its keys reaches ``8·√N`` for that slice's N: with facebook's stream
on 4 slices the slices leave the compact first-order state.  This measures
what ``bench/placement.py``'s hosts pay per slice record, in-process and
without Spark or Kafka: the stream of ``bench/placement.py``'s triangle
workload (facebook's edges in file order, 6 updates each, ``--n`` inserts,
then ``--deletes`` of them deleted) is routed to the slices
(``ShardedView._route_many``, untimed) in batches of ``--batch`` and each
slice's engine applies its pieces; the CPU time of the slices' ``apply``
calls over the records they received is the cost per slice record.

Each run is a fresh process; ``--repeat`` runs per tree, median, the load
average before each run.  ``--baseline TREE`` runs the same in another checkout
(e.g. ``git worktree add --detach /tmp/base main``, kernels built there),
alternately, for an old-vs-new ratio from the same sitting.

Usage::

    .venv/bin/python bench/slice_cost.py                       # 4 shards, 4e5 inserts, batches of 50,000
    .venv/bin/python bench/slice_cost.py --baseline /tmp/base --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUERY = "Q() :- R(a,b), S(b,c), T(c,a)"


def stream(n: int, deletes: int) -> list[tuple[str, tuple[int, int], int]]:
    """bench/placement.py's triangle updates (n inserts), then the first ``deletes`` of them deleted."""
    from ivm.processor.data import sample_graph
    from ivm.processor.kafka.produce import read_edges

    out: list[tuple[str, tuple[int, int], int]] = []
    while len(out) < n:  # the graph again, shifted, if n asks for more than it has (as placement.py)
        shift = len(out) // 529_404 * 4039
        for u, v in read_edges(sample_graph()):
            for rel in "RST":
                out += [(rel, (u + shift, v + shift), 1), (rel, (v + shift, u + shift), 1)]
            if len(out) >= n:
                break
    out = out[:n]
    return out + [(r, row, -1) for r, row, _ in out[:deletes]]


def worker(shards: int, n: int, deletes: int, batch: int) -> dict[str, Any]:
    """Route every batch (untimed), then time each slice's apply of its piece (CPU and wall)."""
    import ivm
    from ivm.updates import Update

    updates = [Update(r, row, m) for r, row, m in stream(n, deletes)]
    view = ivm.maintain(QUERY, shards=shards)
    gc.collect()
    gc.freeze()
    cpu = [0.0] * shards
    wall = [0.0] * shards
    records = [0] * shards
    for i in range(0, len(updates), batch):
        pieces = view._route_many(updates[i : i + batch])
        for s, piece in enumerate(pieces):
            if not piece:
                continue
            engine = view.shards[s].engine
            c0, t0 = time.process_time(), time.perf_counter()
            engine.apply(piece)
            cpu[s] += time.process_time() - c0
            wall[s] += time.perf_counter() - t0
            records[s] += len(piece)
    stats = [view.shards[s].engine.stats() for s in range(shards)]
    return {
        "records": records,
        "cpu_s": cpu,
        "wall_s": wall,
        "partitioned": [int(st.get("partitioned", 0)) for st in stats],
        "heavy_keys": [int(st.get("heavy_keys", 0)) for st in stats],
        "result": sum(view.shards[s].engine.result() for s in range(shards)),
        "engine": view.shards[0].engine.name,
    }


def run(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--shards", str(args.shards)]
    cmd += ["--n", str(args.n), "--deletes", str(args.deletes), "--batch", str(args.batch)]
    env = {**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd=tree)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--n", type=int, default=400_000, help="inserts (placement.py's triangle: 4e5)")
    ap.add_argument("--deletes", type=int, default=0, help="then this many of them deleted")
    ap.add_argument("--batch", type=int, default=50_000, help="updates routed per batch (placement.py: 50,000)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="another checkout, run alternately as 'base'")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.shards, args.n, args.deletes, args.batch)))
        return
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    trees = {"this": ROOT} | ({"base": Path(args.baseline).resolve()} if args.baseline else {})
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    loads: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.repeat):
        for name, tree in trees.items():  # alternately, each run a fresh process
            loads[name].append(os.getloadavg()[0])
            runs[name].append(run(tree, args))
    print(f"{args.shards} shards, {args.n:,} inserts + {args.deletes:,} deletes, batches of {args.batch:,}")
    head = f"{'tree':<5} {'slice records':>13} {'us/record CPU':>14} {'(wall)':>8} {'per slice CPU us':<28}"
    print(f"{head} {'partitioned':<12} {'heavy keys':<16} load avg        result")
    medians = {}
    for name in trees:
        rs = runs[name]
        total = sum(rs[0]["records"])
        per = statistics.median(1e6 * sum(r["cpu_s"]) / total for r in rs)
        wall = statistics.median(1e6 * sum(r["wall_s"]) / total for r in rs)
        slices = [statistics.median(1e6 * r["cpu_s"][s] / r["records"][s] for r in rs) for s in range(args.shards)]
        medians[name] = per
        assert len({r["result"] for r in rs}) == 1
        print(
            f"{name:<5} {total:>13,} {per:>14.2f} {wall:>8.2f} {' '.join(f'{x:.2f}' for x in slices):<28} "
            f"{rs[0]['partitioned']!s:<12} {rs[0]['heavy_keys']!s:<16} "
            f"{'/'.join(f'{x:.1f}' for x in loads[name]):<14}  {rs[0]['result']:,}"
        )
    if "base" in medians:
        assert runs["this"][0]["result"] == runs["base"][0]["result"], "the trees disagree"
        print(f"base / this: {medians['base'] / medians['this']:.2f}x less CPU per slice record")


if __name__ == "__main__":
    main()
