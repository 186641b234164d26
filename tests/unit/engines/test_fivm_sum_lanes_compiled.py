"""The SUM ring's lanes in C (``_lanes_kernel.pyx``) against the Python lanes (``implementation="python"``).

Differential: the same random Z-relation streams (batches mixing relations, rows repeated
inside a batch, inserts, deletes back to zero, multiplicities other than ±1) into an engine
on the compiled lanes and one on the Python reference lanes, compared after every batch
view by view (payloads, secondary indexes, base relations), answers, enumeration and the
drained root deltas, for ints, dyadic floats and ints past 2^63, on the queries of
``test_fivm_sum_lanes`` (direct, one-index and several-sibling plans, powers, a self-join, a
cyclic query, constants) and on the TPC-H shape of ``bench/fivm.py`` with skewed keys.
Snapshots are restored mid-stream (also without the extension: the Python lanes take over).
The kernel functions are checked one by one against their Python counterparts, including
malformed input (a ``TypeError``, never a read past a tuple).

Under ``CI=true`` a missing extension fails these tests instead of skipping them.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import pytest

import ivm
from ivm.engines.fivm import FIVM, lanes, view_tree
from ivm.query import Query
from ivm.rings.exact import Dyadic, exact
from ivm.updates import Row, Update, apply_to_base, by_relation
from tests.seeds import stable_seed
from tests.unit.engines.test_fivm_sum_lanes import QUERIES, brute, expected_result, random_row

kernel = lanes.kernel
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
needs_kernel = pytest.mark.skipif(kernel is None and not CI, reason="_lanes_kernel is not built (pip install -e .)")

INTS = [0, 1, -1, 2, -3, 5, 7]
FLOATS = [0.0, 0.5, -1.25, 2.0, 3.5, -0.75]
BIG = [2**63 - 1, -(2**63), 2**64 + 3, 3, -2, 0, 1]  # products and sums past int64
#: floats with 53 significant bits, huge, tiny and subnormal: sums and products that leave one double (a
#: second component, the wide escape of the compiled accumulator) and come back when they cancel
WIDE = [0.1, 19.99, -7.3, 1e300, -9.2e18, 5e-324, 2.2250738585072014e-308, 1e-300, 123456.78, 0.0]
MULTS = [1, 1, 1, 2, -1, -2, 3]

Base = dict[str, dict[Row, int]]


def test_the_extension_is_built_under_ci() -> None:
    """CI builds the extensions with ``pip install -e .``: a missing build must fail there, not skip."""
    if not CI and kernel is None:
        pytest.skip("not under CI and _lanes_kernel is not built")
    assert kernel is not None and view_tree.add_lanes_kernel is not None


def random_batch(rng: random.Random, query: Query, base: Base, values: Sequence[Any]) -> list[Update]:
    """Up to 40 updates over all relations: fresh rows, repeats inside the batch, deletes to zero."""
    relations = sorted(query.relations)
    batch: list[Update] = []
    for _ in range(rng.choice([1, 2, 7, 25, 40])):
        relation = rng.choice(relations)
        present = base[relation]
        r = rng.random()
        if present and r < 0.3:  # delete a present tuple outright
            row = rng.choice(sorted(present, key=repr))
            u = Update(relation, row, -present[row])
        elif batch and r < 0.4:  # a row of this batch again (its multiplicities add up in the batch)
            u = Update(batch[-1].relation, batch[-1].row, rng.choice(MULTS))
        else:
            u = Update(relation, random_row(rng, query, relation, values), rng.choice(MULTS))
        batch.append(u)
        m = base[u.relation].get(u.row, 0) + u.mult
        if m:
            base[u.relation][u.row] = m
        else:
            base[u.relation].pop(u.row, None)
    return batch


def same_state(a: FIVM, b: FIVM) -> None:
    """Every stored view (primary and secondary indexes), base relation and answer agree exactly."""
    assert a.base == b.base
    for na, nb in zip(a.tree.nodes(), b.tree.nodes(), strict=True):
        assert na.name == nb.name
        if na.store is None:
            assert nb.store is None
            continue
        assert na.store.data == nb.store.data, na.name
        assert list(na.store.data) == list(nb.store.data), na.name  # the same insertion order too
        for positions, index in na.store.indexes.items():
            assert index == nb.store.index(positions), (na.name, positions)
        for payload in na.store.data.values():
            assert type(payload) is tuple and len(payload) == 2 and payload != (0, 0)
    assert a.result() == b.result()
    assert dict(a.enumerate()) == dict(b.enumerate())
    assert a.drain_delta() == b.drain_delta()


def run_pair(query: Query, seed: Any, values: Sequence[Any], batches: int, snapshot_at: int = -1) -> None:
    rng = random.Random(stable_seed(str(query), seed))
    compiled, python = FIVM(query, implementation="compiled"), FIVM(query, implementation="python")
    assert compiled._lane_kernel and not python._lane_kernel
    compiled.drain_delta()
    python.drain_delta()
    base: Base = {r: {} for r in query.relations}
    for step in range(batches):
        if step == snapshot_at:
            compiled = FIVM.restore(compiled.snapshot())
            assert compiled._lane_kernel
        batch = random_batch(rng, query, base, values)
        compiled.apply(batch)
        python.apply(batch)
        same_state(compiled, python)
    assert compiled.result() == expected_result(query, brute(query, base)) or values is WIDE
    # the exact recount (floats as Fractions), rounded once: bit for bit what the exact lanes read
    exact_base = {
        r: {tuple(Fraction(v) if type(v) is float else v for v in row): m for row, m in rows.items()}
        for r, rows in base.items()
    }
    want = expected_result(query, brute(query, exact_base))
    got = compiled.result()
    if isinstance(want, dict):
        assert got.keys() == want.keys() and all(same_float(got[k], want[k]) for k in want)
    else:
        assert same_float(got, want)


def same_float(got: Any, want: Any) -> bool:
    """``got`` is the exact ``want`` rounded once (a float's bits), or equal to it when no float went in."""
    if not isinstance(got, float):
        return got == want
    try:
        rounded = float(want)
    except OverflowError:
        rounded = float("inf") if want > 0 else float("-inf")
    return struct.pack("<d", got) == struct.pack("<d", rounded)


@needs_kernel
@pytest.mark.parametrize("values", [INTS, FLOATS, BIG, WIDE], ids=["ints", "floats", "big ints", "wide floats"])
@pytest.mark.parametrize("text", QUERIES)
def test_compiled_lanes_match_the_python_lanes(text: str, values: list[Any]) -> None:
    query = ivm.parse(text)
    for seed in range(2):
        run_pair(query, (seed, repr(values[:2])), values, 25, snapshot_at=12 if seed else -1)


TPCH = "Q(nation, SUM(price * disc)) :- C(cust, nation), O(okey, cust, prio), L(okey, line, price, disc)"


@needs_kernel
@pytest.mark.parametrize("big", [False, True], ids=["int64", "past int64"])
def test_the_tpch_shape_with_skew(big: bool) -> None:
    """The bench's query: few customers and orders (skewed fan-out), group-by nation, deletes."""
    query = ivm.parse(TPCH)
    rng = random.Random(stable_seed("tpch", big))
    compiled, python = FIVM(query), FIVM(query, implementation="python")
    assert compiled.implementation == "compiled" and python.implementation == "python"
    scale = 2**40 if big else 1
    live: list[Update] = []
    base: Base = {r: {} for r in query.relations}
    for _ in range(30):
        batch = []
        for _ in range(rng.choice([1, 30, 200])):
            r = rng.random()
            if live and r < 0.15:
                u = live.pop(rng.randrange(len(live)))
                batch.append(Update(u.relation, u.row, -u.mult))
                continue
            if r < 0.25:
                u = Update("C", (rng.randrange(8), rng.randrange(3)), 1)
            elif r < 0.45:
                u = Update("O", (rng.randrange(20), rng.choice([0, 0, 0, 1, 2, 3]), rng.randrange(2)), 1)
            else:
                price, disc = rng.randrange(1, 10**6) * scale, rng.randrange(0, 11) * scale
                u = Update("L", (rng.choice([0, 0, 1, 2, rng.randrange(20)]), rng.randrange(7), price, disc), 1)
            if base[u.relation].get(u.row):  # a row once at a time, as in the bench's stream
                continue
            base[u.relation][u.row] = 1
            live.append(u)
            batch.append(u)
        for u in batch:
            if u.mult < 0:
                del base[u.relation][u.row]
        compiled.apply(batch)
        python.apply(batch)
        same_state(compiled, python)
    assert compiled.result() == expected_result(query, brute(query, base))
    # the exact recount (floats as Fractions), rounded once: bit for bit what the exact lanes read
    exact_base = {
        r: {tuple(Fraction(v) if type(v) is float else v for v in row): m for row, m in rows.items()}
        for r, rows in base.items()
    }
    want = expected_result(query, brute(query, exact_base))
    got = compiled.result()
    if isinstance(want, dict):
        assert got.keys() == want.keys() and all(same_float(got[k], want[k]) for k in want)
    else:
        assert same_float(got, want)


@needs_kernel
def test_a_restored_snapshot_without_the_extension_takes_the_python_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    query = ivm.parse(QUERIES[7])
    rng = random.Random(stable_seed("fallback"))
    compiled, python = FIVM(query), FIVM(query, implementation="python")
    base: Base = {r: {} for r in query.relations}
    for _ in range(10):
        batch = random_batch(rng, query, base, INTS)
        compiled.apply(batch)
        python.apply(batch)
    snap = compiled.snapshot()
    monkeypatch.setattr(lanes, "kernel", None)
    monkeypatch.setattr(view_tree, "add_lanes_kernel", None)
    restored = FIVM.restore(snap)
    assert restored.implementation == "compiled" and not restored._lane_kernel
    for _ in range(15):
        batch = random_batch(rng, query, base, INTS)
        restored.apply(batch)
        python.apply(batch)
        same_state(restored, python)


def test_without_the_extension_auto_takes_the_python_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lanes, "kernel", None)
    monkeypatch.setattr(view_tree, "add_lanes_kernel", None)
    query = ivm.parse(QUERIES[0])
    engine = FIVM(query)
    assert engine.implementation == "python" and not engine._lane_kernel
    with pytest.raises(ValueError, match="_lanes_kernel"):
        FIVM(query, implementation="compiled")
    engine.apply([("C", (1, 0), 1), ("O", (10, 1), 1), ("L", (10, 7), 2), ("L", (10, -2), 1)])
    assert engine.result() == 12


def test_other_rings_keep_their_implementations() -> None:
    assert FIVM(ivm.parse("Q(COUNT()) :- R(a, b), S(b, c)")).implementation == "python"
    with pytest.raises(ValueError):
        FIVM(ivm.parse("Q(COUNT()) :- R(a, b), S(b, c)"), implementation="compiled")
    assert not FIVM(ivm.parse(QUERIES[0]))._columnar


# ---------------------------------------------------------------- the kernel functions one by one


def random_lanes(rng: random.Random, values: Sequence[Any], zeros: bool = True) -> tuple[Any, Any]:
    if zeros and rng.random() < 0.2:
        return rng.choice([(0, 0), (0, 0.0), (0.0, -0.0)])
    return (rng.choice(values), rng.choice(values))


@needs_kernel
@pytest.mark.parametrize("values", [INTS, FLOATS, BIG], ids=["ints", "floats", "big ints"])
def test_kernel_functions_match_python(values: list[Any]) -> None:
    assert kernel is not None
    rng = random.Random(stable_seed("kernels", repr(values[:2])))
    for _ in range(200):
        # nonzero: the dict comprehension of FIVM._propagate
        delta = {(i,): random_lanes(rng, values) for i in range(rng.randrange(6))}
        assert kernel.nonzero(delta) == {k: p for k, p in delta.items() if p != lanes.ZERO}
        # from_mults
        mults = {(i, rng.choice(values)): rng.choice(values) for i in range(rng.randrange(6))}
        assert kernel.from_mults(mults) == {row: (m, m) for row, m in mults.items()}
        # by_relation (rows repeat, some sum to 0, a relation may vanish)
        updates = [
            Update(rng.choice("RS"), (rng.randrange(3),), rng.choice([1, -1, 2, rng.choice(values)]))
            for _ in range(rng.randrange(12))
        ]
        expected = by_relation(updates)
        got = kernel.by_relation(updates)
        assert got == expected and list(got) == list(expected)
        assert all(list(got[r]) == list(expected[r]) for r in got)
        # apply_base
        base = {(i,): rng.choice([1, 2, -1, 2**70]) for i in range(rng.randrange(5))}
        other = dict(base)
        d = {(rng.randrange(7),): rng.choice([1, -1, -2, 2**70]) for _ in range(rng.randrange(6))}
        assert kernel.apply_base(base, d) == apply_to_base(other, d)
        assert base == other
        # the store update, with two secondary indexes kept
        cells = [(i, j) for i in range(3) for j in range(3) if rng.random() < 0.5]
        data = {key: random_lanes(rng, values, zeros=False) for key in cells}
        data = {k: p for k, p in data.items() if p != (0, 0)}  # a stored view holds no zero
        a, b = view_tree.Store(), view_tree.Store()
        a.data, b.data = dict(data), dict(data)
        for store in (a, b):
            store.index((1,))
            store.index((0, 1))
        delta = {(rng.randrange(4), rng.randrange(4)): random_lanes(rng, values) for _ in range(rng.randrange(8))}
        for key in list(delta)[:2]:  # some keys cancel exactly
            if key in data:
                delta[key] = (-data[key][0], -data[key][1])
        a.add_all_lanes(delta, compiled=True)
        b.add_all_lanes(delta)
        assert a.data == b.data and a.indexes == b.indexes
        assert all(p != (0, 0) for p in a.data.values())


@needs_kernel
def test_kernel_lifts_powers_and_repeats_in_python_order() -> None:
    """``s · x^k`` per lifted position, output keys summed lane by lane (a lifted float: its exact value,
    :mod:`ivm.rings.exact`, so the sum is the exact rational, whatever the order)."""
    assert kernel is not None
    x = exact  # payloads hold lifted floats as their exact values (the engine makes no other)
    delta = {(1, 2.5): (2, x(0.1)), (3, 2.5): (1, x(0.2)), (1, 3.0): (-1, x(0.3))}
    datas = [{(2.5,): (3, x(0.7)), (3.0,): (1, x(1.1))}]
    got = kernel.direct_delta(delta, datas, [(1,)], (), ((1, 2), (0, 1)))
    F = Fraction
    s = F(0.1) * F(0.7) * F(2.5) ** 2 * 1 + F(0.2) * F(0.7) * F(2.5) ** 2 * 3 + F(0.3) * F(1.1) * F(3.0) ** 2 * 1
    c = 2 * 3 + 1 * 3 + -1 * 1
    assert got == {(): (c, s)}
    assert type(got[()][1]) is Dyadic and got[()][1].as_fraction() == s
    index = {(2,): {(7, 2): (1, 2**64), (8, 2): (2, 5)}, (3,): {(7, 3): (4, -1)}}
    out = kernel.index_join({(2,): (3, 2**64), (3,): (1, 1)}, index, 2, (1,), (1,), ((0, 0),), (0,), ((0, 2),))
    assert out == {(7,): (3 + 4, 2**128 * 49 - 49), (8,): (6, 2**64 * 5 * 64)}


@needs_kernel
@pytest.mark.parametrize(
    "call",
    [
        lambda k: k.nonzero({(1,): 5}),
        lambda k: k.nonzero({(1,): (1, 2, 3)}),
        lambda k: k.direct_delta({(1,): [1, 2]}, [], [], None, ()),
        lambda k: k.direct_delta({(1,): (1, 2)}, [{}], [(3,)], None, ()),
        lambda k: k.direct_delta({(1,): (1, 2)}, [], [], None, ((4, 1),)),
        lambda k: k.direct_delta({[1][0]: (1, 2)}, [], [], None, ()),
        lambda k: k.index_join({(1,): (1, 2)}, {(1,): {(5,): (1, 1)}}, 2, (0,), (0,), ((3, 1),), (1,), ()),
        lambda k: k.index_join({(1, 2): (1, 2)}, {}, 2, (0,), (0,), (), (0,), ()),
        lambda k: k.index_join({(1,): (1, 2)}, {}, 2, (0,), (5,), (), (0,), ()),
        lambda k: k.add_lanes({}, {(1,): 3}, []),
        lambda k: k.add_lanes({}, {(1,): (1, 1)}, [((2,), {})]),
    ],
)
def test_kernel_refuses_malformed_input(call: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        call(kernel)


@needs_kernel
def test_by_relation_refuses_what_it_cannot_read() -> None:
    """Not a list or tuple of 3-tuples: ``None`` (the engine then groups in Python)."""
    assert kernel is not None
    assert kernel.by_relation(iter([("R", (1,), 1)])) is None
    assert kernel.by_relation([("R", (1,))]) is None
    assert kernel.by_relation([]) == {} == by_relation([])
    assert kernel.by_relation([("R", (1,), 1), ("R", (1,), -1)]) == {}
