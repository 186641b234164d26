"""Benchmark: q-hierarchical engine vs first-order IVM on the same update stream.

Berkholz et al. Thm 3.2 promises O(1) time per update and O(1) enumeration
delay for q-hierarchical queries, independent of the database size N.  This
benchmark measures both for N from 10^3 upwards on two queries,

- star:       ``Q(x,y) :- R(x,y), S(x,z), T(x)``
- two-level:  ``Q(x,y) :- R(x,y,w), S(x,y), T(x,z)``  (q-tree x -> y -> w, x -> z)

on data whose join degrees grow like sqrt(N) (sqrt(N) values of x), so that
first-order IVM (delta queries evaluated over indexed base relations, result
materialised) pays O(sqrt(N)) per update while the q-hierarchical engine does
not.  The growth exponent is the least-squares slope of log(time) against
log(N); the target is <= 0.1 for both the update time and the delay.

F-IVM is compared when an engine named ``fivm`` is registered and accepts the
query; otherwise the table says so.

Run::

    .venv/bin/python bench/qhier.py            # N = 10^3 .. 10^6 (about 2 minutes)
    .venv/bin/python bench/qhier.py --quick    # N = 10^3 .. 10^5 (seconds)
    .venv/bin/python bench/qhier.py --max-exp 7 --fo-budget 2  # up to 10^7: ~5 min, ~6 GB RSS

First-order IVM runs each stream for a time budget (``--fo-budget`` seconds;
the table notes how many updates it got through) and up to ``--fo-max``
tuples; its initial materialised view is copied from the qhier engine (its own
preprocessing is a full join, too slow beyond 10^5), and after the stream both
results are checked equal.  It prints a table and saves ``bench/out/qhier.png``.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ivm.engines import ENGINES
from ivm.engines.qhier import QHierEngine
from ivm.query import Query, parse
from ivm.updates import Row, Update

OUT = Path(__file__).resolve().parent / "out"


# -- first-order IVM (classical delta queries, materialised result) ------------------------------


class FirstOrderCQ:
    """First-order IVM for a conjunctive query with free variables.

    The result ``{answer: multiplicity}`` is materialised; a single-tuple update
    ``δR = {t -> m}`` evaluates the delta query ``m · Σ Π(other atoms)`` by index
    nested loops over hash indexes of the base relations (one per relation and
    bound-position set), occurrence by occurrence (telescoping for self-joins).
    Update cost O(|δ valuations|), i.e. O(degree) here; enumeration delay O(1).
    """

    def __init__(self, query: Query) -> None:
        self.query = query
        self.result: dict[Row, int] = {}
        self.relations: dict[str, dict[Row, int]] = {r: {} for r in query.relations}
        self.indexes: dict[tuple[str, tuple[int, ...]], dict[Row, dict[Row, int]]] = {}
        self.plans: dict[str, list[tuple[int, list[tuple[int, tuple[int, ...], tuple[str, ...]]]]]] = {}
        for i, atom in enumerate(query.atoms):
            bound = set(atom.terms)
            plan = []
            rest = [j for j in range(len(query.atoms)) if j != i]
            while rest:
                j = max(rest, key=lambda k: len(bound & set(query.atoms[k].terms)))
                rest.remove(j)
                terms = query.atoms[j].terms
                positions = tuple(p for p, t in enumerate(terms) if t in bound)
                self.indexes.setdefault((query.atoms[j].relation, positions), {})
                plan.append((j, positions, terms))
                bound |= set(terms)
            self.plans.setdefault(atom.relation, []).append((i, plan))

    def load(self, tuples: Iterator[Update], result: dict[Row, int]) -> None:
        """Bulk load: base relations and indexes, and the initial result computed elsewhere."""
        for relation, row, m in tuples:
            self._store(relation, row, m)
        self.result = dict(result)

    def apply(self, updates: list[Update]) -> None:
        for relation, row, m in updates:
            for i, plan in self.plans[relation]:
                self._delta(self.query.atoms[i].terms, row, m, plan)
                # later occurrences of a self-joined relation see this one updated (telescoping)
            self._store(relation, row, m)

    def _delta(self, terms: tuple[str, ...], row: Row, m: int, plan: list) -> None:
        val: dict[str, Any] = {}
        for t, v in zip(terms, row, strict=True):
            if val.setdefault(t, v) != v:
                return
        free = self.query.free
        result = self.result

        def extend(k: int, mult: int) -> None:
            if k == len(plan):
                key = tuple(val[v] for v in free)
                total = result.get(key, 0) + mult
                if total:
                    result[key] = total
                else:
                    del result[key]
                return
            j, positions, jterms = plan[k]
            atom = self.query.atoms[j]
            index = self.indexes[(atom.relation, positions)]
            for other, n in index.get(tuple(val[jterms[p]] for p in positions), {}).items():
                added = []
                ok = True
                for t, v in zip(jterms, other, strict=True):
                    if t in val:
                        ok = val[t] == v
                    else:
                        val[t] = v
                        added.append(t)
                    if not ok:
                        break
                if ok:
                    extend(k + 1, mult * n)
                for t in added:
                    del val[t]

        extend(0, m)

    def _store(self, relation: str, row: Row, m: int) -> None:
        rel = self.relations[relation]
        new = rel.get(row, 0) + m
        if new:
            rel[row] = new
        else:
            del rel[row]
        for (name, positions), index in self.indexes.items():
            if name != relation:
                continue
            key = tuple(row[p] for p in positions)
            bucket = index.setdefault(key, {})
            if new:
                bucket[row] = new
            else:
                del bucket[row]
                if not bucket:
                    del index[key]

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        return iter(self.result.items())


# -- workloads -------------------------------------------------------------------------------------


@dataclass
class Workload:
    name: str
    query: str
    # relation -> (initial tuples, fresh-tuple generator or None)
    make: Callable[[int, random.Random], dict[str, tuple[list[Row], Callable[[], Row] | None]]]


def _star(n: int, rng: random.Random) -> dict[str, tuple[list[Row], Callable[[], Row] | None]]:
    d = max(1, math.isqrt(n))
    counter = iter(range(10**12))
    per = max(1, (n - d) // 2)
    return {
        "R": ([(rng.randrange(d), next(counter)) for _ in range(per)], lambda: (rng.randrange(d), next(counter))),
        "S": ([(rng.randrange(d), next(counter)) for _ in range(per)], lambda: (rng.randrange(d), next(counter))),
        "T": ([(x,) for x in range(d)], None),
    }


def _two_level(n: int, rng: random.Random) -> dict[str, tuple[list[Row], Callable[[], Row] | None]]:
    d = max(1, math.isqrt(n))
    ys = 8
    counter = iter(range(10**12))
    per = max(1, (n - d * ys) // 2)
    return {
        "R": (
            [(rng.randrange(d), rng.randrange(ys), next(counter)) for _ in range(per)],
            lambda: (rng.randrange(d), rng.randrange(ys), next(counter)),
        ),
        "S": ([(x, y) for x in range(d) for y in range(ys)], None),
        "T": ([(rng.randrange(d), next(counter)) for _ in range(per)], lambda: (rng.randrange(d), next(counter))),
    }


WORKLOADS = [
    Workload("star", "Q(x,y) :- R(x,y), S(x,z), T(x)", _star),
    Workload("two-level", "Q(x,y) :- R(x,y,w), S(x,y), T(x,z)", _two_level),
]


def make_stream(
    data: dict[str, tuple[list[Row], Callable[[], Row] | None]], k: int, rng: random.Random
) -> list[Update]:
    """k updates, relations chosen uniformly: deletes of present tuples and inserts (fresh or re-inserts)."""
    present = {rel: list(rows) for rel, (rows, _) in data.items()}
    deleted: dict[str, list[Row]] = {rel: [] for rel in data}
    out = []
    names = sorted(data)
    for _ in range(k):
        rel = rng.choice(names)
        fresh = data[rel][1]
        pool = present[rel]
        insert = rng.random() < 0.5 and (fresh is not None or deleted[rel])
        if insert or not pool:
            if deleted[rel] and (fresh is None or rng.random() < 0.5):
                row = deleted[rel].pop(rng.randrange(len(deleted[rel])))
            elif fresh is not None:
                row = fresh()
            else:
                continue
            pool.append(row)
            out.append(Update(rel, row, 1))
        else:
            i = rng.randrange(len(pool))
            pool[i], pool[-1] = pool[-1], pool[i]
            row = pool.pop()
            deleted[rel].append(row)
            out.append(Update(rel, row, -1))
    return out


# -- measurements ----------------------------------------------------------------------------------


@dataclass
class Measurement:
    workload: str
    engine: str
    n: int
    build_s: float = math.nan
    update_us: float = math.nan
    update_delta_us: float = math.nan
    delay_us: float = math.nan
    delay_p99_us: float = math.nan
    first_us: float = math.nan
    answers: int = 0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def measure_delay(iterator: Iterator[Any], limit: int) -> tuple[float, float, float, int]:
    """(mean delay µs, p99 delay µs, time to first answer µs, answers seen) over at most ``limit`` answers."""
    clock = time.perf_counter_ns
    gaps = []
    start = last = clock()
    count = 0
    for _ in iterator:
        now = clock()
        gaps.append(now - last)
        last = now
        count += 1
        if count >= limit:
            break
    if not count:
        return math.nan, math.nan, (clock() - start) / 1e3, 0
    total = last - start
    gaps.sort()
    return total / count / 1e3, gaps[int(0.99 * (len(gaps) - 1))] / 1e3, gaps[0] / 1e3, count


def timed_updates(apply: Callable[[list[Update]], None], stream: list[Update], chunks: int = 5) -> float:
    """Median over ``chunks`` consecutive slices of the stream of the time per update, in µs."""
    size = max(1, len(stream) // chunks)
    rates = []
    for i in range(0, len(stream), size):
        part = stream[i : i + size]
        t0 = time.perf_counter()
        apply(part)
        rates.append((time.perf_counter() - t0) / len(part) * 1e6)
    rates.sort()
    return rates[len(rates) // 2]


def budgeted_updates(apply: Callable[[list[Update]], None], stream: list[Update], budget_s: float) -> tuple[float, int]:
    """Apply a prefix of the stream within about ``budget_s`` seconds: (µs per update, prefix length)."""
    done = 0
    t0 = time.perf_counter()
    while done < len(stream) and (time.perf_counter() - t0) < budget_s:
        apply(stream[done : done + 10])
        done += len(stream[done : done + 10])
    return (time.perf_counter() - t0) / done * 1e6, done


def run_one(
    workload: Workload, n: int, updates: int, enum_limit: int, fo_max: int, fo_budget: float, seed: int
) -> list[Measurement]:
    rng = random.Random(seed)
    data = workload.make(n, rng)
    stream = make_stream(data, updates, random.Random(seed + 1))
    query = parse(workload.query)
    initial = [Update(rel, row, 1) for rel, (rows, _) in data.items() for row in rows]
    n_actual = len(initial)
    rows: list[Measurement] = []

    gc.collect()
    gc.disable()
    try:
        engine = QHierEngine(query)
        t0 = time.perf_counter()
        engine.apply(initial)
        build = time.perf_counter() - t0
        row = Measurement(workload.name, "qhier", n_actual, build_s=build)
        best = min((measure_delay(engine.enumerate(), enum_limit) for _ in range(3)), key=lambda m: m[0])
        row.delay_us, row.delay_p99_us, row.first_us, row.answers = best
        row.update_us = timed_updates(engine.apply, stream)
        # Inverse stream (restores the state), now with answer deltas drained every 100 updates.
        engine.drain_delta()
        inverse = [Update(u.relation, u.row, -u.mult) for u in reversed(stream)]
        t0 = time.perf_counter()
        changes = 0
        for i in range(0, len(inverse), 100):
            engine.apply(inverse[i : i + 100])
            changes += len(engine.drain_delta())
        row.update_delta_us = (time.perf_counter() - t0) / len(inverse) * 1e6
        row.extra["delta_rows_per_update"] = changes / len(inverse)
        row.extra["items"] = engine.stats()["items"]
        rows.append(row)

        if n_actual <= fo_max:
            fo = FirstOrderCQ(query)
            t0 = time.perf_counter()
            fo.load(iter(initial), dict(engine.enumerate()))
            fo_row = Measurement(workload.name, "first-order", n_actual, build_s=time.perf_counter() - t0)
            fo_row.note = "initial view copied from qhier"
            best = min((measure_delay(fo.enumerate(), enum_limit) for _ in range(3)), key=lambda m: m[0])
            fo_row.delay_us, fo_row.delay_p99_us, fo_row.first_us, fo_row.answers = best
            fo_row.update_us, done = budgeted_updates(fo.apply, stream, fo_budget)
            if done < len(stream):
                fo_row.note += f"; {done} of {len(stream)} updates (time budget)"
            engine.apply(stream[:done])  # same state as first-order: cross-check the two results
            if dict(engine.enumerate()) != fo.result:
                raise AssertionError(f"first-order and qhier disagree on {workload.name} at N={n_actual}")
            rows.append(fo_row)
            del fo
        else:
            rows.append(Measurement(workload.name, "first-order", n_actual, note=f"skipped (N > {fo_max})"))

        fivm = ENGINES.get("fivm")
        if fivm is None:
            rows.append(Measurement(workload.name, "F-IVM", n_actual, note="engine not written yet"))
        elif fivm.refuses(query) is not None:
            rows.append(Measurement(workload.name, "F-IVM", n_actual, note=f"refused: {fivm.refuses(query)}"))
        else:
            f = fivm(query)
            t0 = time.perf_counter()
            f.apply(initial)
            f_row = Measurement(workload.name, "F-IVM", n_actual, build_s=time.perf_counter() - t0)
            f_row.delay_us, f_row.delay_p99_us, f_row.first_us, f_row.answers = measure_delay(f.enumerate(), enum_limit)
            t0 = time.perf_counter()
            f.apply(stream)
            f_row.update_us = (time.perf_counter() - t0) / len(stream) * 1e6
            rows.append(f_row)
            del f
        del engine
    finally:
        gc.enable()
        gc.collect()
    return rows


def slope(points: list[tuple[float, float]]) -> float:
    pts = [(math.log(n), math.log(t)) for n, t in points if t == t and t > 0]
    if len(pts) < 2:
        return math.nan
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else math.nan


def _fmt(x: float, digits: int = 2) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 10^3 .. 10^5, fewer updates")
    parser.add_argument("--max-exp", type=float, default=None, help="largest N as a power of ten")
    parser.add_argument("--updates", type=int, default=None, help="updates per stream")
    parser.add_argument("--fo-max", type=float, default=1e6, help="largest N for first-order IVM")
    parser.add_argument("--fo-budget", type=float, default=None, help="seconds of updates for first-order IVM")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    max_exp = args.max_exp if args.max_exp is not None else (5 if args.quick else 6)
    updates = args.updates or (2000 if args.quick else 10000)
    enum_limit = 10000 if args.quick else 50000
    if args.fo_budget is None:
        args.fo_budget = 1.0 if args.quick else 4.0
    exps = [3 + 0.5 * i for i in range(int((max_exp - 3) * 2) + 1)]
    sizes = [round(10**e) for e in exps]

    results: list[Measurement] = []
    for workload in WORKLOADS:
        for n in sizes:
            rows = run_one(workload, n, updates, enum_limit, int(args.fo_max), args.fo_budget, args.seed)
            for r in rows:
                print(
                    f"  {r.workload:9} {r.engine:11} N={r.n:>9}  update {_fmt(r.update_us):>8} µs"
                    f"  delay {_fmt(r.delay_us, 3):>7} µs  {r.note}",
                    file=sys.stderr,
                    flush=True,
                )
            results.extend(rows)

    header = (
        f"{'query':9} {'engine':11} {'N':>9} {'build s':>8} {'update µs':>10} {'upd+delta µs':>12} "
        f"{'Δrows/upd':>9} {'delay µs':>9} {'p99 µs':>7} {'answers':>8}  note"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.workload:9} {r.engine:11} {r.n:>9} {_fmt(r.build_s):>8} {_fmt(r.update_us):>10} "
            f"{_fmt(r.update_delta_us):>12} {_fmt(r.extra.get('delta_rows_per_update', math.nan), 1):>9} "
            f"{_fmt(r.delay_us, 3):>9} {_fmt(r.delay_p99_us, 1):>7} "
            f"{r.answers:>8}  {r.note}"
        )
    print()
    print("growth exponents (slope of log time vs log N; target <= 0.1 for qhier):")
    for workload in WORKLOADS:
        for engine in ("qhier", "first-order", "F-IVM"):
            sel = [r for r in results if r.workload == workload.name and r.engine == engine]
            up = slope([(r.n, r.update_us) for r in sel])
            de = slope([(r.n, r.delay_us) for r in sel])
            if up == up or de == de:
                print(f"  {workload.name:9} {engine:11} update {_fmt(up, 3):>6}   delay {_fmt(de, 3):>6}")
    _plot(results)
    return 0


def _plot(results: list[Measurement]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, attr, title in ((axes[0], "update_us", "time per update"), (axes[1], "delay_us", "enumeration delay")):
        for workload in WORKLOADS:
            for engine, style in (("qhier", "-o"), ("first-order", "--s"), ("F-IVM", ":^")):
                sel = [r for r in results if r.workload == workload.name and r.engine == engine]
                pts = [(r.n, getattr(r, attr)) for r in sel if getattr(r, attr) == getattr(r, attr)]
                if pts:
                    ax.plot(*zip(*pts, strict=True), style, label=f"{engine} / {workload.name}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N (tuples)")
        ax.set_ylabel("µs")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("q-hierarchical engine (Berkholz et al. Thm 3.2) vs first-order IVM")
    fig.tight_layout()
    path = OUT / "qhier.png"
    fig.savefig(path, dpi=120)
    print(f"plot saved to {path}")


if __name__ == "__main__":
    raise SystemExit(main())
