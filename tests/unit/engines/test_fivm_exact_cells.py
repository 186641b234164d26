"""F-IVM's compiled covariance path with exact cells (issue 36 point 1: ``_covar_kernel.ExactPath``).

The default ``exact=True`` covariance engine keeps every payload cell as a Shewchuk expansion of doubles in
C.  Checked here, on random insert/delete streams (multiplicities -3..3, batches of 1 to 60, several
relations a batch) over a star, a group-by and a chain (index joins: the numpy path there, the kernel
elsewhere) and a self-join, with float features drawn from ordinary cents, huge (1e17, ``float(2**63-1)``),
tiny (1e-20), subnormal (5e-324) and cancelling values:

- every entry of the result equals the reference path's (``implementation="python"``: ring objects with
  :mod:`ivm.rings.exact`) exactly, and the value of an exact rational oracle (``fractions.Fraction`` over
  the join of the current relations), with the same types (ints stay ints, sums of floats read as floats);
- after a batch of extreme tuples and its deletes, every entry (and every stored view) is bit for bit the
  value before;
- snapshots taken mid-stream restore to exact cells and continue identically;
- a cell the kernel cannot keep (a product below the double range) moves the stores to the reference
  numbers without losing a digit, and a restore brings the cells back;
- the kernel did the work (the stores keep exact cells, the kernel's calls are counted).

Under ``CI=true`` a missing extension fails instead of skipping.
"""

from __future__ import annotations

import math
import os
import random
from fractions import Fraction
from itertools import product
from typing import Any

import pytest

import ivm
from ivm.engines.fivm import FIVM, columnar
from ivm.engines.fivm import engine as fivm_engine
from ivm.rings.covariance import Covariance

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BUILT = fivm_engine.ExactPath is not None and columnar.Int64Index is not None
pytestmark = pytest.mark.skipif(not BUILT and not CI, reason="the compiled kernels are not built (pip install -e .)")

STAR = "Q(COVAR(a1, a2, b1, c1)) :- A(k, a1, a2), B(k, b1), C(k, c1)"
GROUP_BY = "Q(k, COVAR(a, b, c)) :- R(k, a), S(k, b, c)"
CHAIN = "Q(COVAR(a, b, c, d)) :- R(a, b), S(b, c), T(c, d)"
SELF_JOIN = "Q(b, COVAR(a, c)) :- E(a, b), E(b, c), F(c)"

CENTS = [round(x / 100, 2) for x in range(-500, 500, 37)]
WIDE = [*CENTS, 1e17, -1e17, float(2**63 - 1), 1e-20, -3e-20, 0.1, 2.0**-60, 12345.678]
EXTREME = [1e17, float(2**63 - 1), -9.2e18, 1e-20, 5e-324, 1e-300, 0.30000000000000004]


class Spy:
    """A compiled path's kernel, its calls counted (a C type's method cannot be patched)."""

    calls = 0

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def run(self, *args: Any) -> Any:
        Spy.calls += 1
        return self.kernel.run(*args)


def spy(engine: FIVM) -> None:
    real = engine._compiled_path

    def wrapped(leaf: Any) -> Any:
        path = real(leaf)
        if path is not None and not isinstance(path.kernel, Spy):
            path.kernel = Spy(path.kernel)
        return path

    engine._compiled_path = wrapped  # type: ignore[method-assign]


def snapshot(engine: FIVM) -> bytes:
    """The engine's snapshot, its spy removed (a local function does not pickle)."""
    engine.__dict__.pop("_compiled_path", None)
    return engine.snapshot()


def stream(
    arity: dict[str, int], rng: random.Random, n: int, pool: list[float], keys: int = 4, int_cols: int = 0
) -> list[tuple[str, tuple[Any, ...], int]]:
    """Inserts and deletes: each relation's first column an int key (``int_cols`` columns ints), the others
    floats from ``pool``; a fifth of the updates delete a live tuple (to zero or below)."""
    live: dict[tuple[str, tuple[Any, ...]], int] = {}
    out = []
    rels = sorted(arity)
    for _ in range(n):
        if live and rng.random() < 0.2:
            (r, t), m = rng.choice(sorted(live.items(), key=repr))
            d = -m if rng.random() < 0.7 else -rng.randint(1, 3)
        else:
            r = rng.choice(rels)
            t = tuple(rng.randrange(keys) if j <= int_cols else rng.choice(pool) for j in range(arity[r]))
            d = rng.choice([1, 1, 2, 3, -1])
        live[(r, t)] = live.get((r, t), 0) + d
        if live[(r, t)] == 0:
            del live[(r, t)]
        out.append((r, t, d))
    return out


def oracle(query: Any, base: dict[str, dict[tuple[Any, ...], int]]) -> dict[tuple[Any, ...], list[Fraction]]:
    """The covariance aggregate of the join of ``base``, exactly: per group of the free variables
    ``[c, s_1.., Q_11, Q_12, ..]`` (upper triangle, the aggregate's variable order) as Fractions."""
    variables = list(query.aggregate.variables)
    free = list(query.free)
    out: dict[tuple[Any, ...], list[Fraction]] = {}
    atoms = query.atoms
    for combo in product(*(list(base[a.relation].items()) for a in atoms)):
        binding: dict[str, Any] = {}
        w = 1
        ok = True
        for atom, (row, m) in zip(atoms, combo, strict=True):
            for term, value in zip(atom.terms, row, strict=True):
                if term in binding and binding[term] != value:
                    ok = False
                    break
                binding[term] = value
            if not ok:
                break
            w *= m
        if not ok:
            continue
        x = [Fraction(binding[v]) for v in variables]
        key = tuple(binding[v] for v in free)
        acc = out.setdefault(key, [Fraction(0)] * (1 + len(x) + len(x) * (len(x) + 1) // 2))
        acc[0] += w
        for i, xi in enumerate(x):
            acc[1 + i] += w * xi
        p = 1 + len(x)
        for i in range(len(x)):
            for j in range(i, len(x)):
                acc[p] += w * x[i] * x[j]
                p += 1
    return {k: v for k, v in out.items() if v[0] != 0 or any(v)}


def entries(payload: Covariance, variables: list[str], engine: FIVM) -> list[Any]:
    """``[c, s.., Q upper triangle..]`` of a full result payload, in ``variables`` order."""
    index = [engine.ring.variables.index(v) for v in variables]  # type: ignore[attr-defined]
    k = len(index)
    s = [payload.s[i] for i in index]
    q = [payload.Q[index[i], index[j]] for i in range(k) for j in range(i, k)]
    return [payload.c, *s, *q]


def as_groups(engine: FIVM, exact: bool = True) -> dict[tuple[Any, ...], Covariance]:
    result = engine.exact_result() if exact else engine.result()
    return result if isinstance(result, dict) else ({(): result} if result.c != 0 or result.s.any() else {})


def same_bits(a: Any, b: Any) -> bool:
    """Equal values of the same type (floats bit for bit: ``-0.0`` is not ``0.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a.hex() == b.hex()
    return bool(a == b)


def assert_results(fast: FIVM, ref: FIVM, where: str) -> None:
    """The exact results agree entry by entry, and the rounded ones bit for bit, types included."""
    variables = list(fast.query.aggregate.variables)
    got, want = as_groups(fast), as_groups(ref)
    assert got.keys() == want.keys(), where
    for key in want:
        g, w = entries(got[key], variables, fast), entries(want[key], variables, ref)
        assert [x == y for x, y in zip(g, w, strict=True)] == [True] * len(w), f"{where} {key}"
    got_r, want_r = as_groups(fast, False), as_groups(ref, False)
    for key in want_r:
        g, w = entries(got_r[key], variables, fast), entries(want_r[key], variables, ref)
        assert all(same_bits(x, y) for x, y in zip(g, w, strict=True)), f"{where} {key}: {g} != {w}"


def contents(engine: FIVM) -> dict[str, dict[tuple[Any, ...], int]]:
    """The relations' current multisets, from the updates the engine was given (:data:`APPLIED`)."""
    base: dict[str, dict[tuple[Any, ...], int]] = {r: {} for r in engine.query.relations}
    for r, t, m in APPLIED[id(engine)]:
        base[r][t] = base[r].get(t, 0) + m
        if base[r][t] == 0:
            del base[r][t]
    return base


#: every update each engine of the tests was given, by ``id(engine)``
APPLIED: dict[int, list[tuple[str, tuple[Any, ...], int]]] = {}


def apply(engine: FIVM, batch: list[tuple[str, tuple[Any, ...], int]]) -> None:
    engine.apply(batch)
    APPLIED.setdefault(id(engine), []).extend(batch)


def assert_oracle(engine: FIVM, where: str) -> None:
    variables = list(engine.query.aggregate.variables)
    base = contents(engine)
    want = oracle(engine.query, base)
    got = as_groups(engine)
    assert {k for k, v in want.items() if v[0] != 0} <= got.keys(), where
    for key, payload in got.items():
        exact_entries = [
            Fraction(x) if isinstance(x, int) else x.as_fraction() for x in entries(payload, variables, engine)
        ]
        assert exact_entries == want.get(key, [0] * len(exact_entries)), f"{where} {key}"


def exact_cells(engine: FIVM) -> bool:
    return all(n.store.nc > 0 for n in engine.tree.nodes() if isinstance(n.store, columnar.ColumnStore))


def run(query_text: str, seed: int, pool: list[float], n: int = 300, int_cols: int = 0) -> tuple[FIVM, FIVM]:
    rng = random.Random(seed)
    query = ivm.parse(query_text)
    fast = FIVM(query)
    ref = FIVM(query, implementation="python")
    assert fast.implementation == "compiled" and fast.ring.exact  # type: ignore[attr-defined]
    spy(fast)
    assert fast.drain_delta() == ref.drain_delta() == []
    updates = stream(dict(query.relations), rng, n, pool, int_cols=int_cols)
    start = 0
    while start < len(updates):
        size = rng.choice([1, 3, 17, 60])
        apply(fast, updates[start : start + size])
        ref.apply(updates[start : start + size])
        start += size
        assert_results(fast, ref, f"{query_text} after {start}")
        drained = fast.drain_delta()  # the answers' multiplicity changes: exact ints, the root's deltas
        assert drained == ref.drain_delta() and all(type(m) is int for _, m in drained), start
        assert dict(fast.enumerate()) == dict(ref.enumerate())
    return fast, ref


@pytest.mark.parametrize("text", [STAR, GROUP_BY, CHAIN, SELF_JOIN])
@pytest.mark.parametrize("seed", range(3))
def test_exact_cells_equal_the_reference_and_the_rational_oracle(text: str, seed: int) -> None:
    Spy.calls = 0
    fast, _ = run(text, 100 + seed, WIDE)
    assert Spy.calls > 0  # the kernel ran
    assert_oracle(fast, text)


@pytest.mark.parametrize("seed", range(3))
def test_cents_stay_in_exact_cells_and_read_as_the_reference(seed: int) -> None:
    Spy.calls = 0
    fast, _ = run(STAR, 200 + seed, CENTS, n=400)
    assert Spy.calls > 0 and exact_cells(fast)  # no fallback: the kernel kept every cell
    assert_oracle(fast, "cents")


def test_int_features_stay_ints() -> None:
    fast, _ = run(GROUP_BY, 7, [float(x) for x in range(-5, 6)], int_cols=3)
    assert exact_cells(fast)
    for payload in fast.result().values():
        assert type(payload.c) is int
        assert all(type(x) is int for x in payload.Q.ravel()) and all(type(x) is int for x in payload.s)


@pytest.mark.parametrize("text", [STAR, GROUP_BY])
def test_extreme_tuples_inserted_and_deleted_leave_every_entry_as_before(text: str) -> None:
    fast, ref = run(text, 31, CENTS, n=200)
    before = as_groups(fast, False)
    views_before = fast.views()
    query = fast.query
    rng = random.Random(4)
    arity = dict(query.relations)
    extreme = [
        (r, (rng.randrange(4), *(rng.choice(EXTREME) for _ in range(arity[r] - 1))), rng.choice([1, 2]))
        for r in sorted(arity)
        for _ in range(4)
    ]
    apply(fast, extreme)
    ref.apply(extreme)
    assert_results(fast, ref, "with the extreme tuples")
    assert_oracle(fast, "with the extreme tuples")
    apply(fast, [(r, t, -m) for r, t, m in extreme])
    ref.apply([(r, t, -m) for r, t, m in extreme])
    after = as_groups(fast, False)
    variables = list(query.aggregate.variables)
    assert after.keys() == before.keys()
    for key in before:
        assert all(
            same_bits(x, y)
            for x, y in zip(entries(after[key], variables, fast), entries(before[key], variables, fast), strict=True)
        ), key
    assert fast.views().keys() == views_before.keys()
    assert_results(fast, ref, "after the deletes")
    more = stream(dict(query.relations), random.Random(5), 120, CENTS)
    for start in range(0, len(more), 10):  # the wide values are gone: the stores come back to exact cells
        apply(fast, more[start : start + 10])
        ref.apply(more[start : start + 10])
    assert_results(fast, ref, "ordinary updates again")
    assert exact_cells(fast)


def test_a_cell_the_kernel_cannot_keep_takes_the_reference_numbers_and_comes_back_on_restore() -> None:
    fast, ref = run(STAR, 41, CENTS, n=120)
    assert exact_cells(fast)
    tiny = [("A", (1, 1e-300, 5e-324), 1), ("B", (1, 1e-300), 1), ("C", (1, 2.5), 1)]
    apply(fast, tiny)
    ref.apply(tiny)
    assert not exact_cells(fast)  # (1e-300)² underflows: the stores took the reference numbers
    assert_results(fast, ref, "tiny")
    assert_oracle(fast, "tiny")
    apply(fast, [(r, t, -m) for r, t, m in tiny])
    ref.apply([(r, t, -m) for r, t, m in tiny])
    assert_results(fast, ref, "tiny deleted")
    back = FIVM.restore(snapshot(fast))
    assert exact_cells(back)  # every value fits again: the restore keeps exact cells
    more = stream(dict(fast.query.relations), random.Random(9), 100, WIDE)
    for engine in (back, ref):
        engine.apply(more)
    assert_results(back, ref, "restored, more updates")


@pytest.mark.parametrize("text", [STAR, GROUP_BY, SELF_JOIN])
def test_snapshots_mid_stream_restore_exact_cells(text: str) -> None:
    fast, ref = run(text, 51, WIDE, n=150)
    blob = snapshot(fast)
    back = FIVM.restore(blob)
    assert back.implementation == "compiled"
    assert_results(back, ref, "restored")
    more = stream(dict(fast.query.relations), random.Random(52), 150, WIDE)
    for start in range(0, len(more), 25):
        for engine in (fast, back, ref):
            engine.apply(more[start : start + 25])
        assert_results(fast, ref, f"continued {start}")
        assert_results(back, ref, f"restored, continued {start}")


def test_nan_and_infinities_are_refused_as_by_the_reference() -> None:
    from ivm.rings.exact import NotFinite

    for bad in (math.nan, math.inf, -math.inf):
        engine = FIVM(ivm.parse(STAR))
        engine.apply([("B", (1, 2.0), 1), ("C", (1, 3.0), 1)])
        with pytest.raises(NotFinite):
            engine.apply([("A", (1, bad, 1.0), 1)])


def test_float64_payloads_remain_an_explicit_inexact_choice() -> None:
    """``exact=False`` keeps binary64 cells (the documented opt-in): after 1e17 is inserted and deleted the
    sum lost the small values; the default (exact cells, compiled) gives them back bit for bit."""
    query = ivm.parse("Q(COVAR(x, y)) :- R(k, x), S(k, y)")
    rows = [("R", (1, 0.1), 1), ("R", (2, 0.2), 1), ("S", (1, 1.0), 1), ("S", (2, 1.0), 1)]
    for exact in (True, False):
        engine = FIVM(query, exact=exact)
        engine.apply(rows)
        before = engine.result().s.tolist()
        engine.apply([("R", (1, 1e17), 1)])
        engine.apply([("R", (1, 1e17), -1)])
        after = engine.result().s.tolist()
        assert engine.implementation == "compiled"
        assert (after == before) is exact, (exact, before, after)


def test_columns_take_the_exact_cells_as_rows_do() -> None:
    import numpy as np

    query = ivm.parse(GROUP_BY)
    fast = FIVM(query)
    ref = FIVM(query, implementation="python")
    spy(fast)
    Spy.calls = 0
    rng = np.random.default_rng(3)
    for _ in range(3):
        keys = rng.integers(0, 5, 40)
        a = rng.choice(np.array([*CENTS, 1e6, 2.0**-30]), 40)
        b, c = rng.choice(np.array(CENTS), 40), rng.choice(np.array(CENTS), 40)
        fast.apply_columns("R", [keys, a])
        fast.apply_columns("S", [keys, b, c], -1)
        ref.apply([("R", (int(k), float(x)), 1) for k, x in zip(keys, a, strict=True)])
        ref.apply([("S", (int(k), float(y), float(z)), -1) for k, y, z in zip(keys, b, c, strict=True)])
        assert_results(fast, ref, "columns")
    assert Spy.calls >= 6  # every batch went up the exact kernel
    fast.apply_columns("R", [keys, a], -1)
    ref.apply([("R", (int(k), float(x)), -1) for k, x in zip(keys, a, strict=True)])
    assert_results(fast, ref, "columns deleted")
