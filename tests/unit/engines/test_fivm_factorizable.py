"""Factorizable updates (F-IVM §6, Example 11, Example 12): ``FIVM.apply_factorized`` and ``View.apply_factorized``.

Differential: the same union of products goes to one engine factorized and to
another expanded here (an independent expansion, net multiplicity per tuple)
and applied tuple by tuple with ``apply``; after every update the results,
the answers, every stored view and the base relations' multiplicities must be
equal (exact payloads).  Queries: the running example (Boolean, group-by,
all free), a star, a path, random queries with self-joins and repeated
variables, a selection; every ring (count, sum lanes, covariance in numpy
and Python, generalized covariance, listing, factorized) and both view trees.
Then the paper's numbers: Example 11's sizes (T10) on a block, Example 12's
cost bound, the rank-1 matrix chain (T11) against ``apps/matrix_chain.py``.
"""

from __future__ import annotations

import dataclasses
import random
from itertools import product as cartesian
from typing import Any

import numpy as np
import pytest

import ivm
from ivm.apps.matrix_chain import MatrixChain
from ivm.engines.fivm import FIVM
from ivm.query.model import Aggregate, Query
from tests.unit.engines.test_fivm_duckdb import random_query

QUERIES = {
    "running_boolean": "Q() :- R(A,B), S(A,C,E), T(C,D)",
    "running_groupby": "Q(A, C) :- R(A,B), S(A,C,E), T(C,D)",
    "running_free": "Q(A, B, C) :- R(A,B), S(A,C,E), T(C,D)",
    "star": "Q(A) :- R(A,B), S(A,C), T(A,D,E)",
    "path": "Q() :- R(A,B), S(B,C), T(C,D)",
    "path_ends": "Q(A, D) :- R(A,B), S(B,C), T(C,D)",
    "two_branches": "Q(A, B, C, D) :- R(A,B,C), S(A,B,D)",
}

RINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "count": ("count", {}),
    "sum": ("sum", {}),
    "covariance_numpy": ("covariance", {"implementation": "numpy"}),
    "covariance_python": ("covariance", {"implementation": "python"}),
    "generalized_covariance": ("generalized", {}),
    "listing": ("count", {"ring": "listing"}),
    "factorized": ("count", {"ring": "factorized"}),
}


def with_aggregate(query: Query, kind: str) -> tuple[Query, dict[str, Any]]:
    """The query with a COUNT, SUM or COVAR aggregate over its variables (and the categorical option)."""
    variables = sorted(query.variables)
    if kind == "count":
        return query, {}
    if kind == "sum":
        return dataclasses.replace(query, aggregate=Aggregate("sum", (variables[1], variables[-1]), 3)), {}
    covariance = dataclasses.replace(query, aggregate=Aggregate("covariance", tuple(variables[:4])))
    return covariance, ({"categorical": (variables[0],)} if kind == "generalized" else {})


# ------------------------------------------------------------------ the oracle
def columns_by_name(query: Query, relation: str) -> dict[str, tuple[int, ...]] | None:
    """Variable → its columns, if every atom of the relation names the columns alike (else None)."""
    seen = None
    for atom in query.atoms:
        if atom.relation != relation:
            continue
        here: dict[str, list[int]] = {}
        for p, v in enumerate(atom.terms):
            here.setdefault(v, []).append(p)
        names = {v: tuple(ps) for v, ps in here.items()}
        if seen is not None and seen != names:
            return None
        seen = names
    return seen


def random_products(
    rng: random.Random, query: Query, relation: str, domain: int = 3, products: int | None = None
) -> list[list[tuple[Any, dict]]]:
    """A union of 1-3 products over random partitions of the relation's columns (names or positions)."""
    arity = query.relations[relation]
    names = columns_by_name(query, relation)
    out = []
    for _ in range(products or rng.choice([1, 2, 2, 3])):
        units: list[Any] = list(names) if names is not None and rng.random() < 0.5 else list(range(arity))
        rng.shuffle(units)
        singletons = rng.random() < 0.6  # most products split every variable: the most factorized case
        prod = []
        while units:
            k = 1 if singletons else rng.randint(1, len(units))
            part, units = units[:k], units[k:]
            data = {}
            for _ in range(rng.randint(1, 4)):
                data[tuple(rng.randrange(domain) for _ in part)] = rng.choice([-2, -1, 1, 1, 2, 3])
            variables: Any = part[0] if len(part) == 1 and rng.random() < 0.5 else tuple(part)
            prod.append((variables, data))
        out.append(prod)
    return out


def expanded(query: Query, relation: str, products: list[list[tuple[Any, dict]]]) -> list[tuple[str, tuple, int]]:
    """The union of products as tuple updates (net multiplicity per tuple), computed independently."""
    arity = query.relations[relation]
    names = columns_by_name(query, relation) or {}
    net: dict[tuple, int] = {}
    for prod in products:
        factors = []
        for variables, data in prod:
            given = (variables,) if isinstance(variables, (str, int)) else tuple(variables)
            cols = [names[g] if isinstance(g, str) else (g,) for g in given]
            factors.append((cols, list(data.items())))
        for combo in cartesian(*(items for _, items in factors)):
            row: list[Any] = [None] * arity
            m = 1
            for (cols, _), (values, mult) in zip(factors, combo, strict=True):
                values = values if isinstance(values, tuple) else (values,)
                for group, x in zip(cols, values, strict=True):
                    for p in group:
                        row[p] = x
                m *= mult
            net[tuple(row)] = net.get(tuple(row), 0) + m
    return [(relation, row, m) for row, m in net.items() if m]


def load(query: Query, rng: random.Random, per_relation: int = 5, domain: int = 3) -> list[tuple[str, tuple, int]]:
    return [
        (rel, tuple(rng.randrange(domain) for _ in range(arity)), rng.choice([1, 1, 2]))
        for rel, arity in query.relations.items()
        for _ in range(per_relation)
    ]


def assert_same(fact: FIVM, ref: FIVM, where: str) -> None:
    assert fact.result() == ref.result(), where
    assert dict(fact.enumerate()) == dict(ref.enumerate()), where
    assert fact.base == ref.base, where
    fv, rv = fact.views(), ref.views()
    assert fv.keys() == rv.keys(), where
    for name, payloads in rv.items():
        assert fv[name].keys() == payloads.keys(), f"{where}: keys of {name}"
        for key, payload in payloads.items():
            assert fv[name][key] == payload, f"{where}: {name}[{key}]"


def differential(query: Query, options: dict[str, Any], seed: int, updates: int = 6) -> FIVM:
    """Random factorized updates against their expansion; factor values from 3 or 5 values per variable, so
    that factors are sometimes larger than the siblings they meet (the other side of Example 12's ``min``)."""
    rng = random.Random(seed)
    fact, ref = FIVM(query, **options), FIVM(query, **options)
    initial = load(query, rng)
    fact.apply(initial)
    ref.apply(initial)
    assert fact.drain_delta() == ref.drain_delta()  # from now on both track the answers' changes
    relations = sorted(query.relations)
    for step in range(updates):
        relation = rng.choice(relations)
        products = random_products(rng, query, relation, domain=rng.choice([3, 5]))
        changed = fact.apply_factorized(relation, products)
        tuples = expanded(query, relation, products)
        ref.apply(tuples)
        assert changed == len(tuples)
        where = f"{query} {options} seed {seed} step {step}: {relation} {products}"
        assert_same(fact, ref, where)
        assert fact.drain_delta() == ref.drain_delta(), where
    return fact


# ------------------------------------------------------------------ differential tests
@pytest.mark.parametrize("ring", sorted(RINGS))
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_factorized_equals_expanded_every_ring(name: str, ring: str) -> None:
    kind, options = RINGS[ring]
    query, extra = with_aggregate(ivm.parse(QUERIES[name]), kind)
    for seed in range(3):
        engine = differential(query, {**options, **extra}, seed)
    assert engine.stats()["factorized_updates"] == 6


@pytest.mark.parametrize("kind", ["count", "sum", "covariance"])
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_factorized_equals_expanded_on_nu_trees(name: str, kind: str) -> None:
    query, extra = with_aggregate(ivm.parse(QUERIES[name]), kind)
    for seed in range(2):
        differential(query, {"tree": "nu", **extra}, seed)


@pytest.mark.parametrize("seed", range(60))
def test_random_queries_self_joins_and_repeated_variables(seed: int) -> None:
    rng = random.Random(1000 + seed)
    kind = ("count", "sum", "covariance")[seed % 3]
    query = random_query(rng, kind)
    options: list[dict[str, Any]] = [{}, {"tree": "nu"}]
    if kind == "covariance":
        options.append({"implementation": "python"})
    if kind == "count":
        options += [{"ring": "listing"}, {"ring": "factorized"}]
    for opts in options:
        differential(query, opts, seed, updates=5)


def test_selections_non_updatable_relations_and_indicators() -> None:
    """Constants select (stored in the base relation all the same); a relation outside U re-evaluates; §7.4."""
    q = ivm.parse("Q(A) :- R(A, 1, B), S(A, B)")
    for seed in range(4):
        differential(q, {}, seed)
    running = ivm.parse(QUERIES["running_groupby"])
    for seed in range(3):
        engine = differential(running, {"updatable": {"S", "T"}}, seed)
    assert engine.stats()["rebuilds"] > 0
    triangle = ivm.parse("Q() :- R(A,B), S(B,C), T(C,A)")
    for seed in range(4):
        engine = differential(triangle, {"indicators": True}, seed)
    assert engine.stats()["indicators"] > 0


@pytest.mark.parametrize(
    "options", [{}, {"ring": "listing"}, {"ring": "factorized"}, {"tree": "nu"}, {"implementation": "python"}]
)
def test_smaller_sibling_is_iterated_and_payloads_stay_exact(options: dict[str, Any]) -> None:
    """Example 12's other side of the ``min``: a sibling smaller than the factor is iterated and the factor
    probed, here with the factor's variables in another order than the sibling's key (a 3-cycle), and
    with relational payloads (§6.4) carried through the product factorized up to the root."""
    query = ivm.parse("Q(A, B, C) :- R(A,B,C), S(C,A,B,D)")
    if options.get("implementation"):
        query = dataclasses.replace(query, aggregate=Aggregate("covariance", ("A", "B", "D")))
    rows = [(0, 1, 2), (1, 1, 0)]
    initial = [("R", row, 1) for row in rows] + [("S", (2, 0, 1, 5), 1)]
    big = {(b, c, a): 1 + (a + b + c) % 3 for a in range(3) for b in range(3) for c in range(3)}
    update = [[(("B", "C", "A"), big), ("D", {5: 1, 6: -1, 7: 2})]]
    fact, ref = FIVM(query, updatable={"S"}, **options), FIVM(query, updatable={"S"}, **options)
    fact.apply(initial)
    ref.apply(initial)
    fact.apply_factorized("S", update)
    ref.apply(expanded(query, "S", update))
    assert_same(fact, ref, "a 3-cycle of names")
    running = ivm.parse(QUERIES["running_free"])
    if options.get("implementation"):
        running = dataclasses.replace(running, aggregate=Aggregate("covariance", ("A", "B", "C", "D")))
    initial = [("R", (0, 1), 1), ("R", (0, 2), 1), ("T", (1, 3), 1), ("T", (2, 4), 2), ("S", (0, 1, 9), 1)]
    update = [[("A", {0: 2, 1: 1, 2: 1, 3: -1}), ("C", {1: 1, 2: -1}), ("E", {0: 1, 1: 3})]]
    fact, ref = FIVM(running, updatable={"S"}, **options), FIVM(running, updatable={"S"}, **options)
    fact.apply(initial)
    ref.apply(initial)
    fact.apply_factorized("S", update)
    ref.apply(expanded(running, "S", update))
    assert_same(fact, ref, "V_R smaller than δS_A")


def test_names_positions_and_errors() -> None:
    q = ivm.parse("Q() :- R(A,B), S(A,C,E), T(C,D)")
    e = FIVM(q)
    # a factor may cover several variables, named or by position; bare values for one-variable factors
    assert e.apply_factorized("S", [[(("A", "C"), {(1, 2): 2}), ("E", {5: 1})], [((0, 1), {(1, 2): 1}), (2, {6: 1})]])
    assert e.base["S"] == {(1, 2, 5): 2, (1, 2, 6): 1}
    with pytest.raises(ValueError, match="unknown relation"):
        e.apply_factorized("U", [])
    with pytest.raises(ValueError, match="covered by no factor"):
        e.apply_factorized("S", [[("A", {1: 1})]])
    with pytest.raises(ValueError, match="covered by factors"):
        e.apply_factorized("S", [[("A", {1: 1}), ((0, "C", "E"), {(1, 1, 1): 1})]])
    with pytest.raises(ValueError, match="not a variable"):
        e.apply_factorized("S", [[("A", {1: 1}), ("C", {1: 1}), ("X", {1: 1})]])
    with pytest.raises(ValueError, match="has 1 values, not 2"):
        e.apply_factorized("S", [[(("A", "C"), {(1,): 1}), ("E", {1: 1})]])
    with pytest.raises(TypeError, match="list of products"):
        e.apply_factorized("S", [("A", {1: 1}), ("C", {1: 1}), ("E", {1: 1})])  # a product, not a union
    self_join = FIVM(ivm.parse("Q() :- E(A,B), E(B,C)"))
    with pytest.raises(ValueError, match="give column positions"):
        self_join.apply_factorized("E", [[("A", {1: 1}), ("B", {2: 1})]])
    assert self_join.apply_factorized("E", [[(0, {1: 1, 2: 1}), (1, {2: 1})]]) == 2
    assert self_join.result() == 2  # E = {(1,2), (2,2)}: the paths 1-2-2 and 2-2-2


# ------------------------------------------------------------------ the paper's numbers
def values(products: list[list[tuple[Any, dict]]]) -> int:
    return sum(len(data) for prod in products for _, data in prod)


def test_example_11_block_sizes_t10() -> None:
    """T10: an n×m block is n + m values; the block plus a row of m − 1 is n + 2m values as two products or
    n + m + 3 as an over-approximation plus a correction; each gives the state of the nm (+ m − 1) tuples."""
    n, m = 40, 30
    a, b = [f"a{i}" for i in range(1, n + 2)], [f"b{j}" for j in range(1, m + 1)]
    q = ivm.parse("Q() :- R(A,B), S(A,C,E), T(C,D)")
    rng = random.Random(11)
    initial = [("S", (rng.choice(a), f"c{rng.randrange(5)}", rng.randrange(3)), 1) for _ in range(60)]
    initial += [("T", (f"c{rng.randrange(5)}", rng.randrange(4)), 1) for _ in range(20)]

    def engine() -> FIVM:
        e = FIVM(q, updatable={"R"})
        e.apply(initial)
        return e

    block = [[("A", dict.fromkeys(a[:n], 1)), ("B", dict.fromkeys(b, 1))]]
    assert values(block) == n + m
    fact, ref = engine(), engine()
    assert fact.apply_factorized("R", block) == n * m
    ref.apply(expanded(q, "R", block))
    assert_same(fact, ref, "block")
    # the propagation reads the factors, not the nm tuples (V_R^{@B} is not stored when only R is updatable)
    assert fact.stats()["factorized_work"] <= 2 * (n + m) + 2 < n * m

    two_products = [*block, [("A", {a[n]: 1}), ("B", dict.fromkeys(b[: m - 1], 1))]]
    corrected = [
        [("A", dict.fromkeys(a, 1)), ("B", dict.fromkeys(b, 1))],
        [("A", {a[n]: 1}), ("B", {b[m - 1]: -1})],
    ]
    assert (values(two_products), values(corrected)) == (n + 2 * m, n + m + 3)
    ref = engine()
    ref.apply(expanded(q, "R", two_products))
    assert len(ref.base["R"]) == n * m + m - 1
    for decomposition in (two_products, corrected):
        fact = engine()
        assert fact.apply_factorized("R", decomposition) == n * m + m - 1
        assert_same(fact, ref, f"{values(decomposition)} values")


def test_example_12_cost_of_a_product_update() -> None:
    """δS = δS_A ⊗ δS_C ⊗ δS_E with U = {S}: δV_RST = (⊕_A V_R ⊗ δS_A)(⊕_C V_T ⊗ δS_C)(⊕_E δS_E), costing
    O(min(|V_R|, |δS_A|) + min(|V_T|, |δS_C|) + |δS_E|) instead of |δS_A|·|δS_C|·|δS_E|."""
    q = ivm.parse("Q() :- R(A,B), S(A,C,E), T(C,D)")
    rng = random.Random(12)
    initial = [("R", (rng.randrange(8), rng.randrange(3)), 1) for _ in range(20)]
    initial += [("T", (rng.randrange(100), rng.randrange(3)), 1) for _ in range(300)]
    for sa, sc, se in [(50, 20, 30), (5, 200, 7)]:
        fact, ref = FIVM(q, updatable={"S"}), FIVM(q, updatable={"S"})
        fact.apply(initial)
        ref.apply(initial)
        v_r, v_t = fact.views()["V^{@B}_{R}"], fact.views()["V^{@D}_{T}"]
        product = [
            [
                ("A", {x: rng.choice([1, 2, -1]) for x in range(sa)}),
                ("C", {x: rng.choice([1, 3]) for x in range(sc)}),
                ("E", {x: rng.choice([1, -2]) for x in range(se)}),
            ]
        ]
        assert fact.apply_factorized("S", product) == sa * sc * se
        ref.apply(expanded(q, "S", product))
        assert_same(fact, ref, f"{sa}x{sc}x{se}")
        bound = min(len(v_r), sa) + min(len(v_t), sc) + se
        assert fact.stats()["factorized_work"] <= bound + 1 < sa * sc * se


def test_rank1_matrix_chain_t11_equals_matrix_chain_app() -> None:
    """T11: A1 (A2 + u vᵀ) A3 − A1 A2 A3 = (A1 u)(vᵀ A3); δA2 = u[J] ⊗ v[K] propagated in O(p²), not O(p³)."""
    rng = np.random.default_rng(42)
    p = 12
    A = [rng.integers(-3, 4, (p, p)) for _ in range(3)]
    q = ivm.parse("Q(I, L) :- A1(I,J), A2(J,K), A3(K,L)")
    entries = [(f"A{n + 1}", (i, j), int(A[n][i, j])) for n in range(3) for i in range(p) for j in range(p)]
    entries = [e for e in entries if e[2]]
    fact, ref = FIVM(q), FIVM(q)
    fact.apply(entries)
    ref.apply(entries)
    chain = MatrixChain([a.astype(object) for a in A])
    for r in range(3):  # a rank-3 update as three rank-1 updates
        u, v = rng.integers(-2, 3, p), rng.integers(-2, 3, p)
        u[r] = v[r] = 1  # never all zero
        rank1 = [[("J", {j: int(u[j]) for j in range(p) if u[j]}), ("K", {k: int(v[k]) for k in range(p) if v[k]})]]
        before, work = fact.result(), fact.stats()["factorized_work"]
        fact.apply_factorized("A2", rank1)
        assert fact.stats()["factorized_work"] - work <= 6 * p * p < p**3
        after = fact.result()
        delta = np.array([[after.get((i, j), 0) - before.get((i, j), 0) for j in range(p)] for i in range(p)])
        A1, A3 = chain.matrix(0), chain.matrix(2)
        assert (delta == np.outer(A1 @ u, v @ A3)).all()  # T11: (A1 u)(vᵀ A3)
        chain.update_rank1(1, u, v)
        ref.apply(expanded(q, "A2", rank1))
        M = chain.result()
        assert fact.result() == {(i, j): M[i, j] for i in range(p) for j in range(p) if M[i, j]}
        assert_same(fact, ref, f"rank-1 update {r}")


def test_float_payloads_rank1_matrix_entries() -> None:
    """Multiplicities may be any number for the payload m · 1: float matrix entries in the count ring."""
    rng = np.random.default_rng(7)
    p = 5
    A = [rng.normal(size=(p, p)) for _ in range(3)]
    q = ivm.parse("Q(I, L) :- A1(I,J), A2(J,K), A3(K,L)")
    e = FIVM(q)
    e.apply([(f"A{n + 1}", (i, j), float(A[n][i, j])) for n in range(3) for i in range(p) for j in range(p)])
    u, v = rng.normal(size=p), rng.normal(size=p)
    e.apply_factorized("A2", [[("J", dict(enumerate(u.tolist()))), ("K", dict(enumerate(v.tolist())))]])
    expected = A[0] @ (A[1] + np.outer(u, v)) @ A[2]
    got = np.zeros((p, p))
    for (i, j), x in e.result().items():
        got[i, j] = x
    assert np.allclose(got, expected)


# ------------------------------------------------------------------ the public View
def test_view_apply_factorized_outcome_policy_and_engines() -> None:
    v = ivm.maintain("Q(A, C) :- R(A,B), S(A,C,E), T(C,D)", engine="fivm")
    v.apply([("R", (1, 1), 1), ("R", (2, 1), 1), ("T", (1, 1), 1), ("T", (2, 1), 1)])
    out = v.apply_factorized("S", [[("A", {1: 1, 2: 1}), ("C", {1: 1, 2: 1}), ("E", {7: 1, 8: 1})]])
    assert (out.applied, out.rejected) == (8, [])
    assert v.result() == {(1, 1): 2, (1, 2): 2, (2, 1): 2, (2, 2): 2}
    # a correction deleting present tuples is fine; deleting absent ones is refused as a whole (state unchanged)
    state = dict(v.engine.base["S"])
    bad = [[("A", {1: 1}), ("C", {1: 1}), ("E", {7: -1, 9: -1})]]
    out = v.apply_factorized("S", bad)
    assert out.applied == 0 and [(r.index, r.update.row, r.update.mult, r.kind) for r in out.rejected] == [
        (0, (1, 1, 9), -1, "absent_delete")
    ]
    assert v.engine.base["S"] == state and v.result()[(1, 1)] == 2
    out = v.apply_factorized("S", [[("A", {1: 1}), ("C", {1: 1}), ("E", {7: -1})]])
    assert out.applied == 1 and v.result()[(1, 1)] == 1
    with pytest.raises(TypeError, match="must be an int"):
        v.apply_factorized("S", [[("A", {1: 0.5}), ("C", {1: 1}), ("E", {7: 1})]])
    # set semantics refuses a duplicate insert; a delete-only relation refuses inserts
    strict = ivm.maintain("Q() :- R(A,B)", engine="fivm", policy=ivm.Policy(duplicate="reject"))
    assert strict.apply_factorized("R", [[("A", {1: 1}), ("B", {1: 1, 2: 1})]]).applied == 2
    out = strict.apply_factorized("R", [[("A", {1: 1, 2: 1}), ("B", {2: 1})]])
    assert [(r.update.row, r.kind) for r in out.rejected] == [((1, 2), "duplicate_insert")]
    assert strict.result() == 2
    # other engines cannot take a factorized update
    other = ivm.maintain("Q() :- R(A,B), S(B,C)", engine="propagation")
    with pytest.raises(TypeError, match="needs the F-IVM engine"):
        other.apply_factorized("R", [[("A", {1: 1}), ("B", {1: 1})]])
