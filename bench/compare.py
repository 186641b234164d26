"""Comparison: this project's engines vs Pathway vs DuckDB re-evaluation, same workloads, one run.

Workloads (deterministic for a seed; binary relations, set semantics, each
update a single tuple with multiplicity +1 or -1, committed in batches):

- ``triangle/facebook``: ``Q() :- R(a,b), S(b,c), T(c,a)`` over SNAP
  ego-Facebook, each undirected edge inserted into R, S and T in both
  orientations (6 updates per edge): 529,404 inserts, then the first half
  (264,702) deleted.
- ``triangle/skewed``: the same query over a heavy-tailed graph, in two phases.
  *Load*: a Chung-Lu graph (each edge's endpoints drawn independently with
  probability proportional to a weight ``w_v = (v+1)^(-1/(β-1))``, a power
  law of exponent ``β = 2.1``, the in-degree exponent of the web graph,
  Broder et al. 2000; self-loops and repeated edges redrawn) with as many
  vertices as give the facebook graph's average degree (43.7), until it has
  ``⌈N/6⌉`` edges, each inserted as 6 tuples like facebook's: N = 10^6
  distinct tuples (10^5 with ``--quick``).  *Update stream*: ``⌈N/12⌉`` edge
  updates (6 tuple updates each, N/2 in all), each an insert or a delete with
  probability 1/2: an insert draws both endpoints in proportion to the same
  weights (the expected degrees: popular vertices gain edges, so hub-hub
  updates come at the rate a Chung-Lu graph has hub-hub edges), a delete
  removes a uniformly random present edge (whose endpoints are then degree-
  proportional too).  The stream is stationary: the graph stays a Chung-Lu
  graph of the same size.  Both phases are timed; the target compares the
  update stream.  ``--skew-beta`` and ``--skew-degree`` change β and the
  average degree; the generator's statistics (largest degree, keys of degree
  ≥ √N, the share of stream updates between two such keys) are printed.
- ``triangle/adversarial``: the adversarial stream of ``bench/triangles.py``
  (two hubs take half of N = 10^6 distinct tuples), loaded, then 1,000 single-tuple
  hub-hub probes (insert and delete) timed one commit each: the updates whose
  first-order delta intersects two Θ(N) lists (this project's engines only).
- ``triangle/hubs``: the adversarial database loaded, then a stationary update
  stream of N/10 single-tuple updates in which a share ``h`` (``--hub-shares``,
  one row per value) toggles one of the 6 hub-hub tuples (``R``, ``S``, ``T`` in
  both orientations: inserted if absent, deleted if present) and the rest
  follow the generator (with probability 1/2 the insert of a new spoke or
  random tuple, else the delete of a uniformly random present tuple).  It
  shows how often updates must join two Θ(N)-degree keys before IVM^eps pays.
- ``qhier``: ``Q() :- R(a,b), S(a,c)`` (q-hierarchical), 400,000 inserts with
  keys over 50,000 values, then half deleted.
- ``sum``: ``Q(SUM(p)) :- C(c,n), O(o,c), L(o,p)`` (a join-aggregate with SUM,
  customer-order-lineitem shape), 520,000 inserts, then half deleted.

Systems: ``auto`` (``ivm.maintain(query)``: the planner's engine, for the
triangle the adaptive IVM^eps), ``first_order`` / ``eps=0.5`` (triangle only),
``first_order_delta`` (the other queries), Pathway (Differential Dataflow with
a Python API: the query written as joins and a reduce, one commit per batch,
each commit waited for before the next), DuckDB (the query re-run after each
batch over tables kept up to date with INSERT / DELETE of the batch's net changes).

Every (workload, system) cell runs in a fresh process; its phases (inserts,
then the update stream, probes or deletes) are timed in batches of ``--batch``
(1,000; probes one update per commit) for at most ``--budget`` seconds each;
inserts left over are then loaded untimed (Pathway: in one batch) so that the
next phase runs on the whole database, while a later phase over budget just
stops.  DuckDB's cost per commit grows with the database, so a budget would
time only its cheapest commits: it writes every batch of every phase and
re-runs the query, timed with the write, on ``--samples`` (25) commits spread
evenly over the phase, the last included (``sampled_phase``).  Printed per cell: updates/s per phase and over all timed
updates (total updates / total time) and per CPU second, the mean and worst
time per commit (apply the batch and read the result; for Pathway from commit
to the end of that logical time at the output), the peak resident memory of
the process, and the result (checked equal across systems that finished).
Saves ``bench/out/compare.json`` and ``bench/out/compare.png``.

Usage::

    .venv/bin/pip install -e '.[bench,compare]'
    .venv/bin/python bench/compare.py --cap-mb 6000   # about 35 minutes on 2 cores
    .venv/bin/python bench/compare.py --quick     # smaller streams, 4 s budgets
    .venv/bin/python bench/compare.py --only triangle/facebook,triangle/skewed --systems auto,first_order
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

OUT = ROOT / "bench" / "out"
Update = tuple[str, tuple[int, int], int]

QUERIES = {
    "triangle/facebook": "Q() :- R(a,b), S(b,c), T(c,a)",
    "triangle/skewed": "Q() :- R(a,b), S(b,c), T(c,a)",
    "triangle/adversarial": "Q() :- R(a,b), S(b,c), T(c,a)",
    "triangle/hubs": "Q() :- R(a,b), S(b,c), T(c,a)",
    "qhier": "Q() :- R(a,b), S(a,c)",
    "sum": "Q(SUM(p)) :- C(c, n), O(o, c), L(o, p)",
}
SQL = {
    "triangle": "SELECT count(*) FROM R JOIN S ON R.y = S.x JOIN T ON S.y = T.x AND T.y = R.x",
    "qhier": "SELECT count(*) FROM R JOIN S ON R.x = S.x",
    "sum": "SELECT coalesce(sum(L.y), 0) FROM C JOIN O ON O.y = C.x JOIN L ON L.x = O.x",
}
SYSTEMS = {
    "triangle/facebook": ["auto", "first_order", "eps=0.5", "pathway", "duckdb"],
    "triangle/skewed": ["auto", "first_order", "eps=0.5", "pathway", "duckdb"],
    "triangle/adversarial": ["auto", "first_order", "eps=0.5"],
    "triangle/hubs": ["auto", "first_order", "eps=0.5"],
    "qhier": ["auto", "first_order_delta", "pathway", "duckdb"],
    "sum": ["auto", "first_order_delta", "pathway", "duckdb"],
}


# -- workloads -------------------------------------------------------------------------

#: average degree of SNAP ego-Facebook (2 x 88,234 edges / 4,039 vertices), the skewed graph's default
FACEBOOK_DEGREE = 43.7
#: the power-law exponent of the skewed graph's degrees (web-graph in-degree, Broder et al. 2000)
SKEW_BETA = 2.1
Phases = list[tuple[str, list[Update]]]


def edge_updates(edge: tuple[int, int], m: int) -> list[Update]:
    """The 6 tuple updates of one undirected edge: R, S and T in both orientations (as facebook's)."""
    u, v = edge
    return [(relation, row, m) for row in ((u, v), (v, u)) for relation in "RST"]


def pop_random(items: list, where: dict, rng: random.Random) -> Any:
    """Remove and return a uniformly random element of ``items`` in O(1) (``where``: element -> index)."""
    i = rng.randrange(len(items))
    item, last = items[i], items.pop()
    if i < len(items):
        items[i] = last
        where[last] = i
    del where[item]
    return item


def chung_lu_stream(n: int, seed: int, beta: float, degree: float) -> tuple[list[Update], list[Update], dict]:
    """(load, update stream, statistics) of the ``triangle/skewed`` workload (see the module docstring).

    The load holds ``⌈n/6⌉`` distinct edges of a Chung-Lu graph with weights
    ``(v+1)^(-1/(β-1))`` over ``2⌈n/6⌉/degree`` vertices (labels shuffled), 6
    tuples each; the stream has ``⌈n/12⌉`` edge updates, each a Chung-Lu insert
    or the delete of a uniformly random present edge with probability 1/2.
    """
    rng = random.Random(seed)
    n_edges = -(-n // 6)
    vertices = max(10, round(2 * n_edges / degree))
    cum = list(itertools.accumulate((v + 1) ** (-1.0 / (beta - 1.0)) for v in range(vertices)))
    label = list(range(vertices))
    rng.shuffle(label)
    edges: list[tuple[int, int]] = []
    where: dict[tuple[int, int], int] = {}
    deg = [0] * vertices

    def draw() -> tuple[int, int]:
        """A new edge: both endpoints in proportion to the weights, no self-loop, not present."""
        while True:
            u, v = rng.choices(range(vertices), cum_weights=cum, k=2)
            edge = (u, v) if u < v else (v, u)
            if u != v and edge not in where:
                return edge

    def insert(edge: tuple[int, int]) -> None:
        where[edge] = len(edges)
        edges.append(edge)
        deg[edge[0]] += 1
        deg[edge[1]] += 1

    for _ in range(n_edges):
        insert(draw())
    load = [u for a, b in edges for u in edge_updates((label[a], label[b]), 1)]
    root = math.sqrt(len(load))
    stats: dict[str, Any] = {
        "beta": beta,
        "vertices": vertices,
        "average_degree": round(2 * n_edges / vertices, 1),
        "tuples": len(load),
        "max_degree": max(deg),
        "keys_at_least_sqrt_n": sum(1 for d in deg if d >= root),
        "keys_at_least_8_sqrt_n": sum(1 for d in deg if d >= 8 * root),
    }
    stream: list[Update] = []
    hub_hub = min_degree = 0
    n_updates = -(-n // 12)
    for _ in range(n_updates):
        if rng.random() < 0.5:
            edge = pop_random(edges, where, rng)
            deg[edge[0]] -= 1
            deg[edge[1]] -= 1
            m = -1
        else:
            edge = draw()
            insert(edge)
            m = 1
        a, b = edge
        hub_hub += deg[a] >= root and deg[b] >= root
        min_degree += min(deg[a], deg[b])
        stream += edge_updates((label[a], label[b]), m)
    stats["stream_hub_hub_share"] = hub_hub / n_updates
    stats["stream_mean_min_degree"] = round(min_degree / n_updates, 1)
    stats["tuples_after_stream"] = 6 * len(edges)
    return load, stream, stats


def adversarial_load(n: int, seed: int) -> list[Update]:
    """``n`` distinct tuples of ``bench/triangles.py``'s adversarial stream (two hubs hold half of them).

    The generator repeats about 4% of its tuples; it is asked for 10% more and
    the first ``n`` distinct ones are kept (its output is shuffled), so N = n.
    """
    from triangles import skewed_stream

    seen: set = set()
    inserts = []
    for u in skewed_stream(n + n // 10, seed):
        if (u[0], u[1]) not in seen:  # set semantics: each tuple once
            seen.add((u[0], u[1]))
            inserts.append(u)
            if len(inserts) == n:
                break
    return inserts


def hub_churn_stream(load: list[Update], n: int, share: float, seed: int) -> tuple[list[Update], dict]:
    """(update stream, statistics) of ``triangle/hubs`` over the adversarial ``load`` (module docstring).

    Set semantics throughout: a toggle deletes a present tuple and inserts an
    absent one; the generator's inserts are redrawn until absent.
    """
    rng = random.Random(seed + 7)
    hubs, pool = 2, max(len(load) // 4, 10)
    hub_hub = [(r, row) for r in "RST" for row in ((0, 1), (1, 0))]
    present = [(r, row) for r, row, _ in load if (r, row) not in hub_hub]
    where = {t: i for i, t in enumerate(present)}
    on = {(r, row) for r, row, _ in load}.intersection(hub_hub)
    stream: list[Update] = []
    toggles = 0
    for _ in range(n):
        if rng.random() < share:
            t = rng.choice(hub_hub)
            stream.append((t[0], t[1], -1 if t in on else 1))
            on ^= {t}
            toggles += 1
        elif rng.random() < 0.5:
            t = pop_random(present, where, rng)
            stream.append((t[0], t[1], -1))
        else:
            while True:
                v = hubs + rng.randrange(pool)
                if rng.random() < 0.5:
                    hub = rng.randrange(hubs)
                    row = (hub, v) if rng.random() < 0.5 else (v, hub)
                else:
                    row = (v, hubs + rng.randrange(pool))
                t = (rng.choice("RST"), row)
                if t not in where:
                    break
            where[t] = len(present)
            present.append(t)
            stream.append((t[0], t[1], 1))
    return stream, {"tuples": len(load), "hub_share": share, "hub_hub_updates": toggles}


def workload(
    name: str,
    quick: bool,
    seed: int,
    beta: float = SKEW_BETA,
    degree: float = FACEBOOK_DEGREE,
    hub_share: float = 0.0,
) -> tuple[Phases, dict]:
    """The timed phases of a workload, in order (``inserts`` first), and statistics about it."""
    from triangles import facebook_stream

    rng = random.Random(seed)
    stats: dict[str, Any] = {}
    if name == "triangle/facebook":
        inserts = facebook_stream(60_000 if quick else 10**7, seed)
    elif name == "triangle/skewed":
        load, stream, stats = chung_lu_stream(100_000 if quick else 1_000_000, seed, beta, degree)
        return [("inserts", load), ("stream", stream)], stats
    elif name == "triangle/hubs":
        load = adversarial_load(100_000 if quick else 1_000_000, seed)
        stream, stats = hub_churn_stream(load, len(load) // 10, hub_share, seed)
        return [("inserts", load), ("stream", stream)], stats
    elif name == "triangle/adversarial":
        inserts = adversarial_load(100_000 if quick else 1_000_000, seed)
        seen = {(r, row) for r, row, _ in inserts}
        probes: list[Update] = []
        for p in range(500):
            rel, row = "RST"[p % 3], ((0, 1) if p % 2 else (1, 0))
            if (rel, row) not in seen:
                probes += [(rel, row, 1), (rel, row, -1)]
        return [("inserts", inserts), ("probes", probes)], {"tuples": len(inserts)}
    elif name == "qhier":
        n, keys = (60_000, 8_000) if quick else (400_000, 50_000)
        inserts = [(("R", "S")[i % 2], (rng.randrange(keys), i), 1) for i in range(n)]
    else:
        n_c, n_o, n_l = (3_000, 20_000, 60_000) if quick else (20_000, 150_000, 350_000)
        inserts = [("C", (c, rng.randrange(25)), 1) for c in range(n_c)]
        inserts += [("O", (o, rng.randrange(n_c)), 1) for o in range(n_o)]
        inserts += [("L", (rng.randrange(n_o), 10 * i + rng.randrange(10)), 1) for i in range(n_l)]
        rng.shuffle(inserts)
    deletes = [(r, row, -1) for r, row, _ in inserts[: len(inserts) // 2]]
    return [("inserts", inserts), ("deletes", deletes)], stats


def batches(stream: list[Update], size: int) -> list[list[Update]]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


# -- systems ---------------------------------------------------------------------------


class Ours:
    """An engine of this project behind ``ivm.maintain`` (the View validates nothing extra here)."""

    def __init__(self, query: str, system: str) -> None:
        import ivm

        if system == "auto":
            self.view = ivm.maintain(query)
        elif system == "eps=0.5":
            self.view = ivm.maintain(query, engine="ivm_eps", eps=0.5)
        else:
            self.view = ivm.maintain(query, engine=system)
        self.engine = self.view.engine
        self.name = self.engine.name

    def commit(self, batch: list[Update]) -> Any:
        self.engine.apply(batch)  # the engine protocol directly: the runtime's path
        return self.engine.result()

    def load(self, updates: list[Update]) -> Any:
        return self.commit(updates)

    def close(self) -> dict[str, Any]:
        stats = self.engine.stats()
        return {k: stats[k] for k in ("eps", "partitioned", "mode_switches") if k in stats}


class DuckDB:
    """Re-evaluates the query after every batch over tables kept current with INSERT/DELETE."""

    def __init__(self, workload_name: str) -> None:
        import duckdb

        self.con = duckdb.connect()
        self.relations = sorted(set(QUERIES[workload_name].split(":-")[1]) & set("RSTCOL"))
        for r in self.relations:
            self.con.execute(f"CREATE TABLE {r} (x BIGINT, y BIGINT)")
        self.sql = SQL[workload_name.split("/")[0]]
        self.name = "duckdb"

    def write(self, batch: list[Update]) -> None:
        """INSERT / DELETE the batch's net changes (a tuple deleted and inserted again in one
        batch nets to nothing; the workloads have set semantics, so each net change is ±1)."""
        import pandas as pd

        net: dict[tuple[str, int, int], int] = {}
        for r, (x, y), m in batch:
            net[(r, x, y)] = net.get((r, x, y), 0) + m
        for sign in (True, False):
            rows = [key for key, m in net.items() if m and (m > 0) == sign]
            if not rows:
                continue
            df = pd.DataFrame(rows, columns=["rel", "x", "y"])
            self.con.register("batch", df)
            for r in self.relations:
                if sign:
                    self.con.execute(f"INSERT INTO {r} SELECT x, y FROM batch WHERE rel = '{r}'")
                else:
                    self.con.execute(
                        f"DELETE FROM {r} USING batch WHERE {r}.x = batch.x AND {r}.y = batch.y AND batch.rel = '{r}'"
                    )
            self.con.unregister("batch")

    def read(self) -> Any:
        return self.con.execute(self.sql).fetchall()[0][0]

    def commit(self, batch: list[Update]) -> Any:
        self.write(batch)
        return self.read()

    def load(self, updates: list[Update]) -> Any:
        return self.commit(updates)

    def close(self) -> dict[str, Any]:
        return {}


class Pathway:
    """The query as a Pathway dataflow (joins + reduce); one commit per batch, awaited.

    Input: one Python connector with rows ``(rel, x, y)`` keyed by all three
    columns (deletes retract the row with the same key).  A heartbeat row per
    commit, joined with the result, makes every commit produce output, so the
    end of each logical time at the subscriber marks that commit as processed.
    """

    def __init__(self, workload_name: str) -> None:
        import pathway as pw

        self.pw = pw
        self.kind = workload_name.split("/")[0]
        self.name = "pathway"
        self.queue: list[tuple[str, list[Update]]] = []
        self.done = threading.Event()
        self.result: Any = None
        self.commit_times: list[float] = []
        self.error: BaseException | None = None

    def run(self, plan: list[tuple[str, list[Update]]], budget: float, on_phase: Any) -> None:
        """Feed ``plan`` (phase name, batch) pairs; ``on_phase`` receives per-commit timings."""
        pw = self.pw
        outer = self

        class Schema(pw.Schema):
            rel: int = pw.column_definition(primary_key=True)
            x: int = pw.column_definition(primary_key=True)
            y: int = pw.column_definition(primary_key=True)

        codes = {r: i for i, r in enumerate("RSTCOL")}
        ended = threading.Event()

        class Feed(pw.io.python.ConnectorSubject):
            def run(self) -> None:
                started: dict[str, float] = {}
                for k, (phase, batch) in enumerate(plan):
                    if phase.endswith("timed") and phase in started and time.perf_counter() - started[phase] > budget:
                        on_phase(phase, None, 0, 0.0)  # over budget: skip the rest of this phase
                        continue
                    ended.clear()
                    t0, c0 = time.perf_counter(), time.process_time()
                    started.setdefault(phase, t0)
                    for r, (x, y), m in batch:
                        values = {"rel": codes[r], "x": x, "y": y}
                        if m > 0:
                            self._add_inner(None, values)
                        else:
                            self._remove_inner(None, values)
                    self._add_inner(None, {"rel": 99, "x": k, "y": 0})  # heartbeat
                    self.commit()
                    if not ended.wait(3600):
                        raise RuntimeError("pathway did not finish a commit within an hour")
                    on_phase(phase, time.perf_counter() - t0, len(batch), time.process_time() - c0)

        t = pw.io.python.read(Feed(), schema=Schema, autocommit_duration_ms=None)

        def rel(code: int, a: str, b: str) -> Any:
            return t.filter(pw.this.rel == code).select(**{a: pw.this.x, b: pw.this.y})

        if self.kind == "triangle":
            r, s, tt = rel(0, "a", "b"), rel(1, "b", "c"), rel(2, "c", "a")
            rs = r.join(s, pw.left.b == pw.right.b).select(a=pw.left.a, c=pw.right.c)
            rst = rs.join(tt, pw.left.c == pw.right.c, pw.left.a == pw.right.a).select(one=1)
            value = rst.reduce(v=pw.reducers.count())
        elif self.kind == "qhier":
            r, s = rel(0, "a", "b"), rel(1, "a", "c")
            value = r.join(s, pw.left.a == pw.right.a).select(one=1).reduce(v=pw.reducers.count())
        else:
            c, o, ll = rel(codes["C"], "c", "n"), rel(codes["O"], "o", "c"), rel(codes["L"], "o", "p")
            co = c.join(o, pw.left.c == pw.right.c).select(o=pw.right.o)
            value = co.join(ll, pw.left.o == pw.right.o).select(p=pw.right.p).reduce(v=pw.reducers.sum(pw.this.p))
        beat = t.filter(pw.this.rel == 99).reduce(k=pw.reducers.max(pw.this.x))
        out = beat.join_left(value).select(k=pw.left.k, v=pw.right.v)

        def on_change(key: Any, row: dict, time: int, is_addition: bool) -> None:
            if is_addition:
                outer.result = row["v"] or 0

        pw.io.subscribe(out, on_change=on_change, on_time_end=lambda _t: ended.set())
        pw.run(monitoring_level=pw.MonitoringLevel.NONE)


# -- one cell --------------------------------------------------------------------------


CPU: dict[str, float] = {}


def timed_phase(system: Any, stream: list[Update], batch: int, budget: float) -> tuple[int, float, list[float], Any]:
    """Commit ``stream`` in batches until done or over budget: (updates, seconds, commit times, result).

    Also adds the phase's CPU time of the whole process to ``CPU`` (the machine is shared:
    CPU time is less disturbed by other jobs than wall time).
    """
    done, elapsed, times, result = 0, 0.0, [], None
    c0 = time.process_time()
    for b in batches(stream, batch):
        t0 = time.perf_counter()
        result = system.commit(b)
        dt = time.perf_counter() - t0
        times.append(dt)
        elapsed += dt
        done += len(b)
        if elapsed > budget:
            break
    CPU["s"] = CPU.get("s", 0.0) + time.process_time() - c0
    return done, elapsed, times, result


def sampled_phase(system: Any, stream: list[Update], batch: int, samples: int) -> tuple[int, float, list[float], Any]:
    """Re-evaluation over the whole phase, timed on ``samples`` commits spread evenly across it.

    A re-evaluating system's commit costs grow with the database, so timing only
    the commits that fit a budget (the first ones, on the smallest database) would
    flatter it.  Here every batch is written (``system.write``), and every k-th
    batch, the last included, is a full timed commit: write, then re-run the query
    (``system.read``).  ``sampled updates / their seconds`` is then an unbiased
    estimate of the rate of committing every batch.  Returns what ``timed_phase``
    does, for the sampled commits; their CPU time goes to ``CPU``.
    """
    chunks = batches(stream, batch)
    every = max(1, -(-len(chunks) // samples))
    done, elapsed, times, result, cpu = 0, 0.0, [], None, 0.0
    for i, b in enumerate(chunks):
        if i % every and i != len(chunks) - 1:
            system.write(b)
            continue
        c0, t0 = time.process_time(), time.perf_counter()
        system.write(b)
        result = system.read()
        dt = time.perf_counter() - t0
        cpu += time.process_time() - c0
        times.append(dt)
        elapsed += dt
        done += len(b)
    CPU["s"] = CPU.get("s", 0.0) + cpu
    return done, elapsed, times, result


def watchdog(cap_mb: float, row: dict) -> None:
    """Stop the process (printing the row with an error) once its resident memory exceeds ``cap_mb``.

    The machine is shared; a system whose intermediate results explode (binary join plans
    on the skewed stream) must not take it down.  The cell then reports the cap, not numbers.
    """
    import os

    page = os.sysconf("SC_PAGE_SIZE")

    def watch() -> None:
        while True:
            with open("/proc/self/statm") as f:
                rss_mb = int(f.read().split()[1]) * page / 2**20
            if rss_mb > cap_mb:
                row["error"] = f"stopped: resident memory exceeded the {cap_mb:,.0f} MB cap"
                row["peak_mb"] = rss_mb
                print(json.dumps(row, default=str), flush=True)
                os._exit(0)
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()


def summarize(
    row: dict, done: dict[str, int], seconds: dict[str, float], cpu: dict[str, float], commits: list[float]
) -> None:
    """Per phase ``<phase>_timed``, ``_per_s``, ``_per_cpu_s``; over the batched phases (probes
    excluded) ``all_per_s`` and ``all_per_cpu_s``; the mean and worst commit time."""
    for phase, n in done.items():
        row[f"{phase}_timed"] = n
        row[f"{phase}_per_s"] = n / seconds[phase] if seconds.get(phase) else None
        row[f"{phase}_per_cpu_s"] = n / cpu[phase] if cpu.get(phase) else None
    batched = [p for p in done if p != "probes"]
    n, t, c = (sum(d.get(p, 0) for p in batched) for d in (done, seconds, cpu))
    row["all_per_s"] = n / t if t else None
    row["all_per_cpu_s"] = n / c if c else None
    commits = sorted(commits)
    row["commit_ms_mean"] = 1000 * sum(commits) / len(commits) if commits else None
    row["commit_ms_max"] = 1000 * commits[-1] if commits else None


def cell(
    workload_name: str,
    system_name: str,
    batch: int,
    budget: float,
    quick: bool,
    seed: int,
    cap_mb: float = 4096,
    beta: float = SKEW_BETA,
    degree: float = FACEBOOK_DEGREE,
    samples: int = 25,
    hub_share: float = 0.0,
) -> dict:
    phases, stats = workload(workload_name, quick, seed, beta, degree, hub_share)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    label = f"{workload_name} h={hub_share:g}" if workload_name == "triangle/hubs" else workload_name
    row: dict[str, Any] = {"workload": label, "system": system_name, "batch": batch, "stream_mb": base_rss}
    row["phases"] = [name for name, _ in phases]
    row["workload_stats"] = stats
    for name, updates in phases:
        row[f"n_{name}"] = len(updates)
    watchdog(cap_mb, row)
    if system_name == "pathway":
        return pathway_cell(row, phases, batch, budget, workload_name)
    system: Any = DuckDB(workload_name) if system_name == "duckdb" else Ours(QUERIES[workload_name], system_name)
    row["engine"] = system.name
    done: dict[str, int] = {}
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}
    commits: list[float] = []
    complete = True
    result = None
    for name, updates in phases:
        size = 1 if name == "probes" else batch
        if isinstance(system, DuckDB):
            done[name], seconds[name], times, result = sampled_phase(system, updates, size, samples)
            row[f"{name}_sampled_commits"] = len(times)
            applied = len(updates)
        else:
            done[name], seconds[name], times, result = timed_phase(system, updates, size, budget)
            applied = done[name]
        cpu[name] = CPU.pop("s")
        if name != "probes":
            commits += times
        if name == "inserts":
            if applied < len(updates):
                t0 = time.perf_counter()
                result = system.load(updates[done[name] :])
                row["untimed_load_s"] = time.perf_counter() - t0
            row["after_inserts"] = result
        else:
            complete = complete and applied == len(updates)
        summarize(row, done, seconds, cpu, commits)
    row["result"] = result if complete else None
    row.update(system.close())
    row["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def pathway_cell(row: dict, phases: Phases, batch: int, budget: float, wl: str) -> dict:
    try:
        system = Pathway(wl)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        row["error"] = f"pathway not importable: {exc}"
        return row
    row["engine"] = "pathway"
    names = [name for name, _ in phases]
    timings: dict[str, list[float]] = {f"{name} timed": [] for name in names}
    timings["load"] = []
    counts: dict[str, int] = dict.fromkeys(timings, 0)
    cpu: dict[str, float] = dict.fromkeys(timings, 0.0)
    # Untimed remainder: Pathway cannot be told mid-run which inserts were skipped, so the
    # feed replays the skipped insert batches as one load commit before the next phase.
    state = {"fed": 0}

    def progress() -> None:
        timed = [f"{name} timed" for name in names]
        summarize(
            row,
            {name: counts[f"{name} timed"] for name in names},
            {name: sum(timings[f"{name} timed"]) for name in names},
            {name: cpu[f"{name} timed"] for name in names},
            [t for label in timed if not label.startswith("probes") for t in timings[label]],
        )

    def on_phase(phase: str, seconds: float | None, n: int, cpu_s: float) -> None:
        if seconds is None:
            return  # over budget: the rest of the phase is skipped
        timings[phase].append(seconds)
        cpu[phase] += cpu_s
        counts[phase] += n
        if phase == "inserts timed":
            state["fed"] += n
        # progress in the row, so that a cell stopped by the memory cap still reports what it measured
        progress()
        row["phase"] = phase

    plan: list[tuple[str, Any]] = []
    for name, updates in phases:
        plan += [(f"{name} timed", b) for b in batches(updates, 1 if name == "probes" else batch)]
        if name == "inserts":
            plan.append(("load", _Remainder(updates, state)))
    try:
        system.run(plan, budget, on_phase)
    except Exception as exc:  # report, never fake numbers
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    progress()
    if timings["load"]:
        row["untimed_load_s"] = timings["load"][0]
    complete = all(counts[f"{name} timed"] == len(updates) for name, updates in phases if name != "inserts")
    row["result"] = system.result if complete else None
    row["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


class _Remainder:
    """The inserts not fed in the timed phase (evaluated lazily, when the feed reaches the load)."""

    def __init__(self, inserts: list[Update], state: dict) -> None:
        self.inserts, self.state = inserts, state

    def __iter__(self):
        return iter(self.inserts[self.state["fed"] :])

    def __len__(self) -> int:
        return len(self.inserts) - self.state["fed"]


# -- driver ----------------------------------------------------------------------------


def run_cell(args: argparse.Namespace, workload_name: str, system_name: str, hub_share: float = 0.0) -> dict:
    cmd = [sys.executable, __file__, "--worker", workload_name, system_name, "--batch", str(args.batch)]
    cmd += ["--hub-share", str(hub_share)]
    cmd += ["--budget", str(args.budget), "--seed", str(args.seed), "--cap-mb", str(args.cap_mb)]
    cmd += ["--skew-beta", str(args.skew_beta), "--skew-degree", str(args.skew_degree)]
    cmd += ["--samples", str(args.samples)]
    cmd += ["--quick"] if args.quick else []
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.strip().splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        label = f"{workload_name} h={hub_share:g}" if workload_name == "triangle/hubs" else workload_name
        return {"workload": label, "system": system_name, "error": " | ".join(tail)}
    return json.loads(lines[-1])


def fmt(x: Any, digits: int = 0) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}"


def _phase_cell(r: dict, phase: str) -> str:
    """``updates/s`` of one phase, ``(k timed)`` when the budget stopped it; blank if the workload has none."""
    if f"n_{phase}" not in r:
        return ""
    text = fmt(r.get(f"{phase}_per_s"))
    timed, total = r.get(f"{phase}_timed"), r[f"n_{phase}"]
    if r.get(f"{phase}_sampled_commits"):
        text += f" ({r[f'{phase}_sampled_commits']} commits sampled)"
    elif timed is not None and timed != total:
        text += f" ({timed:,} timed)"
    return text


def table(rows: list[dict]) -> str:
    head = (
        "| workload | system | inserts/s | deletes/s | stream/s (probes/s) | all/s | all/CPU-s "
        "| ms/commit mean (max) | peak MB | result |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r and not r.get("inserts_per_s"):
            lines.append(f"| {r['workload']} | {r['system']} | error: {r['error'][:90]} | | | | | | | |")
            continue
        name = r["system"] + (f" [{r['engine']}]" if r.get("engine") not in (None, r["system"]) else "")
        third = _phase_cell(r, "stream") or (f"({_phase_cell(r, 'probes')})" if "n_probes" in r else "")
        lines.append(
            f"| {r['workload']} | {name} | {_phase_cell(r, 'inserts')} | {_phase_cell(r, 'deletes')} | {third} "
            f"| {fmt(r.get('all_per_s'))} | {fmt(r.get('all_per_cpu_s'))} "
            f"| {fmt(r.get('commit_ms_mean'), 1)} ({fmt(r.get('commit_ms_max'), 0)}) "
            f"| {fmt(r.get('peak_mb'))} | {r.get('result') if r.get('result') is not None else 'partial'}"
            + (f"; {r['error']} (in phase {r.get('phase')})" if r.get("error") else "")
            + " |"
        )
    return "\n".join(lines)


def targets(rows: list[dict]) -> list[str]:
    def get(wl: str, system: str, key: str) -> Any:
        for r in rows:
            if r["workload"] == wl and r["system"] == system:
                return r.get(key)
        return None

    out = []
    fb = "triangle/facebook"
    auto = get(fb, "auto", "all_per_s")
    best = max(x or 0 for x in (get(fb, "first_order", "all_per_s"), get(fb, "eps=0.5", "all_per_s")))
    pw_, dd = get(fb, "pathway", "all_per_s"), get(fb, "duckdb", "all_per_s")
    if auto:
        out.append(f"facebook auto {auto:,.0f} updates/s (target ≥ 80,000): {'met' if auto >= 80_000 else 'MISSED'}")
        if best:
            out.append(f"facebook auto / best of first_order, eps=0.5 = {auto / best:.2f} (target ≥ 1/1.2 = 0.83)")
        if pw_:
            note = "" if get(fb, "pathway", "deletes_timed") else " (pathway: inserts only, see its row)"
            out.append(f"facebook auto / pathway = {auto / pw_:.1f}x (target ≥ 20x){note}")
        if dd:
            out.append(f"facebook auto / duckdb = {auto / dd:.1f}x (target ≥ 50x)")
        if get(fb, "auto", "peak_mb"):
            out.append(f"facebook auto peak memory {get(fb, 'auto', 'peak_mb'):,.0f} MB (target ≤ 500 MB)")
    sk = "triangle/skewed"
    stats = get(sk, "auto", "workload_stats") or get(sk, "first_order", "workload_stats")
    if stats:
        out.append(
            f"skewed graph: N = {stats['tuples']:,} tuples, β = {stats['beta']:g}, {stats['vertices']:,} vertices "
            f"(average degree {stats['average_degree']:g}), largest degree {stats['max_degree']:,}, "
            f"{stats['keys_at_least_sqrt_n']} keys of degree ≥ √N ({stats['keys_at_least_8_sqrt_n']} ≥ 8√N); "
            f"stream: {stats['stream_hub_hub_share']:.2%} of edge updates join two keys of degree ≥ √N, "
            f"mean smaller degree {stats['stream_mean_min_degree']:g}"
        )
    for phase, label in (("stream", "update stream"), ("inserts", "load")):
        a, f = get(sk, "auto", f"{phase}_per_s"), get(sk, "first_order", f"{phase}_per_s")
        if a and f:
            goal = " (target ≥ 10x)" if phase == "stream" else ""
            out.append(f"skewed {label}: auto / first_order = {a / f:.2f}x{goal}")
        e = get(sk, "eps=0.5", f"{phase}_per_s")
        if e and f:
            out.append(f"skewed {label}: eps=0.5 / first_order = {e / f:.2f}x")
    for r in rows:
        if r["workload"].startswith("triangle/hubs") and r["system"] == "auto":
            a, f = r.get("stream_per_s"), get(r["workload"], "first_order", "stream_per_s")
            e = get(r["workload"], "eps=0.5", "stream_per_s")
            if a and f:
                share = (r.get("workload_stats") or {}).get("hub_share", 0)
                out.append(
                    f"two-hub stream (N = {r['n_inserts']:,}), {share:.1%} hub-hub updates: "
                    f"auto / first_order = {a / f:,.2f}x" + (f", eps=0.5 / first_order = {e / f:,.2f}x" if e else "")
                )
    adv = "triangle/adversarial"
    a, f = get(adv, "auto", "probes_per_s"), get(adv, "first_order", "probes_per_s")
    if a and f:
        out.append(
            f"adversarial (N = {get(adv, 'auto', 'n_inserts'):,}) hub-hub probes: auto / first_order = {a / f:,.0f}x"
        )
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4), squeeze=False)
    for ax, wl in zip(axes[0], names, strict=True):
        cells = [r for r in rows if r["workload"] == wl and r.get("all_per_s")]
        ax.bar([r["system"] for r in cells], [r["all_per_s"] for r in cells], color="tab:blue")
        ax.set_yscale("log")
        ax.set_title(wl)
        ax.set_ylabel("updates/s (all timed phases)")
        ax.tick_params(axis="x", rotation=35)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.suptitle("Throughput per system, same machine, one run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small streams")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--budget", type=float, default=None, help="seconds per timed phase (20; 4 with --quick)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cap-mb", type=float, default=4096, help="resident memory cap per cell (MB)")
    parser.add_argument("--only", default=None, help=f"comma-separated workloads of {', '.join(QUERIES)}")
    parser.add_argument("--systems", default=None, help="comma-separated systems (default: all of each workload)")
    parser.add_argument("--skew-beta", type=float, default=SKEW_BETA, help="power-law exponent of the skewed graph")
    parser.add_argument("--skew-degree", type=float, default=FACEBOOK_DEGREE, help="average degree of the skewed graph")
    parser.add_argument(
        "--samples", type=int, default=None, help="timed commits per phase of DuckDB (25; 8 with --quick)"
    )
    parser.add_argument(
        "--hub-shares", default="0,0.001,0.01,0.1", help="triangle/hubs: shares of hub-hub toggles, one row each"
    )
    parser.add_argument("--hub-share", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="compare", help="file stem of the JSON and PNG under bench/out/")
    parser.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "SYSTEM"))
    args = parser.parse_args()
    if args.budget is None:
        args.budget = 4.0 if args.quick else 20.0
    if args.samples is None:
        args.samples = 8 if args.quick else 25
    if args.worker:
        row = cell(
            *args.worker,
            args.batch,
            args.budget,
            args.quick,
            args.seed,
            args.cap_mb,
            args.skew_beta,
            args.skew_degree,
            args.samples,
            args.hub_share,
        )
        print(json.dumps(row, default=str))
        return
    chosen = args.only.split(",") if args.only else list(QUERIES)
    unknown = [wl for wl in chosen if wl not in QUERIES]
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {list(QUERIES)}")
    wanted = set(args.systems.split(",")) if args.systems else None
    rows = []
    shares = [float(x) for x in args.hub_shares.split(",")]
    runs = [(name, share) for name in chosen for share in (shares if name == "triangle/hubs" else [0.0])]
    for wl, share in runs:
        for system in SYSTEMS[wl]:
            if wanted is not None and system not in wanted:
                continue
            row = run_cell(args, wl, system, share)
            rows.append(row)
            extra = "".join(
                f" {phase} {fmt(row.get(f'{phase}_per_s'))}/s"
                for phase in ("inserts", "deletes", "stream", "probes")
                if row.get(f"{phase}_per_s")
            )
            print(
                f"{row['workload']:24} {system:18} all/s {fmt(row.get('all_per_s')):>10}{extra} {row.get('error', '')}",
                flush=True,
            )
    results: dict[str, set] = {}
    for r in rows:
        if r.get("result") is not None:
            results.setdefault(r["workload"], set()).add(r["result"])
    print()
    print(table(rows))
    print()
    for wl, values in results.items():
        print(
            f"{wl}: results of the systems that finished {'agree' if len(values) == 1 else 'DISAGREE: ' + str(values)}"
        )
    for line in targets(rows):
        print(line)
    print(f"(batch {args.batch}, budget {args.budget:g} s per timed phase; 'partial': a timed phase hit the budget)")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.out}.json").write_text(json.dumps(rows, indent=1, default=str))
    plot(rows, OUT / f"{args.out}.png")
    print(f"saved {OUT / (args.out + '.json')} and {OUT / (args.out + '.png')}")


if __name__ == "__main__":
    main()
