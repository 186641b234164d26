"""Benchmark: how long a snapshot stops the stream, written in place vs in a forked child.

For a pipeline state holding a triangle query over N edges per relation (its engine's indexes and the
relations' contents), each size in a fresh process, the median of ``--repeat``:

- ``in place``: :meth:`StateStore.save` in the caller, what the stream waited before (pickle + write
  + fsync);
- ``fork pause``: what :meth:`BackgroundSnapshots.take` costs the caller (the fork: page tables
  copied, the pages themselves shared copy-on-write);
- ``child write``: how long the child takes to write it beside the stream;
- the snapshot's size and the process's peak RSS.

Usage::

    .venv/bin/python bench/snapshots.py                       # 10^4, 10^5, 10^6 edges
    .venv/bin/python bench/snapshots.py --sizes 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _child(n: int, repeat: int) -> dict[str, float]:
    import gc

    from ivm import maintain
    from ivm.processor.pipeline import PipelineState
    from ivm.processor.state.snapshots import BackgroundSnapshots, StateStore

    rng = random.Random(n)
    domain = max(10, int(n**0.5) * 4)
    updates = [(rel, (rng.randrange(domain), rng.randrange(domain)), 1) for _ in range(n) for rel in "RST"]
    view = maintain("Q() :- R(a,b), S(b,c), T(c,a)", engine="first_order")
    view.apply(updates)
    contents: dict[str, dict[tuple[int, int], int]] = {r: {} for r in "RST"}
    for rel, row, m in updates:
        contents[rel][row] = contents[rel].get(row, 0) + m
    state = PipelineState({"tri": view}, {("R", 0): n}, last_batch_id=0, relations=contents)
    gc.collect()
    gc.freeze()
    in_place, pause, write, size = [], [], [], 0
    with tempfile.TemporaryDirectory() as folder:
        store = StateStore(folder)
        snapshots = BackgroundSnapshots(store)
        for i in range(repeat):
            state.last_batch_id = 2 * i
            started = time.perf_counter()
            _path, size = store.save(state)
            in_place.append(time.perf_counter() - started)
            state.last_batch_id = 2 * i + 1
            started = time.perf_counter()
            snapshots.take(state)
            pause.append(time.perf_counter() - started)
            written = snapshots.wait(600)
            assert written is not None and written.batch_id == 2 * i + 1
            write.append(written.seconds)
    return {
        "edges_per_relation": n,
        "tuples": 3 * n,
        "snapshot_mb": size / 2**20,
        "in_place_s": statistics.median(in_place),
        "fork_pause_s": statistics.median(pause),
        "child_write_s": statistics.median(write),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.repeat)))
        return 0
    print(
        f"# load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; median of {args.repeat}, a fresh process per size"
    )
    print("| edges/relation | tuples | snapshot MB | in place s | fork pause s | child write s | ratio | peak MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(n), "--repeat", str(args.repeat)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {n:,} | {r['tuples']:,} | {r['snapshot_mb']:.1f} | {r['in_place_s']:.3f} | {r['fork_pause_s']:.4f} | "
            f"{r['child_write_s']:.3f} | {r['in_place_s'] / r['fork_pause_s']:.0f}x | {r['peak_mb']:.0f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
