"""Benchmark: line-3 and 4-path counts under ``engine="auto"`` on facebook_combined, half the edges deleted (issue 24).

Each relation is the symmetric edge set; every edge is inserted (relations
round-robin in batches), then a random half deleted.  Each query runs in a fresh
process; updates/s for inserts, deletes and all, peak RSS, and the count checked
against an independent numpy computation (degree products over the live edges).

Run::

    .venv/bin/python bench/line3.py [--batch 1000] [--queries line3 path4]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

GRAPH = Path(__file__).resolve().parents[1] / "data" / "graphs" / "facebook_combined.edges.gz"
QUERIES = {
    "line3": "Q() :- R1(a,b), R2(b,c), R3(c,d)",
    "path4": "Q() :- R1(a,b), R2(b,c), R3(c,d), R4(d,e)",
}


def edges() -> list[tuple[int, int]]:
    with gzip.open(GRAPH, "rt") as f:
        pairs = [tuple(map(int, line.split())) for line in f if line.strip() and not line.startswith("#")]
    return sorted({(a, b) for a, b in pairs} | {(b, a) for a, b in pairs})


def oracle(live: list[tuple[int, int]], k: int) -> int:
    """Walks of k edges over the live edge set: 1ᵀ A^k 1 by repeated sparse-free vector products."""
    src = np.array([a for a, _ in live])
    dst = np.array([b for _, b in live])
    n = int(max(src.max(), dst.max())) + 1
    vec = [1] * n  # Python ints: exact
    for _ in range(k):
        nxt = [0] * n
        for a, b in zip(src.tolist(), dst.tolist(), strict=True):
            nxt[a] += vec[b]
        vec = nxt
    return sum(vec)


def worker(name: str, batch: int, seed: int) -> dict:
    import ivm

    es = edges()
    rels = [f"R{i + 1}" for i in range(QUERIES[name].count("R"))]
    rng = random.Random(seed)
    doomed = rng.sample(es, len(es) // 2)
    inserts = [(r, e, 1) for i in range(0, len(es), batch) for r in rels for e in es[i : i + batch]]
    deletes = [(r, e, -1) for i in range(0, len(doomed), batch) for r in rels for e in doomed[i : i + batch]]
    view = ivm.maintain(QUERIES[name], engine="auto")
    t0 = time.perf_counter()
    for i in range(0, len(inserts), batch):
        view.apply(inserts[i : i + batch])
    t1 = time.perf_counter()
    for i in range(0, len(deletes), batch):
        view.apply(deletes[i : i + batch])
    t2 = time.perf_counter()
    gone = set(doomed)
    want = oracle([e for e in es if e not in gone], len(rels))
    return {
        "query": name,
        "engine": view.engine.name,
        "batch": batch,
        "inserts_per_s": len(inserts) / (t1 - t0),
        "deletes_per_s": len(deletes) / (t2 - t1),
        "all_per_s": (len(inserts) + len(deletes)) / (t2 - t0),
        "updates": len(inserts) + len(deletes),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "count": view.result(),
        "exact": view.result() == want,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--queries", nargs="+", default=list(QUERIES))
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), 1)))
        return
    print(f"load average before: {os.getloadavg()}")
    print("| query | engine | batch | updates | inserts/s | deletes/s | all/s | peak MB | exact |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name in args.queries:
        cmd = [sys.executable, __file__, "--worker", name, str(args.batch)]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        print(
            f"| {name} | {r['engine']} | {r['batch']:,} | {r['updates']:,} | {r['inserts_per_s']:,.0f} | "
            f"{r['deletes_per_s']:,.0f} | {r['all_per_s']:,.0f} | {r['peak_mb']:,.0f} | {r['exact']} |",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
