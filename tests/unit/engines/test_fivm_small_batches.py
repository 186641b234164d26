"""F-IVM's columnar row path for small deltas (:func:`ivm.engines.fivm.columnar.row_delta`) against references.

A delta of at most ``small_delta`` keys goes up the view tree one row at a time
over the same column stores as the grouped kernel (F-IVM §4, Fig. 7; §6.2's
sized covariance payloads).  Differential tests, on random insert/delete
streams with multiplicities -3..3 cut into batches of 1, 2, 7 and 100 in one
stream:

- the covariance ring, ``implementation="numpy"`` (the default threshold,
  the row path forced for every delta, and the grouped kernel alone) against
  ``implementation="python"``: the result, ``enumerate()``, ``drain_delta()`` and
  every stored view after every batch (floats to 1e-9 relative), with a
  snapshot round trip of both engines in the middle of the stream;
- the count ring and the SUM ring: the row path's counts and sums (the ``c``,
  ``s_x`` and ``Q_xy`` parts of every stored covariance payload) against the
  Python engines of ``COUNT(*)`` and ``SUM(x)`` / ``SUM(x * y)`` over the same body
  (count lane = c, sum lane = c, ``s_x`` or ``Q_xy`` by the view's support), and
  ``auto`` against ``python`` for those rings themselves.

The spies assert that the row path (and its division-free product) ran.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ivm
from ivm.engines.fivm import FIVM, columnar, lanes
from ivm.query.model import Aggregate, Query
from ivm.rings.base import Pair
from ivm.rings.covariance import Covariance
from tests.unit.engines.test_fivm_columnar import check
from tests.unit.engines.test_fivm_duckdb import random_query

SIZES = (1, 2, 7, 100)
ALWAYS = 10**9  # small_delta that sends every delta down the row path

FIXED = [
    # a Housing-shaped star: one key, several features per relation (direct plans only)
    "Q(COVAR(a1, a2, b1, c1, c2)) :- A(k, a1, a2), B(k, b1), C(k, c1, c2)",
    # a path: index joins (fan-out) hand a row to the grouped kernel
    "Q(COVAR(a, b, c, d)) :- R(a, b), S(b, c), T(c, d)",
    # group-by, a selection and a repeated variable
    "Q(k, COVAR(a, b)) :- R(k, a, 1), S(k, b, b)",
    # a self-join with a free variable below a bound one
    "Q(b, COVAR(a, c)) :- E(a, b), E(b, c), F(c)",
]


def updates(query: Query, rng: random.Random, n: int, floats: bool) -> list[ivm.Update]:
    """Inserts and deletes of live tuples, multiplicities in -3..3 (never 0), values from a small domain."""
    live: dict[tuple[str, tuple[Any, ...]], int] = {}
    out = []
    rels = dict(query.relations)
    values = [0.5, 1.25, -2.0, 3.0, 1] if floats else [-2, -1, 0, 1, 2, 3]
    for _ in range(n):
        if live and rng.random() < 0.35:
            (rel, row), m = rng.choice(sorted(live.items(), key=repr))
            mult = -m if rng.random() < 0.5 else rng.choice([-3, -2, -1, 1, 2])
        else:
            rel = rng.choice(sorted(rels))
            row = tuple(rng.choice(values) for _ in range(rels[rel]))
            mult = rng.choice([1, 2, 3, -1, -2, -3])
        live[(rel, row)] = live.get((rel, row), 0) + mult
        if not live[(rel, row)]:
            del live[(rel, row)]
        out.append(ivm.Update(rel, row, mult))
    return out


def batches(rng: random.Random, stream: list[ivm.Update]) -> Iterator[tuple[int, list[ivm.Update]]]:
    """``(end, batch)`` with sizes drawn from :data:`SIZES`, all four in every stream of ≥ 110 updates."""
    start, sizes = 0, list(SIZES)
    while start < len(stream):
        size = sizes.pop() if sizes else rng.choice(SIZES)
        yield start + size, stream[start : start + size]
        start += size


class Spy:
    """Counts calls of :func:`columnar.row_delta` and its division-free product."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = self.division_free = 0
        row_delta, row_product = columnar.row_delta, columnar._row_product

        def counted_row_delta(*args: Any) -> Any:
            self.rows += 1
            return row_delta(*args)

        def counted_row_product(*args: Any) -> Any:
            self.division_free += 1
            return row_product(*args)

        monkeypatch.setattr(columnar, "row_delta", counted_row_delta)
        monkeypatch.setattr(columnar, "_row_product", counted_row_product)


def run_covariance(query: Query, seed: int, floats: bool, small: int | None, n: int = 260) -> None:
    rng = random.Random(seed)
    fast = FIVM(query, implementation="numpy", exact=not floats)  # the numpy row path (compiled: test_fivm_compiled)
    ref = FIVM(query, implementation="python", exact=not floats)
    assert fast.implementation == "numpy" and ref.implementation == "python"
    if small is not None:
        fast.small_delta = small
    assert fast.drain_delta() == ref.drain_delta()
    stream = updates(query, rng, n, floats)
    middle = False
    for end, batch in batches(rng, stream):
        fast.apply(batch)
        ref.apply(batch)
        where = f"{query} after {end} (batch {len(batch)})"
        check(fast, ref, floats, where)
        got, want = dict(fast.drain_delta()), dict(ref.drain_delta())
        assert got.keys() == want.keys() and all(np.isclose(got[k], want[k]) for k in got), where
        for relation in query.relations:
            for u in batch:
                if u.relation == relation:
                    assert fast.multiplicity(relation, u.row) == ref.multiplicity(relation, u.row), where
        if not middle and end >= n // 2:  # snapshot round trip of both engines mid-stream
            middle = True
            fast, ref = FIVM.restore(fast.snapshot()), FIVM.restore(ref.snapshot())
            assert fast.small_delta == (columnar.SMALL_DELTA if small is None else small)
            check(fast, ref, floats, f"{where}, restored")
    assert middle


@pytest.mark.parametrize("small", [None, ALWAYS, 0], ids=["auto", "rows", "blocks"])
@pytest.mark.parametrize("floats", [True, False], ids=["float", "exact"])
@pytest.mark.parametrize("seed", range(12))
def test_covariance_random_queries_equal_python(
    seed: int, floats: bool, small: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    query = random_query(random.Random(4200 + seed), "covariance")
    run_covariance(query, 5100 + seed, floats, small)
    if small == 0:
        assert spy.rows == 0
    elif len(query.atoms) > 1:
        assert spy.rows > 0
        if not floats:  # exact payloads always take the division-free product
            assert spy.division_free > 0


@pytest.mark.parametrize("small", [None, ALWAYS], ids=["auto", "rows"])
@pytest.mark.parametrize("floats", [True, False], ids=["float", "exact"])
@pytest.mark.parametrize("text", FIXED)
def test_covariance_fixed_shapes_equal_python(
    text: str, floats: bool, small: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    run_covariance(ivm.parse(text), 77, floats, small, n=400)
    assert spy.rows > 0


def test_float_counts_of_zero_take_the_division_free_product(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sibling whose count cancels to 0 while its sums do not: ``P = 0``, no division by it."""
    spy = Spy(monkeypatch)
    query = ivm.parse("Q(COVAR(a, b)) :- R(k, a), S(k, b)")
    fast = FIVM(query, exact=False, implementation="numpy")
    ref = FIVM(query, implementation="python", exact=False)
    batch = [("R", (1, 2.0), 1), ("R", (1, 5.0), -1), ("S", (1, 3.0), 2), ("S", (1, 0.5), 1)]
    for update in batch:  # one at a time: rows
        fast.apply([update])
        ref.apply([update])
        check(fast, ref, True, str(update))
    assert spy.division_free > 0
    root = fast.result()
    assert root.c == 0 and root.s.tolist() == [-9.0, 0.0]  # (2 - 5) · 3 tuples of S


def sum_entry(payload: Covariance, support: set[int], ring_idx: list[int]) -> Any:
    """The SUM ring's sum lane for a covariance payload: c, s_x or Q_xy as far as the support lifts them."""
    lifted = [i for i in ring_idx if i in support]
    if not lifted:
        return payload.c
    if len(lifted) == 1:
        return payload.s[lifted[0]]
    return payload.Q[lifted[0], lifted[1]]


def close(a: Any, b: Any, floats: bool) -> bool:
    return bool(np.isclose(float(a), float(b), rtol=1e-9, atol=1e-9)) if floats else a == b


def compare_rings(fast: FIVM, count: FIVM, total: FIVM, sum_vars: tuple[str, ...], floats: bool, where: str) -> None:
    """Every stored view: count-ring payload = c, SUM-ring lanes = (c, c | s_x | Q_xy); missing keys are 0."""
    ring_idx = [fast.ring.index[v] for v in sum_vars]  # type: ignore[attr-defined]
    supports = {node.name: set(node.layout.support) for node in fast.tree.nodes() if node.store is not None}
    cov, cnt, sm = fast.views(), count.views(), total.views()
    assert cov.keys() == cnt.keys() == sm.keys(), where
    for name, payloads in cov.items():
        for key in set(payloads) | set(cnt[name]) | set(sm[name]):
            p = payloads.get(key)
            c = 0 if p is None else p.c
            assert close(c, cnt[name].get(key, 0), floats), f"{where}: count of {name}[{key}]"
            lanes = sm[name].get(key, Pair(0, 0))
            s = 0 if p is None else sum_entry(p, supports[name], ring_idx)
            assert close(c, lanes.first, floats) and close(s, lanes.second, floats), f"{where}: sum of {name}[{key}]"


@pytest.mark.parametrize("floats", [True, False], ids=["float", "exact"])
@pytest.mark.parametrize("seed", range(10))
def test_count_and_sum_parts_equal_count_and_sum_rings(
    seed: int, floats: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    rng = random.Random(6300 + seed)
    query = random_query(rng, "covariance")
    variables = query.aggregate.variables
    sum_vars = (rng.choice(variables),) if seed % 3 == 0 else tuple(rng.sample(variables, 2))
    if seed % 5 == 4:
        sum_vars = (sum_vars[0], sum_vars[0])  # SUM(x * x) = Q_xx
    fast = FIVM(query, exact=not floats, implementation="numpy")
    fast.small_delta = ALWAYS if seed % 2 else columnar.SMALL_DELTA
    count = FIVM(Query(query.name, query.free, query.atoms, Aggregate()))
    total = FIVM(Query(query.name, query.free, query.atoms, Aggregate("sum", sum_vars)))
    lanes_in_c = "compiled" if lanes.kernel is not None else "python"  # the SUM ring's lanes (_lanes_kernel)
    assert fast.implementation == "numpy" and count.implementation == "python" and total.implementation == lanes_in_c
    stream = updates(query, rng, 240, floats)
    middle = False
    for end, batch in batches(rng, stream):
        for engine in (fast, count, total):
            engine.apply(batch)
        compare_rings(fast, count, total, sum_vars, floats, f"{query} SUM{sum_vars} after {end}")
        if not middle and end >= len(stream) // 2:
            middle = True
            fast = FIVM.restore(fast.snapshot())
            compare_rings(fast, count, total, sum_vars, floats, f"{query} restored")
    if len(query.atoms) > 1:
        assert spy.rows > 0


@pytest.mark.parametrize("kind", ["count", "sum"])
@pytest.mark.parametrize("seed", range(6))
def test_count_and_sum_rings_auto_equal_python(kind: str, seed: int) -> None:
    """``auto`` keeps the count and SUM rings on their lanes (no numpy path; the SUM lanes in C when
    ``_lanes_kernel`` is built); same answers as ``python``."""
    rng = random.Random(8800 + seed)
    query = random_query(rng, kind)
    auto, ref = FIVM(query), FIVM(query, implementation="python")
    assert auto.implementation == ("compiled" if kind == "sum" and lanes.kernel is not None else "python")
    assert not auto._columnar
    middle = False
    for end, batch in batches(rng, updates(query, rng, 200, False)):
        auto.apply(batch)
        ref.apply(batch)
        assert auto.result() == ref.result() and auto.views() == ref.views(), f"{query} after {end}"
        if not middle and end >= 100:
            middle = True
            auto = FIVM.restore(auto.snapshot())
    assert middle
