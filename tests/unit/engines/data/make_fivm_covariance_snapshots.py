"""Write ``fivm_covariance_7091176.pickle``: F-IVM covariance engines snapshotted by the code of commit 7091176.

That commit kept base relations as dicts of tuples and column stores as full ``k × k`` matrices with a
dict of keys; ``tests/unit/engines/test_fivm_compiled.py`` restores these snapshots with the current code.
Run from a checkout of 7091176 (``git worktree add /tmp/old 7091176``)::

    PYTHONPATH=/tmp/old python tests/unit/engines/data/make_fivm_covariance_snapshots.py OUT.pickle
"""

from __future__ import annotations

import pickle
import random
import sys

QUERIES = {
    "star": ("Q(COVAR(a1, a2, b1, c1)) :- A(k, a1, a2), B(k, b1), C(k, c1)", False),
    "groupby": ("Q(k, COVAR(a, b)) :- R(k, a), S(k, b)", False),
    "chain_exact": ("Q(COVAR(a, b, c, d)) :- R(a, b), S(b, c), T(c, d)", True),
}


def stream(relations: dict[str, int], seed: int, n: int, floats: bool) -> list[tuple[str, tuple, int]]:
    """Inserts and deletes of live tuples; int keys, features floats (or ints); multiplicities -2..3."""
    rng = random.Random(seed)
    live: dict[tuple[str, tuple], int] = {}
    out = []
    for _ in range(n):
        if live and rng.random() < 0.3:
            (rel, row), m = rng.choice(sorted(live.items()))
            mult = -m if rng.random() < 0.5 else rng.choice([-1, 1])
        else:
            rel = rng.choice(sorted(relations))
            values = [0.5, 1.0, 2.25, -3.0] if floats else [1, 2, -3, 0]
            row = tuple(rng.randrange(0, 6) if i == 0 else rng.choice(values) for i in range(relations[rel]))
            mult = rng.choice([1, 1, 2, 3, -1])
        live[(rel, row)] = live.get((rel, row), 0) + mult
        if not live[(rel, row)]:
            del live[(rel, row)]
        out.append((rel, row, mult))
    return out


def main() -> None:
    import ivm
    from ivm.engines.fivm import FIVM

    out = {}
    for name, (text, exact) in QUERIES.items():
        query = ivm.parse(text)
        engine = FIVM(query, exact=exact)
        updates = stream(dict(query.relations), len(name), 300, not exact)
        for start in range(0, len(updates), 25):
            engine.apply(updates[start : start + 25])
        out[name] = engine.snapshot()
    with open(sys.argv[1], "wb") as f:
        pickle.dump(out, f)


if __name__ == "__main__":
    main()
