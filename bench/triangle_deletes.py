"""Benchmark: the triangle's inserts against its deletes, beside the compiled first-order anchor (issue 38).

The stream of the first-order anchor loop ``native_fo.py`` (built again here from the same rule, so this
script needs nothing outside the repository): the undirected edges of ``data/graphs/facebook_combined.edges.gz``
(self-loops dropped, one row per edge) shuffled with ``default_rng(seed)``, each inserted as six updates
``R(u,v) R(v,u) S(u,v) S(v,u) T(u,v) T(v,u)``, then a random half (``default_rng(seed + 1)``) deleted the
same way.  The engine (``ivm.maintain(..., engine=--engine)``'s engine, ``apply`` of batches of ``--batch``
updates) runs in a fresh process; the clock is the process's CPU time (``time.process_time``) around the
``apply`` calls, split at the first delete.  The count after the inserts must be 6 x the triangles (the
anchor's check) and the final count the anchor's.  With ``--anchor PATH`` (the anchor's script, which is
not part of the repository) the anchor runs too, in its own process, on the same stream; its clock is its
own (wall time of the C++ loop, on a loaded machine an overestimate of its cost).

Memory.  ``peak MB`` is each process's peak RSS: the anchor holds its stream as one int32 array, and so does
the engine's process by default (``--input batches``: each batch's ``Update`` objects are made from the array
just before its ``apply``, outside the clock); ``--input rows`` makes all of them up front, as the first
version of this script did, which adds some 240 MB of Python objects to the engine's peak that are the
benchmark's input, not the engine's state.  ``state MB`` is the engine's own ``stats()["state_bytes"]``
after the inserts (its largest state) and ``base MB`` the process's RSS before the engine was built
(interpreter, numpy, the stream).

Run::

    .venv/bin/python bench/triangle_deletes.py [--anchor PATH/native_fo.py]
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GRAPH = ROOT / "data" / "graphs" / "facebook_combined.edges.gz"


def stream(seed: int) -> tuple[np.ndarray, int]:
    """``(rows (n, 4) of relation 0/1/2, a, b, multiplicity), inserts)``: native_fo.py's stream rule."""
    with gzip.open(GRAPH, "rt") as f:
        e = np.loadtxt(f, dtype=np.int64, comments="#", ndmin=2)[:, :2]
    e = e[e[:, 0] != e[:, 1]]
    und = np.unique(np.sort(e, axis=1), axis=0)
    ins = und[np.random.default_rng(seed).permutation(len(und))]
    dele = ins[np.random.default_rng(seed + 1).permutation(len(ins))[: len(ins) // 2]]

    def expand(edges: np.ndarray, m: int) -> np.ndarray:
        u, v = edges[:, 0], edges[:, 1]
        rel = np.tile(np.array([0, 0, 1, 1, 2, 2]), len(edges))
        a = np.stack([u, v, u, v, u, v], axis=1).reshape(-1)
        b = np.stack([v, u, v, u, v, u], axis=1).reshape(-1)
        return np.stack([rel, a, b, np.full(len(rel), m)], axis=1)

    return np.concatenate([expand(ins, 1), expand(dele, -1)]), 6 * len(ins)


def rss_mb() -> float:
    """The process's resident set now, MB (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
    except (OSError, StopIteration):
        return 0.0


def worker(engine_name: str, batch: int, seed: int, inputs: str = "batches") -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import ivm

    rec, n_ins = stream(seed)
    names = "RST"

    def make(part: np.ndarray) -> list[ivm.Update]:
        return [ivm.Update(names[r], (a, b), m) for r, a, b, m in part.tolist()]

    everything = make(rec) if inputs == "rows" else None
    base_mb = rss_mb()
    view = ivm.maintain("Q() :- R(a,b), S(b,c), T(c,a)", engine=engine_name)
    engine = view.engine
    ins_s = del_s = 0.0
    q_ins = None
    state_bytes = 0
    for start in range(0, len(rec), batch):
        chunk = everything[start : start + batch] if everything is not None else make(rec[start : start + batch])
        split = max(0, min(len(chunk), n_ins - start))
        for part, is_insert in ((chunk[:split], True), (chunk[split:], False)):
            if not part:
                continue
            t = time.process_time()
            engine.apply(part)
            spent = time.process_time() - t
            if is_insert:
                ins_s += spent
            else:
                del_s += spent
        if q_ins is None and start + batch >= n_ins:
            q_ins = None if start + batch > n_ins else engine.result()
            state_bytes = int(engine.stats().get("state_bytes", 0))  # (stats() outside the clock)
    n_del = len(rec) - n_ins
    stats = engine.stats()
    return {
        "system": f"{engine_name} ({type(engine).__name__})",
        "ins_ups": round(n_ins / ins_s),
        "del_ups": round(n_del / del_s),
        "all_ups": round(len(rec) / (ins_s + del_s)),
        "q_final": engine.result(),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "base_mb": round(base_mb),
        "state_mb": round(state_bytes / 2**20, 1),
        "bytes_per_tuple": stats.get("bytes_per_tuple"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--anchor", type=Path, metavar="PATH", help="also run the anchor loop native_fo.py at PATH")
    ap.add_argument(
        "--input",
        choices=("batches", "rows"),
        default="batches",
        help="make each batch's updates just before its apply (default), or all of them up front",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.engine, args.batch, args.seed, args.input)))
        return
    cmd = [sys.executable, __file__, "--worker", "--engine", args.engine, "--batch", str(args.batch)]
    cmd += ["--seed", str(args.seed), "--input", args.input]
    rows = [json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])]
    if args.anchor is not None:
        with tempfile.TemporaryDirectory() as d:
            edges = Path(d) / "facebook_combined.edges"
            edges.write_bytes(gzip.decompress(GRAPH.read_bytes()))
            out = subprocess.run(
                [sys.executable, str(args.anchor), str(edges), "--seed", str(args.seed)],
                check=True,
                capture_output=True,
                text=True,
            )
            rows.append(json.loads(out.stdout.splitlines()[-1]))
    header = "| system | inserts/s | deletes/s | deletes / inserts | all updates/s | final count | peak MB | base MB"
    print(header + " | state MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['system']} | {r['ins_ups']:,} | {r['del_ups']:,} | {r['del_ups'] / r['ins_ups']:.2f} | "
            f"{r['all_ups']:,} | {r['q_final']:,} | {r['peak_rss_mb']} | {r.get('base_mb', '-')} | "
            f"{r.get('state_mb', '-')} |"
        )
    if args.anchor is not None:
        print(f"peak memory, engine / anchor: {rows[0]['peak_rss_mb'] / rows[-1]['peak_rss_mb']:.2f}x")
    finals = {r["q_final"] for r in rows}
    if len(finals) != 1:
        raise SystemExit(f"final counts differ: {finals}")


if __name__ == "__main__":
    main()
