"""Benchmark: per-update time of IVM^eps (eps = 1/2) vs first-order IVM vs recomputation.

IVM^eps Theorem 3 predicts O(N^max(eps,1-eps)) = O(N^{1/2}) amortized per
update at eps = 1/2, against O(N) for classical first-order IVM (intersecting
two linear-length adjacency lists) and O(N^{3/2}) for recomputation.  This
script measures the per-update time as the database grows and fits each
method's growth exponent (the slope of log time against log N).

Streams (both deterministic for a seed):

(a) ``facebook``: SNAP ego-Facebook, each undirected edge inserted into R, S
    and T in both orientations (6 tuples per edge; the full graph is 529,404
    tuples, so this stream stops there).  At each size N the database is the
    stream's first N tuples; the probes delete and re-insert random present
    tuples.
(b) ``skewed``: an adversarial stream for first-order IVM.  Two hubs take
    half of the N tuples as spokes ``K(hub, v)`` and ``K(v, hub)`` in every
    relation, so hub degrees grow as N/24; the rest are random edges over
    N/4 vertices.  The probes insert and delete hub-hub tuples, whose
    first-order delta intersects two hub lists of length Θ(N).

For each (stream, method, N) a fresh process builds the database by
single-tuple inserts (the "build" column is the amortized time per insert,
rebalancing included), then times the probe updates (the "update" column).
The peak resident memory of that process is reported.  Recomputation
re-counts all triangles after every update and runs only at the small sizes.

Usage::

    .venv/bin/python bench/triangles.py            # sizes 1e4 .. 1e6, a few minutes on 2 cores
    .venv/bin/python bench/triangles.py --quick    # sizes 1e4 .. 1e5, well under a minute
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "bench" / "out"
QUERY = "Q() :- R(a,b), S(b,c), T(c,a)"
METHODS = ("ivm_eps", "first_order", "recompute")
Update = tuple[str, tuple[int, int], int]


# -- streams ---------------------------------------------------------------------------


def facebook_stream(n: int, seed: int) -> list[Update]:
    """The first ``n`` tuples of the facebook edge stream (edges shuffled by ``seed``)."""
    from ivm.processor.data import facebook_edges

    edges = facebook_edges()
    random.Random(seed).shuffle(edges)
    out: list[Update] = []
    for u, v in edges:
        for row in ((u, v), (v, u)):
            for relation in "RST":
                out.append((relation, row, 1))
        if len(out) >= n:
            break
    return out[:n]


def skewed_stream(n: int, seed: int) -> list[Update]:
    """``n`` tuples: half are spokes of two hubs in every relation and orientation."""
    rng = random.Random(seed)
    hubs, pool = 2, max(n // 4, 10)
    out: list[Update] = []
    for t in range(n // 2):
        relation = "RST"[t % 3]
        hub = (t // 3) % hubs
        v = hubs + rng.randrange(pool)
        out.append((relation, (hub, v) if (t // 6) % 2 == 0 else (v, hub), 1))
    for _ in range(n - n // 2):
        out.append((rng.choice("RST"), (hubs + rng.randrange(pool), hubs + rng.randrange(pool)), 1))
    rng.shuffle(out)
    return out


def probes(stream_name: str, base: list[Update], count: int, seed: int) -> list[Update]:
    """``count`` probe updates (pairs that leave the database as it was)."""
    rng = random.Random(seed + 1)
    out: list[Update] = []
    for p in range(count // 2):
        if stream_name == "skewed":
            relation = "RST"[p % 3]
            row = (0, 1) if p % 2 else (1, 0)
            out += [(relation, row, 1), (relation, row, -1)]
        else:
            relation, row, _ = base[rng.randrange(len(base))]
            out += [(relation, row, -1), (relation, row, 1)]
    return out


# -- the recomputation baseline ----------------------------------------------------------


class Recompute:
    """Keeps R, S, T indexed and re-counts all triangles after every update.

    The count ``Σ_{(a,b)∈R} Σ_c S(b,c)·T(c,a)`` intersects the smaller of the
    two lists per R-tuple: O(|D|^{3/2}) per update in the worst case.
    """

    def __init__(self) -> None:
        self.fwd: dict[str, dict[int, dict[int, int]]] = {r: {} for r in "RST"}
        self.bwd: dict[str, dict[int, dict[int, int]]] = {r: {} for r in "RST"}
        self.count = 0

    def _add(self, relation: str, x: int, y: int, m: int) -> None:
        for index, key, other in ((self.fwd[relation], x, y), (self.bwd[relation], y, x)):
            row = index.setdefault(key, {})
            new = row.get(other, 0) + m
            if new:
                row[other] = new
            else:
                del row[other]
                if not row:
                    del index[key]

    def load(self, updates: list[Update]) -> None:
        for relation, (x, y), m in updates:
            self._add(relation, x, y, m)
        self.count = self.recount()

    def apply(self, updates: list[Update]) -> None:
        for relation, (x, y), m in updates:
            self._add(relation, x, y, m)
            self.count = self.recount()

    def recount(self) -> int:
        s_fwd, t_bwd = self.fwd["S"], self.bwd["T"]
        total = 0
        for a, row in self.fwd["R"].items():
            into_a = t_bwd.get(a)
            if not into_a:
                continue
            for b, r in row.items():
                out_b = s_fwd.get(b)
                if not out_b:
                    continue
                small, big = (out_b, into_a) if len(out_b) <= len(into_a) else (into_a, out_b)
                total += r * sum(m * big[c] for c, m in small.items() if c in big)
        return total

    def result(self) -> int:
        return self.count


# -- one measurement (runs in its own process) ------------------------------------------


def measure(stream_name: str, method: str, n: int, n_probes: int, seed: int) -> dict:
    from ivm.engines.first_order import FirstOrderIVM
    from ivm.engines.ivm_eps import IVMEps
    from ivm.query import parse

    base = facebook_stream(n, seed) if stream_name == "facebook" else skewed_stream(n, seed)
    probe = probes(stream_name, base, n_probes, seed)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    query = parse(QUERY)
    if method == "ivm_eps":
        engine = IVMEps(query, eps=0.5)
    elif method == "first_order":
        engine = FirstOrderIVM(query)
    else:
        engine = Recompute()
    start = time.perf_counter()
    if method == "recompute":
        engine.load(base)  # the baseline's own build: one count at the end
    else:
        for i in range(0, len(base), 1000):
            engine.apply(base[i : i + 1000])
    build = time.perf_counter() - start
    start = time.perf_counter()
    for update in probe:
        engine.apply([update])
    elapsed = time.perf_counter() - start
    stats = engine.stats() if hasattr(engine, "stats") else {}
    return {
        "stream": stream_name,
        "method": method,
        "n": len(base),
        "build_us": 1e6 * build / len(base),
        "update_us": 1e6 * elapsed / len(probe),
        "probes": len(probe),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "data_mb": rss_before / 1024,
        "result": engine.result(),
        "majors": stats.get("major_rebalances", 0),
    }


def run_worker(stream_name: str, method: str, n: int, n_probes: int, seed: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", stream_name, method, str(n), str(n_probes), str(seed)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def fit_exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(time) against log(N)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sizes 1e4..1e5 and fewer probes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--worker", nargs=5, metavar=("STREAM", "METHOD", "N", "PROBES", "SEED"))
    args = parser.parse_args()
    if args.worker:
        stream_name, method, n, n_probes, seed = args.worker
        print(json.dumps(measure(stream_name, method, int(n), int(n_probes), int(seed))))
        return

    if args.quick:
        sizes = [10_000, 30_000, 100_000]
        recompute_sizes = [3_000, 10_000, 30_000]
        n_probes, recompute_probes = 400, 4
    else:
        sizes = [10_000, 30_000, 100_000, 300_000, 1_000_000]
        recompute_sizes = [10_000, 30_000, 100_000]
        n_probes, recompute_probes = 2000, 4
    facebook_max = 6 * 88_234
    rows: list[dict] = []
    print(f"{'stream':9} {'method':12} {'N':>9} {'update µs':>11} {'build µs':>9} {'peak MB':>8} {'result':>12}")
    for stream_name in ("facebook", "skewed"):
        for method in METHODS:
            grid = recompute_sizes if method == "recompute" else sizes
            if stream_name == "facebook":
                grid = sorted({min(n, facebook_max) for n in grid})
            for n in grid:
                count = recompute_probes if method == "recompute" else n_probes
                row = run_worker(stream_name, method, n, count, args.seed)
                rows.append(row)
                print(
                    f"{stream_name:9} {method:12} {row['n']:>9} {row['update_us']:>11.2f} "
                    f"{row['build_us']:>9.2f} {row['peak_mb']:>8.0f} {row['result']:>12}",
                    flush=True,
                )
    # The same database must give the same count under every method.
    counts: dict[tuple[str, int], set[int]] = {}
    for row in rows:
        counts.setdefault((row["stream"], row["n"]), set()).add(row["result"])
    disagreements = {k: v for k, v in counts.items() if len(v) > 1}
    print("\ncounts agree across methods:", "yes" if not disagreements else f"NO {disagreements}")

    print(f"\n{'stream':9} {'method':12} {'exponent':>9} {'sizes':>22} {'peak MB at max N':>17}")
    summary: dict[str, dict[str, float]] = {}
    for stream_name in ("facebook", "skewed"):
        for method in METHODS:
            pts = [(r["n"], r["update_us"]) for r in rows if r["stream"] == stream_name and r["method"] == method]
            exponent = fit_exponent(pts)
            peak = max(r["peak_mb"] for r in rows if r["stream"] == stream_name and r["method"] == method)
            summary.setdefault(stream_name, {})[method] = exponent
            span = f"{pts[0][0]:.0e}..{pts[-1][0]:.0e}"
            print(f"{stream_name:9} {method:12} {exponent:>9.2f} {span:>22} {peak:>17.0f}")
    for stream_name in ("facebook", "skewed"):
        top = max(r["n"] for r in rows if r["stream"] == stream_name and r["method"] == "ivm_eps")
        at = {r["method"]: r["update_us"] for r in rows if r["stream"] == stream_name and r["n"] == top}
        print(
            f"{stream_name}: at N = {top}, first-order / ivm_eps per-update time = "
            f"{at['first_order'] / at['ivm_eps']:.1f}x"
        )
    print("(recomputation is measured only at the small sizes and re-counts after every update)")
    print("(facebook stops at its full size, 529,404 tuples)")

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "triangles.json").write_text(json.dumps(rows, indent=1))
    plot(rows, summary, OUT / "triangles.png")
    print(f"\nsaved {OUT / 'triangles.png'} and {OUT / 'triangles.json'}")


def plot(rows: list[dict], summary: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, stream_name in zip(axes, ("facebook", "skewed"), strict=True):
        for method, marker in zip(METHODS, "osx", strict=True):
            pts = [(r["n"], r["update_us"]) for r in rows if r["stream"] == stream_name and r["method"] == method]
            label = f"{method} (slope {summary[stream_name][method]:.2f})"
            ax.loglog([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=label)
        ax.set_title(f"{stream_name} stream")
        ax.set_xlabel("N (tuples)")
        ax.set_ylabel("time per update (µs)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("Triangle count: IVM^eps (eps = 1/2) vs first-order IVM vs recomputation")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
