"""F-IVM on cyclic queries with indicator projections (§7.4, GYO*), functional dependencies (§7.3),
self-joins and multi-relation batches, against the brute-force oracle."""

from __future__ import annotations

import random

import pytest

import ivm
from ivm.engines.fivm import FIVM
from tests.oracles import apply_stream, count_answers
from tests.unit.test_engine_protocol import random_stream

CYCLIC = [
    "Q() :- R(a,b), S(b,c), T(c,a)",
    "Q(a) :- R(a,b), S(b,c), T(c,a)",
    "Q() :- R(a,b), S(b,c), T(c,d), U(d,a), W(a,c)",
    "Q() :- R(a,b), S(b,c), T(c,d), U(d,a)",
    "Q() :- E(a,b), E(b,c), E(c,a)",
]


def test_triangle_gets_the_indicator_of_example_31() -> None:
    engine = FIVM(ivm.parse("Q() :- R(a,b), S(b,c), T(c,a)"), indicators=True)
    names = [leaf.name for leaf in engine.indicator_leaves]
    assert len(names) == 1 and names[0].startswith("∃_{") and names[0].endswith("R")
    assert "∃" in engine.explain()


def test_indicator_bounds_the_view_on_a_skewed_triangle() -> None:
    """S and T share a hub: without ∃R the view at the last variable has |S|·|T| keys, with it ≤ |R|."""
    q = ivm.parse("Q() :- R(a,b), S(b,c), T(c,a)")
    plain, ind = FIVM(q), FIVM(q, indicators=True)
    n = 30
    batch = [ivm.Update("S", (b, 0), 1) for b in range(n)] + [ivm.Update("T", (0, a), 1) for a in range(n)]
    batch += [ivm.Update("R", (i, i), 1) for i in range(n)]
    for e in (plain, ind):
        e.apply(batch)
    assert plain.result() == ind.result() == n
    assert max(len(v) for v in plain.views().values()) >= n * n
    assert max(len(v) for v in ind.views().values()) <= 2 * n
    # T9: deleting R tuples updates the indicator only when a count reaches 0
    ind.apply([ivm.Update("R", (3, 3), -1)])
    assert ind.result() == n - 1


@pytest.mark.parametrize("text", CYCLIC)
@pytest.mark.parametrize("seed", range(4))
def test_indicators_match_brute_force(text: str, seed: int) -> None:
    rng = random.Random(seed)
    query = ivm.parse(text)
    engine = FIVM(query, indicators=True)
    stream = random_stream(query, rng, 250, domain=5)
    applied = []
    i = 0
    while i < len(stream):
        batch = stream[i : i + rng.choice([1, 4, 30])]
        i += len(batch)
        engine.apply([ivm.Update(*u) for u in batch])
        applied += batch
        db, _ = apply_stream(applied)
        expected = count_answers(query, db)
        if query.free:
            assert dict(engine.enumerate()) == expected
        else:
            assert engine.result() == expected.get((), 0)


def test_functional_dependencies_example_27() -> None:
    query = ivm.parse("Q(A, B, C, D) :- R(A,B), S(B,C), T(C,D)")
    fd = FIVM(query, fds=[("B", "C"), ("C", "D")])
    plain = FIVM(query)
    assert fd.order.parent != plain.order.parent
    rng = random.Random(2)
    for _ in range(6):
        batch = []
        for _ in range(20):
            b = rng.randrange(6)
            c = b % 3  # B -> C
            d = c * 10  # C -> D
            rel = rng.choice("RST")
            row = {"R": (rng.randrange(4), b), "S": (b, c), "T": (c, d)}[rel]
            batch.append(ivm.Update(rel, row, 1))
        fd.apply(batch)
        plain.apply(batch)
        assert dict(fd.enumerate()) == dict(plain.enumerate())
        assert fd.stats()["materialized_views"] > 0


def test_multi_relation_batches_and_self_joins_equal_one_by_one() -> None:
    query = ivm.parse("Q(a) :- E(a,b), E(b,c), F(c,a)")
    rng = random.Random(5)
    stream = [ivm.Update(*u) for u in random_stream(query, rng, 300, domain=4)]
    batched, single = FIVM(query), FIVM(query)
    batched.apply(stream)
    for u in stream:
        single.apply([u])
    db, _ = apply_stream(stream)
    assert dict(batched.enumerate()) == dict(single.enumerate()) == count_answers(query, db)


FREE_CONNEX = [
    "Q(A, B, C) :- R(A,B), S(A,C,E), T(C,D)",
    "Q(A, B, C, D) :- R(A,B), S(A,C,E), T(C,D)",
    "Q(a) :- R(a,b), S(a,c)",
    "Q(a, b) :- R(a,b), S(b,c)",
    "Q(a, c) :- R(a,b), S(b,c), U(d)",
]


@pytest.mark.parametrize("text", FREE_CONNEX)
@pytest.mark.parametrize("seed", range(3))
def test_factorized_enumeration_and_deltas_match_brute_force(text: str, seed: int) -> None:
    rng = random.Random(seed)
    query = ivm.parse(text)
    engine = FIVM(query, ring="factorized")
    stream = random_stream(query, rng, 200, domain=4)
    applied: list = []
    seen: dict = {}
    for start in range(0, len(stream), 15):
        batch = stream[start : start + 15]
        engine.apply([ivm.Update(*u) for u in batch])
        applied += batch
        db, _ = apply_stream(applied)
        expected = count_answers(query, db)
        assert dict(engine.enumerate()) == expected
        for row, d in engine.drain_delta():
            seen[row] = seen.get(row, 0) + d
        assert {k: v for k, v in seen.items() if v} == expected
