"""Benchmark: F-IVM's Housing covariance with the join key ``postcode`` as an int, a float or a string (issue 38).

The data of :mod:`bench.housing` (its generator: six relations joined on ``postcode``, about 9 tuples per
postcode, features rounded to cents) with ``postcode`` given as

- ``int``: the postcode number itself (0 .. P-1), as :mod:`bench.housing` gives it;
- ``float``: ``(postcode + 0.5) / P``, a normalised float in (0, 1) (F-IVM's shipped Housing tables are
  normalised, so their ``postcode`` is a float; none of these is integral, so every one is interned);
- ``string``: ``"PC0000123"``, a string key (customer ids, SKUs).

The query is the covariance matrix of the 26 features (``postcode`` is the join key only, not lifted, so
the three key types compute the same 1 + 26 + 351 = 378 numbers; a string cannot be lifted).  Inserts
arrive in chunks of ``--batch`` tuples per relation, round-robin, in F-IVM's order (each relation sorted
by postcode) or shuffled; ``engine.apply`` of Python tuples (``--input rows``) or ``apply_columns`` of
arrays (``--input columns``; the string key is an object array there).  Every cell (key type x checkout
x repeat) is a fresh process; checkouts alternate run by run (new, old, new, old).  The clock: CPU time
of the process (``time.process_time``, robust to other load on the machine) and wall time around the
engine's calls only; the final 378 numbers are checked against :func:`bench.housing.oracle` (to 1e-9
relative).

Run::

    .venv/bin/python bench/housing_keys.py --postcodes 20000 --repeats 3 --old ../main
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.housing import FEATURES, generate, oracle, size

KEYS = ("int", "float", "string")


def query_text(lift: bool = False) -> str:
    names, atoms = (["postcode"] if lift else []), []
    for rel, k in FEATURES.items():
        vs = [f"{rel.lower()}{i}" for i in range(k)]
        names += vs
        atoms.append(f"{rel}(postcode, {', '.join(vs)})")
    return f"Q(COVAR({', '.join(names)})) :- {', '.join(atoms)}"


def key_column(pc: np.ndarray, key: str, postcodes: int) -> Any:
    if key == "int":
        return pc.astype(np.int64)
    if key == "float":
        return (pc.astype(np.float64) + 0.5) / postcodes
    return np.array([f"PC{p:07d}" for p in pc.tolist()], dtype=object)


def worker(
    postcodes: int, batch: int, key: str, order: str, given: str, seed: int, root: str | None, lift: bool = False
) -> dict[str, Any]:
    if root is not None:
        sys.path.insert(0, str(Path(root).resolve()))
    import ivm
    from ivm.engines.fivm import FIVM
    from ivm.query import parse

    if root is not None:
        assert Path(ivm.__file__).resolve().is_relative_to(Path(root).resolve()), ivm.__file__
    data = generate(postcodes, seed, order)
    keys = {rel: key_column(pc, key, postcodes) for rel, (pc, _) in data.items()}
    if lift and key == "string":
        raise ValueError("--lift: a string postcode cannot be lifted by the covariance")
    engine = FIVM(parse(query_text(lift)), exact=False)
    pos = dict.fromkeys(data, 0)
    cpu = wall = 0.0
    while any(pos[r] < len(data[r][0]) for r in data):
        for rel, (pc, cents) in data.items():
            start = pos[rel]
            if start >= len(pc):
                continue
            stop = start + batch
            pos[rel] = stop
            features = cents[start:stop] / 100
            columns = [keys[rel][start:stop], *(features[:, j] for j in range(features.shape[1]))]
            if given == "rows":
                rows = list(zip(*(c.tolist() for c in columns), strict=True))
                c0, w0 = time.process_time(), time.perf_counter()
                engine.apply([(rel, row, 1) for row in rows])
            else:
                c0, w0 = time.process_time(), time.perf_counter()
                engine.apply_columns(rel, columns)
            cpu += time.process_time() - c0
            wall += time.perf_counter() - w0
    tuples = size(data)
    want = oracle(data)
    if not lift:
        want = np.delete(np.delete(want, 1, 0), 1, 1)  # without postcode (a join key only here)
    elif key == "float":  # postcode' = (postcode + 0.5) / P: M' = T M Tᵀ for that affine map of [1, postcode, ...]
        T = np.eye(len(want))
        T[1, 0], T[1, 1] = 0.5 / postcodes, 1.0 / postcodes
        want = T @ want @ T.T
    got = engine.result().matrix()
    err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))
    stats = engine.stats()
    return {
        "key": key,
        "tuples": tuples,
        "cpu_s": cpu,
        "wall_s": wall,
        "tuples_per_cpu_s": tuples / cpu,
        "tuples_per_s": tuples / wall,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "max_rel_err": err,
        "key_dictionary": len(getattr(engine, "_keydict", ()) or ()),
        "compiled_runs": stats.get("implementation"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--postcodes", type=int, default=20_000, help="about 9 tuples each")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keys", nargs="+", choices=KEYS, default=list(KEYS))
    ap.add_argument("--order", choices=("postcode", "shuffled"), default="postcode")
    ap.add_argument("--input", choices=("rows", "columns"), default="rows")
    ap.add_argument("--lift", action="store_true", help="postcode also in COVAR (F-IVM's query; int, float keys)")
    ap.add_argument("--old", metavar="PATH", help="also run the checkout at PATH (e.g. ../main), alternated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--worker", nargs=2, metavar=("KEY", "ROOT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        key, root = args.worker
        root_path = root if root != "-" else None
        run = worker(args.postcodes, args.batch, key, args.order, args.input, args.seed, root_path, args.lift)
        print(json.dumps(run))
        return
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    checkouts = [("new", "-")] + ([("old", args.old)] if args.old else [])
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(args.repeats):
        for key in args.keys:
            for label, root in checkouts:
                cmd = [sys.executable, __file__, "--postcodes", str(args.postcodes), "--batch", str(args.batch)]
                cmd += ["--order", args.order, "--input", args.input, "--seed", str(args.seed), "--worker", key, root]
                cmd += ["--lift"] if args.lift else []
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                runs.setdefault((label, key), []).append(json.loads(out.strip().splitlines()[-1]))
    print(f"\n{args.postcodes:,} postcodes, batch {args.batch:,}, order {args.order}, input {args.input}")
    print("| checkout | key | tuples | tuples/CPU-s (median) | runs (tuples/CPU-s) | tuples/wall-s | peak MB | exact |")
    print("|---|---|---:|---:|---|---:|---:|---|")
    for (label, key), done in runs.items():
        mid = sorted(done, key=lambda r: r["tuples_per_cpu_s"])[len(done) // 2]
        runs_text = ", ".join(f"{r['tuples_per_cpu_s']:,.0f}" for r in done)
        print(
            f"| {label} | {key} | {mid['tuples']:,} | {mid['tuples_per_cpu_s']:,.0f} | "
            f"{runs_text} | {mid['tuples_per_s']:,.0f} | "
            f"{mid['peak_mb']:,.0f} | {'yes' if mid['max_rel_err'] < 1e-9 else 'NO ' + str(mid['max_rel_err'])} |"
        )


if __name__ == "__main__":
    main()
