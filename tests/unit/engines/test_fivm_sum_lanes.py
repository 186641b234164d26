"""The SUM ring Z × Z/R as ``(count, sum)`` lanes of plain numbers (:mod:`ivm.engines.fivm.lanes`).

Randomized Z-relation streams (inserts, deletes, multiplicities other than ±1,
batches of one tuple and of several) over values including 0, negatives and
floats, checked after every batch against brute force and against the same
engine on the generic ring path (the same ring without the ``numeric`` flag,
so payloads are :class:`~ivm.rings.base.Pair` objects and every operation is a
ring method).  The float values are dyadic (0.5, -1.25, ...) and small, so every
sum is exact and both paths must agree to the last bit, view keys included.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import ivm
from ivm.engines.fivm import FIVM, lanes
from ivm.query import Query
from ivm.rings.base import Pair, PairRing, Ring
from ivm.rings.covariance import CovarianceRing
from ivm.rings.numeric import NumericRing, SumRing
from ivm.rings.relational import RelationalRing
from ivm.updates import Row, Update

Base = dict[str, dict[Row, int]]

QUERIES = [
    "Q(SUM(p)) :- C(c, n), O(o, c), L(o, p)",  # the bench's shape: direct and one-index plans
    "Q(a, SUM(b)) :- R(a, b), S(a, c)",  # group-by, q-hierarchical: direct plans only
    "Q(SUM(b * d)) :- R(a, b), S(a, c), T(c, d)",  # a product of variables from different atoms
    "Q(a, SUM(b * b)) :- R(a, b), S(a, c)",  # a variable twice: g_b(x) = x^2
    "Q(SUM(2 * b * c)) :- R(a, b), S(b, c), T(c, a)",  # cyclic, with a coefficient
    "Q(a, SUM(3 * b * c)) :- R(a, b), S(b, c, 'x'), T(_, c)",  # a constant and a wildcard
    "Q(SUM(a * b)) :- R(a, b), R(b, c)",  # a self-join
    "Q(c, SUM(a * a * b)) :- R(a, b), S(b, c), T(b, d), U(d)",  # a view joining two siblings by index
    "Q(SUM(x)) :- R(x, x), S(x, y)",  # a repeated variable in an atom
    "Q(SUM(c * c * a)) :- R(a, b), S(a, c), T(c, d)",  # c^2 lifted at a view joining its sibling by index
    "Q(c, SUM(b * b)) :- R(a, b), S(b, c), T(b, d), U(d)",  # b^2 lifted at a view with two siblings
]
INTS = [0, 1, -1, 2, -3, 5]
FLOATS = [0.0, 0.5, -1.25, 2.0, 3.5, -0.75]
MULTS = [1, 1, 1, 2, -1, -2, 3]


class GenericSumRing(SumRing):
    """The same ring without the promise of plain-number elements: the engine keeps its generic path."""

    numeric = False


class GenericFIVM(FIVM):
    """F-IVM on ``Z × GenericSumRing``: Pair payloads and ring method calls throughout."""

    @staticmethod
    def _make_ring(query: Query, name: str, categorical: Any, exact: bool) -> Ring:
        ring = FIVM._make_ring(query, name, categorical, exact)
        assert isinstance(ring, PairRing) and isinstance(ring.second, SumRing)
        return PairRing(ring.first, GenericSumRing(ring.second.powers))


def brute(query: Query, base: Base) -> dict[Row, tuple[int, Any]]:
    """``{group: (count, coefficient · Σ Π summed values)}`` over all valuations, Z semantics."""
    valuations: list[tuple[dict[str, Any], int]] = [({}, 1)]
    for atom in query.atoms:
        extended = []
        for val, m in valuations:
            for row, k in base.get(atom.relation, {}).items():
                if not atom.matches(row):
                    continue
                ext = dict(val)
                if all(ext.setdefault(var, v) == v for var, v in zip(atom.terms, row, strict=True)):
                    extended.append((ext, m * k))
        valuations = extended
    out: dict[Row, tuple[int, Any]] = {}
    for val, m in valuations:
        key = tuple(val[v] for v in query.free)
        value: Any = m * query.aggregate.coefficient
        for v in query.aggregate.variables:
            value *= val[v]
        count, total = out.get(key, (0, 0))
        out[key] = (count + m, total + value)
    return out


def expected_result(query: Query, truth: Mapping[Row, tuple[int, Any]]) -> Any:
    if not query.free:
        return truth.get((), (0, 0))[1]
    return {k: s for k, (c, s) in truth.items() if c != 0}  # SQL: a group with rows is a row, even when its SUM is 0


def random_row(rng: random.Random, query: Query, relation: str, values: Sequence[Any]) -> Row:
    atom = next(a for a in query.atoms if a.relation == relation)
    fixed = dict(atom.constants)
    row = [rng.choice(["x", "y"]) if p in fixed else rng.choice(values) for p in range(atom.arity)]
    if len(set(atom.terms)) < atom.arity and rng.random() < 0.6:  # R(x, x): mostly rows it selects
        row = [row[atom.terms.index(t)] for t in atom.terms]
    return tuple(row)


def random_batch(rng: random.Random, query: Query, base: Base, values: Sequence[Any]) -> list[Update]:
    relations = sorted(query.relations)
    batch = []
    for _ in range(rng.choice([1, 1, 2, 5, 12])):
        relation = rng.choice(relations)
        present = base[relation]
        if present and rng.random() < 0.35:  # delete a present tuple outright: keys go back to zero
            row = rng.choice(sorted(present, key=repr))
            batch.append(Update(relation, row, -present[row]))
        else:
            batch.append(Update(relation, random_row(rng, query, relation, values), rng.choice(MULTS)))
        for u in batch[-1:]:
            m = present.get(u.row, 0) + u.mult
            if m:
                present[u.row] = m
            else:
                present.pop(u.row, None)
    return batch


def check(query: Query, engine: FIVM, generic: FIVM, base: Base) -> None:
    truth = brute(query, base)
    assert engine.result() == expected_result(query, truth)
    assert engine.result() == generic.result()
    counts = {k: c for k, (c, _) in truth.items() if c}
    assert dict(engine.enumerate()) == counts == dict(generic.enumerate())
    assert engine.drain_delta() == generic.drain_delta()
    assert engine.views() == generic.views()
    for payloads in engine.views().values():
        assert all(isinstance(p, Pair) and not (p.first == 0 and p.second == 0) for p in payloads.values())


@pytest.mark.parametrize("values", [INTS, FLOATS], ids=["ints", "floats"])
@pytest.mark.parametrize("text", QUERIES)
def test_lanes_match_brute_force_and_the_generic_ring(text: str, values: list[Any]) -> None:
    query = ivm.parse(text)
    for seed in range(3):
        rng = random.Random(f"{text}/{seed}")
        engine, generic = FIVM(query), GenericFIVM(query)
        assert engine._lanes and not generic._lanes
        engine.drain_delta()
        generic.drain_delta()
        base: Base = {r: {} for r in query.relations}
        for _ in range(40):
            batch = random_batch(rng, query, base, values)
            engine.apply(batch)
            generic.apply(batch)
            check(query, engine, generic, base)


@pytest.mark.parametrize(
    "text, options",
    [
        ("Q(SUM(2 * b * c)) :- R(a, b), S(b, c), T(c, a)", {"indicators": True}),
        ("Q(SUM(p)) :- C(c, n), O(o, c), L(o, p)", {"updatable": {"L"}}),  # C, O updates rebuild the views
    ],
)
def test_lanes_with_indicators_and_rebuilds(text: str, options: dict[str, Any]) -> None:
    query = ivm.parse(text)
    rng = random.Random(text)
    engine, generic = FIVM(query, **options), GenericFIVM(query, **options)
    engine.drain_delta()
    generic.drain_delta()
    base: Base = {r: {} for r in query.relations}
    for _ in range(60):
        batch = random_batch(rng, query, base, INTS)
        engine.apply(batch)
        generic.apply(batch)
        check(query, engine, generic, base)


def test_lane_payloads_survive_a_snapshot() -> None:
    """Restored stores rebuild their index projections; the restored engine keeps the lanes."""
    query = ivm.parse("Q(c, SUM(a * a * b)) :- R(a, b), S(b, c), T(b, d), U(d)")
    rng = random.Random(7)
    engine, generic = FIVM(query), GenericFIVM(query)
    base: Base = {r: {} for r in query.relations}
    for step in range(60):
        if step == 30:
            engine = FIVM.restore(engine.snapshot())
            assert engine._lanes
        batch = random_batch(rng, query, base, FLOATS)
        engine.apply(batch)
        generic.apply(batch)
        assert engine.result() == generic.result() == expected_result(query, brute(query, base))
        assert engine.views() == generic.views()


def test_the_bench_shape_by_hand() -> None:
    """``SUM(p)`` over C ⋈ O ⋈ L: inserts, a multiplicity 2, a delete back to zero."""
    v = ivm.maintain("Q(SUM(p)) :- C(c, n), O(o, c), L(o, p)", engine="fivm")
    v.apply([("C", (1, 0), 1), ("O", (10, 1), 1), ("L", (10, 7), 1), ("L", (10, -2), 2)])
    assert v.result() == 7 - 4
    v.apply([("O", (11, 1), 1), ("L", (11, 0.5), 1)])
    assert v.result() == 3.5
    v.apply([("C", (1, 0), -1)])
    assert v.result() == 0 and list(v.enumerate()) == []


def plan_kind(plan: Any) -> str:
    """Which lane kernel runs the plan (and whether it lifts a power ≥ 2 there)."""
    if plan.direct is not None:
        kind = "direct"
    elif len(plan.steps) == 1 and not plan.steps[0].full:
        kind = "one index"
    else:
        kind = "recursive"
    return kind + (" x^k" if any(k >= 2 for _, k in plan.powers) else "")


def test_the_queries_reach_every_lane_kernel_with_powers() -> None:
    kinds = {plan_kind(plan) for text in QUERIES for node in FIVM(ivm.parse(text)).tree.nodes() for plan in node.plans}
    assert {"direct x^k", "one index x^k", "recursive x^k"} <= kinds


def test_numeric_flags() -> None:
    assert NumericRing.numeric and SumRing.numeric
    assert not PairRing(NumericRing(), SumRing({"b"})).numeric
    assert not CovarianceRing(("a", "b")).numeric and not RelationalRing(("a",)).numeric
    assert SumRing({"b": 2}).power("b") == 2 and SumRing({"b": 2}).power("a") == 0 and NumericRing().power("b") == 0
    assert lanes.numeric_pair(PairRing(NumericRing(), SumRing({"b"})))
    assert not lanes.numeric_pair(PairRing(NumericRing(), GenericSumRing({"b"})))
    assert not lanes.numeric_pair(NumericRing())
