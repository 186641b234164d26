"""IVM^eps for 3R queries (Appendix H, Theorem 37) against brute force, invariants after every batch.

- a table of 3R queries of every class (private variables, pair-join tuples of two
  variables, variables in all three atoms, repeated variables and constants in atoms,
  nullary atoms, self-joins) on random insert/delete streams at eps 0, 0.3, 0.5, 1,
  with skew, multiplicities other than 1 and full deletions;
- major and minor rebalancing (counters asserted) for 3R^2 and 3R^3, none for the
  hierarchical class;
- the Table 1 classification of every 3R query over up to four variables, against an
  independent reading of Definitions 33-35 (and Proposition 41 against a hierarchy
  test, 3R^3 against a GYO cyclicity test), and the engine's plan and guarantee for each;
- refusals by name, snapshot round trip.
"""

from __future__ import annotations

import itertools
import random
from functools import partial

import pytest

from ivm.engines.base import EngineRefused
from ivm.engines.ivm_eps.three_relations import IVMEps3R
from ivm.engines.ivm_eps.three_relations_invariants import check_3r_invariants
from ivm.query import parse
from ivm.query.model import Atom, Query
from tests.oracles import ZDatabase, assert_multiplicities, count, hub_stream, logical_stats, replay

EPS = [0.0, 0.3, 0.5, 1.0]

#: random updates with the hub value 0 (tests/oracles.py)
stream = partial(hub_stream, domain=5, hub_rate=0.4)


def bursty_stream(rng: random.Random, query: Query, rounds: int, burst: int = 40):
    """Background updates (as :func:`stream`) interleaved with bursts: ``burst`` tuples that agree
    everywhere but at one position are inserted (multiplicity 2) and then deleted in random order,
    so that the degree of one key crosses 3θ/2 and falls below θ/2 again (minor rebalancing)."""
    relations = sorted(query.relations)
    background = stream(rng, query, 10**9, domain=40, hub_rate=0.3)
    for r in range(rounds):
        for _ in range(30):
            yield next(background)
        relation = rng.choice(relations)
        arity = query.relations[relation]
        if not arity:
            continue
        pos = rng.randrange(arity)
        rows = [tuple(1000 + j if q == pos else -r for q in range(arity)) for j in range(burst)]
        for row in rows:
            yield relation, row, 2
        rng.shuffle(rows)
        for row in rows:
            yield relation, row, -2


# (query, its class by hand from Definition 35)
QUERIES = [
    ("Q() :- R(a), S(a), T(a)", 0),  # one variable in all three
    ("Q() :- R(x), S(y), T(z)", 0),  # private variables only: a product of sums
    ("Q() :- R(a,x), S(a,y), T(a,z)", 0),
    ("Q() :- R(), S(a), T(a,b)", 1),  # a nullary atom, A_ST = (a)
    ("Q() :- R(a,b), S(a,b), T(a,c)", 1),  # A_RS = (b), A_RST = (a), a private c
    ("Q() :- R(b,c,a), S(c,b), T(d)", 1),  # a pair-join tuple of two variables
    ("Q() :- R(a,a,b), S(b,c,c), T(b,3)", 0),  # repeated variables and a constant
    ("Q() :- R(a,b), S(b,c), T(c,d)", 2),  # the 4-path
    ("Q() :- R(a,b), S(b), T(a)", 2),  # Q_2 of Example 36 without private variables
    ("Q() :- R(a,b,c), S(b,c), T(a,d)", 2),  # A_RS of two variables, a private d
    ("Q() :- R(a,b,d), S(b,d), T(a,d)", 2),  # a variable in all three
    ("Q() :- R(a,a,b), S(b,c), T(c,c)", 2),  # repeated variables within the atoms
    ("Q() :- R(a,b), S(b,c), T(c,3)", 2),  # a constant
    ("Q() :- R(a,b), S(b,c), T(c,a)", 3),  # the triangle
    ("Q() :- R(b,a), S(c,b), T(a,c)", 3),  # read the other way round
    ("Q() :- R(a,b,d), S(b,c,d), T(c,a,d)", 3),  # a variable in all three
    ("Q() :- R(a,b,c), S(b,c,d), T(d,a)", 3),  # pair-join tuples of two variables
    ("Q() :- R(a,b,c,d), S(e,c,f,d), T(g,f,b,d)", 3),  # Example 36, Q_1
    ("Q() :- E(a,b), E(b,c), E(c,d)", 2),  # self-join: copies per atom
    ("Q() :- E(a,b), E(b,c), E(c,a)", 3),
    ("Q() :- E(a,b), E(b,a), F(a)", 1),
]


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize(("text", "klass"), QUERIES)
def test_random_streams_match_brute_force(text: str, klass: int, eps: float) -> None:
    query = parse(text)
    engine = IVMEps3R(query, eps=eps)
    assert engine.stats()["class"] == klass
    base = ZDatabase(query)
    for seed in (1, 2):
        rng = random.Random(seed * 1000 + QUERIES.index((text, klass)))
        updates = list(stream(rng, query, 120))
        replay(engine, base, query, updates, rng, check_3r_invariants)
        assert_multiplicities(engine, base)
    assert any(m not in (0, 1) for table in base.rel.values() for m in table.values())
    assert engine.stats()["updates_applied"] == 240


def test_multiplicities_multiply() -> None:
    """R(1,2) = 2, S(2,3) = 3, T(3,4) = -1 and T(3,5) = 4 on the 4-path: Σ = 2·3·(-1 + 4)."""
    engine = IVMEps3R(parse("Q() :- R(a,b), S(b,c), T(c,d)"), eps=0.5)
    engine.apply([("R", (1, 2), 2), ("S", (2, 3), 3), ("T", (3, 4), -1), ("T", (3, 5), 4)])
    check_3r_invariants(engine)
    assert engine.result() == 2 * 3 * (-1 + 4)
    assert list(engine.enumerate()) == [((), 2 * 3 * (-1 + 4))]
    engine.apply([("S", (2, 3), -3)])
    assert engine.result() == 0 and list(engine.enumerate()) == []


def _grow_then_shrink(text: str, eps: float, seed: int) -> IVMEps3R:
    query = parse(text)
    engine = IVMEps3R(query, eps=eps)
    base = ZDatabase(query)
    rng = random.Random(seed)
    updates = list(bursty_stream(rng, query, 12))
    for k, (relation, row, m) in enumerate(updates + [(r, row, -m) for r, row, m in reversed(updates)]):
        engine.apply([(relation, row, m)])
        base.apply(relation, row, m)
        if k % 7 == 0:
            check_3r_invariants(engine)
    check_3r_invariants(engine)
    return engine


@pytest.mark.parametrize("eps", [0.3, 0.5])
@pytest.mark.parametrize(
    "text", ["Q() :- R(a,b), S(b,c), T(c,d)", "Q() :- R(a,b), S(b), T(a)", "Q() :- R(a,b,d), S(b,c,d), T(c,a,d)"]
)
def test_skewed_grow_and_shrink_runs_major_and_minor_rebalancing(text: str, eps: float) -> None:
    engine = _grow_then_shrink(text, eps, seed=5)
    stats = engine.stats()
    assert engine.result() == 0 and stats["state_tuples"] == 0
    assert stats["threshold_base"] in (1, 2)
    assert stats["major_rebalances"] >= 10  # doubling on the way up, halving on the way down
    assert stats["minor_rebalances"] >= 1 and stats["tuples_moved"] >= stats["minor_rebalances"]


def test_hierarchical_class_never_partitions_or_rebalances() -> None:
    """3R^1 after the optimization phase (H.1.4): no partition, no rebalancing, whatever the skew."""
    engine = _grow_then_shrink("Q() :- R(a,b), S(a,b), T(a,c)", 0.5, seed=9)
    stats = engine.stats()
    assert stats["plan_hierarchical"] == 1 and stats["partitioned_relations"] == 0
    assert stats["major_rebalances"] == stats["minor_rebalances"] == 0
    assert not hasattr(engine, "N") or engine.N == 1


@pytest.mark.parametrize("eps", [0.3, 0.5, 0.7])
def test_path_minor_rebalancing_both_ways(eps: float) -> None:
    """A key of the middle relation M = R grows past 3θ/2 (light -> heavy) and shrinks below θ/2."""
    query = parse("Q() :- R(a,b), S(b), T(a)")
    engine = IVMEps3R(query, eps=eps)
    base = ZDatabase(query)
    preload = [("S", (b,), 1 + b % 3) for b in range(200)] + [("T", (a,), 2) for a in range(60)]
    for update in preload:
        engine.apply([update])
        base.apply(*update)
    n = engine.N
    theta = n**eps
    up = next(d for d in range(1, n) if d >= 1.5 * theta)
    assert up + engine.size < n  # no major rebalancing on the way
    majors = engine.major_rebalances
    for b in range(up):
        engine.apply([("R", (7, b), 2)])
        base.apply("R", (7, b), 2)
        check_3r_invariants(engine)
        assert ((7,) in engine.M.hf) == (b + 1 >= up)
    assert engine.minor_rebalances == 1
    assert engine.result() == count(query, base.rel)
    for b in range(up):
        engine.apply([("R", (7, b), -2)])
        base.apply("R", (7, b), -2)
        check_3r_invariants(engine)
        degree = up - b - 1
        if degree:
            assert ((7,) in engine.M.hf) == (degree >= 0.5 * theta)
    assert engine.minor_rebalances == 2 and engine.major_rebalances == majors and n == engine.N


def test_snapshot_round_trip() -> None:
    for text in ("Q() :- R(a,b), S(b,c), T(c,d)", "Q() :- R(a,b), S(b,c), T(c,a)", "Q() :- R(a,b), S(a,b), T(a,c)"):
        query = parse(text)
        engine = IVMEps3R(query, eps=0.3)
        base = ZDatabase(query)
        updates = list(stream(random.Random(3), query, 200))
        for update in updates[:100]:
            engine.apply([update])
            base.apply(*update)
        copy = IVMEps3R.restore(engine.snapshot())
        assert logical_stats(copy.stats()) == logical_stats(engine.stats())
        for update in updates[100:]:
            engine.apply([update])
            copy.apply([update])
            base.apply(*update)
        check_3r_invariants(copy)
        assert copy.result() == engine.result() == count(query, base.rel)
        assert logical_stats(copy.stats()) == logical_stats(engine.stats())


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Q(a) :- R(a,b), S(b,c), T(c,a)", "free variables"),
        ("Q() :- R(a,b), S(b,c)", "three atoms"),
        ("Q() :- R(a,b), S(b,c), T(c,d), U(d,a)", "three atoms"),
        ("Q(SUM(a)) :- R(a,b), S(b,c), T(c,a)", "COUNT(*)"),
        ("Q() :- R(a,b), S(b,c), T(c,a) HAVING COUNT(*) > 1", "HAVING"),
    ],
)
def test_refuses_by_name(text: str, words: str) -> None:
    query = parse(text)
    assert words in IVMEps3R.refuses(query)
    with pytest.raises(EngineRefused, match="ivm_eps_3r"):
        IVMEps3R(query)


# -- Table 1 over every 3R query with up to four variables --------------------------------------

VARS = "abcd"


def independent_class(atoms: list[frozenset[str]]) -> int:
    """Definition 35 read directly: rels(v) for each variable, and the pair-join tuples are the
    variables whose rels is exactly {R,S}, {S,T} or {R,T}."""
    rels = {v: frozenset(k for k, atom in enumerate(atoms) if v in atom) for v in set().union(*atoms)}
    pairs = [frozenset({0, 1}), frozenset({1, 2}), frozenset({0, 2})]
    return sum(1 for pair in pairs if any(r == pair for r in rels.values()))


def hierarchical(atoms: list[frozenset[str]]) -> bool:
    """rels(A) ⊆ rels(B), rels(B) ⊆ rels(A) or rels(A) ∩ rels(B) = ∅ for every pair (App. H.4)."""
    rels = [frozenset(k for k, atom in enumerate(atoms) if v in atom) for v in set().union(*atoms)]
    return all(x <= y or y <= x or not (x & y) for x in rels for y in rels)


def alpha_acyclic(atoms: list[frozenset[str]]) -> bool:
    """GYO: drop variables in one edge only and edges contained in another; acyclic iff nothing is left."""
    edges = [set(a) for a in atoms]
    changed = True
    while changed:
        changed = False
        for e in edges:
            lonely = {v for v in e if sum(v in f for f in edges) == 1}
            if lonely:
                e -= lonely
                changed = True
        for k, e in enumerate(edges):
            if any(e <= f for j, f in enumerate(edges) if j != k):
                del edges[k]
                changed = True
                break
    return len(edges) <= 1


def all_3r_queries() -> list[tuple[frozenset[str], frozenset[str], frozenset[str]]]:
    subsets = [frozenset(c) for r in range(len(VARS) + 1) for c in itertools.combinations(VARS, r)]
    return list(itertools.product(subsets, repeat=3))


def as_query(atoms: tuple[frozenset[str], ...]) -> Query:
    return Query("Q", (), tuple(Atom(name, tuple(sorted(a))) for name, a in zip("RST", atoms, strict=True)))


def canonical(atoms: tuple[frozenset[str], ...]) -> tuple:
    """The smallest renaming of the variables (isomorphism class, atoms kept in place)."""
    best = None
    for perm in itertools.permutations(VARS):
        ren = dict(zip(VARS, perm, strict=True))
        key = tuple(tuple(sorted(ren[v] for v in a)) for a in atoms)
        best = key if best is None or key < best else best
    return best


def test_table_1_classification_of_every_3r_query_over_four_variables() -> None:
    queries = all_3r_queries()
    assert len(queries) == 16**3
    seen = {0: 0, 1: 0, 2: 0, 3: 0}
    for atoms in queries:
        i = independent_class(list(atoms))
        seen[i] += 1
        assert hierarchical(list(atoms)) == (i <= 1)  # Proposition 41
        assert alpha_acyclic(list(atoms)) == (i <= 2)  # 3R^3 cyclic, 3R^2 acyclic (Example 36)
        query = as_query(atoms)
        assert IVMEps3R.refuses(query) is None
        engine = IVMEps3R(query, eps=0.5)
        stats = engine.stats()
        assert stats["class"] == i
        guarantee = engine.describe()["guarantee"]
        if i <= 1:
            assert stats["plan_hierarchical"] == 1 and stats["partitioned_relations"] == 0
            assert guarantee["update"] == "O(1) non-amortized" and guarantee["space"] == "O(N)"
        elif i == 2:
            assert stats["plan_path"] == 1 and stats["partitioned_relations"] == 2
            assert guarantee["update"] == "O(N^0.5) amortized" and guarantee["space"] == "O(N)"
        else:
            assert stats["plan_triangle"] == 1 and stats["partitioned_relations"] == 3
            assert guarantee["update"] == "O(N^0.5) amortized" and guarantee["space"] == "O(N^1.5)"
    assert all(seen.values())


def test_every_3r_query_up_to_renaming_counts_correctly() -> None:
    """One short random stream per isomorphism class of 3R queries over up to four variables."""
    classes = {canonical(atoms): atoms for atoms in all_3r_queries()}
    rng = random.Random(11)
    for atoms in classes.values():
        query = as_query(atoms)
        eps = rng.choice(EPS)
        engine = IVMEps3R(query, eps=eps)
        base = ZDatabase(query)
        for update in stream(rng, query, 25, domain=3):
            engine.apply([update])
            base.apply(*update)
        check_3r_invariants(engine)
        assert engine.result() == count(query, base.rel), (str(query), eps)


def test_threshold_base_follows_figure_4_on_the_path_plan() -> None:
    """Digest §7.2's trace on the 3R^2 plan: from empty, N doubles when |D| reaches N and becomes
    ⌊N/2⌋ - 1 when |D| < ⌊N/4⌋; each change is one major rebalancing."""
    engine = IVMEps3R(parse("Q() :- R(a,b), S(b), T(a)"), eps=0.5)
    expected_n = 1
    majors = 0
    for b in range(10):
        engine.apply([("R", (0, b), 1)])
        if engine.size == expected_n:
            expected_n *= 2
            majors += 1
        check_3r_invariants(engine)
        assert (engine.N, engine.major_rebalances) == (expected_n, majors)
    for b in range(10):
        engine.apply([("R", (0, b), -1)])
        if engine.size < expected_n // 4:
            expected_n = expected_n // 2 - 1
            majors += 1
        check_3r_invariants(engine)
        assert (engine.N, engine.major_rebalances) == (expected_n, majors)
    assert engine.size == 0 and engine.N >= 1
