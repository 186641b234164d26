"""The propagation engine's ``drain_delta`` (the delta rule over the batch, ivm.engines.propagation.delta)
against a brute-force diff of consecutive results, and its cost: the work of a drain depends on the
batch and its join partners, not on the size of the database or of the result."""

from __future__ import annotations

import pickle
import random

import pytest

import ivm
from ivm.engines.propagation import PropagationEngine
from ivm.shards import per_atom_relations
from ivm.updates import Update
from tests.oracles import apply_stream, count_answers

QUERIES = {
    "hook": "Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)",
    "path_bool": "Q() :- R1(x1), R2(x1,x2), R3(x2,x3), R4(x3)",
    "path_full": "Q(a,b,c,d) :- R1(a,b), R2(b,c), R3(c,d)",
    "star_proj": "Q(x2) :- R1(x1,x2), R2(x2,x4), R3(x2,x5), R4(x1), R5(x4,x6)",
    "tpch": "Q(p,s) :- PART(p), PARTSUPP(p,s), SUPPLIER(s)",
    "product": "Q(a,c) :- R(a,b), S(c)",
    "selection": "Q(a) :- R(a,5), S(a,b), T(b,b)",
    "extender": "Q(z,x,u) :- R1(z,x,w), R6(z,x,w,p), R8(p), R2(x,u)",
}


def _random_batch(query: ivm.Query, rng: random.Random, live: dict, size: int, domain: int) -> list[Update]:
    """Inserts and deletes with multiplicities in 1..3 (deletes never below zero, so the default
    policy holds), some tuples touched twice in one batch."""
    relations = dict(query.relations)
    out = []
    for _ in range(size):
        relation = rng.choice(sorted(relations))
        rows = [key for key in live if key[0] == relation]
        if rows and rng.random() < 0.4:
            key = rng.choice(rows)
            m = -rng.randint(1, live[key])
        else:
            key = (relation, tuple(rng.choice([rng.randrange(domain), 5]) for _ in range(relations[relation])))
            m = rng.randint(1, 3)
        live[key] = live.get(key, 0) + m
        if not live[key]:
            del live[key]
        out.append(Update(key[0], key[1], m))
        if rng.random() < 0.1:  # undone in the same batch
            out.append(Update(key[0], key[1], -m))
            live[key] = live.get(key, 0) + out[-1].mult
            if not live[key]:
                del live[key]
    return out


def _folded(delta: list) -> dict:
    answers = [row for row, _ in delta]
    assert len(answers) == len(set(answers)), "an answer listed twice in one drain"
    assert all(m for _, m in delta), "a zero change listed"
    return dict(delta)


def _diff(before: dict, after: dict) -> dict:
    keys = set(before) | set(after)
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys if after.get(k, 0) != before.get(k, 0)}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_drain_delta_equals_the_diff_of_consecutive_results(name: str, seed: int) -> None:
    query = ivm.parse(QUERIES[name])
    rng = random.Random(seed * 1000 + len(name))
    engine = PropagationEngine(query)
    live: dict = {}
    applied: list = []
    first = _random_batch(query, rng, live, 20, 4)
    engine.apply(first)
    applied += first
    previous = count_answers(query, apply_stream(applied)[0])
    assert _folded(engine.drain_delta()) == previous  # the first drain lists the result
    for _ in range(25):
        batch = _random_batch(query, rng, live, rng.choice([1, 3, 8, 20]), 4)
        engine.apply(batch)
        applied += batch
        db, rejected = apply_stream(applied)
        assert rejected == []
        now = count_answers(query, db)
        assert _folded(engine.drain_delta()) == _diff(previous, now)
        previous = now
    assert engine.drain_delta() == []  # nothing since the last drain


@pytest.mark.parametrize("seed", [4, 5])
@pytest.mark.parametrize("text", ["Q(a,b) :- E(a,b), E(b,c), F(c)", "Q() :- E(a,b), E(b,a), F(a)"])
def test_drain_delta_of_a_self_join_with_one_relation_per_atom(text: str, seed: int) -> None:
    """E(a,b), E(b,c): each E update goes to both atoms' relations in one batch; the telescoping
    sum then also counts ΔE ⋈ ΔE, so the drains add up to the self-join's changes."""
    query = ivm.parse(text)
    renamed, atoms_of = per_atom_relations(query)
    engine = PropagationEngine(renamed)
    rng = random.Random(seed)
    base = ivm.parse("Q(a,c) :- E(a,b), F(c)")  # only to draw E and F updates
    live: dict = {}
    applied: list = []
    previous: dict = {}
    engine.drain_delta()
    for _ in range(30):
        batch = _random_batch(base, rng, live, rng.choice([1, 4, 12]), 4)
        routed = [Update(renamed.atoms[i].relation, u.row, u.mult) for u in batch for i in atoms_of[u.relation]]
        engine.apply(routed)
        applied += batch
        now = count_answers(query, apply_stream(applied)[0])
        assert _folded(engine.drain_delta()) == _diff(previous, now)
        previous = now


def test_drain_delta_with_negative_multiplicities() -> None:
    """Z-relations: the engine takes any non-zero multiplicity when the policy allows it."""
    query = ivm.parse("Q(a) :- R(a,b), S(b)")
    engine = PropagationEngine(query)
    rng = random.Random(9)
    applied: list = []
    previous: dict = {}
    engine.drain_delta()
    for _ in range(40):
        batch = []
        for _ in range(rng.randint(1, 6)):
            relation = rng.choice("RS")
            row = (rng.randrange(3), rng.randrange(3)) if relation == "R" else (rng.randrange(3),)
            batch.append(Update(relation, row, rng.choice([-2, -1, 1, 3])))
        engine.apply(batch)
        applied += batch
        now = count_answers(query, apply_stream(applied, reject_negative=False)[0])
        assert _folded(engine.drain_delta()) == _diff(previous, now)
        previous = now


def test_drain_survives_a_snapshot() -> None:
    query = ivm.parse(QUERIES["hook"])
    engine = PropagationEngine(query)
    engine.apply([Update("R1", (1, 2), 1), Update("R2", (2, 3), 1)])
    engine.drain_delta()
    engine.apply([Update("R3", (3,), 2)])
    restored = pickle.loads(pickle.dumps(engine))
    assert restored.drain_delta() == engine.drain_delta() == [((1,), 2)]
    restored.apply([Update("R1", (1, 2), -1)])
    assert restored.drain_delta() == [((1,), -2)]


def _work_of_one_drain(query: str, filler: int, batch: list[Update], setup: list[Update]) -> tuple[int, int]:
    """(delta work, result size) of draining ``batch`` over ``setup`` plus ``filler`` unrelated answers."""
    q = ivm.parse(query)
    engine = PropagationEngine(q)
    engine.apply(setup)
    # unrelated tuples that all join: the result grows with ``filler``, the batch's partners do not
    engine.apply([Update("R1", (f"a{i}", f"b{i}"), 1) for i in range(filler)])
    engine.apply([Update("R2", (f"b{i}", f"c{i}"), 1) for i in range(filler)])
    engine.apply([Update("R3", (f"c{i}",), 1) for i in range(filler)])
    engine.drain_delta()
    before = engine.delta.work
    engine.apply(batch)
    engine.drain_delta()
    result = engine.result()
    return engine.delta.work - before, len(result) if isinstance(result, dict) else result


@pytest.mark.parametrize("query", ["Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)", "Q() :- R1(x1,x2), R2(x2,x3), R3(x3)"])
def test_drain_work_does_not_depend_on_the_result_size(query: str) -> None:
    setup = [Update("R1", (1, 2), 1), Update("R1", (4, 2), 2), Update("R2", (2, 3), 1)]
    batch = [Update("R3", (3,), 1), Update("R1", (5, 2), 1), Update("R2", (2, 7), 3), Update("R1", (4, 2), -2)]
    costs = {}
    for filler in (10, 1_000, 20_000):
        costs[filler] = _work_of_one_drain(query, filler, batch, setup)
    works = {work for work, _ in costs.values()}
    sizes = [size for _, size in costs.values()]
    assert len(works) == 1, costs  # the same work whatever the database and result size
    work = works.pop()
    assert 0 < work < 50
    assert sizes[-1] > 20_000 > work * 100  # the result (answers, or the count) is large; the drain never reads it
