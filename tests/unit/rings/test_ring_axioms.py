"""The ring axioms of F-IVM §2.1 for every ring of :mod:`ivm.rings` (exact integer elements).

+ commutative and associative with identity 0 and inverses; * associative with
identity 1, distributing over + on both sides; commutativity of * where the
ring claims it (Theorem 33 for the covariance rings), and its failure for matrices.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from ivm.rings import (
    CovarianceRing,
    GeneralizedCovarianceRing,
    MatrixRing,
    NumericRing,
    PairRing,
    RelationalRing,
    SumRing,
)
from ivm.rings.base import Ring
from ivm.rings.relational import Relation

VARS = ("x", "y", "z")


def lifted(ring: Ring, rng: random.Random) -> Any:
    """A random sum of products of liftings and multiplicities."""
    out = ring.zero
    for _ in range(rng.randint(1, 3)):
        term = ring.from_mult(rng.choice([-2, -1, 1, 3]))
        for v in rng.sample(VARS, rng.randint(0, 3)):
            term = term * ring.lift(v, rng.randint(-3, 3))
        out = out + term
    return out


def relation(rng: random.Random, schema: tuple[str, ...] | None = None) -> Relation:
    """A random relation; F[Z] is a ring on one schema (Def. 36: mixed-schema unions need [32])."""
    if schema is None:
        schema = tuple(sorted(rng.sample(VARS, rng.randint(0, 2))))
    data = {tuple(rng.randint(0, 2) for _ in schema): rng.randint(-2, 2) for _ in range(rng.randint(0, 3))}
    return Relation(schema, data)


def matrix(ring: MatrixRing, rng: random.Random) -> Any:
    return ring.element([[rng.randint(-3, 3) for _ in range(3)] for _ in range(3)])


RINGS: dict[str, tuple[Ring, Callable[[random.Random], Any]]] = {}
for _name, _ring in {
    "Z": NumericRing(),
    "sum": SumRing({"x": 1, "y": 2}),
    "pair": PairRing(NumericRing(), SumRing({"x": 1})),
    "covariance": CovarianceRing(VARS),
    "generalized": GeneralizedCovarianceRing(VARS, categorical={"y"}),
    "generalized_all_cat": GeneralizedCovarianceRing(VARS, categorical=VARS),
}.items():
    RINGS[_name] = (_ring, lambda rng, r=_ring: lifted(r, rng))
RINGS["relational"] = (RelationalRing(VARS), lambda rng: relation(rng, ("x", "y")))
_matrices = MatrixRing(3)
RINGS["matrix"] = (_matrices, lambda rng: matrix(_matrices, rng))


def eq(ring: Ring, a: Any, b: Any) -> bool:
    return ring.is_zero(a - b)


@pytest.mark.parametrize("name", sorted(RINGS))
@pytest.mark.parametrize("seed", range(25))
def test_ring_axioms(name: str, seed: int) -> None:
    ring, gen = RINGS[name]
    rng = random.Random(seed)
    a, b, c = gen(rng), gen(rng), gen(rng)
    zero, one = ring.zero, ring.one
    assert eq(ring, a + b, b + a)
    assert eq(ring, (a + b) + c, a + (b + c))
    assert eq(ring, a + zero, a) and eq(ring, zero + a, a)
    assert ring.is_zero(a + (-a))
    assert eq(ring, (a * b) * c, a * (b * c))
    assert eq(ring, a * one, a) and eq(ring, one * a, a)
    assert eq(ring, a * (b + c), a * b + a * c)
    assert eq(ring, (a + b) * c, a * c + b * c)
    assert ring.is_zero(a * zero) and ring.is_zero(zero * a)
    if ring.commutative:
        assert eq(ring, a * b, b * a)


def test_matrices_are_not_commutative() -> None:
    ring, gen = RINGS["matrix"]
    rng = random.Random(3)
    assert any(not eq(ring, (a := gen(rng)) * (b := gen(rng)), b * a) for _ in range(5))


def test_zero_test_is_not_trivial() -> None:
    for name, (ring, gen) in RINGS.items():
        rng = random.Random(1)
        assert not ring.is_zero(ring.one), name
        assert any(not ring.is_zero(gen(rng)) for _ in range(5)), name


def test_covariance_lift_tuple_is_the_product_of_lifts() -> None:
    ring = CovarianceRing(("x", "y", "z", "w"))
    a = ring.lift_tuple(("y", "q", "x"), (3, 9, -2))
    assert a == ring.lift("y", 3) * ring.lift("q", 9) * ring.lift("x", -2)


@pytest.mark.parametrize("seed", range(25))
def test_relational_join_is_associative_and_distributes_across_schemas(seed: int) -> None:
    """Inside a view tree unions are over one schema, products over any: check exactly those."""
    ring = RelationalRing(VARS)
    rng = random.Random(seed)
    s1 = tuple(sorted(rng.sample(VARS, rng.randint(0, 2))))
    a, b = relation(rng, s1), relation(rng, s1)
    c, d = relation(rng), relation(rng)
    assert eq(ring, (c * d) * a, c * (d * a))
    assert eq(ring, (a + b) * c, a * c + b * c)
    assert eq(ring, c * (a + b), c * a + c * b)
    assert eq(ring, c * d, d * c)
