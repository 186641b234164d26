"""Benchmark: F-IVM vs first-order IVM vs DuckDB re-evaluation (F-IVM §7, Fig. 20 and Fig. 28 in shape).

Two workloads, each an update stream with inserts and deletes processed in
batches of 1 .. 10^4 tuples; throughput in updates/s (higher is better):

(a) Housing-like star schema (seeded generator below): six relations House,
    Shop, Institution, Restaurant, Demographics, Transport joined on postcode,
    26 continuous features; the query is the covariance matrix of degree 26
    (``COVAR(f1..f26)``: 1 + 26 + 351 = 378 scalar aggregates).
(b) TPC-H (``tpchgen-cli``, scale ``--sf``): customer ⋈ orders ⋈ lineitem,
    ``SUM(l_extendedprice · l_discount)`` grouped by ``c_nationkey`` (cents and
    percent, exact integers).

Systems: F-IVM (``engine="fivm"``, one view tree, covariance ring, float64
payloads), first-order IVM (``first_order_delta``: one delta query per scalar
aggregate, the same Python), and DuckDB re-evaluating the query after each
batch over tables with a multiplicity column.  Each (system, batch size) cell
runs the same stream from an empty state for at most ``--budget`` seconds; the
table reports updates/s, how many updates were processed, the number of
materialized views, and the F-IVM / first-order speedup.  The results of the
three systems are checked equal on a common prefix.

Run::

    .venv/bin/python bench/fivm.py            # full: batch sizes 1..10^4, ~10 minutes on 2 cores
    .venv/bin/python bench/fivm.py --quick    # a minute or less

Saves ``bench/out/fivm.png`` and ``bench/out/fivm.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import combinations_with_replacement
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb
import numpy as np

from ivm.engines.first_order.general import FirstOrderDelta
from ivm.engines.fivm import FIVM
from ivm.query import Query, parse
from ivm.updates import Update

OUT = Path(__file__).resolve().parent / "out"

HOUSING_FEATURES = {
    "House": 8,
    "Shop": 4,
    "Institution": 3,
    "Restaurant": 3,
    "Demographics": 5,
    "Transport": 3,
}


# -- workloads ---------------------------------------------------------------------------------------


def housing(postcodes: int, houses_per_postcode: int, seed: int) -> tuple[Query, list[Update]]:
    """A seeded Housing-like star: every relation keyed by postcode, 26 float features in all.

    House has ``houses_per_postcode`` tuples per postcode on average, the other
    relations 1-3.  The stream interleaves the relations round-robin (as in the
    paper's protocol) and deletes 10% of the inserted tuples later in the stream.
    """
    rng = random.Random(seed)
    features: dict[str, list[str]] = {}
    n = 0
    for rel, k in HOUSING_FEATURES.items():
        features[rel] = [f"f{n + i + 1}" for i in range(k)]
        n += k
    atoms = ", ".join(f"{rel}(pc, {', '.join(vs)})" for rel, vs in features.items())
    all_vars = [v for vs in features.values() for v in vs]
    query = parse(f"Q(COVAR({', '.join(all_vars)})) :- {atoms}")
    per_rel: dict[str, list[tuple]] = {rel: [] for rel in features}
    for pc in range(postcodes):
        for rel, vs in features.items():
            count = rng.randint(1, 2 * houses_per_postcode - 1) if rel == "House" else rng.randint(1, 3)
            for _ in range(count):
                per_rel[rel].append((pc, *(round(rng.uniform(0, 100), 2) for _ in vs)))
    for rows in per_rel.values():
        rng.shuffle(rows)
    stream: list[Update] = []
    inserted: list[Update] = []
    iters = {rel: iter(rows) for rel, rows in per_rel.items()}
    live = set(iters)
    while live:
        for rel in list(live):
            row = next(iters[rel], None)
            if row is None:
                live.discard(rel)
                continue
            u = Update(rel, row, 1)
            stream.append(u)
            inserted.append(u)
            if rng.random() < 0.1:
                victim = inserted.pop(rng.randrange(len(inserted)))
                stream.append(Update(victim.relation, victim.row, -1))
    return query, stream


def tpch(sf: float, seed: int, workdir: Path) -> tuple[Query, list[Update]]:
    """customer ⋈ orders ⋈ lineitem from tpchgen-cli at scale ``sf``; 15% of the tuples deleted later."""
    exe = shutil.which("tpchgen-cli") or str(Path(sys.executable).parent / "tpchgen-cli")
    subprocess.run(
        [exe, "-s", str(sf), "--tables=customer,orders,lineitem", f"--output-dir={workdir}"],
        check=True,
        capture_output=True,
    )

    def read(name: str) -> list[list[str]]:
        with open(workdir / f"{name}.tbl") as f:
            return [line.rstrip("\n").split("|") for line in f]

    customer = [("C", (int(r[0]), int(r[3]))) for r in read("customer")]
    orders = [("O", (int(r[0]), int(r[1]), int(r[7]))) for r in read("orders")]
    lineitem = [
        ("L", (int(r[0]), int(r[3]), round(float(r[5]) * 100), round(float(r[6]) * 100))) for r in read("lineitem")
    ]
    query = parse("Q(nation, SUM(price * disc)) :- C(cust, nation), O(okey, cust, prio), L(okey, line, price, disc)")
    rng = random.Random(seed)
    stream: list[Update] = []
    inserted: list[Update] = []
    # round-robin in the variable order's top-down order: customers, then their orders, then lineitems
    sources = [iter(customer), iter(orders), iter(lineitem)]
    ratios = [1, 10, 40]
    live = [True, True, True]
    while any(live):
        for i, src in enumerate(sources):
            for _ in range(ratios[i]):
                item = next(src, None)
                if item is None:
                    live[i] = False
                    break
                u = Update(item[0], item[1], 1)
                stream.append(u)
                inserted.append(u)
                if rng.random() < 0.15:
                    victim = inserted.pop(rng.randrange(len(inserted)))
                    stream.append(Update(victim.relation, victim.row, -1))
    return query, stream


# -- systems -----------------------------------------------------------------------------------------


class DuckDBReeval:
    """DuckDB re-evaluating the query after every batch over Z-relation tables (column ``m``)."""

    def __init__(self, query: Query) -> None:
        self.query = query
        self.con = duckdb.connect()
        self.con.execute("SET threads TO 1")
        for rel, arity in query.relations.items():
            cols = ", ".join(f"c{p} DOUBLE" for p in range(arity))
            self.con.execute(f"CREATE TABLE {rel} ({cols}, m BIGINT)")
        first: dict[str, str] = {}
        where = []
        for i, atom in enumerate(query.atoms):
            for p, v in enumerate(atom.terms):
                col = f"t{i}.c{p}"
                if v in first:
                    where.append(f"{first[v]} = {col}")
                else:
                    first[v] = col
        mult = " * ".join(f"t{i}.m" for i in range(len(query.atoms)))
        agg = query.aggregate
        exprs = [f"SUM({mult})"]
        if agg.kind == "sum":
            exprs.append(f"SUM({mult}{''.join(' * ' + first[v] for v in agg.variables)})")
        elif agg.kind == "covariance":
            vs = agg.variables
            exprs += [f"SUM({mult} * {first[v]})" for v in vs]
            exprs += [f"SUM({mult} * {first[vs[i]]} * {first[vs[j]]})" for i, j in self._pairs()]
        group = [first[v] for v in query.free]
        self.sql = f"SELECT {', '.join([*group, *exprs])} FROM " + ", ".join(
            f"{a.relation} t{i}" for i, a in enumerate(query.atoms)
        )
        self.sql += " WHERE " + " AND ".join(where) if where else ""
        self.sql += f" GROUP BY {', '.join(group)}" if group else ""
        self.last: list[tuple] = []

    def _pairs(self) -> list[tuple[int, int]]:
        return list(combinations_with_replacement(range(len(self.query.aggregate.variables)), 2))

    def apply(self, batch: list[Update]) -> None:
        by_rel: dict[str, list[tuple]] = {}
        for rel, row, m in batch:
            by_rel.setdefault(rel, []).append((*row, m))
        for rel, rows in by_rel.items():
            marks = ", ".join("?" * len(rows[0]))
            self.con.executemany(f"INSERT INTO {rel} VALUES ({marks})", rows)
        self.last = self.con.execute(self.sql).fetchall()

    def stats(self) -> dict[str, int]:
        return {"materialized_views": 0}


def make_system(name: str, query: Query) -> Any:
    if name == "F-IVM":
        return FIVM(query, exact=False) if query.aggregate.kind == "covariance" else FIVM(query)
    if name == "1-IVM":
        return FirstOrderDelta(query)
    return DuckDBReeval(query)


def run_cell(name: str, query: Query, stream: list[Update], batch: int, budget: float) -> dict[str, Any]:
    system = make_system(name, query)
    done = 0
    start = time.perf_counter()
    while done < len(stream) and time.perf_counter() - start < budget:
        chunk = stream[done : done + batch]
        system.apply(chunk)
        done += len(chunk)
    elapsed = time.perf_counter() - start
    return {
        "system": name,
        "batch": batch,
        "updates": done,
        "seconds": elapsed,
        "throughput": done / elapsed if elapsed else float("inf"),
        "views": system.stats()["materialized_views"],
        "engine": system,
    }


def check_agree(query: Query, stream: list[Update]) -> None:
    """The three systems give the same result on a prefix (floats: relative 1e-6)."""
    systems = {n: make_system(n, query) for n in ("F-IVM", "1-IVM", "DuckDB")}
    for s in systems.values():
        s.apply(stream)
    duck = systems["DuckDB"].last
    fivm, first = systems["F-IVM"].result(), systems["1-IVM"].result()
    if query.aggregate.kind == "covariance":
        m = len(query.aggregate.variables)
        assert np.allclose(fivm.Q.astype(float), first.Q.astype(float), rtol=1e-9)
        row = [x or 0 for x in duck[0]]
        assert fivm.c == row[0], (fivm.c, row[0])
        assert np.allclose(fivm.s.astype(float), np.array(row[1 : 1 + m], dtype=float), rtol=1e-6)
    else:
        expected = {(int(r[0]),): int(r[2]) for r in duck if r[2]}
        assert fivm == first == expected, "systems disagree"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small data, batch sizes 1, 100, 1000, ~1 minute")
    ap.add_argument("--budget", type=float, default=None, help="seconds per (system, batch size) cell")
    ap.add_argument("--sf", type=float, default=None, help="TPC-H scale factor")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    quick = args.quick
    budget = args.budget or (1.5 if quick else 12.0)
    sf = args.sf or (0.002 if quick else 0.01)
    batches = [1, 100, 1000] if quick else [1, 10, 100, 1000, 10000]
    OUT.mkdir(exist_ok=True)
    workloads: dict[str, tuple[Query, list[Update]]] = {}
    workloads["housing (covariance, degree 26)"] = housing(300 if quick else 2500, 4, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        workloads["tpch (SUM group-by, C-O-L)"] = tpch(sf, args.seed, Path(tmp))
    rows: list[dict[str, Any]] = []
    for label, (query, stream) in workloads.items():
        check_agree(query, stream[:1500])
        print(f"\n== {label}: {len(stream)} updates ({sum(u.mult < 0 for u in stream)} deletes)", flush=True)
        print(f"{'batch':>7} {'system':>8} {'updates/s':>12} {'processed':>10} {'views':>6}")
        for batch in batches:
            cells = {}
            for name in ("F-IVM", "1-IVM", "DuckDB"):
                cell = run_cell(name, query, stream, batch, budget)
                cell.pop("engine")
                cell["workload"] = label
                cells[name] = cell
                rows.append(cell)
                print(
                    f"{batch:>7} {name:>8} {cell['throughput']:>12,.0f} {cell['updates']:>10} {cell['views']:>6}",
                    flush=True,
                )
            speed = cells["F-IVM"]["throughput"] / cells["1-IVM"]["throughput"]
            duck = cells["F-IVM"]["throughput"] / cells["DuckDB"]["throughput"]
            print(f"{'':>7} F-IVM/1-IVM = {speed:,.1f}x   F-IVM/DuckDB = {duck:,.1f}x", flush=True)
    (OUT / "fivm.json").write_text(json.dumps(rows, indent=1))
    plot(rows, OUT / "fivm.png")
    print(f"\nsaved {OUT / 'fivm.png'} and {OUT / 'fivm.json'}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(labels), figsize=(6 * len(labels), 4.2))
    for ax, label in zip(np.atleast_1d(axes), labels, strict=True):
        for name, marker in (("F-IVM", "o"), ("1-IVM", "s"), ("DuckDB", "^")):
            pts = [(r["batch"], r["throughput"]) for r in rows if r["workload"] == label and r["system"] == name]
            views = next(r["views"] for r in rows if r["workload"] == label and r["system"] == name)
            ax.plot(*zip(*pts, strict=True), marker=marker, label=f"{name} ({views} views)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch size (tuples)")
        ax.set_ylabel("throughput (updates/s)")
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


_: Callable[..., Any] = main

if __name__ == "__main__":
    main()
