"""Benchmark: the triangle's compiled state (first-order and IVM^eps partitions) vs Python, four streams.

First-order IVM (IVM^eps §1.1, App. A.1) costs O(min(deg_j(β), deg_k(α))) per
update whatever the implementation, IVM^eps O(N^max(eps,1-eps)) amortized
(Theorem 3); this script measures the constants of
``Q() :- R(a,b), S(b,c), T(c,a)``.  Systems (each cell a fresh process):

- ``auto``: ``ivm.maintain(query)`` (``engine="auto"``: the adaptive IVM^eps
  engine ``ivm_eps_auto``, on the compiled state in both of its modes: the
  first-order key sets while no relation is partitioned, IVM^eps's heavy/light
  partitions and views once the first-order work exceeds the partitioned
  estimate by |D| (the work rule, ``promote="work"``; ``auto@base`` of an older
  checkout may use the degree rule); the ``part`` column says when it partitioned),
- ``compiled``: ``FirstOrderIVM(implementation="compiled")`` (the compact state alone),
- ``auto_python``: the adaptive engine with ``implementation="python"`` (the reference),
- ``fo_python``: ``FirstOrderIVM(implementation="python")`` (``engine="first_order"``,
  the baseline of ``bench/compare.py``),
- ``plain``: the plain-Python first-order loop of the issue (:class:`PlainLoop`: a dict
  of sets per relation and direction, one update at a time, ~20 lines),
- ``native``: with ``--anchor SCRIPT``, an external native first-order loop (not part of
  this repository: a script that takes the facebook edge file and ``--seed`` and prints a
  JSON row, e.g. a C++ loop, tuple at a time), facebook only (its own copy of the same
  stream, same seed), once.

``--baseline TREE`` adds, for each system of ``--baseline-systems`` (``auto``),
a row ``<system>@base`` whose workers import the engines from another checkout
(e.g. ``git worktree add --detach /tmp/base main``, kernels built there), run
alternately with this tree's in the same sitting: old vs new on the same
streams, the ratio trustworthy on a shared machine.

Workloads: ``facebook`` (the anchor's stream: the undirected SNAP ego-Facebook
edges shuffled, each inserted as 6 updates R, S, T in both directions, then a
random half deleted the same way), ``skewed`` (``bench/compare.py``'s
``triangle/skewed``: a Chung-Lu graph of degree exponent 2.1 loaded, its
stationary update stream, then half of the remaining edges deleted; ``--skew-n``
tuples, 10^6 in compare.py), ``hubs`` (``bench/compare.py``'s ``triangle/hubs``:
the adversarial two-hub database of ``--hub-n`` tuples loaded, then its
stationary stream of N/10 updates, a share ``h`` of them toggling a hub-hub tuple;
one workload ``hubs-h`` per value of ``--hub-shares``) and ``adversarial``
(``triangle/adversarial``: the same database, then its 1,000 hub-hub probes,
each inserted and deleted, as the ``stream`` phase).  Phases ``insert``,
(``stream``,) ``delete``, each timed separately, in batches of ``--batches``
(one ``apply`` per batch).  The streams are built once, pickled under
``bench/out`` and loaded by each worker, which then calls ``gc.freeze()`` (the
input is not engine state).

Per cell: the median over ``--repeat`` runs of updates/s per phase and overall,
and overall per CPU second of the worker (the machine is shared: CPU time is
less disturbed by other jobs), the peak RSS of the worker (``VmHWM``) and its
RSS before the engine was built (stream loaded), the load average before each
run, the final count (checked equal across systems).  The ratios ``auto /
plain`` per batch are the issue's target (at least 5x at batch 1,000, at least
1x at batch 1).

Usage::

    .venv/bin/python bench/first_order_kernel.py                         # full table, ~20-30 min on 2 cores
    .venv/bin/python bench/first_order_kernel.py --batches 1,1000 --repeat 1 --workloads facebook
    .venv/bin/python bench/first_order_kernel.py --systems auto,plain --json bench/out/fo.json
    .venv/bin/python bench/first_order_kernel.py --workloads hubs,adversarial --systems auto,auto_python,plain \
        --batches 1,1000 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

EDGES = ROOT / "data" / "graphs" / "facebook_combined.edges.gz"
OUT = ROOT / "bench" / "out"
QUERY = "Q() :- R(a,b), S(b,c), T(c,a)"
SYSTEMS = ("auto", "compiled", "auto_python", "fo_python", "plain")
WORKLOADS = ("facebook", "skewed", "hubs", "adversarial")
Update = tuple[str, tuple[int, int], int]
Phases = list[tuple[str, list[Update]]]


def six(u: int, v: int, m: int) -> list[Update]:
    """One undirected edge as R, S, T in both orientations (the anchor's order)."""
    return [("R", (u, v), m), ("R", (v, u), m), ("S", (u, v), m), ("S", (v, u), m), ("T", (u, v), m), ("T", (v, u), m)]


def facebook_phases(seed: int) -> Phases:
    """Inserts then deletes, built exactly as the native anchor builds its stream."""
    import numpy as np

    e = np.loadtxt(EDGES, dtype=np.int64, comments="#", ndmin=2)[:, :2]
    e = e[e[:, 0] != e[:, 1]]
    und = np.unique(np.sort(e, axis=1), axis=0)
    ins = und[np.random.default_rng(seed).permutation(len(und))]
    dele = ins[np.random.default_rng(seed + 1).permutation(len(ins))[: len(ins) // 2]]
    inserts = [t for u, v in ins.tolist() for t in six(u, v, 1)]
    deletes = [t for u, v in dele.tolist() for t in six(u, v, -1)]
    return [("insert", inserts), ("delete", deletes)]


def skewed_phases(n: int, seed: int) -> Phases:
    """compare.py's ``triangle/skewed`` (load, stationary stream), then half of the final edges deleted."""
    import random

    from compare import FACEBOOK_DEGREE, SKEW_BETA, chung_lu_stream

    load, stream, _ = chung_lu_stream(n, seed, SKEW_BETA, FACEBOOK_DEGREE)
    present: dict[tuple[int, int], None] = {}
    for rel, row, m in load + stream:
        if rel == "R" and row[0] < row[1]:
            if m > 0:
                present[row] = None
            else:
                present.pop(row, None)
    edges = list(present)
    random.Random(seed + 1).shuffle(edges)
    deletes = [t for u, v in edges[: len(edges) // 2] for t in six(u, v, -1)]
    return [("insert", load), ("stream", stream), ("delete", deletes)]


def hub_phases(n: int, share: float, seed: int) -> Phases:
    """compare.py's ``triangle/hubs``: the two-hub database, then its stream with hub-hub share ``share``."""
    from compare import adversarial_load, hub_churn_stream

    load = adversarial_load(n, seed)
    stream, _ = hub_churn_stream(load, len(load) // 10, share, seed)
    return [("insert", load), ("stream", stream)]


def adversarial_phases(n: int, seed: int) -> Phases:
    """compare.py's ``triangle/adversarial``: the two-hub database, then 1,000 hub-hub probes (insert, delete)."""
    from compare import workload

    (_, load), (_, probes) = workload("triangle/adversarial", n < 1_000_000, seed)[0]
    if n not in (100_000, 1_000_000):
        from compare import adversarial_load

        load = adversarial_load(n, seed)
    return [("insert", load), ("stream", probes)]


class PlainLoop:
    """The plain-Python first-order loop: per relation a dict of sets each way, one update at a time.

    ``δR(x,y) = m·|S(y,·) ∩ T(·,x)|`` and the rotations (IVM^eps §1.1), set
    semantics (the streams insert absent and delete present tuples only).
    """

    name = "plain"

    def __init__(self) -> None:
        self.fwd: dict[str, dict[int, set[int]]] = {r: {} for r in "RST"}
        self.bwd: dict[str, dict[int, set[int]]] = {r: {} for r in "RST"}
        self.count = 0

    def apply(self, batch: list[Update]) -> None:
        fwd, bwd, empty = self.fwd, self.bwd, frozenset()
        nxt, prv = {"R": "S", "S": "T", "T": "R"}, {"R": "T", "S": "R", "T": "S"}
        for rel, (x, y), m in batch:
            self.count += m * len(fwd[nxt[rel]].get(y, empty) & bwd[prv[rel]].get(x, empty))
            if m > 0:
                fwd[rel].setdefault(x, set()).add(y)
                bwd[rel].setdefault(y, set()).add(x)
            else:
                fwd[rel][x].discard(y)
                bwd[rel][y].discard(x)

    def result(self) -> int:
        return self.count

    def stats(self) -> dict[str, Any]:
        return {}


def make(system: str) -> Any:
    """The engine (or loop) of ``system`` (see the module docstring)."""
    import ivm
    from ivm.engines.first_order.engine import FirstOrderIVM
    from ivm.engines.ivm_eps.adaptive import IVMEpsAdaptive
    from ivm.query import parse

    if system == "auto":
        return ivm.maintain(QUERY).engine
    if system == "compiled":
        return FirstOrderIVM(parse(QUERY), implementation="compiled")
    if system == "auto_python":
        return IVMEpsAdaptive(parse(QUERY), implementation="python")
    if system == "fo_python":
        return FirstOrderIVM(parse(QUERY), implementation="python")
    return PlainLoop()


def status_mb(field: str) -> float:
    """``VmRSS`` / ``VmHWM`` of this process in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(system: str, path: str, batch: int) -> dict:
    """One run: load the phases, time each in batches of ``batch`` (one ``apply`` each), wall and CPU."""
    with open(path, "rb") as f:
        phases: Phases = pickle.load(f)
    gc.collect()
    gc.freeze()  # the input stream is not engine state: no collection walks it
    out: dict[str, Any] = {"rss_before_mb": status_mb("VmRSS:")}
    engine = make(system)
    out["engine"] = getattr(engine, "name", system)
    for phase, stream in phases:
        chunks = [stream[i : i + batch] for i in range(0, len(stream), batch)]
        apply = engine.apply
        c0, t0 = time.process_time(), time.perf_counter()
        for chunk in chunks:
            apply(chunk)
        out[f"{phase}_s"] = time.perf_counter() - t0
        out[f"{phase}_cpu_s"] = time.process_time() - c0
        out[f"{phase}_n"] = len(stream)
        out[f"q_{phase}"] = engine.result()
        del chunks
    stats = engine.stats()
    out["partitioned"] = int(stats.get("partitioned", 0))
    out["promotions"] = int(stats.get("promotions", 0))
    out["peak_rss_mb"] = status_mb("VmHWM:")
    return out


def run(system: str, path: Path, batch: int, tree: str | None = None) -> dict:
    """One run of ``system`` in a fresh process; ``tree``: import the engines from that checkout."""
    cmd = [sys.executable, __file__, "--worker", system, "--path", str(path), "--batch", str(batch)]
    cmd += ["--tree", tree] if tree else []
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # no idle BLAS threads spinning
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(workload: str, system: str, batch: int, runs: list[dict], loads: list[float]) -> dict:
    """The medians of one cell's runs, printed as a table row."""
    phases = [p for p in ("insert", "stream", "delete") if f"{p}_n" in runs[0]]
    row: dict[str, Any] = {"workload": workload, "system": system, "batch": batch, "load": loads}
    for p in phases:
        row[f"{p}_per_s"] = statistics.median(r[f"{p}_n"] / r[f"{p}_s"] for r in runs)
    total = sum(runs[0][f"{p}_n"] for p in phases)
    row["all_per_s"] = statistics.median(total / sum(r[f"{p}_s"] for p in phases) for r in runs)
    row["all_per_cpu_s"] = statistics.median(total / sum(r[f"{p}_cpu_s"] for p in phases) for r in runs)
    row["peak_rss_mb"] = statistics.median(r["peak_rss_mb"] for r in runs)
    row["rss_before_mb"] = statistics.median(r["rss_before_mb"] for r in runs)
    row["partitioned"] = max(r["partitioned"] + r["promotions"] for r in runs)
    row["q"] = [runs[0][f"q_{p}"] for p in phases]
    row["engine"] = runs[0]["engine"]
    assert all([r[f"q_{p}"] for p in phases] == row["q"] for r in runs), "runs disagree"
    cells = [f"{row[f'{p}_per_s']:>11,.0f}" for p in phases]
    if phases == ["insert", "delete"]:
        cells.insert(1, f"{'-':>11}")
    elif phases == ["insert", "stream"]:
        cells.append(f"{'-':>11}")
    print(
        f"{system:<12} {batch:>6} {' '.join(cells)} {row['all_per_s']:>11,.0f} {row['all_per_cpu_s']:>11,.0f} "
        f"{row['peak_rss_mb']:>8.0f} {row['rss_before_mb']:>8.0f} {row['partitioned']:>4}  "
        f"{'/'.join(f'{x:.1f}' for x in loads):<14}  {row['q'][-1]:,}",
        flush=True,
    )
    return row


def anchor(script: Path, seed: int) -> dict:
    """The external native first-order loop ``script`` on facebook (same stream and seed)."""
    import gzip
    import tempfile

    with tempfile.NamedTemporaryFile("wb", suffix=".edges") as f:
        f.write(gzip.decompress(EDGES.read_bytes()))
        f.flush()
        cmd = [sys.executable, str(script), f.name, "--seed", str(seed)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,100,1000,10000")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--skew-n", type=int, default=1_000_000, help="tuples loaded by the skewed workload")
    ap.add_argument("--hub-n", type=int, default=1_000_000, help="tuples of the two-hub database (hubs, adversarial)")
    ap.add_argument("--hub-shares", default="0,0.01,0.1", help="hubs: shares of hub-hub toggles, one workload each")
    ap.add_argument("--baseline", help="another checkout whose engines run as <system>@base, alternately")
    ap.add_argument("--baseline-systems", default="auto", help="the systems also run from --baseline")
    ap.add_argument("--anchor", type=Path, help="an external native first-order loop timed beside (facebook)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1000, help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        if args.tree:  # the engines of another checkout (the baseline); this script's own code stays
            sys.path.insert(0, str(Path(args.tree).resolve()))
            for name in [m for m in sys.modules if m == "ivm" or m.startswith("ivm.")]:
                del sys.modules[name]
        print(json.dumps(worker(args.worker, args.path, args.batch)))
        return
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    workloads = []
    for workload in args.workloads.split(","):
        if workload == "hubs":
            workloads += [f"hubs-{float(h):g}" for h in args.hub_shares.split(",")]
        else:
            workloads.append(workload)
    systems = args.systems.split(",")
    if args.baseline:
        base = [s for s in args.baseline_systems.split(",") if s in systems and s != "plain"]
        systems = [x for s in systems for x in ([s, f"{s}@base"] if s in base else [s])]
    for workload in workloads:
        size = {"skewed": args.skew_n, "facebook": 0}.get(workload, args.hub_n)
        path = OUT / f"fo_{workload}_{args.seed}_{size}.pkl"
        if not path.exists():
            if workload == "facebook":
                phases = facebook_phases(args.seed)
            elif workload == "skewed":
                phases = skewed_phases(args.skew_n, args.seed)
            elif workload == "adversarial":
                phases = adversarial_phases(args.hub_n, args.seed)
            else:
                phases = hub_phases(args.hub_n, float(workload.split("-", 1)[1]), args.seed)
            with open(path, "wb") as f:
                pickle.dump(phases, f, protocol=pickle.HIGHEST_PROTOCOL)
        print(f"\n== {workload} ==", flush=True)
        head = f"{'system':<12} {'batch':>6} {'insert/s':>11} {'stream/s':>11} {'delete/s':>11} {'all/s':>11}"
        print(f"{head} {'all/CPU-s':>11} {'peak MB':>8} {'(stream)':>8} {'part':>4}  load avg        Q end", flush=True)
        for batch in (int(b) for b in args.batches.split(",")):
            for system in systems:
                if system.endswith("@base"):
                    continue  # runs alternately with its own system, below
                pair = [system, f"{system}@base"] if f"{system}@base" in systems else [system]
                runs_of: dict[str, list[dict]] = {s: [] for s in pair}
                loads_of: dict[str, list[float]] = {s: [] for s in pair}
                for _ in range(args.repeat):
                    for s in pair:  # old and new alternately, each run a fresh process
                        loads_of[s].append(os.getloadavg()[0])
                        tree = args.baseline if s.endswith("@base") else None
                        runs_of[s].append(run(s.removesuffix("@base"), path, batch, tree))
                for name in pair:
                    rows.append(summary(workload, name, batch, runs_of[name], loads_of[name]))
        engines = sorted({r["engine"] for r in rows if r["workload"] == workload and r["system"] == "auto"})
        if engines:
            print(f"auto ran: {', '.join(engines)} (part: runs in which it partitioned a relation)", flush=True)
        qs = {tuple(r["q"]) for r in rows if r["workload"] == workload}
        assert len(qs) == 1, f"systems disagree on {workload}: {qs}"
        if workload == "facebook" and args.anchor:
            a = anchor(args.anchor, args.seed)
            if a:
                assert (a["q_ins"], a["q_final"]) == tuple(qs.pop()), "the anchor's counts differ"
                rows.append({**a, "workload": workload, "system": "native"})
                print(
                    f"{'native':<12} {'tuple':>6} {a['ins_ups']:>11,} {'-':>11} {a['del_ups']:>11,} "
                    f"{a['all_ups']:>11,} {'-':>11} {a['peak_rss_mb']:>8.0f} {'-':>8} {'-':>4}  "
                    f"{os.getloadavg()[0]:.1f}            {a['q_final']:,}",
                    flush=True,
                )
    print("\nratios (all/s over the same workload and batch; in parentheses per CPU second):")
    by = {(r["workload"], r["system"], r.get("batch")): r["all_per_s"] for r in rows if "all_per_s" in r}
    cpu = {(r["workload"], r["system"], r.get("batch")): r["all_per_cpu_s"] for r in rows if "all_per_cpu_s" in r}
    natives = {r["workload"]: r["all_ups"] for r in rows if r["system"] == "native"}
    for (workload, system, batch), v in by.items():
        base = by.get((workload, "plain", batch))
        if system != "plain" and base:
            extra = f", {v / natives[workload]:.2f}x native" if workload in natives else ""
            c = cpu[(workload, system, batch)] / cpu[(workload, "plain", batch)]
            print(f"  {workload:<9} batch {batch:>5}: {system:<12} {v / base:6.2f}x plain ({c:.2f}x){extra}")
        old = by.get((workload, f"{system}@base", batch))
        if old:
            c = cpu[(workload, system, batch)] / cpu[(workload, f"{system}@base", batch)]
            print(f"  {workload:<9} batch {batch:>5}: {system:<12} {v / old:6.2f}x {system}@base ({c:.2f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
