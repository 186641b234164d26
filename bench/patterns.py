"""Benchmark: pattern-aware vs pattern-oblivious plans on windowed (FIFO) streams (Hu & Wang).

Every relation goes through one shared count window of N inserts (so the
streams are jointly FIFO, 003 §1.3, and N is the number of live tuples).
Per-update cost is measured after the window is full, against N.

- ``tpch``: ``Q() :- PART(p,c), PARTSUPP(s,p), SUPPLIER(s)`` (PART-like rows
  ``(part, catalogue entry)``), on the windowed form of Ex. 2.8's nesting: a
  hot part p, and every tick a new supplier, a new catalogue row of p and a
  PARTSUPP row of the supplier about to expire.
  *aware*: the FIFO tree (PARTSUPP on top, PART and SUPPLIER as FILTER leaves,
  Lemma 3.8), chosen from the declared joint FIFO;
  *oblivious*: a join tree picked without the patterns (rooted at PART,
  PART <- PARTSUPP <- SUPPLIER, Fig. 4's shape);
  *F-IVM*: the planner's choice when no pattern is declared.
- ``qhier``: ``Q() :- R1(x1,x2), R2(x2), R3(x1)`` on the same nesting (a hot
  x2 = b whose R2 tuple arrives again every tick); the oblivious tree is
  Fig. 4's R2 <- R1 <- R3 (λ > 1, Ex. 2.8).
- ``hook``: ``Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)`` on the OMv stream of
  Thm 3.9 (every lifespan 2n²): no O(1) plan exists; the engine runs its best
  free-connex tree and the cost per update grows.

Run::

    .venv/bin/python bench/patterns.py           # N up to 10^5 (a few minutes)
    .venv/bin/python bench/patterns.py --quick   # N up to 10^4 (well under a minute)

Prints a table (µs and work units per update, growth exponents) and saves
``bench/out/patterns.png`` and ``bench/out/patterns.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ivm.engines import ENGINES
from ivm.engines.propagation import PropagationEngine, rooted_tree
from ivm.patterns import CountWindow
from ivm.patterns.streams import hook_omv_stream
from ivm.query import parse
from ivm.query.plan import plan
from ivm.updates import Update

OUT = Path(__file__).resolve().parent / "out"
logging.getLogger("ivm.patterns").setLevel(logging.ERROR)


def windowed(ticks: list[list[Update]], size: int) -> tuple[list[Update], int]:
    """Push the inserts through one shared count window; returns the stream and where the window is full."""
    window = CountWindow(size)
    out: list[Update] = []
    full = 0
    for t, inserts in enumerate(ticks):
        for u in inserts:
            out += window.admit(u, t)
            out.append(u)
        if not full and len(out) >= size + 3 * len(inserts) and any(u.mult < 0 for u in out[-6:]):
            full = len(out)
    return out, full or len(out) // 2


def tpch_stream(n: int) -> tuple[list[Update], int]:
    """Ex. 2.8's nesting under a window of n inserts (3 per tick, so lifespans n/3 ticks)."""
    life = n // 3
    ticks = []
    for t in range(2 * life + 2000):
        tick = [Update("SUPPLIER", (f"s{t}",), 1), Update("PART", ("p", f"c{t}"), 1)]
        if t >= life - 1:
            tick.append(Update("PARTSUPP", (f"s{t - life + 1}", "p"), 1))  # its supplier expires next tick
        else:
            tick.append(Update("PARTSUPP", (f"s{t}", f"q{t}"), 1))
        ticks.append(tick)
    return windowed(ticks, n)


def qhier_stream(n: int) -> tuple[list[Update], int]:
    """The same nesting for Q_hier: every tick a new R3(a_t), one more copy of R2(b) (hot b)
    and R1(a, b) for the R3 tuple about to expire."""
    life = n // 3
    ticks = []
    for t in range(2 * life + 2000):
        tick = [Update("R3", (f"a{t}",), 1), Update("R2", ("b",), 1)]
        a = f"a{t - life + 1}" if t >= life - 1 else f"z{t}"
        tick.append(Update("R1", (a, "b"), 1))
        ticks.append(tick)
    return windowed(ticks, n)


OBLIVIOUS_ROOT = {"tpch": 0, "qhier": 1}  # PART <- PARTSUPP <- SUPPLIER; R2 <- R1 <- R3 (Fig. 4)
QUERIES = {
    "tpch": "Q() :- PART(p,c), PARTSUPP(s,p), SUPPLIER(s)",
    "qhier": "Q() :- R1(x1,x2), R2(x2), R3(x1)",
}


def plans(name: str) -> dict[str, Callable[[], Any]]:
    q = parse(QUERIES[name])
    joint = ["+".join(q.relations) + "=fifo"]
    out: dict[str, Callable[[], Any]] = {
        "aware (FIFO tree)": lambda: PropagationEngine(q, joint),
        "oblivious tree": lambda: PropagationEngine(q, tree=rooted_tree(q, OBLIVIOUS_ROOT[name])),
    }
    chosen = plan(q, registered=ENGINES).engine
    if chosen and chosen != "propagation":
        out[f"planner w/o patterns ({chosen})"] = lambda: ENGINES[chosen](q)
    return out


def measure(factory: Callable[[], Any], stream: list[Update], start: int, batch: int = 1) -> tuple[float, float, Any]:
    engine = factory()
    engine.apply(stream[:start])
    work0 = engine.stats().get("work", 0)
    rest = stream[start:]
    gc.collect()
    gc.disable()
    t0 = time.perf_counter()
    done = 0
    for k in range(0, len(rest), batch):  # at most ~3 s per point: slow plans are measured on a prefix
        engine.apply(rest[k : k + batch])
        done += len(rest[k : k + batch])
        if done % 256 == 0 and time.perf_counter() - t0 > 3:
            break
    dt = time.perf_counter() - t0
    gc.enable()
    work = engine.stats().get("work", 0) - work0
    answer = engine.result()
    return 1e6 * dt / done, work / done, answer


def slope(xs: list[float], ys: list[float]) -> float:
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def hook(sizes: list[int]) -> list[dict[str, Any]]:
    q = parse("Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)")
    rows = []
    for n in sizes:
        rng = random.Random(n)
        matrix = [[int(rng.random() < 0.5) for _ in range(n)] for _ in range(n)]
        vectors = [[int(rng.random() < 0.5) for _ in range(n)] for _ in range(n)]
        stream, probes = hook_omv_stream(matrix, vectors)
        engine = PropagationEngine(q)
        t0 = time.perf_counter()
        pos = 0
        for p in probes:
            engine.apply(stream[pos:p])
            pos = p
            sum(1 for _ in engine.answers())
        engine.apply(stream[pos:])
        dt = time.perf_counter() - t0
        stats = engine.stats()
        rows.append(
            {
                "n": n,
                "D": 3 * n * n,
                "us": 1e6 * dt / len(stream),
                "work": stats["work"] / len(stream),
                "plan": engine.plan.kind,
                "constant_time": engine.plan.constant_time,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = [1000, 3000, 10000] if args.quick else [1000, 3000, 10000, 30000, 100000]
    results: dict[str, Any] = {}
    for name in QUERIES:
        gen = tpch_stream if name == "tpch" else qhier_stream
        print(f"\n== {name}: {QUERIES[name]} (shared count window of N inserts: jointly FIFO)")
        print(f"{'plan':<34}" + "".join(f"{'N=' + str(n):>16}" for n in sizes) + f"{'exp(us)':>9}{'exp(work)':>10}")
        per: dict[str, Any] = {}
        streams = {n: gen(n) for n in sizes}
        for label, factory in plans(name).items():
            us, work, answers = [], [], []
            for n in sizes:
                stream, start = streams[n]
                limit = min(len(stream), start + 60000)
                a, b, r = measure(factory, stream[:limit], start)
                us.append(a)
                work.append(b)
                answers.append(r)
            e_us, e_work = slope(sizes, us), (slope(sizes, work) if any(work) else float("nan"))
            cells = "".join(
                f"{u:>9.1f}µs/{w:<5.0f}" if w else f"{u:>9.1f}µs      " for u, w in zip(us, work, strict=True)
            )
            print(f"{label:<34}{cells}{e_us:>9.2f}{e_work:>10.2f}")
            per[label] = {"us": us, "work": work, "exp_us": e_us, "exp_work": e_work, "result": answers}
        results[name] = {"sizes": sizes, "plans": per}
    hook_sizes = [6, 10, 16] if args.quick else [6, 10, 16, 24, 32]
    print("\n== hook: Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3) on the OMv stream of Thm 3.9 (jointly FIFO)")
    rows = hook(hook_sizes)
    for r in rows:
        print(
            f"n={r['n']:<4} |D|~{r['D']:<7} {r['us']:>8.1f} µs/update {r['work']:>8.1f} work/update "
            f"plan={r['plan']} constant_time={r['constant_time']}"
        )
    e = slope([r["D"] for r in rows], [r["work"] for r in rows])
    print(f"work growth exponent against |D|: {e:.2f} (no O(1) plan exists: Ω(√|D|^(1-ε)) under OMv, Thm 3.9)")
    results["hook"] = {"rows": rows, "exp_work": e}
    OUT.mkdir(exist_ok=True)
    (OUT / "patterns.json").write_text(json.dumps(results, indent=1, default=str))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, name in zip(axes, QUERIES, strict=False):
        for label, d in results[name]["plans"].items():
            ax.loglog(sizes, d["us"], marker="o", label=f"{label} (exp {d['exp_us']:.2f})")
        ax.set_title(f"{name}: windowed FIFO stream")
        ax.set_xlabel("N (live tuples)")
        ax.set_ylabel("µs per update")
        ax.legend(fontsize=7)
    ax = axes[2]
    ax.loglog([r["D"] for r in rows], [r["work"] for r in rows], marker="o", label=f"propagation (exp {e:.2f})")
    ax.set_title("Q_hook on the OMv stream (Thm 3.9)")
    ax.set_xlabel("|D| ~ 3n²")
    ax.set_ylabel("work units per update")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "patterns.png", dpi=120)
    print(f"\nsaved {OUT / 'patterns.png'} and {OUT / 'patterns.json'}")


if __name__ == "__main__":
    main()
