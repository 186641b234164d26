"""Benchmark: F-IVM covariance over a Housing-shaped star, sized payloads and the batch path (issue 24).

The shape of F-IVM's Housing regression (``housing_regression.sql``): six
relations joined on ``postcode``: House (10 features), Shop (5),
Institution (2), Restaurant (2), Demographics (4), Transport (3); the query is
the covariance matrix over all 27 variables, postcode included (1 + 27 + 378 =
406 aggregates).  Each postcode has 1-7 houses and one tuple in each other
relation (about 9 tuples per postcode; ``--postcodes`` sets the size).
Inserts arrive in chunks of the batch size, round-robin over the relations
(the paper's protocol); float payloads (``exact=False``).

Every (implementation, batch size) runs in a fresh process; the table reports
tuples/s (median of ``--repeats`` processes), peak RSS of the process and RSS
before the first update (the generated stream included), and checks the final
406 numbers against an independent numpy computation (per-postcode group sums
joined by postcode) to 1e-9 relative.  Figures of the native systems (the
issue's measurements on this machine kind) are printed beside for the ratio.

Run::

    .venv/bin/python bench/housing.py                      # ~7e5 tuples, batches 1, 1000, 10000
    .venv/bin/python bench/housing.py --postcodes 20000 --repeats 1 --python   # smaller, with the reference path
    # 27k tuples, batches 1..1000, auto/numpy/python and an older engine checked out beside (git worktree add)
    .venv/bin/python bench/housing.py --postcodes 3000 --batches 1 10 100 1000 \
        --implementations auto numpy python --old /tmp/old313

``--implementations`` picks among ``auto``, ``numpy`` and ``python``
(``FIVM(implementation=...)``); ``--old PATH`` also runs the engine of the
checkout at PATH (imported from there, built without the ``implementation``
option when its FIVM has none), labelled ``old@<commit>``.

Saves ``bench/out/housing.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

OUT = Path(__file__).resolve().parent / "out"
FEATURES = {"House": 10, "Shop": 5, "Institution": 2, "Restaurant": 2, "Demographics": 4, "Transport": 3}
#: The issue's measurements on this machine kind (2 cores), 699,620 tuples.
NATIVE = {"F-IVM C++ batch 1000 (tuples/s)": 6.6e6, "F-IVM C++ batch 1 (tuples/s)": 2.45e6, "F-IVM C++ peak MB": 125}


def generate(postcodes: int, seed: int) -> dict[str, np.ndarray]:
    """Per relation an array (rows, 1 + features): postcode then uniform features rounded to cents."""
    rng = np.random.default_rng(seed)
    out = {}
    for rel, k in FEATURES.items():
        per = rng.integers(1, 8, postcodes) if rel == "House" else np.ones(postcodes, dtype=np.int64)
        pc = np.repeat(np.arange(postcodes), per)
        rng.shuffle(pc)
        feats = np.round(rng.uniform(0, 100, (len(pc), k)), 2)
        out[rel] = np.column_stack([pc.astype(float), feats])
    return out


def query_text() -> str:
    names, atoms = ["postcode"], []
    for rel, k in FEATURES.items():
        vs = [f"{rel.lower()}{i}" for i in range(k)]
        names += vs
        atoms.append(f"{rel}(postcode, {', '.join(vs)})")
    return f"Q(COVAR({', '.join(names)})) :- {', '.join(atoms)}"


def chunks(data: dict[str, np.ndarray], batch: int) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """Round-robin chunks of ``batch`` tuples per relation, rows as Python tuples (postcode an int)."""
    rows = {}
    for rel, arr in data.items():
        lists = arr.tolist()
        rows[rel] = [(int(r[0]), *r[1:]) for r in lists]
    out = []
    pos = dict.fromkeys(rows, 0)
    while any(pos[r] < len(rows[r]) for r in rows):
        for rel in rows:
            if pos[rel] < len(rows[rel]):
                out.append((rel, rows[rel][pos[rel] : pos[rel] + batch]))
                pos[rel] += batch
    return out


def oracle(data: dict[str, np.ndarray]) -> np.ndarray:
    """MᵀM over [1, postcode, features...] of the star join, by per-postcode sums (independent of the engine)."""
    P = int(max(a[:, 0].max() for a in data.values())) + 1
    order = ["postcode"] + [f"{r}{i}" for r, k in FEATURES.items() for i in range(k)]
    # per relation and postcode: count, sums of [features], sums of outer products
    parts = []
    for arr in data.values():
        pc = arr[:, 0].astype(int)
        X = arr[:, 1:]
        cnt = np.bincount(pc, minlength=P).astype(float)
        S = np.zeros((P, X.shape[1]))
        np.add.at(S, pc, X)
        QQ = np.zeros((P, X.shape[1], X.shape[1]))
        np.add.at(QQ, pc, X[:, :, None] * X[:, None, :])
        parts.append((cnt, S, QQ))
    n = len(order) + 1
    M = np.zeros((n, n))
    total_cnt = np.prod([p[0] for p in parts], axis=0)
    pcs = np.arange(P, dtype=float)
    offs = []
    o = 2
    for _, S, _ in parts:
        offs.append(o)
        o += S.shape[1]
    M[0, 0] = total_cnt.sum()
    M[0, 1] = M[1, 0] = (total_cnt * pcs).sum()
    M[1, 1] = (total_cnt * pcs * pcs).sum()
    for i, (_, Si, Qi) in enumerate(parts):
        others = np.prod([p[0] for j, p in enumerate(parts) if j != i], axis=0)
        a = offs[i]
        b = a + Si.shape[1]
        M[0, a:b] = M[a:b, 0] = (others[:, None] * Si).sum(0)
        M[1, a:b] = M[a:b, 1] = (others[:, None] * pcs[:, None] * Si).sum(0)
        M[a:b, a:b] = (others[:, None, None] * Qi).sum(0)
        for j in range(i + 1, len(parts)):
            Sj = parts[j][1]
            rest = np.prod([p[0] for h, p in enumerate(parts) if h not in (i, j)], axis=0)
            c = offs[j]
            d = c + Sj.shape[1]
            block = (Si * rest[:, None]).T @ Sj
            M[a:b, c:d] = block
            M[c:d, a:b] = block.T
    return M


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(postcodes: int, batch: int, implementation: str, seed: int, root: str | None = None) -> dict[str, Any]:
    """One configuration in this process; ``root``: import ``ivm`` from that checkout instead of this one."""
    if root is not None:
        sys.path.insert(0, str(Path(root).resolve()))
    import inspect

    import ivm
    from ivm.engines.fivm import FIVM
    from ivm.query import parse

    if root is not None:
        assert Path(ivm.__file__).resolve().is_relative_to(Path(root).resolve()), ivm.__file__
    data = generate(postcodes, seed)
    stream = chunks(data, batch)
    tuples = sum(len(rows) for _, rows in stream)
    options: dict[str, Any] = {"exact": False}
    if "implementation" in inspect.signature(FIVM.__init__).parameters:
        options["implementation"] = implementation
    engine = FIVM(parse(query_text()), **options)
    before = rss_mb()
    start = time.perf_counter()
    for rel, rows in stream:
        engine.apply([(rel, row, 1) for row in rows])
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    got = engine.result().matrix()
    want = oracle(data)
    err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))
    stats = engine.stats()
    return {
        "postcodes": postcodes,
        "tuples": tuples,
        "batch": batch,
        "implementation": implementation,
        "seconds": seconds,
        "tuples_per_s": tuples / seconds,
        "peak_mb": peak,
        "rss_before_mb": before,
        "max_rel_err": err,
        "view_bytes": stats.get("view_bytes", float("nan")),
        "bytes_per_payload": stats.get("bytes_per_payload", float("nan")),
        "exact": err < 1e-9,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--postcodes", type=int, default=77_750, help="about 9 tuples each (77,750: ~7e5 tuples)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 1000, 10000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--python", action="store_true", help="also run implementation='python' (slow)")
    ap.add_argument(
        "--implementations",
        nargs="+",
        choices=["auto", "numpy", "python"],
        help="FIVM(implementation=...) values to run (default: numpy, plus python with --python)",
    )
    ap.add_argument("--old", metavar="PATH", help="also run the engine of the checkout at PATH (e.g. a git worktree)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--worker", nargs=3, metavar=("POSTCODES", "BATCH", "IMPL"), help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        p, b, impl = args.worker
        print(json.dumps(worker(int(p), int(b), impl, args.seed, args.root)))
        return
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average before the run {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    rows = []
    impls = args.implementations or ["numpy"] + (["python"] if args.python else [])
    configs: list[tuple[str, str, str | None]] = [(impl, impl, None) for impl in impls]
    if args.old:
        commit = subprocess.run(
            ["git", "-C", args.old, "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
        configs.append((f"old@{commit}", "auto", args.old))
    for label, impl, root in configs:
        for batch in args.batches:
            runs = []
            for _ in range(args.repeats):
                cmd = [sys.executable, __file__, "--seed", str(args.seed), "--worker", str(args.postcodes), str(batch)]
                cmd += [impl, *(["--root", root] if root else [])]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                runs.append(json.loads(out.strip().splitlines()[-1]))
            mid = sorted(runs, key=lambda r: r["tuples_per_s"])[len(runs) // 2]
            mid["implementation"] = label
            mid["repeats"] = [round(r["tuples_per_s"]) for r in runs]
            mid["load_after"] = os.getloadavg()[0]
            rows.append(mid)
            print(
                f"{label:11s} batch {batch:>6,}: {mid['tuples']:,} tuples, {mid['tuples_per_s']:>10,.0f} tuples/s "
                f"(median of {statistics.median(mid['repeats']):,.0f} over {mid['repeats']}), "
                f"peak {mid['peak_mb']:,.0f} MB (before updates {mid['rss_before_mb']:,.0f} MB), "
                f"views {mid['view_bytes'] / 2**20:,.1f} MB, {mid['bytes_per_payload']:.0f} B/payload, "
                f"max rel err {mid['max_rel_err']:.1e}",
                flush=True,
            )
    print()
    print(
        "| implementation | batch | tuples | tuples/s (median) | runs | vs F-IVM C++ | peak MB | RSS before MB "
        "| views MB | exact | load after |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        key = "F-IVM C++ batch 1 (tuples/s)" if r["batch"] == 1 else "F-IVM C++ batch 1000 (tuples/s)"
        native = NATIVE[key]
        print(
            f"| {r['implementation']} | {r['batch']:,} | {r['tuples']:,} | {r['tuples_per_s']:,.0f} | "
            f"{', '.join(f'{x:,}' for x in r['repeats'])} | "
            f"1/{native / r['tuples_per_s']:,.0f} | {r['peak_mb']:,.0f} | {r['rss_before_mb']:,.0f} | "
            f"{r['view_bytes'] / 2**20:,.1f} | {'yes' if r['exact'] else 'NO'} | {r['load_after']:.2f} |"
        )
    print(f"\nnative (issue 24, same data shape, this machine kind): {NATIVE}")
    load = os.getloadavg()
    print(f"load average after the run {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    OUT.mkdir(exist_ok=True)
    (OUT / "housing.json").write_text(json.dumps({"rows": rows, "native": NATIVE}, indent=1))


if __name__ == "__main__":
    main()
