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
before the first update (the generated data included), and checks the final
406 numbers against an independent numpy computation (per-postcode group sums
joined by postcode) to 1e-9 relative.  Figures of the native systems (the
issue's measurements on this machine kind) are printed beside for the ratio.

The stream is generated lazily: the relations are kept as numpy arrays (postcodes
int32, features as int16 cents, 2 bytes a value) and each chunk becomes Python
tuples ``(postcode, f1, ...)`` (an int, then floats equal to ``round(u, 2)``) just
before the engine gets it, so the engine receives the same tuples in the same order
as from a list built in advance, without 1.4e7 tuples held at once (5.7 GB at
``--postcodes 1555000``).  The clock runs around ``engine.apply`` and the building
of its update list ``[(relation, row, 1), ...]``, not around the making of the
tuples from the arrays (which the earlier version did before starting the clock).

Run::

    .venv/bin/python bench/housing.py                      # ~7e5 tuples, batches 1, 1000, 10000
    .venv/bin/python bench/housing.py --postcodes 1555000 --batches 1000 --repeats 1   # ~1.4e7 tuples
    .venv/bin/python bench/housing.py --postcodes 20000 --repeats 1 --python   # smaller, with the reference path
    # 27k tuples, batches 1..1000, auto/numpy/python and an older engine checked out beside (git worktree add)
    .venv/bin/python bench/housing.py --postcodes 3000 --batches 1 10 100 1000 \
        --implementations auto numpy python --old /tmp/old313

``--implementations`` picks among ``auto``, ``compiled``, ``numpy`` and ``python``
(``FIVM(implementation=...)``); ``--old PATH`` also runs the engine of the
checkout at PATH (imported from there, built without the ``implementation``
option when its FIVM has none), labelled ``old@<commit>``; the configurations take turns run by
run (for each batch size: new, old, new, old, ...), and each run's load average is printed.

``--orders`` runs each update order (default both): ``postcode``, each relation's tuples sorted by
postcode as in F-IVM's shipped tables (the order of the native run the ratio is taken against), and
``shuffled``, the same tuples in a random order of postcodes (each chunk touches random postcodes: a
cache miss per view probe once the state outgrows the caches).

Saves ``bench/out/housing.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

OUT = Path(__file__).resolve().parent / "out"
FEATURES = {"House": 10, "Shop": 5, "Institution": 2, "Restaurant": 2, "Demographics": 4, "Transport": 3}
#: The issue's measurements on this machine kind (2 cores), 699,620 tuples.
NATIVE = {"F-IVM C++ batch 1000 (tuples/s)": 6.6e6, "F-IVM C++ batch 1 (tuples/s)": 2.45e6, "F-IVM C++ peak MB": 125}


ORDERS = ("postcode", "shuffled")
INPUTS = ("rows", "columns")


def generate(postcodes: int, seed: int, order: str = "shuffled") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per relation ``(postcodes int32, cents int16 (rows, features))``: uniform features in [0, 100)
    rounded to cents, ``cents / 100`` being exactly ``np.round(u, 2)`` (the same draws as before).

    ``order``: ``"shuffled"``, each relation's tuples in a random order of postcodes (every chunk
    touches random postcodes); ``"postcode"``, the same tuples stably sorted by postcode, the order of
    F-IVM's shipped Housing tables (``examples/data/housing*/*.tbl`` are sorted by postcode), in which
    the issue's native run streamed them."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}")
    rng = np.random.default_rng(seed)
    out = {}
    for rel, k in FEATURES.items():
        per = rng.integers(1, 8, postcodes) if rel == "House" else np.ones(postcodes, dtype=np.int64)
        pc = np.repeat(np.arange(postcodes, dtype=np.int32), per)
        rng.shuffle(pc)
        cents = np.rint(rng.uniform(0, 100, (len(pc), k)) * 100).astype(np.int16)
        if order == "postcode":
            by = np.argsort(pc, kind="stable")
            pc, cents = pc[by], cents[by]
        out[rel] = (pc, cents)
    return out


def query_text() -> str:
    names, atoms = ["postcode"], []
    for rel, k in FEATURES.items():
        vs = [f"{rel.lower()}{i}" for i in range(k)]
        names += vs
        atoms.append(f"{rel}(postcode, {', '.join(vs)})")
    return f"Q(COVAR({', '.join(names)})) :- {', '.join(atoms)}"


def column_chunks(data: dict[str, tuple[np.ndarray, np.ndarray]], batch: int) -> Iterator[tuple[str, list[np.ndarray]]]:
    """Round-robin chunks of ``batch`` tuples per relation, made lazily, as columns: the postcodes (int32)
    and one float64 array per feature (``cents / 100``)."""
    pos = dict.fromkeys(data, 0)
    while any(pos[r] < len(data[r][0]) for r in data):
        for rel, (pc, cents) in data.items():
            start = pos[rel]
            if start < len(pc):
                stop = start + batch
                features = cents[start:stop] / 100
                yield rel, [pc[start:stop], *(features[:, j] for j in range(features.shape[1]))]
                pos[rel] = stop


def chunks(data: dict[str, tuple[np.ndarray, np.ndarray]], batch: int) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    """:func:`column_chunks` as rows: Python tuples ``(postcode, f1, ...)``, the postcode an int and the
    features floats, made lazily."""
    for rel, columns in column_chunks(data, batch):
        yield rel, list(zip(*(column.tolist() for column in columns), strict=True))


def size(data: dict[str, tuple[np.ndarray, np.ndarray]]) -> int:
    return sum(len(pc) for pc, _ in data.values())


def oracle(data: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """MᵀM over [1, postcode, features...] of the star join, by per-postcode sums (independent of the engine).

    Per relation: the count and feature sums per postcode (``bincount``), and its diagonal block
    ``Σ_rows others(postcode) · x xᵀ`` as one matrix product per chunk of rows; memory O(P · k + chunk).
    """
    P = int(max(pc.max() for pc, _ in data.values())) + 1
    order = ["postcode"] + [f"{r}{i}" for r, k in FEATURES.items() for i in range(k)]
    counts, sums = [], []
    for pc, cents in data.values():
        counts.append(np.bincount(pc, minlength=P).astype(float))
        sums.append(
            np.stack([np.bincount(pc, weights=cents[:, j] / 100, minlength=P) for j in range(cents.shape[1])], 1)
        )
    n = len(order) + 1
    M = np.zeros((n, n))
    total_cnt = np.prod(counts, axis=0)
    pcs = np.arange(P, dtype=float)
    offs = []
    o = 2
    for S in sums:
        offs.append(o)
        o += S.shape[1]
    M[0, 0] = total_cnt.sum()
    M[0, 1] = M[1, 0] = (total_cnt * pcs).sum()
    M[1, 1] = (total_cnt * pcs * pcs).sum()
    for i, ((pc, cents), Si) in enumerate(zip(data.values(), sums, strict=True)):
        others = np.prod([c for j, c in enumerate(counts) if j != i], axis=0)
        a = offs[i]
        b = a + Si.shape[1]
        M[0, a:b] = M[a:b, 0] = (others[:, None] * Si).sum(0)
        M[1, a:b] = M[a:b, 1] = (others[:, None] * pcs[:, None] * Si).sum(0)
        for start in range(0, len(pc), 1 << 20):
            X = cents[start : start + (1 << 20)] / 100
            M[a:b, a:b] += (X * others[pc[start : start + (1 << 20)]][:, None]).T @ X
        for j in range(i + 1, len(sums)):
            Sj = sums[j]
            rest = np.prod([c for h, c in enumerate(counts) if h not in (i, j)], axis=0)
            c = offs[j]
            d = c + Sj.shape[1]
            block = (Si * rest[:, None]).T @ Sj
            M[a:b, c:d] = block
            M[c:d, a:b] = block.T
    return M


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(
    postcodes: int,
    batch: int,
    implementation: str,
    seed: int,
    root: str | None = None,
    order: str = "shuffled",
    given: str = "rows",
    payloads: str = "float64",
) -> dict[str, Any]:
    """One configuration in this process; ``root``: import ``ivm`` from that checkout instead of this one;
    ``given``: ``"rows"`` (``engine.apply`` of Python tuples) or ``"columns"`` (``engine.apply_columns``
    of numpy arrays); ``payloads``: ``"float64"`` (``exact=False``, the C kernel) or ``"exact"`` (``exact=True``:
    exact sums of the floats: exact cells in C under the compiled implementation, ``_covar_kernel.ExactPath``,
    else :mod:`ivm.rings.exact`'s numbers in object arrays)."""
    if root is not None:
        sys.path.insert(0, str(Path(root).resolve()))
    import inspect

    import ivm
    from ivm.engines.fivm import FIVM
    from ivm.query import parse

    if root is not None:
        assert Path(ivm.__file__).resolve().is_relative_to(Path(root).resolve()), ivm.__file__
    data = generate(postcodes, seed, order)
    tuples = size(data)
    options: dict[str, Any] = {"exact": payloads == "exact"}
    if "implementation" in inspect.signature(FIVM.__init__).parameters:
        options["implementation"] = implementation
    engine = FIVM(parse(query_text()), **options)
    before = rss_mb()
    seconds = cpu_seconds = 0.0
    clock, cpu = time.perf_counter, time.process_time  # (CPU time: the comparison on a shared machine)
    if given == "columns":
        for rel, columns in column_chunks(data, batch):  # each chunk's arrays made outside the clock
            start, start_cpu = clock(), cpu()
            engine.apply_columns(rel, columns)
            seconds += clock() - start
            cpu_seconds += cpu() - start_cpu
    else:
        for rel, rows in chunks(data, batch):  # each chunk made just before it is applied (outside the clock)
            start, start_cpu = clock(), cpu()
            engine.apply([(rel, row, 1) for row in rows])
            seconds += clock() - start
            cpu_seconds += cpu() - start_cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    got = engine.result().matrix()
    want = oracle(data)
    err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))
    stats = engine.stats()
    return {
        "postcodes": postcodes,
        "tuples": tuples,
        "batch": batch,
        "order": order,
        "implementation": implementation,
        "input": given,
        "seconds": seconds,
        "tuples_per_s": tuples / seconds,
        "cpu_tuples_per_s": tuples / cpu_seconds,
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
        choices=["auto", "compiled", "numpy", "python"],
        help="FIVM(implementation=...) values to run (default: auto, plus python with --python)",
    )
    ap.add_argument("--old", metavar="PATH", help="also run the engine of the checkout at PATH (e.g. a git worktree)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--payloads",
        choices=("float64", "exact"),
        default="float64",
        help="float64 payloads (exact=False, the default) or exact float sums (exact=True, ivm.rings.exact)",
    )
    ap.add_argument(
        "--orders",
        nargs="+",
        choices=ORDERS,
        default=list(ORDERS),
        help="update orders: postcode (F-IVM's tables, the native run's order) and/or shuffled (random postcodes)",
    )
    ap.add_argument(
        "--inputs",
        nargs="+",
        choices=INPUTS,
        default=list(INPUTS),
        help="how chunks reach the engine: rows (apply of Python tuples), columns (apply_columns of arrays)",
    )
    ap.add_argument("--order", choices=ORDERS, default="shuffled", help=argparse.SUPPRESS)
    ap.add_argument("--input", choices=INPUTS, default="rows", help=argparse.SUPPRESS)
    ap.add_argument("--worker", nargs=3, metavar=("POSTCODES", "BATCH", "IMPL"), help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        p, b, impl = args.worker
        print(json.dumps(worker(int(p), int(b), impl, args.seed, args.root, args.order, args.input, args.payloads)))
        return
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average before the run {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    rows = []
    impls = args.implementations or ["auto"] + (["python"] if args.python else [])
    # (label, implementation, checkout, input)
    configs: list[tuple[str, str, str | None, str]] = [
        (f"{impl}/{given}", impl, None, given) for impl in impls for given in args.inputs
    ]
    if args.old:
        commit = subprocess.run(
            ["git", "-C", args.old, "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
        configs.append((f"old@{commit}/rows", "auto", args.old, "rows"))  # (an older FIVM may lack apply_columns)
    for order, batch in [(o, b) for o in args.orders for b in args.batches]:
        # the configurations alternate run by run (new, old, new, old, ...), so a change of load hits both
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in configs}
        for _ in range(args.repeats):
            for label, impl, root, given in configs:
                cmd = [sys.executable, __file__, "--seed", str(args.seed), "--order", order, "--input", given]
                cmd += ["--payloads", args.payloads]
                cmd += ["--worker", str(args.postcodes), str(batch), impl, *(["--root", root] if root else [])]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                run = json.loads(out.strip().splitlines()[-1])
                run["load"] = os.getloadavg()[0]
                runs[label].append(run)
        for label, *_ in configs:
            done = runs[label]
            mid = sorted(done, key=lambda r: r["tuples_per_s"])[len(done) // 2]
            mid["implementation"] = label
            mid["repeats"] = [round(r["tuples_per_s"]) for r in done]
            mid["loads"] = [round(r["load"], 2) for r in done]
            mid["load_after"] = os.getloadavg()[0]
            rows.append(mid)
            print(
                f"{label:14s} {order:8s} batch {batch:>6,}: {mid['tuples']:,} tuples, "
                f"{mid['tuples_per_s']:>10,.0f} tuples/s "
                f"(median of {mid['repeats']}, load after each {mid['loads']}), "
                f"CPU time {sorted(r['cpu_tuples_per_s'] for r in done)[len(done) // 2]:,.0f} tuples/s "
                f"(of {[round(r['cpu_tuples_per_s']) for r in done]}), "
                f"peak {mid['peak_mb']:,.0f} MB (before updates {mid['rss_before_mb']:,.0f} MB), "
                f"views {mid['view_bytes'] / 2**20:,.1f} MB, {mid['bytes_per_payload']:.0f} B/payload, "
                f"max rel err {mid['max_rel_err']:.1e}",
                flush=True,
            )
    print()
    print(
        "| implementation/input | order | batch | tuples | tuples/s (median) | runs | vs F-IVM C++ | peak MB "
        "| RSS before MB | views MB | exact | load after |"
    )
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        key = "F-IVM C++ batch 1 (tuples/s)" if r["batch"] == 1 else "F-IVM C++ batch 1000 (tuples/s)"
        native = NATIVE[key]
        print(
            f"| {r['implementation']} | {r['order']} | {r['batch']:,} | {r['tuples']:,} | {r['tuples_per_s']:,.0f} | "
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
