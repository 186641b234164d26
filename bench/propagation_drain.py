"""Per-batch cost of the propagation engine's drain_delta against the result size.

The delta rule (ivm.engines.propagation.delta) against diffing two enumerations (what drain_delta
did before): the same 100-update batch of the hook query Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3) over
databases whose result grows from 10^3 to 10^5 answers.  Prints work units and milliseconds per drain.

    .venv/bin/python bench/propagation_drain.py
"""

from __future__ import annotations

import random
import time

import ivm
from ivm.engines.propagation import PropagationEngine
from ivm.updates import Update

QUERY = "Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)"


def database(n: int) -> list[Update]:
    out = [Update("R1", (i, i % (n // 10 + 1)), 1) for i in range(n)]
    out += [Update("R2", (b, b), 1) for b in range(n // 10 + 1)]
    out += [Update("R3", (b,), 1) for b in range(n // 10 + 1)]
    return out


def batch(n: int, rng: random.Random) -> list[Update]:
    out = [Update("R1", (n + k, rng.randrange(n // 10 + 1)), 1) for k in range(50)]
    out += [Update("R1", (k, k % (n // 10 + 1)), -1) for k in rng.sample(range(n), 50)]
    return out


def diff_drain(engine: PropagationEngine, last: dict) -> tuple[list, dict]:
    now = dict(engine.views.enumerate())
    out = [(r, m - last.get(r, 0)) for r, m in now.items() if m != last.get(r, 0)]
    out += [(r, -m) for r, m in last.items() if r not in now]
    return out, now


def main() -> None:
    rng = random.Random(1)
    print(f"{'answers':>9} {'delta work':>11} {'delta ms':>9} {'diff ms':>9} {'changes':>8}")
    for n in (1_000, 10_000, 100_000):
        engine = PropagationEngine(ivm.parse(QUERY))
        engine.apply(database(n))
        engine.drain_delta()
        last = dict(engine.views.enumerate())
        b = batch(n, rng)
        engine.apply(b)
        work = engine.delta.work
        t = time.perf_counter()
        delta = engine.drain_delta()
        ms = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        diff, _ = diff_drain(engine, last)
        diff_ms = (time.perf_counter() - t) * 1000
        assert dict(delta) == dict(diff)
        print(f"{len(last):>9,} {engine.delta.work - work:>11,} {ms:>9.2f} {diff_ms:>9.2f} {len(delta):>8}")


if __name__ == "__main__":
    main()
