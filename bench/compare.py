"""Comparison: this project's engines vs Pathway vs DuckDB re-evaluation, same workloads, one run.

Workloads (deterministic for a seed; binary relations, set semantics, each
update a single tuple with multiplicity +1 or -1, committed in batches):

- ``triangle/facebook``: ``Q() :- R(a,b), S(b,c), T(c,a)`` over SNAP
  ego-Facebook, each undirected edge inserted into R, S and T in both
  orientations (6 updates per edge): 529,404 inserts, then the first half
  (264,702) deleted.
- ``triangle/skewed``: the same query over the adversarial stream of
  ``bench/triangles.py`` (two hubs take half of N = 10^6 tuples), then half of
  it deleted; after the inserts, 1,000 single-tuple hub-hub probes (insert and
  delete), the updates whose first-order delta intersects two Θ(N) lists.
- ``qhier``: ``Q() :- R(a,b), S(a,c)`` (q-hierarchical), 400,000 inserts with
  keys over 50,000 values, then half deleted.
- ``sum``: ``Q(SUM(p)) :- C(c,n), O(o,c), L(o,p)`` (a join-aggregate with SUM,
  customer-order-lineitem shape), 520,000 inserts, then half deleted.

Systems: ``auto`` (``ivm.maintain(query)``: the planner's engine, for the
triangle the adaptive IVM^eps), ``first_order`` / ``eps=0.5`` (triangle only),
``first_order_delta`` (the other queries), Pathway (Differential Dataflow with
a Python API: the query written as joins and a reduce, one commit per batch,
each commit waited for before the next), DuckDB (the query re-run after each
batch over tables kept up to date with INSERT / DELETE).

Every (workload, system) cell runs in a fresh process: the inserts are timed in
batches of ``--batch`` (1,000) for at most ``--budget`` seconds; whatever is
left is then loaded untimed (Pathway and DuckDB: in one batch) and the deletes
are timed the same way.  Printed per cell: updates/s for inserts, deletes and
both together (total updates / total time), the mean and worst time per commit
(apply the batch and read the result; for Pathway from commit to the end of
that logical time at the output), the peak resident memory of the process, and
the result (checked equal across systems that finished).  Saves
``bench/out/compare.json`` and ``bench/out/compare.png``.

Usage::

    .venv/bin/pip install -e '.[bench,compare]'
    .venv/bin/python bench/compare.py             # about 15 minutes on 2 cores
    .venv/bin/python bench/compare.py --quick     # smaller streams, 4 s budgets
"""

from __future__ import annotations

import argparse
import json
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
    "qhier": ["auto", "first_order_delta", "pathway", "duckdb"],
    "sum": ["auto", "first_order_delta", "pathway", "duckdb"],
}


# -- workloads -------------------------------------------------------------------------


def workload(name: str, quick: bool, seed: int) -> tuple[list[Update], list[Update], list[Update]]:
    """(inserts, deletes, probes) of a workload."""
    from triangles import facebook_stream, skewed_stream

    rng = random.Random(seed)
    probes: list[Update] = []
    if name == "triangle/facebook":
        inserts = facebook_stream(60_000 if quick else 10**7, seed)
    elif name == "triangle/skewed":
        n = 100_000 if quick else 1_000_000
        seen: set = set()
        inserts = []
        for u in skewed_stream(n, seed):
            if (u[0], u[1]) not in seen:  # set semantics: each tuple once
                seen.add((u[0], u[1]))
                inserts.append(u)
        for p in range(500):
            rel, row = "RST"[p % 3], ((0, 1) if p % 2 else (1, 0))
            if (rel, row) not in seen:
                probes += [(rel, row, 1), (rel, row, -1)]
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
    return inserts, deletes, probes


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

    def _write(self, batch: list[Update]) -> None:
        import pandas as pd

        for sign in (1, -1):
            rows = [(r, x, y) for r, (x, y), m in batch if m == sign]
            if not rows:
                continue
            df = pd.DataFrame(rows, columns=["rel", "x", "y"])
            self.con.register("batch", df)
            for r in self.relations:
                if sign > 0:
                    self.con.execute(f"INSERT INTO {r} SELECT x, y FROM batch WHERE rel = '{r}'")
                else:
                    self.con.execute(
                        f"DELETE FROM {r} USING batch WHERE {r}.x = batch.x AND {r}.y = batch.y AND batch.rel = '{r}'"
                    )
            self.con.unregister("batch")

    def commit(self, batch: list[Update]) -> Any:
        self._write(batch)
        return self.con.execute(self.sql).fetchall()[0][0]

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


def cell(
    workload_name: str, system_name: str, batch: int, budget: float, quick: bool, seed: int, cap_mb: float = 4096
) -> dict:
    inserts, deletes, probes = workload(workload_name, quick, seed)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row: dict[str, Any] = {"workload": workload_name, "system": system_name, "batch": batch, "stream_mb": base_rss}
    row["n_inserts"], row["n_deletes"] = len(inserts), len(deletes)
    watchdog(cap_mb, row)
    if system_name == "pathway":
        return pathway_cell(row, inserts, deletes, batch, budget, workload_name)
    system: Any = DuckDB(workload_name) if system_name == "duckdb" else Ours(QUERIES[workload_name], system_name)
    row["engine"] = system.name
    ins, t_ins, c_ins, result = timed_phase(system, inserts, batch, budget)
    cpu_ins = CPU.pop("s")
    if ins < len(inserts):
        t0 = time.perf_counter()
        result = system.load(inserts[ins:])
        row["untimed_load_s"] = time.perf_counter() - t0
    row["after_inserts"] = result
    if probes and system_name not in ("duckdb",):
        p_done, t_p, _, _ = timed_phase(system, probes, 1, budget)
        row["probes_per_s"] = p_done / t_p if t_p else None
        row["probes_per_cpu_s"] = p_done / CPU.pop("s")
    dels, t_del, c_del, result = timed_phase(system, deletes, batch, budget)
    row.update(close_row(ins, t_ins, dels, t_del, c_ins + c_del, len(deletes)))
    row["both_per_cpu_s"] = (ins + dels) / (cpu_ins + CPU.pop("s"))
    row["result"] = result if dels == len(deletes) else None
    row.update(system.close())
    row["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def close_row(ins: int, t_ins: float, dels: int, t_del: float, commits: list[float], n_del: int) -> dict:
    commits = sorted(commits)
    return {
        "inserts_timed": ins,
        "deletes_timed": dels,
        "inserts_per_s": ins / t_ins if t_ins else None,
        "deletes_per_s": dels / t_del if t_del else None,
        "both_per_s": (ins + dels) / (t_ins + t_del) if t_ins + t_del else None,
        "commit_ms_mean": 1000 * sum(commits) / len(commits) if commits else None,
        "commit_ms_max": 1000 * commits[-1] if commits else None,
    }


def pathway_cell(row: dict, inserts: list[Update], deletes: list[Update], batch: int, budget: float, wl: str) -> dict:
    try:
        system = Pathway(wl)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        row["error"] = f"pathway not importable: {exc}"
        return row
    row["engine"] = "pathway"
    timings: dict[str, list[float]] = {"ins timed": [], "del timed": [], "load": []}
    counts: dict[str, int] = {"ins timed": 0, "del timed": 0, "load": 0}
    skipped: set = set()
    plan_ins = [("ins timed", b) for b in batches(inserts, batch)]
    # Untimed remainder: Pathway cannot be told mid-run which inserts were skipped, so the
    # feed replays the skipped insert batches as one load commit before the deletes.
    state = {"fed": 0}

    cpu: dict[str, float] = {"ins timed": 0.0, "del timed": 0.0, "load": 0.0}

    def on_phase(phase: str, seconds: float | None, n: int, cpu_s: float) -> None:
        if seconds is None:
            skipped.add(phase)
            return
        timings[phase].append(seconds)
        cpu[phase] += cpu_s
        counts[phase] += n
        if phase == "ins timed":
            state["fed"] += n
        # progress in the row, so that a cell stopped by the memory cap still reports what it measured
        row.update(
            close_row(
                counts["ins timed"],
                sum(timings["ins timed"]),
                counts["del timed"],
                sum(timings["del timed"]),
                timings["ins timed"] + timings["del timed"],
                len(deletes),
            )
        )
        row["phase"] = phase

    plan: list[tuple[str, Any]] = list(plan_ins)
    plan.append(("load", _Remainder(inserts, state)))
    plan += [("del timed", b) for b in batches(deletes, batch)]
    try:
        system.run(plan, budget, on_phase)
    except Exception as exc:  # report, never fake numbers
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    row.update(
        close_row(
            counts["ins timed"],
            sum(timings["ins timed"]),
            counts["del timed"],
            sum(timings["del timed"]),
            timings["ins timed"] + timings["del timed"],
            len(deletes),
        )
    )
    spent = cpu["ins timed"] + cpu["del timed"]
    row["both_per_cpu_s"] = (counts["ins timed"] + counts["del timed"]) / spent if spent else None
    if timings["load"]:
        row["untimed_load_s"] = timings["load"][0]
    row["result"] = system.result if counts["del timed"] == len(deletes) else None
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


def run_cell(args: argparse.Namespace, workload_name: str, system_name: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", workload_name, system_name, "--batch", str(args.batch)]
    cmd += ["--budget", str(args.budget), "--seed", str(args.seed), "--cap-mb", str(args.cap_mb)]
    cmd += ["--quick"] if args.quick else []
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.strip().splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"workload": workload_name, "system": system_name, "error": " | ".join(tail)}
    return json.loads(lines[-1])


def fmt(x: Any, digits: int = 0) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}"


def table(rows: list[dict]) -> str:
    head = (
        "| workload | system | inserts/s | deletes/s | both/s | both/CPU-s | ms/commit mean (max) | peak MB | result |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r and not r.get("inserts_per_s"):
            lines.append(f"| {r['workload']} | {r['system']} | error: {r['error'][:90]} | | | | | | |")
            continue
        partial = "" if r.get("inserts_timed") == r.get("n_inserts") else f" ({r['inserts_timed']:,} timed)"
        dpartial = "" if r.get("deletes_timed") == r.get("n_deletes") else f" ({r['deletes_timed']:,} timed)"
        name = r["system"] + (f" [{r['engine']}]" if r.get("engine") not in (None, r["system"]) else "")
        lines.append(
            f"| {r['workload']} | {name} | {fmt(r['inserts_per_s'])}{partial} | {fmt(r['deletes_per_s'])}{dpartial} "
            f"| {fmt(r['both_per_s'])} | {fmt(r.get('both_per_cpu_s'))} "
            f"| {fmt(r['commit_ms_mean'], 1)} ({fmt(r['commit_ms_max'], 0)}) "
            f"| {fmt(r.get('peak_mb'))} | {r.get('result') if r.get('result') is not None else 'partial'}"
            + (f"; {r['error']} (in phase {r.get('phase')})" if r.get("error") else "")
            + " |"
        )
    return "\n".join(lines)


def targets(rows: list[dict]) -> list[str]:
    def get(wl: str, system: str, key: str) -> float | None:
        for r in rows:
            if r["workload"] == wl and r["system"] == system:
                return r.get(key)
        return None

    out = []
    fb = "triangle/facebook"
    auto = get(fb, "auto", "both_per_s")
    best = max(x or 0 for x in (get(fb, "first_order", "both_per_s"), get(fb, "eps=0.5", "both_per_s")))
    pw_, dd = get(fb, "pathway", "both_per_s"), get(fb, "duckdb", "both_per_s")
    if auto:
        out.append(f"facebook auto {auto:,.0f} updates/s (target ≥ 80,000): {'met' if auto >= 80_000 else 'MISSED'}")
        if best:
            out.append(f"facebook auto / best of first_order, eps=0.5 = {auto / best:.2f} (target ≥ 1/1.2 = 0.83)")
        if pw_:
            note = "" if get(fb, "pathway", "deletes_timed") else " (pathway: inserts only, see its row)"
            out.append(f"facebook auto / pathway = {auto / pw_:.1f}x (target ≥ 20x){note}")
        if dd:
            out.append(f"facebook auto / duckdb = {auto / dd:.1f}x (target ≥ 50x)")
        out.append(f"facebook auto peak memory {get(fb, 'auto', 'peak_mb'):,.0f} MB (target ≤ 500 MB)")
    sk = "triangle/skewed"
    a, f = get(sk, "auto", "probes_per_s"), get(sk, "first_order", "probes_per_s")
    if a and f:
        out.append(f"skewed (N = {get(sk, 'auto', 'n_inserts'):,}) hub probes: auto / first_order = {a / f:.1f}x")
    a, f = get(sk, "auto", "both_per_s"), get(sk, "first_order", "both_per_s")
    if a and f:
        out.append(f"skewed stream inserts+deletes: auto / first_order = {a / f:.2f}x")
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(QUERIES)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4))
    for ax, wl in zip(axes, names, strict=True):
        cells = [r for r in rows if r["workload"] == wl and r.get("both_per_s")]
        ax.bar([r["system"] for r in cells], [r["both_per_s"] for r in cells], color="tab:blue")
        ax.set_yscale("log")
        ax.set_title(wl)
        ax.set_ylabel("updates/s (inserts + deletes)")
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
    parser.add_argument("--only", default=None, help="comma-separated workloads")
    parser.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "SYSTEM"))
    args = parser.parse_args()
    if args.budget is None:
        args.budget = 4.0 if args.quick else 20.0
    if args.worker:
        print(json.dumps(cell(*args.worker, args.batch, args.budget, args.quick, args.seed, args.cap_mb), default=str))
        return
    chosen = args.only.split(",") if args.only else list(QUERIES)
    rows = []
    for wl in chosen:
        for system in SYSTEMS[wl]:
            row = run_cell(args, wl, system)
            rows.append(row)
            extra = f" probes/s {fmt(row.get('probes_per_s'))}" if row.get("probes_per_s") else ""
            print(
                f"{wl:18} {system:18} both/s {fmt(row.get('both_per_s')):>10}{extra} {row.get('error', '')}", flush=True
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
    print(f"(batch {args.batch}, budget {args.budget:g} s per timed phase; 'partial': the timed phase hit the budget)")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "compare.json").write_text(json.dumps(rows, indent=1, default=str))
    plot(rows, OUT / "compare.png")
    print(f"saved {OUT / 'compare.json'} and {OUT / 'compare.png'}")


if __name__ == "__main__":
    main()
