"""Benchmark: the self-join triangle (IVM^eps App. B) and triangle listing (App. E) on the compiled state.

Both run IVM^eps at eps = 1/2 (``engine="auto"`` plans ``ivm_eps`` for them): the
self-join ``Q() :- E(a,b), E(b,c), E(c,a)`` keeps one partitioned relation and one
view (Figure 5, corrected), the listing ``Q(a,b,c) :- R(a,b), S(b,c), T(c,a)``
the count's partitions and views plus Q^L, the groups of W and F (Figure 13).
Systems, each run a fresh process: ``compiled`` (``implementation="compiled"``,
the default where the kernel is built), ``python`` (the reference) and, for the
self-join, ``plain`` (a plain-Python first-order loop over one dict of sets each
way: ``δQ = 3·m·|E(β,·) ∩ E(·,α)|``, no self-loops in these streams).

Workloads: ``selfjoin``: facebook's edges (``bench/first_order_kernel.py``'s
shuffled stream) as E in both orientations, inserted, then a random half
deleted; ``listing``: the first ``--listing-n`` updates of facebook's R, S, T
insert stream, then the first half of them deleted (the listing holds every
answer: the whole graph would hold 9.7 million).  Phases timed separately in
batches of ``--batches``; per cell the median of ``--repeat`` runs of updates/s
(wall and CPU), the peak RSS, the load average before each run; results checked
equal across systems.  ``--baseline TREE`` adds ``<system>@base`` rows with
another checkout's engines, alternately.

Usage::

    .venv/bin/python bench/triangle_variants.py --batches 1,1000
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
sys.path.insert(0, str(ROOT / "bench"))
OUT = ROOT / "bench" / "out"
QUERIES = {"selfjoin": "Q() :- E(a,b), E(b,c), E(c,a)", "listing": "Q(a,b,c) :- R(a,b), S(b,c), T(c,a)"}
Update = tuple[str, tuple[int, int], int]


def phases(workload: str, listing_n: int, seed: int) -> list[tuple[str, list[Update]]]:
    from first_order_kernel import facebook_phases

    (_, inserts), (_, deletes) = facebook_phases(seed)
    if workload == "selfjoin":  # R's copies of the stream are E in both orientations
        return [("insert", [("E", row, m) for r, row, m in inserts if r == "R"]),
                ("delete", [("E", row, m) for r, row, m in deletes if r == "R"])]  # fmt: skip
    inserts = inserts[:listing_n]
    return [("insert", inserts), ("delete", [(r, row, -m) for r, row, m in inserts[: len(inserts) // 2]])]


class PlainSelfJoin:
    """The plain-Python first-order self-join loop: one dict of sets each way, one update at a time."""

    name = "plain"

    def __init__(self) -> None:
        self.fwd: dict[int, set[int]] = {}
        self.bwd: dict[int, set[int]] = {}
        self.count = 0

    def apply(self, batch: list[Update]) -> None:
        fwd, bwd, empty = self.fwd, self.bwd, frozenset()
        for _, (x, y), m in batch:
            self.count += 3 * m * len(fwd.get(y, empty) & bwd.get(x, empty))
            if m > 0:
                fwd.setdefault(x, set()).add(y)
                bwd.setdefault(y, set()).add(x)
            else:
                fwd[x].discard(y)
                bwd[y].discard(x)

    def result(self) -> int:
        return self.count


def status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(workload: str, system: str, path: str, batch: int) -> dict[str, Any]:
    with open(path, "rb") as f:
        data: list[tuple[str, list[Update]]] = pickle.load(f)
    gc.collect()
    gc.freeze()
    if system == "plain":
        engine: Any = PlainSelfJoin()
    else:
        from ivm.engines.ivm_eps import IVMEps
        from ivm.query import parse

        engine = IVMEps(parse(QUERIES[workload]), eps=0.5, implementation=system)
    out: dict[str, Any] = {}
    for phase, stream in data:
        chunks = [stream[i : i + batch] for i in range(0, len(stream), batch)]
        c0, t0 = time.process_time(), time.perf_counter()
        for chunk in chunks:
            engine.apply(chunk)
        out[f"{phase}_s"] = time.perf_counter() - t0
        out[f"{phase}_cpu_s"] = time.process_time() - c0
        out[f"{phase}_n"] = len(stream)
    result = engine.result()
    out["result"] = len(result) if isinstance(result, dict) else result
    out["answers_sum"] = sum(result.values()) if isinstance(result, dict) else result
    out["peak_rss_mb"] = status_mb("VmHWM:")
    return out


def run(workload: str, system: str, path: Path, batch: int, tree: str | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", workload, system, "--path", str(path), "--batch", str(batch)]
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve() if tree else ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="selfjoin,listing")
    ap.add_argument("--systems", default="compiled,python,plain")
    ap.add_argument("--batches", default="1,1000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--listing-n", type=int, default=120_000, help="facebook R, S, T inserts of the listing")
    ap.add_argument("--baseline", help="another checkout: its engines run as <system>@base, alternately")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1000, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.path, args.batch)))
        return
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    for workload in args.workloads.split(","):
        path = OUT / f"variants_{workload}_{args.seed}_{args.listing_n}.pkl"
        if not path.exists():
            with open(path, "wb") as f:
                pickle.dump(phases(workload, args.listing_n, args.seed), f, protocol=pickle.HIGHEST_PROTOCOL)
        print(f"\n== {workload}: {QUERIES[workload]} ==", flush=True)
        print(f"{'system':<16} {'batch':>6} {'insert/s':>10} {'delete/s':>10} {'all/s':>10} {'all/CPU-s':>10} "
              f"{'peak MB':>8}  load avg        result", flush=True)  # fmt: skip
        systems = [s for s in args.systems.split(",") if workload == "selfjoin" or s != "plain"]
        if args.baseline:
            systems = [x for s in systems for x in ([s, f"{s}@base"] if s != "plain" else [s])]
        for batch in (int(b) for b in args.batches.split(",")):
            runs: dict[str, list[dict]] = {s: [] for s in systems}
            loads: dict[str, list[float]] = {s: [] for s in systems}
            for _ in range(args.repeat):
                for s in systems:  # alternately, each run a fresh process
                    loads[s].append(os.getloadavg()[0])
                    tree = args.baseline if s.endswith("@base") else None
                    runs[s].append(run(workload, s.removesuffix("@base"), path, batch, tree))
            results = {(r["result"], r["answers_sum"]) for rs in runs.values() for r in rs}
            assert len(results) == 1, f"systems disagree: {results}"
            for s in systems:
                rs = runs[s]
                n = rs[0]["insert_n"] + rs[0]["delete_n"]
                cells = [statistics.median(r[f"{p}_n"] / r[f"{p}_s"] for r in rs) for p in ("insert", "delete")]
                total = statistics.median(n / (r["insert_s"] + r["delete_s"]) for r in rs)
                cpu = statistics.median(n / (r["insert_cpu_s"] + r["delete_cpu_s"]) for r in rs)
                print(
                    f"{s:<16} {batch:>6} {cells[0]:>10,.0f} {cells[1]:>10,.0f} {total:>10,.0f} {cpu:>10,.0f} "
                    f"{statistics.median(r['peak_rss_mb'] for r in rs):>8.0f}  "
                    f"{'/'.join(f'{x:.1f}' for x in loads[s]):<14}  {rs[0]['result']:,}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
