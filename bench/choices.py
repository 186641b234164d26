"""Benchmark: the planner's data-dependent choices, each measured on several data shapes (issue 10).

Where the best answer depends on the data or the workload rather than on the
query's structure, the default should be the measured best.  Each choice below
is measured with every option on the same streams, in one run:

``engine/q-hier``
    The engine of a q-hierarchical query whose F-IVM view tree has update
    exponent 0 (``Q() :- R(a,b), S(a,c)`` and the group-by ``Q(a) :- ...``):
    ``qhier`` (Berkholz et al. Thm 3.2), ``fivm`` (F-IVM Thm 13; the same O(1)
    bounds), ``first_order_delta`` (1-IVM).  Commits of 1, 10 and 1,000 updates.
``consolidate``
    Whether ``qhier`` folds a batch into a Z-set (one update per tuple) before
    applying it: ``never``, ``always``, ``auto`` (the default rule: fold when
    the batch's duplicate rate reaches ``CONSOLIDATE_AT``), on
    ``Q(x,y) :- R(x,y), S(x,z)`` (still planned on qhier) with duplicate rates
    from 0 to about 0.85.
``materialize``
    F-IVM's μ (Fig. 8): every relation updatable (the default: every view with
    an updatable sibling stored) vs only S updatable (R and T declared static:
    fewer views to maintain, but an update to R or T re-evaluates every view),
    on the path count ``Q() :- R(a,b), S(b,c), T(c,d)`` where R and T are loaded
    first, then S changes and R is updated never, once in 20,000 or once in 500
    updates.
``engine/free-connex``
    The engine of a free-connex acyclic, not q-hierarchical count under
    arbitrary update patterns (``Q() :- R(a,b), S(b,c), T(c,d)``): ``fivm`` (the
    planner's rule 5), ``propagation`` (Hu & Wang; O(λ) amortized),
    ``first_order_delta``.  Commits of 1 and 1,000.
``triangle-eps``
    The triangle count's eps (``ivm_eps_auto``: first-order until a key's degree
    reaches λ·√N, then eps = 0.5 for that relation) for λ = 2, 8 (default), 32,
    against plain ``first_order`` and ``ivm_eps`` at eps = 0.5: a prefix of the
    facebook stream and the skewed stream of ``bench/triangles.py``, the first
    quarter deleted after the inserts.  Measured only: the adaptive engine is
    maintained elsewhere.

Data shapes (binary relations; join variables draw from a key domain of
n/25 values, the other attributes from 10^9 values):

- ``uniform``: insert-only, keys uniform;
- ``skewed``: insert-only, keys heavy-tailed (Zipf-like: key ``⌊K^U⌋`` for U
  uniform in [0, 1), so the k-th key has frequency ∝ 1/k);
- ``mixed``: uniform keys, 40% of the updates delete a live tuple;
- ``duplicates`` / ``hotP``: P% of the updates insert or delete one of 64 hot
  tuples (deletes only while present), the rest uniform inserts; at commits
  of 1,000 almost every hot update repeats a tuple of its batch.

Method: every (choice, shape) runs in a fresh process; its stream is built once
and frozen out of the garbage collector, then every (option, commit size) is
run ``--repeat`` times, interleaved in a rotating order (so that load from
other jobs on the shared machine, and the heap left by the previous run,
spread over the options), each from an empty state through
``ivm.maintain(...).apply`` (the path the processor takes), timed in CPU
seconds of the process (less disturbed by other jobs than wall time), and
stopped after ``--budget`` CPU seconds (the row then says how many updates
were timed).  A commit reads the result of a scalar query, as the processor
does after every batch; a group-by result (whose size, not the engine, would
dominate small commits) is read once at the end.  The median rate is reported.  Results of the options that
finished are checked equal.

Usage::

    .venv/bin/python bench/choices.py            # about 12 minutes on 2 shared cores
    .venv/bin/python bench/choices.py --quick    # small streams, one repetition, about a minute
    .venv/bin/python bench/choices.py --only consolidate,materialize

Prints one table per choice and a summary (measured best per shape next to the
current default); saves ``bench/out/choices.json`` and ``bench/out/choices.png``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

OUT = ROOT / "bench" / "out"
Update = tuple[str, tuple[Any, ...], int]
WIDE = 10**9
HOT_TUPLES = 64


@dataclass(frozen=True)
class Choice:
    """One data-dependent choice: the query, the options (label -> how to build the view), the shapes."""

    name: str
    query: str
    options: tuple[str, ...]
    shapes: tuple[str, ...]
    batches: tuple[int, ...] = (1000,)
    note: str = ""
    extra_queries: tuple[str, ...] = field(default=())


CHOICES = {
    c.name: c
    for c in (
        Choice(
            "engine/q-hier",
            "Q() :- R(a,b), S(a,c)",
            ("qhier", "fivm", "first_order_delta"),
            ("uniform", "skewed", "mixed", "duplicates"),
            (1, 10, 1000),
            "q-hierarchical, F-IVM tree with update exponent 0",
            ("Q(a) :- R(a,b), S(a,c)",),
        ),
        Choice(
            "consolidate",
            "Q(x,y) :- R(x,y), S(x,z)",
            ("never", "always", "auto"),
            ("uniform", "skewed", "mixed", "hot10", "hot25", "hot40", "hot60", "duplicates"),
            (100, 1000),
            "qhier: fold a batch into a Z-set first?",
        ),
        Choice(
            "materialize",
            "Q() :- R(a,b), S(b,c), T(c,d)",
            ("all updatable", "only S updatable"),
            ("static", "rare", "often"),
            (1, 1000),
            "F-IVM mu: R and T loaded first, then R updated never / 1 in 20,000 / 1 in 500 updates",
        ),
        Choice(
            "engine/free-connex",
            "Q() :- R(a,b), S(b,c), T(c,d)",
            ("fivm", "propagation", "first_order_delta"),
            ("uniform", "skewed", "mixed"),
            (1, 1000),
            "free-connex, not q-hierarchical, arbitrary patterns",
        ),
        Choice(
            "triangle-eps",
            "Q() :- R(a,b), S(b,c), T(c,a)",
            ("first_order", "eps=0.5", "auto λ=2", "auto λ=8", "auto λ=32"),
            ("facebook", "skewed"),
            (1000,),
            "measured only (ivm_eps_auto is maintained elsewhere)",
        ),
    )
}

SHAPES = {
    "uniform": {"keys": "uniform", "hot": 0.0, "deletes": 0.0},
    "skewed": {"keys": "zipf", "hot": 0.0, "deletes": 0.0},
    "mixed": {"keys": "uniform", "hot": 0.0, "deletes": 0.4},
    "duplicates": {"keys": "uniform", "hot": 0.8, "deletes": 0.0},
    **{f"hot{p}": {"keys": "uniform", "hot": p / 100, "deletes": 0.0} for p in (10, 25, 40, 60)},
}


# -- streams ------------------------------------------------------------------------------


def stream(query_text: str, shape: str, n: int, seed: int) -> list[Update]:
    """``n`` valid updates (no delete of an absent tuple) of the query's relations in ``shape``."""
    import ivm

    query = ivm.parse(query_text)
    spec = SHAPES[shape]
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for atom in query.atoms:
        for v in atom.variables:
            counts[v] = counts.get(v, 0) + 1
    join = {v for v, c in counts.items() if c > 1}
    atoms = {a.relation: a for a in query.atoms}
    relations = list(atoms)
    keys = max(n // 25, 10)

    def value(var: str) -> int:
        if var not in join:
            return rng.randrange(WIDE)
        if spec["keys"] == "zipf":
            return int(keys ** rng.random()) - 1
        return rng.randrange(keys)

    def fresh(relation: str) -> tuple[int, ...]:
        return tuple(value(t) if isinstance(t, str) else t for t in atoms[relation].terms)

    hot = [(r, fresh(r)) for r in (relations[i % len(relations)] for i in range(HOT_TUPLES))]
    present: dict[tuple[str, tuple[int, ...]], int] = {}
    live: list[tuple[str, tuple[int, ...]]] = []
    out: list[Update] = []
    while len(out) < n:
        u = rng.random()
        if u < spec["hot"]:
            key = hot[rng.randrange(len(hot))]
            m = -1 if present.get(key, 0) > 0 and rng.random() < 0.5 else 1
        elif u < spec["hot"] + spec["deletes"] and live:
            j = rng.randrange(len(live))
            live[j], live[-1] = live[-1], live[j]
            key, m = live.pop(), -1
        else:
            key, m = (relation := rng.choice(relations), fresh(relation)), 1
            if spec["deletes"]:
                live.append(key)
        present[key] = present.get(key, 0) + m
        out.append((key[0], key[1], m))
    return out


def materialize_stream(shape: str, n: int, seed: int) -> tuple[list[Update], list[Update]]:
    """(load, timed) for the materialization choice: R and T loaded, then S changes (and R, T at a rate)."""
    rng = random.Random(seed)
    keys = max(n // 25, 10)
    load = [("R", (rng.randrange(WIDE), rng.randrange(keys)), 1) for _ in range(n // 4)]
    load += [("T", (rng.randrange(keys), rng.randrange(WIDE)), 1) for _ in range(n // 4)]
    every = {"static": 0, "rare": 20_000, "often": 500}[shape]
    timed: list[Update] = []
    for i in range(n):
        if every and i % every == every - 1:
            timed.append(("R", (rng.randrange(WIDE), rng.randrange(keys)), 1))
        else:
            timed.append(("S", (rng.randrange(keys), rng.randrange(keys)), 1))
    return load, timed


def triangle_stream(shape: str, n: int, seed: int) -> list[Update]:
    """A triangle stream (``bench/triangles.py``): ``n`` inserts, then the first quarter deleted."""
    from triangles import facebook_stream, skewed_stream

    if shape == "facebook":
        inserts = facebook_stream(n, seed)
    else:
        seen: set[tuple[str, tuple[int, int]]] = set()
        inserts = []
        for r, row, m in skewed_stream(n, seed):
            if (r, row) not in seen:
                seen.add((r, row))
                inserts.append((r, row, m))
    return inserts + [(r, row, -1) for r, row, _ in inserts[: len(inserts) // 4]]


# -- options --------------------------------------------------------------------------------


def make_view(choice: Choice, query: str, option: str) -> Any:
    """The view for ``option`` of ``choice`` (``ivm.maintain`` with the engine and options it names)."""
    import ivm

    if choice.name == "consolidate":
        return ivm.maintain(query, engine="qhier", options={"consolidate": option})
    if choice.name == "materialize":
        options = None if option == "all updatable" else {"updatable": ["S"]}
        return ivm.maintain(query, engine="fivm", options=options)
    if choice.name == "triangle-eps":
        if option == "eps=0.5":
            return ivm.maintain(query, engine="ivm_eps", eps=0.5)
        if option.startswith("auto"):
            return ivm.maintain(query, engine="ivm_eps_auto", options={"skew": float(option.split("=")[1])})
        return ivm.maintain(query, engine=option)
    return ivm.maintain(query, engine=option)


def current_default(choice: Choice, query: str) -> str:
    """What the library does today when the user does not say (read from the code, not written down)."""
    import inspect

    import ivm
    from ivm.engines import ENGINES

    if choice.name.startswith("engine/"):
        return ivm.maintain(query).engine.name
    if choice.name == "consolidate":
        return str(inspect.signature(ENGINES["qhier"].__init__).parameters["consolidate"].default)
    if choice.name == "materialize":
        default = inspect.signature(ENGINES["fivm"].__init__).parameters["updatable"].default
        return "all updatable" if default is None else "only S updatable"
    skew = inspect.signature(ENGINES["ivm_eps_auto"].__init__).parameters["skew"].default
    return f"auto λ={skew:g}"


# -- one (choice, shape) in a fresh process ------------------------------------------------------


def run_once(
    make: Callable[[], Any], load: list[Update], timed: list[Update], batch: int, budget: float
) -> tuple[int, float, Any, dict[str, Any]]:
    """Apply ``load`` untimed, then ``timed`` in commits of ``batch`` until done or over ``budget`` CPU s."""
    view = make()
    if load:
        view.apply(load)
    scalar = not view.query.free
    gc.collect()
    done, cpu = 0, 0.0
    for i in range(0, len(timed), batch):
        chunk = timed[i : i + batch]
        c0 = time.process_time()
        view.apply(chunk)
        if scalar:
            view.result()  # a commit reads the result, as the processor does (group-by: once, at the end)
        cpu += time.process_time() - c0
        done += len(chunk)
        if cpu > budget:
            break
    result = view.result() if done == len(timed) else None
    choice = getattr(view.engine, "choice", None)
    info = choice() if callable(choice) else {}
    info.update({k: v for k, v in view.stats().items() if k in ("rebuilds", "materialized_views", "batches_folded")})
    return done, cpu, result, info


def cell(choice_name: str, shape: str, n: int, repeat: int, budget: float, seed: int) -> list[dict[str, Any]]:
    """Every (query, option, batch) of one (choice, shape), interleaved over ``repeat`` rounds."""
    from ivm.updates import duplicate_rate

    choice = CHOICES[choice_name]
    rows: list[dict[str, Any]] = []
    for query in (choice.query, *choice.extra_queries):
        load: list[Update] = []
        if choice.name == "materialize":
            load, timed = materialize_stream(shape, n, seed)
        elif choice.name == "triangle-eps":
            timed = triangle_stream(shape, n, seed)
        else:
            timed = stream(query, shape, n, seed)
        gc.collect()
        gc.freeze()  # the stream is permanent: keep it out of every collection
        runs: dict[tuple[str, int], list[tuple[int, float, Any, dict[str, Any]]]] = {}
        for round_ in range(repeat):
            k = round_ % len(choice.options)  # rotate the order: no option always runs after the same one
            for option in choice.options[k:] + choice.options[:k]:
                for batch in choice.batches:
                    runs.setdefault((option, batch), []).append(
                        run_once(lambda o=option, q=query: make_view(choice, q, o), load, timed, batch, budget)
                    )
        default = current_default(choice, query)
        for batch in choice.batches:
            dups = [duplicate_rate(timed[i : i + batch]) for i in range(0, len(timed), batch)]
            row: dict[str, Any] = {
                "choice": choice.name,
                "query": query,
                "shape": shape,
                "batch": batch,
                "updates": len(timed),
                "duplicate_rate": round(statistics.fmean(dups), 3),
                "default": default,
                "rates": {},
                "timed": {},
                "info": {},
            }
            results = {}
            for option in choice.options:
                measured = runs[(option, batch)]
                row["rates"][option] = statistics.median(d / c if c else 0.0 for d, c, _, _ in measured)
                row["timed"][option] = min(d for d, _, _, _ in measured)
                row["info"][option] = measured[-1][3]
                if measured[-1][2] is not None:
                    results[option] = measured[-1][2]
            row["best"] = max(row["rates"], key=row["rates"].get)
            row["default_vs_best"] = (
                row["rates"][default] / row["rates"][row["best"]] if default in row["rates"] else None
            )
            values = list(results.values())
            row["results_agree"] = all(v == values[0] for v in values)
            rows.append(row)
        gc.unfreeze()
    return rows


# -- the run --------------------------------------------------------------------------------


def fmt_rate(rate: float) -> str:
    return f"{rate / 1000:,.0f}k" if rate >= 10_000 else f"{rate / 1000:,.1f}k"


def print_tables(rows: list[dict[str, Any]]) -> None:
    for name, choice in CHOICES.items():
        mine = [r for r in rows if r["choice"] == name]
        if not mine:
            continue
        print(f"\n## {name}: {choice.note}")
        head = ["query", "shape", "batch", "dup rate", *choice.options, "best", "default"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in mine:
            cells = []
            for o in choice.options:
                text = fmt_rate(r["rates"][o])
                if r["timed"][o] < r["updates"]:
                    text += f" ({r['timed'][o]:,} timed)"
                cells.append(f"**{text}**" if o == r["best"] else text)
            agree = "" if r["results_agree"] else " (results differ!)"
            print(
                f"| {r['query']} | {r['shape']} | {r['batch']:,} | {r['duplicate_rate']:.2f} | "
                + " | ".join(cells)
                + f" | {r['best']} | {r['default']}{agree} |"
            )


def print_summary(rows: list[dict[str, Any]]) -> None:
    print("\n## summary: measured best per shape next to the current default (updates per CPU second)")
    print("| choice | query | shape | batch | measured best | current default | default / best |")
    print("|---|---|---|---:|---|---|---:|")
    for r in rows:
        ratio = r["default_vs_best"]
        print(
            f"| {r['choice']} | {r['query']} | {r['shape']} | {r['batch']:,} | {r['best']} "
            f"({fmt_rate(r['rates'][r['best']])}) | {r['default']} | {'' if ratio is None else f'{ratio:.2f}'} |"
        )


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in CHOICES if any(r["choice"] == n for r in rows)]
    fig, axes = plt.subplots(len(names), 1, figsize=(16, 3.6 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=True):
        choice = CHOICES[name]
        mine = [r for r in rows if r["choice"] == name]
        width = 0.8 / len(choice.options)
        for k, option in enumerate(choice.options):
            xs = [i + (k - (len(choice.options) - 1) / 2) * width for i in range(len(mine))]
            ys = [r["rates"][option] for r in mine]
            hatch = ["//" if r["default"] == option else "" for r in mine]
            bars = ax.bar(xs, ys, width, label=option)
            for bar, h in zip(bars, hatch, strict=True):
                bar.set_hatch(h)
        labels = []
        for r in mine:
            q = "" if r["query"] == choice.query else "\ngroup-by"
            labels.append(f"{r['shape']}{q}\nbatch {r['batch']:,}")
        ax.set_xticks(range(len(mine)), labels, fontsize=6 if len(mine) > 12 else 7)
        ax.set_yscale("log")
        ax.set_ylabel("updates / CPU s")
        ax.set_title(f"{name}: {choice.note} (hatched: the current default)", fontsize=9)
        ax.legend(fontsize=7, ncol=len(choice.options))
        ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small streams, one repetition")
    parser.add_argument("-n", type=int, default=None, help="updates per stream (100,000; 20,000 with --quick)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per option (3; 1 with --quick)")
    parser.add_argument("--budget", type=float, default=None, help="CPU seconds per run (3; 1 with --quick)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default=None, help=f"comma-separated choices of {', '.join(CHOICES)}")
    parser.add_argument("--out", default="choices", help="file stem of the JSON and PNG under bench/out/")
    parser.add_argument("--worker", nargs=2, metavar=("CHOICE", "SHAPE"))
    parser.add_argument("--tables", action="store_true", help="print the tables and redraw the plot of the saved run")
    args = parser.parse_args()
    if args.tables:
        saved = json.loads((OUT / f"{args.out}.json").read_text())
        print(json.dumps(saved["meta"]))
        print_tables(saved["rows"])
        print_summary(saved["rows"])
        plot(saved["rows"], OUT / f"{args.out}.png")
        return
    n = args.n or (20_000 if args.quick else 100_000)
    repeat = args.repeat or (1 if args.quick else 3)
    budget = args.budget or (1.0 if args.quick else 3.0)
    if args.worker:
        tri = args.worker[0] == "triangle-eps"
        rows = cell(*args.worker, 3 * n // 2 if tri else n, repeat, budget, args.seed)
        print(json.dumps(rows, default=str))
        return
    names = args.only.split(",") if args.only else list(CHOICES)
    load = os.getloadavg()
    print(f"load average before the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores)")
    rows: list[dict[str, Any]] = []
    for name in names:
        for shape in CHOICES[name].shapes:
            t0 = time.perf_counter()
            cmd = [sys.executable, __file__, "--worker", name, shape, "-n", str(n), "--repeat", str(repeat)]
            cmd += ["--budget", str(budget), "--seed", str(args.seed)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{name}/{shape} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            rows += json.loads(done.stdout.strip().splitlines()[-1])
            print(f"  {name} / {shape}: {time.perf_counter() - t0:.0f} s", flush=True)
    print_tables(rows)
    print_summary(rows)
    after = os.getloadavg()
    print(f"\nload average after the run: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}")
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"n": n, "repeat": repeat, "budget": budget, "seed": args.seed, "load_before": load, "load_after": after}
    (OUT / f"{args.out}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    plot(rows, OUT / f"{args.out}.png")
    print(f"saved {OUT / (args.out + '.json')} and {OUT / (args.out + '.png')}")


if __name__ == "__main__":
    main()
