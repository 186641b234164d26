"""IVM^eps for Loomis-Whitney counts (Appendix F, Theorem 25) against brute force, invariants after every batch.

- degrees 3, 4, 5 on random insert/delete streams (multiplicities other than 1, deletes
  to zero and below) at eps 0, 0.3, 0.5, 1 against nested loops over the base relations;
- skewed bursty streams driving major (N doubled and halved) and minor rebalancing
  (light -> heavy and heavy -> light), counters asserted;
- degree 3 equal to the triangle engine IVMEpsTriangle on the same streams;
- apply(batch) equal to one update at a time, snapshot round trip, set_eps, bulk_load;
- permuted atoms and columns, self-joins, refusals by name, the guarantee of Theorem 25;
- the δQ case 2 of F.1 (middle parts heavy, last part light) read from V_i in O(1).
"""

from __future__ import annotations

import itertools
import random
from functools import partial

import pytest

from ivm.engines.base import EngineRefused
from ivm.engines.ivm_eps.loomis_whitney import IVMEpsLW
from ivm.engines.ivm_eps.loomis_whitney_invariants import InvariantViolation, check_lw_invariants
from ivm.engines.ivm_eps.triangle import IVMEpsTriangle
from ivm.query import parse
from ivm.query.model import Query
from tests.oracles import ZDatabase, assert_multiplicities, count, hub_stream, logical_stats, replay, z_add

EPS = [0.0, 0.3, 0.5, 1.0]
LW = {
    3: "Q() :- R(a,b), S(b,c), T(c,a)",
    4: "Q() :- R1(b,c,d), R2(a,c,d), R3(a,b,d), R4(a,b,c)",
    5: "Q() :- A(b,c,d,e), B(a,c,d,e), C(a,b,d,e), D(a,b,c,e), E(a,b,c,d)",
}


#: random updates with the hub value 0 (tests/oracles.py)
stream = partial(hub_stream, domain=4, hub_rate=0.35)


def planted_stream(rng: random.Random, query: Query, length: int, domain: int, hub_rate: float = 0.5):
    """Planted join results: each step picks values for all variables (0 with ``hub_rate``, so the
    key 0 is heavy, else a light tail value) and inserts the row of every atom but at most one
    (multiplicities in {-1, 1, 2}); 15% of the steps delete a present row.  Heavy and light keys
    meet in one join result, so every view V_i = R_{i+1}^h ⋯ R_{i-2}^h · R_{i-1}^l fills."""
    variables = sorted(query.variables)
    present: dict[tuple[str, tuple], int] = {}
    for _ in range(length):
        if present and rng.random() < 0.15:
            (relation, row), m = rng.choice(sorted(present.items(), key=repr))
            del present[(relation, row)]
            yield relation, row, -m
            continue
        value = {v: 0 if rng.random() < hub_rate else rng.randrange(1, domain) for v in variables}
        skip = rng.randrange(len(query.atoms) + 2)
        for k, atom in enumerate(query.atoms):
            if k == skip:
                continue
            row = tuple(value[v] for v in atom.terms)
            m = rng.choice([1, 1, 2, -1])
            z_add(present, (atom.relation, row), m)
            yield atom.relation, row, m


def bursty_stream(rng: random.Random, query: Query, rounds: int, burst: int = 30):
    """Background updates interleaved with bursts: ``burst`` rows sharing every value but one
    (so one key of every relation partitioned on a shared column gets degree ``burst``), inserted
    with multiplicity 2 and then deleted in random order."""
    relations = sorted(query.relations)
    background = stream(rng, query, 10**9, domain=6, hub_rate=0.3)
    for r in range(rounds):
        for _ in range(15):
            yield next(background)
        relation = rng.choice(relations)
        arity = query.relations[relation]
        pos = rng.randrange(arity)
        rows = [tuple(1000 + j if q == pos else -r for q in range(arity)) for j in range(burst)]
        for row in rows:
            yield relation, row, 2
        rng.shuffle(rows)
        for row in rows:
            yield relation, row, -2


def run(engine: IVMEpsLW, query: Query, updates: list, rng: random.Random, check_every: int = 1) -> ZDatabase:
    """Apply ``updates`` in random batches of 1-4, invariants and brute force after every batch.

    ``base.views_seen[k]`` is the largest size of V_{k+1} met after a batch."""
    base = ZDatabase(query)
    base.views_seen = [0] * len(query.atoms)

    def views_seen(engine: IVMEpsLW) -> None:
        base.views_seen = [max(a, len(v)) for a, v in zip(base.views_seen, engine.views, strict=True)]

    replay(engine, base, query, updates, rng, check_lw_invariants, check_every, views_seen)
    return base


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("degree", [3, 4, pytest.param(5, marks=pytest.mark.slow)])  # degree 5: ~4.5 s each
def test_random_streams_match_brute_force(degree: int, eps: float) -> None:
    query = parse(LW[degree])
    engine = IVMEpsLW(query, eps=eps)
    rng = random.Random(100 * degree + int(10 * eps))
    updates = list(stream(rng, query, 300, domain=5))
    updates += list(planted_stream(rng, query, 250 if degree == 3 else 200, domain=60 if degree == 3 else 16))
    base = run(engine, query, updates, rng)
    assert_multiplicities(engine, base)
    assert base.seen_negative and base.seen_nonunit
    if eps == 0.3:  # heavy and light parts met in join results: every view was used
        assert all(base.views_seen), base.views_seen
    if eps == 0.5:
        assert any(base.views_seen), base.views_seen
    assert engine.stats()["updates_applied"] == len(updates)
    assert list(engine.enumerate()) == ([((), engine.result())] if engine.result() else [])
    if eps == 1.0:
        assert engine.stats()["heavy_keys"] == 0 and engine.stats()["view_entries"] == 0
    if eps == 0.0:
        assert engine.stats()["light_keys"] == 0 and engine.stats()["view_entries"] == 0


def test_multiplicities_multiply_and_delete_to_zero() -> None:
    query = parse(LW[4])
    engine = IVMEpsLW(query, eps=0.5)
    engine.apply([("R1", (2, 3, 4), 2), ("R2", (1, 3, 4), -3), ("R3", (1, 2, 4), 1), ("R4", (1, 2, 3), 5)])
    check_lw_invariants(engine)
    assert engine.result() == 2 * -3 * 1 * 5
    engine.apply([("R3", (1, 2, 4), -1)])
    assert engine.result() == 0 and list(engine.enumerate()) == [] and engine.multiplicity("R3", (1, 2, 4)) == 0
    check_lw_invariants(engine)


def _grow_then_shrink(degree: int, eps: float, seed: int) -> tuple[IVMEpsLW, int]:
    query = parse(LW[degree])
    engine = IVMEpsLW(query, eps=eps)
    base = ZDatabase(query)
    rng = random.Random(seed)
    updates = list(bursty_stream(rng, query, 8))
    largest_n = 1
    for k, (relation, row, m) in enumerate(updates + [(r, row, -m) for r, row, m in reversed(updates)]):
        engine.apply([(relation, row, m)])
        base.apply(relation, row, m)
        largest_n = max(largest_n, engine.N)
        if k % 23 == 0:
            check_lw_invariants(engine)
            assert engine.result() == count(query, base.rel)
    check_lw_invariants(engine)
    return engine, largest_n


@pytest.mark.parametrize(("degree", "eps"), [(3, 0.5), (4, 0.3), (4, 0.5), (5, 0.5)])
def test_skewed_bursts_run_major_and_minor_rebalancing_both_ways(degree: int, eps: float) -> None:
    engine, largest_n = _grow_then_shrink(degree, eps, seed=degree)
    stats = engine.stats()
    assert engine.result() == 0 and stats["state_tuples"] == 0
    assert largest_n >= 120 and stats["threshold_base"] in (1, 2)  # doubled on the way up, halved on the way down
    assert stats["major_rebalances"] >= 14
    assert stats["minor_to_heavy"] >= 1 and stats["minor_to_light"] >= 1
    assert stats["tuples_moved"] >= stats["minor_rebalances"]


@pytest.mark.parametrize("degree", [3, 4])
def test_minor_rebalancing_of_one_key_both_ways(degree: int) -> None:
    """One key of R1 crosses 3θ/2 (light -> heavy) and falls below θ/2 (heavy -> light), N fixed."""
    query = parse(LW[degree])
    engine = IVMEpsLW(query, eps=0.5)
    base = ZDatabase(query)
    n = degree
    names = [a.relation for a in query.atoms]
    preload = [(names[k % n], tuple(100 + k * 10 + q for q in range(n - 1)), 1) for k in range(300)]
    for update in preload:
        engine.apply([update])
        base.apply(*update)
    big_n = engine.N
    theta = big_n**0.5
    up = next(d for d in range(1, big_n) if d >= 1.5 * theta)
    assert up + engine.size < big_n  # no major rebalancing on the way
    slot = engine.occurrences[names[0]][0][0]
    key_column = query.atoms[0].terms.index(engine.variables[slot])
    rows = [tuple(7 if q == key_column else 3000 + j * n + q for q in range(n - 1)) for j in range(up)]
    majors = engine.major_rebalances
    for j, row in enumerate(rows):
        engine.apply([(names[0], row, 2)])
        base.apply(names[0], row, 2)
        check_lw_invariants(engine)
        assert (7 in engine.slots[slot].hf) == (j + 1 >= up)
    assert engine.minor_to_heavy == 1
    for j, row in enumerate(rows):
        engine.apply([(names[0], row, -2)])
        base.apply(names[0], row, -2)
        check_lw_invariants(engine)
        degree_left = up - j - 1
        if degree_left:
            assert (7 in engine.slots[slot].hf) == (degree_left >= 0.5 * theta)
    assert engine.stats()["minor_to_light"] == 1 and engine.major_rebalances == majors and big_n == engine.N
    assert engine.result() == count(query, base.rel)


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize(
    "text", [LW[3], "Q() :- T(c,a), R(a,b), S(b,c)", "Q() :- R(b,a), S(c,b), T(a,c)", "Q() :- E(a,b), E(b,c), E(c,a)"]
)
def test_degree_3_equals_the_triangle_engine(text: str, eps: float) -> None:
    """Same stream into IVMEpsLW and IVMEpsTriangle: the same count after every update; both
    partition the atom of the first two variables on the first one, so the rebalancings agree."""
    query = parse(text)
    lw, tri = IVMEpsLW(query, eps=eps), IVMEpsTriangle(query, eps=eps)
    rng = random.Random(7)
    updates = list(stream(rng, query, 150, domain=5)) + list(bursty_stream(rng, query, 3))
    updates += list(planted_stream(rng, query, 200, domain=60))
    views_seen = 0
    for update in updates:
        lw.apply([update])
        tri.apply([update])
        assert lw.result() == tri.result()
        views_seen = max(views_seen, lw.stats()["view_entries"])
    check_lw_invariants(lw)
    assert views_seen or eps in (0.0, 1.0)
    ls, ts = lw.stats(), tri.stats()
    for key in ("state_tuples", "threshold_base", "heavy_keys", "major_rebalances", "minor_rebalances"):
        assert ls[key] == ts[key], key
    assert ls["view_entries"] == ts["view_entries"]


@pytest.mark.parametrize("degree", [3, 4, 5])
def test_apply_batch_equals_one_by_one(degree: int) -> None:
    query = parse(LW[degree])
    updates = list(bursty_stream(random.Random(degree), query, 3)) + list(stream(random.Random(9), query, 80))
    one, batch = IVMEpsLW(query, eps=0.3), IVMEpsLW(query, eps=0.3)
    for update in updates:
        one.apply([update])
    batch.apply(updates)
    assert batch.result() == one.result() and batch.stats() == one.stats()
    assert batch.views == one.views
    check_lw_invariants(batch)


def test_snapshot_round_trip() -> None:
    for degree in (3, 4):
        query = parse(LW[degree])
        engine = IVMEpsLW(query, eps=0.3)
        base = ZDatabase(query)
        updates = list(bursty_stream(random.Random(3), query, 4))
        half = len(updates) // 2
        for update in updates[:half]:
            engine.apply([update])
            base.apply(*update)
        copy = IVMEpsLW.restore(engine.snapshot())
        assert logical_stats(copy.stats()) == logical_stats(engine.stats()) and copy.views == engine.views
        for update in updates[half:]:
            engine.apply([update])
            copy.apply([update])
            base.apply(*update)
        check_lw_invariants(copy)
        assert copy.result() == engine.result() == count(query, base.rel)
        assert logical_stats(copy.stats()) == logical_stats(engine.stats())


@pytest.mark.parametrize("degree", [3, 4])
def test_set_eps_keeps_the_result_and_the_invariants(degree: int) -> None:
    query = parse(LW[degree])
    engine = IVMEpsLW(query, eps=0.5)
    base = ZDatabase(query)
    rng = random.Random(21)
    updates = list(bursty_stream(rng, query, 4))
    for k, eps in enumerate([1.0, 0.0, 0.3, 0.5, 0.7]):
        for update in updates[k * 40 : (k + 1) * 40]:
            engine.apply([update])
            base.apply(*update)
        before, majors, n = engine.result(), engine.major_rebalances, engine.N
        engine.set_eps(eps)
        assert engine.result() == before == count(query, base.rel)
        assert engine.eps == eps and n == engine.N and engine.major_rebalances == majors + 1
        assert engine.strict
        check_lw_invariants(engine)
        if eps == 1.0:
            assert engine.stats()["heavy_keys"] == 0
        if eps == 0.0:
            assert engine.stats()["light_keys"] == 0
    with pytest.raises(ValueError, match="eps"):
        engine.set_eps(1.5)


def test_max_degree() -> None:
    query = parse(LW[4])
    engine = IVMEpsLW(query, eps=0.5)
    assert engine.max_degree() == 0
    engine.apply([("R1", (1, j, 0), 1) for j in range(5)] + [("R2", (1, 2, 3), 1)])
    # R1(b,c,d) is partitioned on b: key 1 has degree 5
    assert engine.max_degree() == 5


@pytest.mark.parametrize("degree", [3, 4, 5])
def test_permuted_atoms_and_columns(degree: int) -> None:
    """The same database under the query with shuffled atoms and columns (rows permuted alike)."""
    query = parse(LW[degree])
    rng = random.Random(degree)
    atoms = list(query.atoms)
    rng.shuffle(atoms)
    perms = {a.relation: rng.sample(range(degree - 1), degree - 1) for a in atoms}
    body = ", ".join(f"{a.relation}({','.join(a.terms[p] for p in perms[a.relation])})" for a in atoms)
    permuted = parse(f"Q() :- {body}")
    engine, reference = IVMEpsLW(permuted, eps=0.5), IVMEpsLW(query, eps=0.5)
    base = ZDatabase(permuted)
    for relation, row, m in list(bursty_stream(rng, query, 3)) + list(stream(rng, query, 100)):
        moved = tuple(row[p] for p in perms[relation])
        engine.apply([(relation, moved, m)])
        reference.apply([(relation, row, m)])
        base.apply(relation, moved, m)
        assert engine.result() == reference.result()
    check_lw_invariants(engine)
    assert engine.result() == count(permuted, base.rel)


@pytest.mark.parametrize(
    "text",
    [
        "Q() :- E(a,b), E(b,c), E(c,a)",
        "Q() :- R(b,c,d), R(a,c,d), S(a,b,d), T(a,b,c)",
        "Q() :- R(b,c,d), R(c,d,a), R(d,a,b), R(a,b,c)",
    ],
)
def test_self_joins_keep_one_copy_per_atom(text: str) -> None:
    query = parse(text)
    for eps in (0.0, 0.5):
        engine = IVMEpsLW(query, eps=eps)
        rng = random.Random(5)
        updates = list(stream(rng, query, 140, domain=4)) + list(bursty_stream(rng, query, 2))
        run(engine, query, updates, rng, check_every=3)
        assert engine.stats()["updates_applied"] == len(updates)


def test_bulk_load_equals_apply() -> None:
    for degree in (3, 4, 5):
        query = parse(LW[degree])
        updates = list(bursty_stream(random.Random(degree), query, 3)) + list(stream(random.Random(1), query, 200))
        for eps in (0.0, 0.3, 1.0):
            loaded, applied = IVMEpsLW(query, eps=eps), IVMEpsLW(query, eps=eps)
            loaded.bulk_load(updates)
            applied.apply(updates)
            check_lw_invariants(loaded)
            assert loaded.result() == applied.result()
            assert 2 * loaded.size + 1 == loaded.N and loaded.strict
            more = list(stream(random.Random(2), query, 60))
            loaded.apply(more)
            applied.apply(more)
            check_lw_invariants(loaded)
            assert loaded.result() == applied.result()


def test_case_2_reads_the_view_for_heavy_middle_parts_and_a_light_last_part() -> None:
    """F.1 case 2 for n = 4: δR1(z,x,y) with R2's key x and R3's key y heavy and every a4 light in R4.

    The sum over the M light a4-values comes from one entry of V_1 = Σ_{a4} R2^h·R3^h·R4^l."""
    query = parse("Q() :- R1(a1,a2,a3), R2(a2,a3,a4), R3(a3,a4,a1), R4(a4,a1,a2)")
    engine = IVMEpsLW(query, eps=0.5)
    x, y, z, m = "x", "y", "z", 40
    updates = [("R2", (x, y, i), 1) for i in range(m)] + [("R3", (y, i, z), 1) for i in range(m)]
    updates += [("R4", (i, z, x), 1) for i in range(m)]
    engine.apply(updates)
    _, r2, r3, r4 = engine.slots
    assert x in r2.hf and y in r3.hf and not r4.hf  # heavy middle keys, all of R4 light
    assert engine.views[0] == {(z, x, y): m}
    engine.apply([("R1", (z, x, y), 3)])
    assert engine.result() == 3 * m
    check_lw_invariants(engine)


def test_describe_stats_and_guarantee() -> None:
    query = parse(LW[4])
    engine = IVMEpsLW(query, eps=0.3)
    d = engine.describe()
    assert d["degree"] == 4 and d["variables"] == ["b", "c", "d", "a"]
    assert [r["partitioned_on"] for r in d["relations"]] == ["b", "c", "d", "a"]
    assert [r["misses"] for r in d["relations"]] == ["a", "b", "c", "d"]
    assert d["views"][0] == "V1(b, c, d) = Σ_a R2^h · R3^h · R4^l"
    stats = engine.stats()
    assert stats["degree"] == 4 and stats["eps"] == 0.3 and stats["threshold_base"] == 1
    assert {f"heavy_keys_R{i}" for i in range(1, 5)} <= stats.keys()
    assert {f"view_entries_V{i}" for i in range(1, 5)} <= stats.keys()
    assert all(isinstance(v, int | float) for v in stats.values())
    g = IVMEpsLW.guarantee(query, 0.3)
    assert g["update"] == "O(N^0.7) amortized" and g["space"] == "O(N^1.3)" and g["answer"] == "O(1)"
    assert g["preprocessing"] == "O(N^1.33333)" and "OMv" in g["lower_bound"]
    assert IVMEpsLW.guarantee(parse(LW[5]), 1.0)["update"] == "O(N) amortized"
    assert IVMEpsLW.guarantee(parse(LW[3]), 0.5)["preprocessing"] == "O(N^1.5)"
    assert d["guarantee"] == g


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Q() :- R(b,c,d), R2(a,c,d), R3(a,b,5), R4(a,b,c)", "constants"),
        ("Q() :- R(a,a), S(a,c), T(c,a)", "repeated variable"),
        ("Q() :- R(a,b,e), S(b,c), T(c,a)", "private variable"),
        ("Q() :- R(a,b), S(b,c), T(c,d), U(d,a)", "not n - 1"),
        ("Q() :- R(a,b), S(b,a)", "degree n ≥ 3"),
        ("Q() :- R(a,b,c), S(a,b,c), T(a,b,d), U(b,c,d)", "missing from two atoms"),
        ("Q() :- R(a,b,c), S(b,c,d), T(c,d,e), U(d,e,a), V(e,a,b)", "arity"),
        ("Q(a) :- R(a,b), S(b,c), T(c,a)", "free variables"),
        ("Q(SUM(a)) :- R(a,b), S(b,c), T(c,a)", "COUNT(*)"),
        ("Q() :- R(a,b), S(b,c), T(c,a) HAVING COUNT(*) > 1", "HAVING"),
    ],
)
def test_refuses_by_name(text: str, words: str) -> None:
    query = parse(text)
    reason = IVMEpsLW.refuses(query)
    assert reason is not None and words in reason
    with pytest.raises(EngineRefused, match="ivm_eps_lw"):
        IVMEpsLW(query)
    with pytest.raises(ValueError):
        IVMEpsLW.guarantee(query, 0.5)


def test_accepts_every_renaming_of_degree_4() -> None:
    """Every assignment of the four atoms to the missing variables, in any atom order, is accepted."""
    variables = "pqrs"
    for order in itertools.permutations(range(4)):
        atoms = [f"X{k}({','.join(v for v in variables if v != variables[order[k]])})" for k in range(4)]
        query = parse(f"Q() :- {', '.join(atoms)}")
        assert IVMEpsLW.refuses(query) is None
        engine = IVMEpsLW(query)
        assert sorted(engine.slot_atoms) == [0, 1, 2, 3]


def test_invariant_checker_names_a_broken_invariant() -> None:
    query = parse(LW[3])
    engine = IVMEpsLW(query, eps=0.5)
    engine.apply(list(stream(random.Random(4), query, 60)))
    check_lw_invariants(engine)
    engine.count += 1
    with pytest.raises(InvariantViolation, match=r"inv\. 6"):
        check_lw_invariants(engine)
    engine.count -= 1
    engine.views[0][("nowhere", "at all")] = 1
    with pytest.raises(InvariantViolation, match="V1"):
        check_lw_invariants(engine)
    del engine.views[0][("nowhere", "at all")]
    engine.N = 4 * engine.N + 8
    with pytest.raises(InvariantViolation, match="size invariant"):
        check_lw_invariants(engine)


def test_unknown_relation_and_wrong_arity_raise() -> None:
    engine = IVMEpsLW(parse(LW[3]))
    with pytest.raises(KeyError, match="Z"):
        engine.apply([("Z", (1, 2), 1)])
    with pytest.raises(ValueError, match="arity"):
        engine.apply([("R", (1, 2, 3), 1)])
