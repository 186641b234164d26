"""The batch path of F-IVM (grouped array operations, :mod:`ivm.engines.fivm.columnar`) against the Python reference.

Differential: the same random insert/delete streams (multiplicities -3..3,
self-joins, repeated variables, group-by and Boolean covariance queries,
batches of 1 to 60) go to ``implementation="numpy"`` and
``implementation="python"``; after every batch the results, the answers and
every stored view's payloads must be equal: exactly for integer payloads,
to 1e-9 relative for float payloads.  Also: updatable subsets (re-evaluation),
``drain_delta`` and snapshot/restore of the columnar state.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import ivm
from ivm.engines.fivm import FIVM
from ivm.engines.fivm import engine as fivm_engine
from ivm.rings.covariance import Covariance
from tests.unit.engines.test_fivm_duckdb import random_query

COMPILED = fivm_engine.Path is not None  # the compiled covariance path (_covar_kernel.pyx) is built


def stream(query: ivm.Query, rng: random.Random, n: int, floats: bool) -> list[ivm.Update]:
    live: dict[tuple[str, tuple], int] = {}
    out = []
    rels = dict(query.relations)
    for _ in range(n):
        if live and rng.random() < 0.35:
            (rel, row), m = rng.choice(sorted(live.items()))
            mult = -m if rng.random() < 0.6 else rng.choice([-1, 1])
        else:
            rel = rng.choice(sorted(rels))
            row = tuple(
                rng.choice([0.5, 1.25, -2.0, 3.0]) if floats else rng.randrange(-2, 4) for _ in range(rels[rel])
            )
            mult = rng.choice([1, 1, 2, 3, -1])
        live[(rel, row)] = live.get((rel, row), 0) + mult
        if not live[(rel, row)]:
            del live[(rel, row)]
        out.append(ivm.Update(rel, row, mult))
    return out


def same(a: object, b: object, floats: bool) -> bool:
    if isinstance(a, Covariance) and isinstance(b, Covariance):
        return a.is_close(b, rel=1e-9, abs_=1e-9) if floats else a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], floats) for k in a)
    return a == b


def check(fast: FIVM, ref: FIVM, floats: bool, where: str) -> None:
    assert same(fast.result(), ref.result(), floats), where
    assert dict(fast.enumerate()) == dict(ref.enumerate()), where
    fast_views, ref_views = fast.views(), ref.views()
    assert fast_views.keys() == ref_views.keys(), where
    for name, payloads in ref_views.items():
        # float payloads that cancel to ~0 are deleted by both; a key both keep must agree
        assert same(fast_views[name], payloads, floats), f"{where}: view {name}"


@pytest.mark.parametrize("floats", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_numpy_batches_equal_python_reference(seed: int, floats: bool) -> None:
    rng = random.Random(7000 + seed)
    query = random_query(rng, "covariance")
    fast = FIVM(query, implementation="numpy", exact=not floats)
    ref = FIVM(query, implementation="python", exact=not floats)
    assert fast.implementation == "numpy" and ref.implementation == "python"
    updates = stream(query, rng, 240, floats)
    start = 0
    while start < len(updates):
        size = rng.choice([1, 2, 7, 25, 60])
        batch = updates[start : start + size]
        fast.apply(batch)
        ref.apply(batch)
        check(fast, ref, floats, f"{query} after {start + size}")
        start += size
    if not floats:  # exact payloads stay Python ints
        result = fast.result()
        if isinstance(result, Covariance):
            assert all(type(x) is int for x in result.Q.ravel())


@pytest.mark.parametrize("seed", range(10))
def test_numpy_with_updatable_subset_drain_and_snapshot(seed: int) -> None:
    rng = random.Random(9100 + seed)
    query = random_query(rng, "covariance")
    rels = sorted(query.relations)
    fast = FIVM(query, updatable=rels[:1], implementation="numpy")
    ref = FIVM(query, updatable=rels[:1], implementation="python")
    assert fast.drain_delta() == ref.drain_delta()
    updates = stream(query, rng, 150, False)
    for start in range(0, len(updates), 15):
        batch = updates[start : start + 15]
        fast.apply(batch)
        ref.apply(batch)
        check(fast, ref, False, str(query))
        assert fast.drain_delta() == ref.drain_delta(), str(query)
        if start == 60:
            fast = FIVM.restore(fast.snapshot())
    assert fast.stats()["rebuilds"] == ref.stats()["rebuilds"] > 0 or len(rels) == 1


@pytest.mark.parametrize("implementation", ["numpy", "auto"])
def test_housing_shaped_star_float_matches_numpy_oracle(implementation: str) -> None:
    """A star on one key with several features per relation: the root equals Mᵀ M of the materialized join."""
    rng = np.random.default_rng(3)
    query = ivm.parse("Q(COVAR(a1, a2, b1, c1, c2, c3)) :- A(k, a1, a2), B(k, b1), C(k, c1, c2, c3)")
    rows = {
        "A": [(int(k), *map(float, rng.uniform(0, 9, 2))) for k in rng.integers(0, 30, 200)],
        "B": [(int(k), float(rng.uniform(0, 9))) for k in rng.integers(0, 30, 80)],
        "C": [(int(k), *map(float, rng.uniform(0, 9, 3))) for k in rng.integers(0, 30, 120)],
    }
    engine = FIVM(query, exact=False, implementation=implementation)
    updates = [ivm.Update(r, row, 1) for r, rs in rows.items() for row in rs]
    random.Random(1).shuffle(updates)
    gone = updates[::3]
    for start in range(0, len(updates), 50):
        engine.apply(updates[start : start + 50])
    engine.apply([ivm.Update(u.relation, u.row, -1) for u in gone])
    live = {r: [row for row in rs if ivm.Update(r, row, 1) not in gone] for r, rs in rows.items()}
    design = [
        [1.0, *a[1:], *b[1:], *c[1:]]
        for a in live["A"]
        for b in live["B"]
        if b[0] == a[0]
        for c in live["C"]
        if c[0] == a[0]
    ]
    M = np.array(design)
    assert engine.implementation == ("compiled" if implementation == "auto" and COMPILED else "numpy")
    np.testing.assert_allclose(engine.result().matrix(), M.T @ M, rtol=1e-12)
    per = {k: v for k, v in engine.stats().items() if k.startswith("bytes_per_payload[")}
    assert per["bytes_per_payload[V^{@a1}_{A}]"] == (1 + 2 + 3) * 8  # support {a1, a2}: c, s, Q's upper triangle
    assert per["bytes_per_payload[V^{@k}_{A,B,C}]"] == (1 + 6 + 21) * 8  # the root: the whole matrix
