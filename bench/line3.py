"""Benchmark: line-3 and 4-path counts under ``engine="auto"`` on facebook_combined, half the edges deleted (issue 24).

Each relation is the symmetric edge set; every edge is inserted (relations
round-robin in batches), then a random half deleted.  Each query runs in a fresh
process; updates/s for inserts, deletes and all, peak RSS, and the count checked
against an independent numpy computation (degree products over the live edges).

``--keys int float string`` runs each query once per key type: the same graph with every vertex ``v``
as ``v`` (int), ``v + 0.5`` (a non-integral float: an interned code) or ``"v0000123"`` (a string), so the
count and the oracle are the same (issue 38).  ``--old DIR`` runs the same cells against another
checkout's ``ivm`` (e.g. ``../main``), alternating new and old.  Rates are also given per CPU second of
the worker (``time.process_time``), the fair measure on a loaded machine.

Run::

    .venv/bin/python bench/line3.py [--batch 1000] [--queries line3 path4] [--keys int float string] [--old ../main]
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


KEYS = {
    "int": lambda v: v,
    "float": lambda v: v + 0.5,
    "string": lambda v: f"v{v:07d}",
}


def worker(name: str, batch: int, seed: int, keys: str = "int", code: str | None = None) -> dict:
    if code:  # another checkout's engine (before/after comparisons)
        sys.path.insert(0, str(Path(code).resolve()))
    import ivm

    es = edges()
    rels = [f"R{i + 1}" for i in range(QUERIES[name].count("R"))]
    rng = random.Random(seed)
    doomed = rng.sample(es, len(es) // 2)
    key = KEYS[keys]
    inserts = [(r, (key(a), key(b)), 1) for i in range(0, len(es), batch) for r in rels for a, b in es[i : i + batch]]
    deletes = [
        (r, (key(a), key(b)), -1) for i in range(0, len(doomed), batch) for r in rels for a, b in doomed[i : i + batch]
    ]
    view = ivm.maintain(QUERIES[name], engine="auto")
    c0, t0 = time.process_time(), time.perf_counter()
    for i in range(0, len(inserts), batch):
        view.apply(inserts[i : i + batch])
    t1 = time.perf_counter()
    for i in range(0, len(deletes), batch):
        view.apply(deletes[i : i + batch])
    c2, t2 = time.process_time(), time.perf_counter()
    gone = set(doomed)
    want = oracle([e for e in es if e not in gone], len(rels))
    return {
        "query": name,
        "keys": keys,
        "checkout": Path(ivm.__file__).resolve().parents[1].name,
        "cpu_per_s": (len(inserts) + len(deletes)) / (c2 - c0),
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
    ap.add_argument("--keys", nargs="+", default=["int"], choices=list(KEYS))
    ap.add_argument("--old", help="another checkout to run the same cells against (alternating)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        name, batch, keys, code = args.worker
        print(json.dumps(worker(name, int(batch), 1, keys, code if code != "-" else None)))
        return
    print(f"load average before: {os.getloadavg()}")
    head = (
        "| query | keys | checkout | engine | batch | updates | inserts/s | deletes/s | all/s | all/CPU-s | peak MB |"
    )
    print(head + " exact |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in args.queries:
        for keys in args.keys:
            for _ in range(args.repeats):
                for code in ["-", *([args.old] if args.old else [])]:
                    cmd = [sys.executable, __file__, "--worker", name, str(args.batch), keys, code]
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                    r = json.loads(out.strip().splitlines()[-1])
                    print(
                        f"| {name} | {keys} | {r['checkout']} | {r['engine']} | {r['batch']:,} | {r['updates']:,} | "
                        f"{r['inserts_per_s']:,.0f} | {r['deletes_per_s']:,.0f} | {r['all_per_s']:,.0f} | "
                        f"{r['cpu_per_s']:,.0f} | {r['peak_mb']:,.0f} | {r['exact']} |",
                        flush=True,
                    )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
