"""What a SQL selection or computed attribute costs where updates enter a view (ivm/query/expr.py).

The same stream of inserts into R(A, B) JOIN S(B, C) (grouped by A, maintained by the planner's engine)
under four queries: the plain join; a selection every update passes (the entry's pure overhead); a
selection half the updates fail (dropped before the engine); and SUM of a computed attribute. Prints the
time per update (µs, best of ``--repeat``) through ``View.apply`` and ``View.apply_admitted`` (the
runtime's path), and the updates applied and filtered.

    .venv/bin/python bench/sql_entry.py              # 200,000 updates, best of 3
    .venv/bin/python bench/sql_entry.py --n 20000    # seconds
"""

from __future__ import annotations

import argparse
import random
import time

import ivm
from ivm.query.sql import parse_sql

SCHEMA = {"R": ["A", "B"], "S": ["B", "C"]}
QUERIES = {
    "plain join": "SELECT R.A, COUNT(*) FROM R JOIN S USING (B) GROUP BY R.A",
    "selection, all pass": "SELECT R.A, COUNT(*) FROM R JOIN S USING (B) WHERE S.C >= 0 AND R.A >= 0 GROUP BY R.A",
    "selection, half fail": "SELECT R.A, COUNT(*) FROM R JOIN S USING (B) WHERE S.C % 2 = 0 OR S.C IS NULL "
    "GROUP BY R.A",
    "plain SUM(S.C)": "SELECT R.A, SUM(S.C) FROM R JOIN S USING (B) GROUP BY R.A",
    "SUM(S.C * 2 + 1)": "SELECT R.A, SUM(S.C * 2 + 1) FROM R JOIN S USING (B) GROUP BY R.A",
}


def stream(n: int, seed: int = 0) -> list[ivm.Update]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            out.append(ivm.Update("R", (rng.randrange(1000), rng.randrange(5000)), 1))
        else:
            out.append(ivm.Update("S", (rng.randrange(5000), rng.randrange(100)), 1))
    return out


def run(sql: str, updates: list[ivm.Update], admitted: bool, batch: int) -> tuple[float, int, int]:
    view = ivm.maintain(parse_sql(sql, SCHEMA))
    applied = filtered = 0
    start = time.perf_counter()
    for i in range(0, len(updates), batch):
        part = updates[i : i + batch]
        out = view.apply_admitted(part, finite=True) if admitted else view.apply(part)
        applied += out.applied
        filtered += out.filtered
    return time.perf_counter() - start, applied, filtered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    updates = stream(args.n)
    print(f"{args.n} inserts in batches of {args.batch}, best of {args.repeat}; µs per update")
    print(f"{'query':<24} {'apply':>8} {'admitted':>9} {'applied':>9} {'filtered':>9}")
    for label, sql in QUERIES.items():
        times = {}
        for admitted in (False, True):
            best = min(run(sql, updates, admitted, args.batch) for _ in range(args.repeat))
            times[admitted] = best
        seconds, applied, filtered = times[False]
        print(
            f"{label:<24} {seconds / args.n * 1e6:>8.2f} {times[True][0] / args.n * 1e6:>9.2f} "
            f"{applied:>9} {filtered:>9}"
        )


if __name__ == "__main__":
    main()
