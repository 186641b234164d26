"""IVM^eps for the 4-path count (App. G, Theorem 27) against a brute force, invariants after every batch.

- random insert/delete streams (deletes of present tuples, deletes that drive
  multiplicities to zero or below, multiplicities other than 1) at eps 0, 0.3, 0.5, 1,
  on the query written in several ways: other atom orders and variable and relation
  names, middle atoms read backwards, private variables, constants and repeated
  variables, self-joins;
- the adversarial stream of the issue: a hub in S and a hub in T, R and U toggled at
  the hubs, growing and shrinking: major and minor rebalancing both ways (counters);
- apply(batch) equals one update at a time; snapshot round trip; set_eps; refusals.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from ivm.engines.base import EngineRefused
from ivm.engines.ivm_eps.four_path import IVMEps4Path
from ivm.engines.ivm_eps.four_path_invariants import InvariantViolation, check_four_path_invariants
from ivm.query import parse
from ivm.query.model import Query
from tests.oracles import ZDatabase, assert_multiplicities, count, logical_stats, replay, z_add

EPS = [0.0, 0.3, 0.5, 1.0]
CANONICAL = "Q() :- R(a), S(a,b), T(b,c), U(c)"


def value(rng: random.Random, domain: int, hub_rate: float) -> int:
    """Skewed values: 0 takes ``hub_rate`` of the draws, 1 a fifth as many, the rest is uniform."""
    dice = rng.random()
    if dice < hub_rate:
        return 0
    if dice < 1.2 * hub_rate:
        return 1
    return rng.randrange(2, domain)


def stream(rng: random.Random, query: Query, length: int, domain: int = 60, hub_rate: float = 0.45) -> Iterator:
    """Random updates over skewed values (:func:`value`), binary relations three times as often as
    the others (so that hubs get heavy at eps = 1/2); inserts with multiplicities in {1, 2, 3};
    deletes of whole present tuples, partial deletes, and deletes of absent tuples (negative
    multiplicities)."""
    present: dict[tuple[str, tuple], int] = {}
    relations = [r for r, arity in sorted(query.relations.items()) for _ in range(3 if arity >= 2 else 1)]
    for _ in range(length):
        dice = rng.random()
        if present and dice < 0.3:
            (relation, row), m = rng.choice(sorted(present.items(), key=repr))
            m = -m if rng.random() < 0.7 else -rng.choice([1, 2])  # to zero, or part of it (maybe below zero)
        else:
            relation = rng.choice(relations)
            arity = query.relations[relation]
            row = tuple(value(rng, domain, hub_rate) for _ in range(arity))
            m = rng.choice([1, 1, 2, 3, -1])
        z_add(present, (relation, row), m)
        yield relation, row, m


QUERIES = [
    CANONICAL,
    "Q() :- Ends(q), Mid2(p,q), Mid1(o,p), Start(o)",  # other names, atoms in another order
    "Q() :- U(c), T(c,b), R(a), S(b,a)",  # middle atoms read backwards
    "Q() :- R(a,x), S(y,a,b), T(b,z,c), U(w,c)",  # private variables
    "Q() :- R(a,a), S(a,b,1), T(b,c,c), U(c)",  # repeated variables and a constant
    "Q() :- V(a), E(a,b), E(b,c), V(c)",  # self-joins: one copy per atom
    "Q() :- E(a,a), E(a,b), E(b,c), E(c,c)",  # one relation in all four atoms, ends on its self-loops
]


SLOW = {"Q() :- R(a,x), S(y,a,b), T(b,z,c), U(w,c)"}  # ~5 s per eps: make test runs it, make test-fast does not


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("text", [pytest.param(q, marks=pytest.mark.slow) if q in SLOW else q for q in QUERIES])
def test_random_streams_match_brute_force(text: str, eps: float) -> None:
    query = parse(text)
    for seed in range(3):
        engine = IVMEps4Path(query, eps=eps)
        base = ZDatabase(query)
        rng = random.Random(1000 * seed + 100 * QUERIES.index(text) + EPS.index(eps))
        updates = list(stream(rng, query, 400))
        replay(engine, base, query, updates, rng, check_four_path_invariants)
        assert_multiplicities(engine, base)
        assert any(m not in (0, 1) for table in base.rel.values() for m in table.values())
        assert any(m < 0 for table in base.rel.values() for m in table.values())
        stats = engine.stats()
        assert stats["updates_applied"] == 400 and stats["major_rebalancings"] >= 3
        if eps == 1.0:  # first-order IVM: no heavy value ever
            assert stats["heavy_keys"] == 0 and stats["minor_rebalancings"] == 0
        if eps == 0.0:  # every value heavy
            assert stats["light_keys"] == 0 and stats["S_ll_tuples"] == stats["T_ll_tuples"] == 0


def test_multiplicities_multiply_and_enumerate() -> None:
    engine = IVMEps4Path(parse(CANONICAL), eps=0.5)
    engine.apply(
        [("R", (1,), 2), ("S", (1, 2), 3), ("T", (2, 3), -1), ("T", (2, 4), 4), ("U", (3,), 5), ("U", (4,), 1)]
    )
    check_four_path_invariants(engine)
    assert engine.result() == 2 * 3 * (-1 * 5 + 4 * 1)
    assert list(engine.enumerate()) == [((), 2 * 3 * (-1 * 5 + 4 * 1))]
    engine.apply([("S", (1, 2), -3)])
    assert engine.result() == 0 and list(engine.enumerate()) == []
    assert engine.multiplicity("S", (1, 2)) == 0 and engine.multiplicity("T", (2, 3)) == -1
    with pytest.raises(KeyError):
        engine.apply([("X", (1,), 1)])


@pytest.mark.parametrize("eps", [0.3, 0.5])
def test_hub_stream_drives_major_and_minor_rebalancing_both_ways(eps: float) -> None:
    """A hub in S and a hub in T, R and U toggled at the hubs (the issue's stream): light -> heavy and
    heavy -> light minor rebalancing on all four partitioned variables, N doubling and halving."""
    query = parse(CANONICAL)
    engine = IVMEps4Path(query, eps=eps)
    base = ZDatabase(query)
    rng = random.Random(7)
    background = []
    for _ in range(260):
        relation = rng.choice("RSTU")
        row = (rng.randrange(1, 80),) if relation in "RU" else (rng.randrange(1, 80), rng.randrange(1, 80))
        background.append((relation, row, rng.choice([1, 2])))
    updates = list(background)
    heavy_seen = {"S_heavy_A": 0, "S_heavy_B": 0, "T_heavy_B": 0, "T_heavy_C": 0}
    hub_degree = 40
    for r in range(2):
        hub_b = 7000 + r
        hub_rows = []
        for j in range(hub_degree):
            hub_rows += [("S", (0, 100 + j)), ("T", (100 + j, 0)), ("S", (200 + j, hub_b)), ("T", (hub_b, 200 + j))]
        growing = []
        for k, (relation, row) in enumerate(hub_rows):
            growing.append((relation, row, 1 + k % 2))
            if k % 6 == 0:
                growing += [("R", (0,), 1), ("U", (0,), 1), ("R", (200 + k % hub_degree,), 2)]
            elif k % 6 == 3:
                growing += [("R", (0,), -1), ("U", (0,), -1), ("U", (200 + k % hub_degree,), 1)]
        shrinking = []
        order = list(enumerate(hub_rows))
        rng.shuffle(order)
        for k, (relation, row) in order:
            shrinking.append((relation, row, -(1 + k % 2)))
            if k % 4 == 0:
                shrinking += [("U", (0,), 1), ("R", (0,), 1)]
            elif k % 4 == 2:
                shrinking += [("U", (0,), -1), ("R", (0,), -1)]
        updates += growing + shrinking
    teardown = [(relation, row, -m) for relation, row, m in reversed(background)]
    max_n = 0
    for k, (relation, row, m) in enumerate(updates + teardown):
        engine.apply([(relation, row, m)])
        base.apply(relation, row, m)
        stats = engine.stats()
        max_n = max(max_n, engine.N)
        for key in heavy_seen:
            heavy_seen[key] = max(heavy_seen[key], stats[key])
        if k % 97 == 0:
            check_four_path_invariants(engine)
            assert engine.result() == count(query, base.rel)
    check_four_path_invariants(engine)
    assert engine.result() == count(query, base.rel)
    # what is left: the R and U values toggled at the hubs; delete them too
    remaining = [(r, row, -m) for r, table in base.rel.items() for row, m in table.items()]
    assert {r for r, _, _ in remaining} <= {"R", "U"}
    for relation, row, m in remaining:
        engine.apply([(relation, row, m)])
        base.apply(relation, row, m)
    check_four_path_invariants(engine)
    assert engine.result() == 0 and engine.size == 0
    stats = engine.stats()
    assert all(heavy_seen.values()), heavy_seen  # the hub values were heavy on each partitioned variable
    assert stats["S_heavy_A"] == stats["S_heavy_B"] == stats["T_heavy_B"] == stats["T_heavy_C"] == 0
    assert stats["promotions"] >= 4 and stats["demotions"] >= 4  # minor rebalancing both ways
    assert stats["minor_rebalancings"] == stats["promotions"] + stats["demotions"]
    assert stats["tuples_moved"] >= stats["minor_rebalancings"]
    assert max_n >= 512 and max_n // 8 >= engine.N  # N doubled on the way up and halved on the way down
    assert stats["major_rebalancings"] >= 12


def test_apply_batch_equals_one_at_a_time() -> None:
    query = parse(CANONICAL)
    rng = random.Random(3)
    updates = list(stream(rng, query, 600, domain=12, hub_rate=0.3))
    one, batched = IVMEps4Path(query, eps=0.3), IVMEps4Path(query, eps=0.3)
    for update in updates:
        one.apply([update])
    for pos in range(0, len(updates), 50):
        batched.apply(updates[pos : pos + 50])
    assert one.stats() == batched.stats()
    assert one.view_tables() == batched.view_tables()
    check_four_path_invariants(batched)
    assert one.stats()["minor_rebalancings"] > 0


def test_snapshot_round_trip() -> None:
    query = parse("Q() :- V(a), E(a,b), E(b,c), V(c)")
    engine = IVMEps4Path(query, eps=0.3)
    base = ZDatabase(query)
    updates = list(stream(random.Random(5), query, 400, domain=10))
    for update in updates[:200]:
        engine.apply([update])
        base.apply(*update)
    copy = IVMEps4Path.restore(engine.snapshot())
    assert logical_stats(copy.stats()) == logical_stats(engine.stats()) and copy.view_tables() == engine.view_tables()
    check_four_path_invariants(copy)
    for update in updates[200:]:
        engine.apply([update])
        copy.apply([update])
        base.apply(*update)
    check_four_path_invariants(copy)
    assert copy.result() == engine.result() == count(query, base.rel)
    assert logical_stats(copy.stats()) == logical_stats(engine.stats())


def test_set_eps_keeps_the_result_and_the_invariants() -> None:
    query = parse(CANONICAL)
    engine = IVMEps4Path(query, eps=0.5)
    base = ZDatabase(query)
    rng = random.Random(11)
    updates = list(stream(rng, query, 500, domain=15, hub_rate=0.35))
    for step, eps in enumerate([0.0, 0.3, 1.0, 0.7, 0.5]):
        for update in updates[step * 100 : (step + 1) * 100]:
            engine.apply([update])
            base.apply(*update)
        before, majors = engine.result(), engine.major_rebalancings
        engine.set_eps(eps)
        assert engine.eps == eps and engine.result() == before == count(query, base.rel)
        assert engine.strict and engine.major_rebalancings == majors
        check_four_path_invariants(engine)
        degrees: dict = {}
        for relation in ("S", "T"):
            for row in base.rel[relation]:
                for pos in (0, 1):
                    key = (relation, pos, row[pos])
                    degrees[key] = degrees.get(key, 0) + 1
        assert engine.max_degree() == max(degrees.values())
    assert engine.stats()["eps_changes"] == 5
    with pytest.raises(ValueError):
        engine.set_eps(1.5)


def test_threshold_base_follows_figure_4() -> None:
    """From empty, N doubles when |D| reaches N and becomes ⌊N/2⌋ - 1 when |D| < ⌊N/4⌋;
    each change is one major rebalancing (strict partitions right after)."""
    engine = IVMEps4Path(parse(CANONICAL), eps=0.5)
    expected_n, majors = 1, 0
    rows = [("S", (0, b), 1) for b in range(12)] + [("R", (0,), 1), ("T", (3, 4), 1), ("U", (4,), 1)]
    for update in rows + [(r, row, -m) for r, row, m in rows]:
        engine.apply([update])
        if engine.size == expected_n:
            expected_n, majors = 2 * expected_n, majors + 1
        elif engine.size < expected_n // 4:
            expected_n, majors = expected_n // 2 - 1, majors + 1
        check_four_path_invariants(engine)
        assert (engine.N, engine.major_rebalancings) == (expected_n, majors)
    assert engine.size == 0 and engine.result() == 0


def test_invariant_checker_names_a_broken_invariant() -> None:
    engine = IVMEps4Path(parse(CANONICAL), eps=0.5)
    engine.apply([("R", (1,), 1), ("S", (1, 2), 1), ("T", (2, 3), 1), ("U", (3,), 1)])
    check_four_path_invariants(engine)
    engine.state.RS_ll[2] += 1
    with pytest.raises(InvariantViolation, match="V_RS_ll differs"):
        check_four_path_invariants(engine)
    engine.state.RS_ll[2] -= 1
    engine.count += 1
    with pytest.raises(InvariantViolation, match=r"inv\. 6"):
        check_four_path_invariants(engine)


def test_guarantee_describe_and_eps_validation() -> None:
    query = parse(CANONICAL)
    g = IVMEps4Path.guarantee(query, 0.3)
    assert g["update"] == "O(N^0.7) amortized" and g["space"] == g["preprocessing"] == "O(N^1.3)"
    assert g["answer"] == "O(1)" and "OMv" in g["lower_bound"]
    assert IVMEps4Path.guarantee(query, 0.0)["space"] == "O(N)"
    engine = IVMEps4Path(parse("Q() :- U(z), T(y,z), R(x), S(x,y)"), eps=0.5)
    described = engine.describe()
    variables = described["variables"]
    assert {variables["a"], variables["c"]} == {"x", "z"} and variables["b"] == "y"  # the path either way
    assert {described["roles"]["S"], described["roles"]["T"]} == {"S(x, y)", "T(y, z)"}
    assert len(described["views"]) == 17 and described["guarantee"]["update"] == "O(N^0.5) amortized"
    for bad in (-0.1, 1.5, "auto", True):
        with pytest.raises(ValueError):
            IVMEps4Path(query, eps=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Q() :- R(a), S(a,b), T(b,c)", "four atoms"),
        ("Q() :- R(a), S(a,b), T(b,c), U(c), W(c)", "four atoms"),
        ("Q(a) :- R(a), S(a,b), T(b,c), U(c)", "free variables"),
        ("Q() :- R(a,b), S(b,c), T(c,d), U(d,a)", "path"),  # the 4-cycle
        ("Q() :- R(a), S(a,b), T(a,c), U(c)", "path"),  # a in three atoms
        ("Q() :- R(a), S(a,b), T(b,c), U(d)", "path"),  # U joins nothing
        ("Q() :- R(a), S(a,b), T(c,d), U(d)", "path"),  # two separate edges
        ("Q(SUM(a)) :- R(a), S(a,b), T(b,c), U(c)", "COUNT(*)"),
        ("Q() :- R(a), S(a,b), T(b,c), U(c) HAVING COUNT(*) > 1", "HAVING"),
    ],
)
def test_refuses_by_name(text: str, words: str) -> None:
    query = parse(text)
    reason = IVMEps4Path.refuses(query)
    assert reason is not None and words in reason
    with pytest.raises(EngineRefused, match="ivm_eps_path4"):
        IVMEps4Path(query)
    with pytest.raises(ValueError):
        IVMEps4Path.guarantee(query)
