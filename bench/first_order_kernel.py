"""Benchmark: the compiled first-order loop against the Python one on the facebook triangle stream.

First-order IVM (IVM^eps App. A.1) costs O(min(deg_j(β), deg_k(α))) per update
whichever loop runs it; this script measures the constant.  Systems:

- ``auto``: ``IVMEpsAdaptive`` (what ``engine="auto"`` builds) with the
  Cython kernel (``implementation="compiled"``),
- ``auto_python``: the same engine with the Python reference loop,
- ``first_order``: ``FirstOrderIVM`` with the Python loop (the plain-Python
  first-order baseline of ``bench/compare.py`` and ``bench/triangles.py``).

Stream (the one of ``../shared/anchors/native_fo.py``, same seed): the
undirected facebook edges shuffled, each inserted as 6 updates R, S, T in both
directions, then a random half deleted the same way.  Every (system, batch)
cell runs in a fresh process, ``--repeat`` times; the table shows the median
updates/s (inserts, deletes, all) and the load average before each cell.
With ``--anchor`` the native anchor runs on the same stream when it is there.

Usage::

    .venv/bin/python bench/first_order_kernel.py                 # batches 1 and 1000, median of 3
    .venv/bin/python bench/first_order_kernel.py --batches 1000 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EDGES = ROOT / "data" / "graphs" / "facebook_combined.edges.gz"
ANCHOR = ROOT.parent / "shared" / "anchors" / "native_fo.py"
QUERY = "Q() :- R(a,b), S(b,c), T(c,a)"
SYSTEMS = ("auto", "auto_python", "first_order")
Update = tuple[str, tuple[int, int], int]


def facebook_stream(seed: int) -> tuple[list[Update], list[Update]]:
    """Inserts then deletes, built exactly as the native anchor builds its stream."""
    import numpy as np

    e = np.loadtxt(EDGES, dtype=np.int64, comments="#", ndmin=2)[:, :2]
    e = e[e[:, 0] != e[:, 1]]
    und = np.unique(np.sort(e, axis=1), axis=0)
    ins = und[np.random.default_rng(seed).permutation(len(und))]
    dele = ins[np.random.default_rng(seed + 1).permutation(len(ins))[: len(ins) // 2]]

    def expand(edges: np.ndarray, m: int) -> list[Update]:
        out: list[Update] = []
        for u, v in edges.tolist():
            out += [("R", (u, v), m), ("R", (v, u), m), ("S", (u, v), m)]
            out += [("S", (v, u), m), ("T", (u, v), m), ("T", (v, u), m)]
        return out

    return expand(ins, 1), expand(dele, -1)


def engine_for(system: str) -> Any:
    """The engine of ``system`` (see the module docstring)."""
    from ivm.engines.first_order import FirstOrderIVM
    from ivm.engines.ivm_eps.adaptive import IVMEpsAdaptive
    from ivm.query import parse

    query = parse(QUERY)
    if system == "auto":
        return IVMEpsAdaptive(query, implementation="compiled")
    if system == "auto_python":
        return IVMEpsAdaptive(query, implementation="python")
    return FirstOrderIVM(query, implementation="python")


def worker(system: str, batch: int, seed: int) -> dict:
    """One cell: time the inserts and the deletes in batches of ``batch`` (one ``apply`` each)."""
    inserts, deletes = facebook_stream(seed)
    engine = engine_for(system)
    out: dict = {"system": system, "batch": batch}
    for phase, stream in (("insert", inserts), ("delete", deletes)):
        chunks = [stream[i : i + batch] for i in range(0, len(stream), batch)]
        apply = engine.apply
        t0 = time.perf_counter()
        for chunk in chunks:
            apply(chunk)
        out[f"{phase}_s"] = time.perf_counter() - t0
        out[f"{phase}_n"] = len(stream)
        out[f"q_{phase}"] = engine.result()
    out["partitioned"] = int(engine.stats().get("partitioned", 0))
    return out


def run_cell(system: str, batch: int, seed: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", system, "--batch", str(batch), "--seed", str(seed)]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # no idle BLAS threads spinning
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,1000")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--anchor", action="store_true", help="also run ../shared/anchors/native_fo.py when present")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1000, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.batch, args.seed)))
        return
    rows = []
    print(f"{'system':<12} {'batch':>5} {'insert/s':>10} {'delete/s':>10} {'all/s':>10}  load avg    Q end")
    for batch in (int(b) for b in args.batches.split(",")):
        for system in args.systems.split(","):
            runs = []
            loads = []
            for _ in range(args.repeat):
                loads.append(os.getloadavg()[0])
                runs.append(run_cell(system, batch, args.seed))
            n = runs[0]["insert_n"] + runs[0]["delete_n"]
            row = {
                "system": system,
                "batch": batch,
                "insert_per_s": statistics.median(r["insert_n"] / r["insert_s"] for r in runs),
                "delete_per_s": statistics.median(r["delete_n"] / r["delete_s"] for r in runs),
                "all_per_s": statistics.median(n / (r["insert_s"] + r["delete_s"]) for r in runs),
                "load": loads,
                "q": (runs[0]["q_insert"], runs[0]["q_delete"]),
            }
            assert len({(r["q_insert"], r["q_delete"]) for r in runs}) == 1
            rows.append(row)
            print(
                f"{system:<12} {batch:>5} {row['insert_per_s']:>10,.0f} {row['delete_per_s']:>10,.0f} "
                f"{row['all_per_s']:>10,.0f}  {'/'.join(f'{x:.1f}' for x in loads):<10}  {row['q'][1]:,}",
                flush=True,
            )
    by = {(r["system"], r["batch"]): r["all_per_s"] for r in rows}
    for batch in sorted({r["batch"] for r in rows}):
        base = by.get(("first_order", batch))
        for system in ("auto", "auto_python"):
            if base and (system, batch) in by:
                print(f"batch {batch}: {system} / first_order (python) = {by[(system, batch)] / base:.2f}x")
    if args.anchor and ANCHOR.exists():
        import gzip
        import tempfile

        with tempfile.NamedTemporaryFile("wb", suffix=".edges") as f:
            f.write(gzip.decompress(EDGES.read_bytes()))
            f.flush()
            cmd = [sys.executable, str(ANCHOR), f.name, "--seed", str(args.seed)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        print("native anchor:", done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
