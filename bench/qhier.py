"""Benchmark: the q-hierarchical engine's implementations vs first-order IVM, N = 10^4 .. 10^7.

Berkholz et al. Thm 3.2 promises O(1) time per update and O(1) enumeration
delay for q-hierarchical queries, independent of the database size N.  This
benchmark measures both, with the state's memory, on two queries,

- star:       ``Q(x,y) :- R(x,y), S(x,z), T(x)``
- two-level:  ``Q(x,y) :- R(x,y,w), S(x,y), T(x,z)``  (q-tree x -> y -> w, x -> z)

on data whose join degrees grow like sqrt(N) (sqrt(N) values of x), so that
first-order IVM (delta queries over indexed base relations, result
materialised) pays O(sqrt(N)) per update while the q-hierarchical engine does
not.  Rows: ``qhier/compact`` (typed-array state, :mod:`ivm.engines.qhier.compact`),
``qhier/python`` (the reference), ``first-order`` and ``F-IVM`` (when registered
and accepting the query).

Every (query, engine, N) runs in a fresh process (no state, allocator or
collector history shared between sizes), with the cyclic collector ON as in
production.  Per row: build time; the time per update applied one at a time
(``apply([u])``) over ``--repeats`` fresh streams of other random tuples, each
cut in slices of ``--slice`` updates (200) timed separately, and in batches of
1,000 (one batch a slice); each stream's inverse, untimed, restores the state.
The updates are stored compactly (:class:`Stream`: relation, id, multiplicity
arrays, the same for every N) and each slice's update objects are made just
before it is timed, so what the harness costs per update does not grow with N.
Columns: the median over slices in wall-clock time (``upd µs``, ``b1000 µs``) and
in process CPU time (``upd cpu``), and the 10th percentile of the CPU time
(``upd p10``, ``b1k p10``): on a shared machine a context switch to another
process evicts the caches as well as taking the core, the median includes
that and the 10th percentile of short slices mostly does not; the same
single-update loop with a no-op engine in the same process (``harness``,
``harn p10``: unpack each update, hash its row; the part of the time that is not
the engine's, shown beside it, never subtracted); the time per update with
answer deltas drained every 100 updates; the enumeration delay; the number of
generation-2 collections (and of all collections) during the update passes and
the seconds spent in them; the peak RSS of the process before the answer-delta
pass (whose first ``drain_delta()`` lists the whole result); and
``bytes_per_tuple`` from ``stats()``.  The note says how many batches of 1,000
the engine folded into Z-sets (``consolidate="auto"``: at small N the stream
repeats T's few tuples often enough).  The initial tuples are generated in chunks
from their ids (no list of N Python tuples), so the peak RSS is the engine's.
The growth exponent is the least-squares slope of log(time) against log(N); the
target is at most 0.05 for the compact engine's update time.

On a shared machine one process can run 1.5-2x slower than the next through all
its columns, the harness alone included (a slow spell of the host, or where its
memory landed), which one process per size turns into a bent curve.
``--rounds R`` measures every row in R fresh processes, in R interleaved rounds
(odd rounds walk the sizes backwards), and reports per column the median over
the processes, the range of their update times, and the exponent of each round
alone beside the exponent of the medians.

Run::

    .venv/bin/python bench/qhier.py                      # N = 10^4 .. 10^6, both implementations
    .venv/bin/python bench/qhier.py --quick              # N = 10^4 .. 10^5
    .venv/bin/python bench/qhier.py --max-exp 7 --python-max-exp 6   # compact to 10^7 (~1.2 GB), python to 10^6
    .venv/bin/python bench/qhier.py --max-exp 7 --implementations compact --fo-max 0 --rounds 5   # medians of 5

It prints the command, the table, the exponents and the load average after each
query, and saves ``bench/out/qhier.png``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ivm.engines import ENGINES
from ivm.engines.qhier.engine import QHierEngine
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
#
# A relation's rows are functions of an integer id (x = a hash of the id modulo sqrt(N)), so the
# initial load is generated chunk by chunk and the stream keeps the present ids in an int64 array.


def _mix(i: int, salt: int) -> int:
    """A fixed pseudo-random 61-bit value of ``i`` (splitmix-style), the same in every process."""
    z = (i * 0x9E3779B97F4A7C15 + salt) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) >> 3


@dataclass
class Relation:
    """Rows ``row(id)`` for ids ``[0, initial)``; ``fresh`` says whether new ids may be inserted."""

    initial: int
    row: Callable[[int], Row]
    fresh: bool


@dataclass
class Workload:
    name: str
    query: str
    make: Callable[[int], dict[str, Relation]]


def _star(n: int) -> dict[str, Relation]:
    d = max(1, math.isqrt(n))
    per = max(1, (n - d) // 2)
    return {
        "R": Relation(per, lambda i: (_mix(i, 1) % d, i), True),
        "S": Relation(per, lambda i: (_mix(i, 2) % d, i), True),
        "T": Relation(d, lambda i: (i,), False),
    }


def _two_level(n: int) -> dict[str, Relation]:
    d = max(1, math.isqrt(n))
    ys = 8
    per = max(1, (n - d * ys) // 2)
    return {
        "R": Relation(per, lambda i: (_mix(i, 3) % d, _mix(i, 4) % ys, i), True),
        "S": Relation(d * ys, lambda i: (i // ys, i % ys), False),
        "T": Relation(per, lambda i: (_mix(i, 5) % d, i), True),
    }


WORKLOADS = {
    "star": Workload("star", "Q(x,y) :- R(x,y), S(x,z), T(x)", _star),
    "two-level": Workload("two-level", "Q(x,y) :- R(x,y,w), S(x,y), T(x,z)", _two_level),
}


def initial_updates(data: dict[str, Relation], chunk: int = 100_000) -> Iterator[list[Update]]:
    """The initial database as insert batches of at most ``chunk`` tuples."""
    for rel, spec in sorted(data.items()):
        for start in range(0, spec.initial, chunk):
            yield [Update(rel, spec.row(i), 1) for i in range(start, min(spec.initial, start + chunk))]


@dataclass
class Stream:
    """A stream of updates stored compactly: per update the relation's index in ``names``, the tuple's id
    and the multiplicity (typed arrays, 10 bytes an update, whatever N).

    :meth:`updates` materialises a slice as :class:`~ivm.updates.Update` objects.  The timed loops
    materialise each slice just before timing it, so the updates the engine reads are freshly allocated
    objects, laid out the same way for every N (as a consumer's freshly decoded records are): a list of
    Python updates built long before, with the generation's own work (the random choice among N present
    ids) in between, would cost more cache misses per update at large N, and that growth would be the
    harness's, not the engine's.
    """

    names: list[str]
    rel: array
    ids: array
    mult: array

    def __len__(self) -> int:
        return len(self.ids)

    def updates(self, data: dict[str, Relation], lo: int = 0, hi: int | None = None) -> list[Update]:
        """Updates ``lo .. hi`` as objects."""
        names, rel, ids, mult = self.names, self.rel, self.ids, self.mult
        return [
            Update(names[rel[j]], data[names[rel[j]]].row(ids[j]), mult[j])
            for j in range(lo, len(self) if hi is None else hi)
        ]

    def inverse(self, data: dict[str, Relation]) -> list[Update]:
        """The updates that undo the stream (in reverse order, multiplicities negated)."""
        return [Update(u.relation, u.row, -u.mult) for u in reversed(self.updates(data))]


def make_stream(data: dict[str, Relation], k: int, rng: random.Random) -> Stream:
    """k updates, relations chosen uniformly: deletes of present tuples and inserts (fresh or re-inserts)."""
    present = {rel: array("q", range(spec.initial)) for rel, spec in data.items()}
    deleted: dict[str, list[int]] = {rel: [] for rel in data}
    next_id = {rel: 10**12 for rel in data}
    names = sorted(data)
    out = Stream(names, array("b"), array("q"), array("b"))
    for _ in range(k):
        rel = rng.choice(names)
        spec = data[rel]
        pool = present[rel]
        insert = rng.random() < 0.5 and (spec.fresh or deleted[rel])
        if insert or not pool:
            if deleted[rel] and (not spec.fresh or rng.random() < 0.5):
                i = deleted[rel].pop(rng.randrange(len(deleted[rel])))
            elif spec.fresh:
                i = next_id[rel]
                next_id[rel] += 1
            else:
                continue
            pool.append(i)
            m = 1
        else:
            j = rng.randrange(len(pool))
            pool[j], pool[-1] = pool[-1], pool[j]
            i = pool.pop()
            deleted[rel].append(i)
            m = -1
        out.rel.append(names.index(rel))
        out.ids.append(i)
        out.mult.append(m)
    return out


# -- measurements (one process per row) ------------------------------------------------------------


@dataclass
class Measurement:
    workload: str
    engine: str
    n: int
    build_s: float = math.nan
    update_us: float = math.nan
    update_cpu_us: float = math.nan
    update_p10_us: float = math.nan
    harness_us: float = math.nan
    batch_us: float = math.nan
    batch_p10_us: float = math.nan
    harness_p10_us: float = math.nan
    update_delta_us: float = math.nan
    delay_us: float = math.nan
    delay_p99_us: float = math.nan
    answers: int = 0
    gen2: int = 0
    collections: int = 0
    gc_s: float = 0.0
    peak_rss_mb: float = math.nan
    bytes_per_tuple: float = math.nan
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def measure_delay(iterator: Iterator[Any], limit: int) -> tuple[float, float, int]:
    """(mean delay µs, p99 delay µs, answers seen) over at most ``limit`` answers."""
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
        return math.nan, math.nan, 0
    gaps.sort()
    return (last - start) / count / 1e3, gaps[int(0.99 * (len(gaps) - 1))] / 1e3, count


class GcWatch:
    """Counts the cyclic collector's runs (all generations, and generation 2) and their seconds."""

    def __init__(self) -> None:
        self.collections = 0
        self.gen2 = 0
        self.seconds = 0.0
        self._t0 = 0.0
        self.on = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.collections += 1
            self.gen2 += info["generation"] == 2
            self.seconds += time.perf_counter() - self._t0


def _slices(stream: Stream, size: int) -> list[tuple[int, int]]:
    return [(i, min(len(stream), i + size)) for i in range(0, len(stream), size)]


def _p10(xs: list[float]) -> float:
    """The 10th percentile: the slices least disturbed by other processes on a shared machine."""
    xs = sorted(xs)
    return xs[(len(xs) - 1) // 10]


def time_passes(
    engine: Any, data: dict[str, Relation], args: argparse.Namespace, salt: int, batch: int, watch: GcWatch
) -> tuple[float, float, float, int]:
    """µs per update over ``args.repeats`` fresh streams (each of other random tuples, so no pass finds
    the items it touches still in cache from an earlier one), each cut in slices of ``args.slice``
    updates (at least one batch) timed separately, each slice's update objects made just before it is
    timed (:class:`Stream`); each stream's inverse, untimed, restores the state.  ``batch`` updates per
    ``apply`` call.  Returns the median over slices of the wall-clock time and of the process CPU time
    (the latter is not inflated while other processes hold the cores), and the 10th percentile of the
    CPU time (slices short enough that some run between two context switches: a switch to another
    process also evicts the caches, which a median on a loaded machine includes); and the number of
    timed ``apply`` calls the engine folded into a Z-set first."""
    rates, cpu = [], []
    folded = 0
    for r in range(args.repeats):
        stream = make_stream(data, args.updates, random.Random(args.seed + salt + r))
        for lo, hi in _slices(stream, max(batch, args.slice)):
            part = stream.updates(data, lo, hi)
            calls = [part[i : i + batch] for i in range(0, len(part), batch)]
            before = engine.stats()["batches_folded"]
            watch.on = True
            t0, c0 = time.perf_counter(), time.process_time()
            for call in calls:
                engine.apply(call)
            rates.append((time.perf_counter() - t0) / len(part) * 1e6)
            cpu.append((time.process_time() - c0) / len(part) * 1e6)
            watch.on = False
            folded += engine.stats()["batches_folded"] - before
        engine.apply(stream.inverse(data))
    return statistics.median(rates), statistics.median(cpu), _p10(cpu), folded


def _anon_huge_mb() -> float:
    """MB of this process's memory on transparent huge pages (Linux; NaN elsewhere)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def _no_op(batch: list[Update]) -> None:
    """What the harness costs per update besides the engine: unpack each update and hash its row."""
    for _relation, row, _mult in batch:
        hash(row)


def time_harness(data: dict[str, Relation], args: argparse.Namespace, salt: int) -> tuple[float, float]:
    """µs per update of the single-update loop with :func:`_no_op` as the engine, over fresh streams in
    the same process (so with the same heap), sliced and made just before timing as in
    :func:`time_passes`: the part of the per-update time that is not the engine's.  The median
    wall-clock time and the 10th percentile of the CPU time."""
    rates, cpu = [], []
    for r in range(args.repeats):
        stream = make_stream(data, args.updates, random.Random(args.seed + salt + r))
        for lo, hi in _slices(stream, args.slice):
            part = stream.updates(data, lo, hi)
            calls = [part[i : i + 1] for i in range(len(part))]
            t0, c0 = time.perf_counter(), time.process_time()
            for call in calls:
                _no_op(call)
            rates.append((time.perf_counter() - t0) / len(part) * 1e6)
            cpu.append((time.process_time() - c0) / len(part) * 1e6)
    return statistics.median(rates), _p10(cpu)


def run_child(workload_name: str, n: int, engine_name: str, args: argparse.Namespace) -> Measurement:
    """One row, measured in this (fresh) process."""
    workload = WORKLOADS[workload_name]
    data = workload.make(n)
    n_actual = sum(spec.initial for spec in data.values())
    stream = make_stream(data, args.updates, random.Random(args.seed)).updates(data)
    query = parse(workload.query)
    watch = GcWatch()
    gc.callbacks.append(watch)
    row = Measurement(workload.name, engine_name, n_actual)
    if engine_name.startswith("qhier/"):
        if args.no_huge_pages:
            from ivm.engines.qhier import _qhier_kernel

            _qhier_kernel.huge_pages(False)
        engine: Any = QHierEngine(query, implementation=engine_name.split("/")[1])  # type: ignore[arg-type]
        t0 = time.perf_counter()
        for batch in initial_updates(data):
            engine.apply(batch)
        row.build_s = time.perf_counter() - t0
        row.delay_us, row.delay_p99_us, row.answers = min(
            (measure_delay(engine.enumerate(), args.enum_limit) for _ in range(3)), key=lambda m: m[0]
        )
        row.update_us, row.update_cpu_us, row.update_p10_us, _ = time_passes(engine, data, args, 100, 1, watch)
        row.batch_us, _, row.batch_p10_us, folded = time_passes(engine, data, args, 200, 1000, watch)
        if folded:  # consolidate="auto" folds a batch whose duplicate rate is >= 0.25 (T's few tuples repeat)
            row.note = f"{folded} of {args.repeats * math.ceil(args.updates / 1000)} b1000 batches folded"
        row.harness_us, row.harness_p10_us = time_harness(data, args, 300)
        # before the answer-delta phase: its first drain_delta() lists the whole result (by design)
        row.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        stats = engine.stats()
        row.bytes_per_tuple = stats["bytes_per_tuple"]
        row.extra["anon_huge_mb"] = _anon_huge_mb()
        row.extra["state_mb"] = stats["state_bytes"] / 2**20
        row.extra["items"] = stats["items"]
        engine.drain_delta()
        changes = 0
        t0 = time.perf_counter()
        for i in range(0, len(stream), 100):
            engine.apply(stream[i : i + 100])
            changes += len(engine.drain_delta())
        row.update_delta_us = (time.perf_counter() - t0) / len(stream) * 1e6
        row.extra["delta_rows_per_update"] = changes / len(stream)
    elif engine_name == "first-order":
        fo = FirstOrderCQ(query)
        oracle = QHierEngine(query)
        for batch in initial_updates(data):
            oracle.apply(batch)
        t0 = time.perf_counter()
        fo.load((u for batch in initial_updates(data) for u in batch), dict(oracle.enumerate()))
        row.build_s = time.perf_counter() - t0
        row.note = "initial view copied from qhier"
        row.delay_us, row.delay_p99_us, row.answers = measure_delay(fo.enumerate(), args.enum_limit)
        watch.on = True
        done = 0
        t0 = time.perf_counter()
        while done < len(stream) and time.perf_counter() - t0 < args.fo_budget:
            fo.apply(stream[done : done + 10])
            done += len(stream[done : done + 10])
        row.update_us = (time.perf_counter() - t0) / done * 1e6
        watch.on = False
        if done < len(stream):
            row.note += f"; {done} of {len(stream)} updates (time budget)"
        oracle.apply(stream[:done])
        if dict(oracle.enumerate()) != fo.result:
            raise AssertionError(f"first-order and qhier disagree on {workload.name} at N={n_actual}")
    else:  # F-IVM
        fivm = ENGINES["fivm"]
        f = fivm(query)
        t0 = time.perf_counter()
        for batch in initial_updates(data):
            f.apply(batch)
        row.build_s = time.perf_counter() - t0
        row.delay_us, row.delay_p99_us, row.answers = measure_delay(f.enumerate(), args.enum_limit)
        watch.on = True
        t0 = time.perf_counter()
        for u in stream:
            f.apply([u])
        row.update_us = (time.perf_counter() - t0) / len(stream) * 1e6
        watch.on = False
    row.gen2, row.collections, row.gc_s = watch.gen2, watch.collections, watch.seconds
    if row.peak_rss_mb != row.peak_rss_mb:
        row.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def run_fresh(workload: str, n: int, engine: str, args: argparse.Namespace) -> Measurement:
    """Run one row in a new interpreter and read its JSON line."""
    cmd = [sys.executable, __file__, "--child", workload, str(n), engine]
    for opt in ("updates", "repeats", "slice", "enum_limit", "fo_budget", "seed"):
        cmd += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
    if args.no_huge_pages:
        cmd.append("--no-huge-pages")
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode:
        sys.stderr.write(out.stderr)
        return Measurement(workload, engine, n, note=f"failed (exit {out.returncode})")
    fields = json.loads(out.stdout.strip().splitlines()[-1])
    return Measurement(**fields)


#: columns whose median over the rounds' processes a combined row reports: every float column but the
#: collector's seconds (a combined row keeps the most any process saw)
_MEDIAN_FIELDS = tuple(f.name for f in fields(Measurement) if f.type == "float" and f.name != "gc_s")


def combine(rows: list[Measurement]) -> Measurement:
    """One row from the same (query, engine, N) measured in several fresh processes: the median of each
    timing, memory and size column (a process that ran through a slow spell of a shared machine moves
    the median by at most one place), the most collections any process saw (a collection on the hot
    path is never averaged away), the per-process update times in ``extra["update_us_rounds"]``."""
    if len(rows) == 1:
        row = rows[0]
        row.extra["update_us_rounds"] = [row.update_us]
        return row
    ok = [r for r in rows if r.update_us == r.update_us] or rows
    out = Measurement(ok[0].workload, ok[0].engine, ok[0].n, answers=ok[0].answers, note=ok[0].note)
    for name in _MEDIAN_FIELDS:
        values = [getattr(r, name) for r in ok if getattr(r, name) == getattr(r, name)]
        setattr(out, name, statistics.median(values) if values else math.nan)
    out.gen2 = max(r.gen2 for r in ok)
    out.collections = max(r.collections for r in ok)
    out.gc_s = max(r.gc_s for r in ok)
    out.extra = dict(ok[0].extra)
    huge = [r.extra.get("anon_huge_mb", math.nan) for r in ok]
    out.extra["anon_huge_mb"] = statistics.median(huge)
    out.extra["update_us_rounds"] = [r.update_us for r in rows]
    failed = len(rows) - len([r for r in rows if r.update_us == r.update_us])
    if failed:
        out.note = (out.note + "; " if out.note else "") + f"{failed} of {len(rows)} processes failed"
    return out


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


def _thp() -> str:
    """The kernel's transparent huge page modes (``enabled``, ``defrag``); the compact state asks for them
    with madvise, which takes effect under ``always`` or ``madvise``."""
    try:
        modes = [Path(f"/sys/kernel/mm/transparent_hugepage/{k}").read_text().strip() for k in ("enabled", "defrag")]
    except OSError:
        return "unknown (not Linux, or no /sys)"
    return f"enabled {modes[0]}, defrag {modes[1]}"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _print_row(r: Measurement, file: Any = sys.stdout) -> None:
    note = r.note
    rounds = [x for x in r.extra.get("update_us_rounds", []) if x == x]
    if len(rounds) > 1:
        note = f"upd range {min(rounds):.3f}-{max(rounds):.3f}" + ("; " + note if note else "")
    print(
        f"{r.workload:9} {r.engine:13} {r.n:>9} {_fmt(r.build_s):>8} {_fmt(r.update_us, 3):>8} "
        f"{_fmt(r.update_cpu_us, 3):>8} {_fmt(r.update_p10_us, 3):>8} {_fmt(r.harness_us, 3):>8} "
        f"{_fmt(r.harness_p10_us, 3):>8} {_fmt(r.batch_us, 3):>8} {_fmt(r.batch_p10_us, 3):>8} "
        f"{_fmt(r.update_delta_us, 3):>9} {_fmt(r.delay_us, 3):>8} "
        f"{r.gen2:>4}/{r.collections:<6} {_fmt(r.gc_s, 3):>7} {_fmt(r.peak_rss_mb, 0):>7} "
        f"{_fmt(r.extra.get('anon_huge_mb', math.nan), 0):>6} "
        f"{_fmt(r.bytes_per_tuple, 1):>7}  {note}",
        file=file,
        flush=True,
    )


HEADER = (
    f"{'query':9} {'engine':13} {'N':>9} {'build s':>8} {'upd µs':>8} {'upd cpu':>8} {'upd p10':>8} {'harness':>8} "
    f"{'harn p10':>8} {'b1000 µs':>8} {'b1k p10':>8} "
    f"{'upd+Δ µs':>9} "
    f"{'delay µs':>8} {'gc2/all':>11} {'gc s':>7} {'RSS MB':>7} {'THP MB':>6} {'B/tuple':>7}  note"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 10^4 .. 10^5, fewer updates")
    parser.add_argument("--min-exp", type=float, default=4, help="smallest N as a power of ten")
    parser.add_argument("--max-exp", type=float, default=None, help="largest N as a power of ten (compact)")
    parser.add_argument("--python-max-exp", type=float, default=None, help="largest N for the Python reference")
    parser.add_argument("--implementations", nargs="+", default=["compact", "python"], help="qhier implementations")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--updates", type=int, default=None, help="updates per stream")
    parser.add_argument("--repeats", type=int, default=3, help="fresh streams timed per row")
    parser.add_argument(
        "--rounds", type=int, default=1, help="fresh processes per row, in interleaved rounds (medians reported)"
    )
    parser.add_argument("--slice", type=int, default=200, help="updates per timed slice (batches: 1,000)")
    parser.add_argument(
        "--no-huge-pages", action="store_true", help="the compact state's large arrays on 4 KB pages (no madvise)"
    )
    parser.add_argument("--enum-limit", type=int, default=50_000)
    parser.add_argument("--fo-max", type=float, default=1e5, help="largest N for first-order IVM and F-IVM")
    parser.add_argument("--fo-budget", type=float, default=2.0, help="seconds of updates for first-order IVM")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", nargs=3, metavar=("WORKLOAD", "N", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.updates is None:
        args.updates = 2000 if args.quick else 10000
    if args.child:
        workload, n, engine = args.child
        print(json.dumps(asdict(run_child(workload, int(n), engine, args))))
        return 0

    max_exp = args.max_exp if args.max_exp is not None else (5 if args.quick else 6)
    python_max = args.python_max_exp if args.python_max_exp is not None else max_exp
    exps = [args.min_exp + 0.5 * i for i in range(int((max_exp - args.min_exp) * 2) + 1)]
    print("command: " + " ".join([Path(sys.executable).name, *sys.argv]))
    print(f"load average before: {_load()}  (cpus: {os.cpu_count()})")
    print(f"transparent huge pages: {_thp()}" + ("  (--no-huge-pages: not advised)" if args.no_huge_pages else ""))
    print(HEADER, file=sys.stderr)
    plan: list[tuple[str, int, str]] = []
    for name in args.workloads:
        query = parse(WORKLOADS[name].query)
        fivm = ENGINES.get("fivm")
        for e in exps:
            n = round(10**e)
            engines = [f"qhier/{impl}" for impl in args.implementations if impl != "python" or e <= python_max]
            if n <= args.fo_max:
                engines.append("first-order")
                if fivm is not None and fivm.refuses(query) is None:
                    engines.append("F-IVM")
            plan += [(name, n, engine) for engine in engines]
    runs: dict[tuple[str, int, str], list[Measurement]] = {key: [] for key in plan}
    for k in range(args.rounds):
        # every row once per round, each in its own fresh process; odd rounds walk the sizes backwards, so
        # a slow spell of the machine does not fall on the same sizes in every round
        for key in plan if k % 2 == 0 else plan[::-1]:
            row = run_fresh(*key, args)
            _print_row(row, sys.stderr)
            runs[key].append(row)
        print(f"  [round {k + 1} of {args.rounds} done, load average {_load()}]", file=sys.stderr, flush=True)
    results = [combine(runs[key]) for key in plan]

    print(HEADER)
    print("-" * len(HEADER))
    for r in results:
        _print_row(r)
    print()
    if args.rounds > 1:
        print(
            f"(each row: the median over {args.rounds} fresh processes, one per round, of each column; "
            "the note's 'upd range': the least and the most of their 'upd µs')"
        )
    print()
    print("growth exponents (slope of log time vs log N; target <= 0.05 for qhier/compact updates):")
    for name in args.workloads:
        for engine in sorted({r.engine for r in results if r.workload == name}):
            sel = [r for r in results if r.workload == name and r.engine == engine]
            parts = [
                f"{label} {_fmt(slope([(r.n, getattr(r, attr)) for r in sel]), 3):>6}"
                for label, attr in (
                    ("update", "update_us"),
                    ("update cpu", "update_cpu_us"),
                    ("update p10", "update_p10_us"),
                    ("harness", "harness_us"),
                    ("harness p10", "harness_p10_us"),
                    ("batch", "batch_us"),
                    ("batch p10", "batch_p10_us"),
                    ("delay", "delay_us"),
                )
            ]
            print(f"  {name:9} {engine:13} " + "   ".join(parts) + f"   (N {sel[0].n}..{sel[-1].n})")
            if args.rounds > 1:
                per_round = [slope([(r.n, r.extra["update_us_rounds"][k]) for r in sel]) for k in range(args.rounds)]
                print(f"  {'':9} {'':13} update, each round alone: " + "  ".join(_fmt(x, 3) for x in per_round))
    print(f"load average after: {_load()}")
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
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = (
        (axes[0], "update_us", "time per update (one per apply)", "µs"),
        (axes[1], "delay_us", "enumeration delay", "µs"),
        (axes[2], "bytes_per_tuple", "state bytes per tuple", "bytes"),
    )
    styles = {"qhier/compact": "-o", "qhier/python": "-s", "first-order": "--^", "F-IVM": ":v"}
    series = [(w, e) for w in sorted({r.workload for r in results}) for e in styles]
    colors = {key: f"C{i}" for i, key in enumerate(series)}  # the same colour for a series in every panel
    for ax, attr, title, unit in panels:
        for r_workload, engine in series:
            sel = [r for r in results if r.workload == r_workload and r.engine == engine]
            pts = [(r.n, getattr(r, attr)) for r in sel if getattr(r, attr) == getattr(r, attr)]
            if pts:
                ax.plot(
                    *zip(*pts, strict=True),
                    styles[engine],
                    color=colors[(r_workload, engine)],
                    label=f"{engine} / {r_workload}",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N (tuples)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("q-hierarchical engine (Berkholz et al. Thm 3.2): compact vs Python state vs first-order IVM")
    fig.tight_layout()
    path = OUT / "qhier.png"
    fig.savefig(path, dpi=120)
    print(f"plot saved to {path}")


if __name__ == "__main__":
    raise SystemExit(main())
