"""The set-semantics fast paths of the triangle engines against brute force.

``first_order``, the adaptive ``ivm_eps_auto`` (in first-order mode) and
``ivm_eps`` count ``Σ_z K_j(β,z)·K_k(z,α)`` as the size of a key intersection
while neither intersected slot stores a multiplicity other than 1, and fall
back to the sum of products otherwise.  These streams mix unit and non-unit
multiplicities (2, 3, negative), bring tuples back to 1 and down to zero, and
run on distinct relations, a flipped atom and self-joins, with the count and
the base multiplicities compared with a brute-force evaluation after every
update.
"""

from __future__ import annotations

import itertools
import random

import pytest

import ivm
from ivm.engines.first_order.engine import FirstOrderIVM
from ivm.engines.ivm_eps import check_invariants
from ivm.engines.ivm_eps.adaptive import IVMEpsAdaptive
from ivm.engines.ivm_eps.partition import AllLightPartition, HeavyLightPartition
from ivm.query import parse

QUERIES = [
    "Q() :- R(a,b), S(b,c), T(c,a)",
    "Q() :- R(a,b), S(c,b), T(c,a)",
    "Q() :- E(a,b), E(b,c), F(c,a)",
    "Q() :- E(a,b), E(b,c), E(c,a)",
]
DOMAIN = 6


def brute_count(text: str, db: dict[str, dict[tuple, int]], domain: int = DOMAIN) -> int:
    """``Σ_{a,b,c ∈ domain} Π_atoms relation(terms)`` by enumerating every binding."""
    atoms = parse(text).atoms
    total = 0
    for a, b, c in itertools.product(range(domain), repeat=3):
        binding = {"a": a, "b": b, "c": c}
        product = 1
        for atom in atoms:
            product *= db.get(atom.relation, {}).get(tuple(binding[t] for t in atom.terms), 0)
            if not product:
                break
        total += product
    return total


def mixed_stream(
    rng: random.Random, relations: list[str], n: int, domain: int = DOMAIN
) -> list[tuple[str, tuple[int, int], int]]:
    """Mostly unit inserts and deletes of present tuples, some multiplicities pushed to 2, 3 or
    below zero and brought back to 1 or to zero (Z-relations: engines accept all of them)."""
    live: dict[tuple[str, tuple[int, int]], int] = {}
    out = []
    for _ in range(n):
        r = rng.random()
        if live and r < 0.35:  # delete a present tuple to zero
            (rel, row), m = rng.choice(sorted(live.items()))
            delta = -m
        elif live and r < 0.5:  # bring a present tuple back to 1 (or push it off 1)
            (rel, row), m = rng.choice(sorted(live.items()))
            delta = 1 - m if m != 1 else rng.choice([1, 2, -2])
        else:
            rel = rng.choice(relations)
            row = (rng.randrange(domain), rng.randrange(domain))
            delta = 1 if rng.random() < 0.8 else rng.choice([2, 3, -1])
        if not delta:
            continue
        new = live.get((rel, row), 0) + delta
        if new:
            live[(rel, row)] = new
        else:
            live.pop((rel, row), None)
        out.append((rel, row, delta))
    return out


def build(engine: str, text: str) -> ivm.View:
    if engine == "eps=0.5":
        return ivm.maintain(text, engine="ivm_eps", eps=0.5)
    if engine == "auto-switching":
        view = ivm.maintain(text, engine="ivm_eps_auto", eps=0.5)
        view.engine.skew = 0.75  # partition once a key has degree ≥ 0.75·√N: many switches
        view.engine.promote = "degree"
        view.engine._set_cutoffs()
        view.engine.min_check = 4
        return view
    if engine == "work-switching":
        view = ivm.maintain(text, engine="ivm_eps_auto", eps=0.5)
        view.engine.cost = 1  # r = 1 element step per update: the work rule partitions early and often
        view.engine._set_cutoffs()
        view.engine.min_check = 4
        return view
    return ivm.maintain(text, engine=engine)


# the adaptive engine leaves the direct self-join to IVMEpsSelfJoin (what eps=0.5 builds for it)
CASES = [
    (engine, text)
    for text in QUERIES
    for engine in ("first_order", "ivm_eps_auto", "auto-switching", "work-switching", "eps=0.5")
    if engine in ("first_order", "eps=0.5") or not IVMEpsAdaptive.refuses(parse(text))
]


@pytest.mark.parametrize(("engine", "text"), CASES)
@pytest.mark.parametrize("seed", range(3))
def test_mixed_multiplicities_against_brute_force_after_every_update(engine: str, text: str, seed: int) -> None:
    query = parse(text)
    view = build(engine, text)
    rng = random.Random(seed)
    db: dict[str, dict[tuple, int]] = {}
    for relation, row, m in mixed_stream(rng, sorted(query.relations), 220):
        view.engine.apply([(relation, row, m)])
        rel = db.setdefault(relation, {})
        rel[row] = rel.get(row, 0) + m
        if not rel[row]:
            del rel[row]
        assert view.result() == brute_count(text, db)
        assert view.engine.multiplicity(relation, row) == rel.get(row, 0)
        if engine != "first_order":
            check_invariants(view.engine)


@pytest.mark.parametrize("engine", ["first_order", "ivm_eps_auto", "eps=0.5"])
def test_a_non_unit_multiplicity_on_either_intersected_side_is_weighted(engine: str) -> None:
    text = "Q() :- R(a,b), S(b,c), T(c,a)"
    view = build(engine, text)
    base = [("S", (2, c), 1) for c in range(3, 9)] + [("T", (c, 1), 1) for c in range(3, 9)]
    view.engine.apply(base)
    view.engine.apply([("R", (1, 2), 1)])
    assert view.result() == 6  # all unit: the fast path
    view.engine.apply([("S", (2, 3), 1)])  # S(2,3) = 2: the R-side intersection is weighted
    assert view.result() == 7
    view.engine.apply([("T", (4, 1), 2)])  # T(4,1) = 3
    assert view.result() == 9
    view.engine.apply([("R", (1, 2), 1)])  # R(1,2) = 2: δ = S·T over c = 2 + 3 + 4·1 = 9
    assert view.result() == 18
    view.engine.apply([("S", (2, 3), -1), ("T", (4, 1), -2), ("R", (1, 2), -1)])  # back to set semantics
    assert view.result() == 6
    view.engine.apply([("R", (1, 2), -1)])  # delete to zero
    assert view.result() == 0
    view.engine.apply([("R", (1, 2), 1)])
    assert view.result() == 6
    parts = getattr(view.engine, "parts", None) or view.engine._slots
    for part in parts:
        if isinstance(part, AllLightPartition):
            assert part.other == {}  # multiplicities back to 1 are not kept aside
        else:
            assert part.nonunit == 0


def test_self_join_weights_each_occurrence() -> None:
    """R = S = T: the second and third slots see the first one's update (telescoping)."""
    text = "Q() :- E(a,b), E(b,c), E(c,a)"
    fo = ivm.maintain(text, engine="first_order")
    cycle = [("E", (0, 1), 1), ("E", (1, 2), 1), ("E", (2, 0), 1)]
    fo.engine.apply(cycle)
    assert fo.result() == 3
    fo.engine.apply([("E", (0, 1), 2)])  # E(0,1) = 3: every rotation of the cycle weighs 3
    assert fo.result() == 9
    fo.engine.apply([("E", (1, 2), -1)])
    assert fo.result() == 0
    db = {"E": {(0, 1): 3, (2, 0): 1}}
    assert fo.result() == brute_count(text, db)


def test_key_set_partition_round_trips_with_multiplicities() -> None:
    p = AllLightPartition()
    for x, y, m in [(1, 2, 1), (1, 3, 2), (4, 2, -1), (1, 3, -1), (5, 5, 1)]:
        p.add(x, y, m)
    assert sorted(p.items()) == [(1, 2, 1), (1, 3, 1), (4, 2, -1), (5, 5, 1)]
    assert p.other == {(4, 2): -1} and p.lsize == 4
    hl = p.to_heavy_light()
    assert isinstance(hl, HeavyLightPartition) and hl.nonunit == 1 and hl.lsize == 4
    assert sorted(hl.items()) == sorted(p.items())
    back = AllLightPartition.from_heavy_light(hl)
    assert sorted(back.items()) == sorted(p.items()) and back.other == p.other and back.lb == p.lb


@pytest.mark.parametrize("seed", range(2))
def test_random_larger_streams_agree_across_engines(seed: int) -> None:
    """Longer streams over a wider domain: all engines and brute force agree at checkpoints."""
    rng = random.Random(50 + seed)
    text = "Q() :- R(a,b), S(b,c), T(c,a)"
    names = ("first_order", "ivm_eps_auto", "auto-switching", "work-switching", "eps=0.5")
    views = {name: build(name, text) for name in names}
    stream = mixed_stream(rng, ["R", "S", "T"], 3000, domain=12)
    db: dict[str, dict[tuple, int]] = {}
    for k in range(0, len(stream), 250):
        batch = stream[k : k + 250]
        for view in views.values():
            view.engine.apply(batch)
        for relation, row, m in batch:
            rel = db.setdefault(relation, {})
            rel[row] = rel.get(row, 0) + m
            if not rel[row]:
                del rel[row]
        expected = brute_count(text, db, domain=12)
        assert {name: v.result() for name, v in views.items()} == dict.fromkeys(views, expected)
    assert views["auto-switching"].stats()["mode_switches"] > 0
    assert views["work-switching"].stats()["promotions"] > 0
    assert isinstance(views["first_order"].engine, FirstOrderIVM)
