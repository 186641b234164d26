"""Every registered engine against the brute-force oracle, through the engine protocol.

For each engine and each sample query it accepts: random insert/delete streams
(multiplicities, full deletions, skewed keys) applied in random batch sizes
must give the brute-force count after every batch; applying a batch equals
applying its updates one by one; a snapshot restores the same state; updates outside the
engines' precondition (unknown relation, wrong arity) are refused by name and change nothing.
"""

from __future__ import annotations

import random

import pytest

import ivm
from ivm.engines import ENGINES
from tests.oracles import apply_stream, count, count_answers

SAMPLE_QUERIES = [
    "Q() :- R(a,b), S(b,c), T(c,a)",
    "Q() :- E(a,b), E(b,c), E(c,a)",
    "Q() :- R(a,b), S(c,b), T(c,a)",
    "Q() :- R(a,b), S(a,c)",
    "Q(a) :- R(a,b), S(a,c)",
    "Q(a, b) :- R(a,b), S(b,c)",
    "Q() :- R(a,b), S(b,c)",
    "Q() :- R(a,b), S(b,c), T(c,d)",  # 3R^2 (IVM^eps App. H)
    "Q() :- R(a), S(a,b), T(b,c), U(c)",  # 4-path (App. G)
    "Q() :- R(b,c,d), S(a,c,d), T(a,b,d), U(a,b,c)",  # Loomis-Whitney of degree 4 (App. F)
]


def _cases() -> list[tuple[str, str]]:
    cases = []
    for name, cls in sorted(ENGINES.items()):
        for text in SAMPLE_QUERIES:
            if cls.refuses(ivm.parse(text)) is None:
                cases.append((name, text))
    return cases


CASES = _cases()


def random_stream(query: ivm.Query, rng: random.Random, n: int, domain: int) -> list[tuple[str, tuple, int]]:
    """Inserts and deletes of present tuples (valid under the default policy), skewed keys."""
    live: dict[tuple[str, tuple], int] = {}
    relations = dict(query.relations)
    out = []
    for _ in range(n):
        if live and rng.random() < 0.35:
            (rel, row), m = rng.choice(sorted(live.items()))
            mult = -rng.randint(1, m) if rng.random() < 0.7 else -m  # partial or full deletion
        else:
            rel = rng.choice(sorted(relations))
            # skew: value 0 is a hub
            row = tuple(0 if rng.random() < 0.3 else rng.randrange(domain) for _ in range(relations[rel]))
            mult = rng.choice([1, 1, 1, 2, 3])
        live[(rel, row)] = live.get((rel, row), 0) + mult
        if live[(rel, row)] == 0:
            del live[(rel, row)]
        out.append((rel, row, mult))
    return out


def test_every_engine_has_a_case() -> None:
    assert {name for name, _ in CASES} == set(ENGINES), "an engine accepts none of the sample queries"


@pytest.mark.parametrize(("engine", "text"), CASES)
@pytest.mark.parametrize("seed", range(3))
def test_engine_matches_brute_force_after_every_batch(engine: str, text: str, seed: int) -> None:
    rng = random.Random(seed)
    query = ivm.parse(text)
    view = ivm.maintain(query, engine=engine)
    stream = random_stream(query, rng, 300, domain=6)
    applied: list[tuple[str, tuple, int]] = []
    i = 0
    while i < len(stream):
        size = rng.choice([1, 1, 5, 20])
        batch = stream[i : i + size]
        outcome = view.apply(batch)
        assert outcome.rejected == []
        applied += batch
        i += size
        db, _ = apply_stream(applied)
        expected = count_answers(query, db)
        if query.free:
            assert dict(view.enumerate()) == expected
        else:
            assert view.result() == count(query, db)


@pytest.mark.parametrize(("engine", "text"), CASES)
def test_batch_equals_one_by_one_and_snapshot_roundtrips(engine: str, text: str) -> None:
    rng = random.Random(7)
    query = ivm.parse(text)
    stream = random_stream(query, rng, 400, domain=5)
    batched = ivm.maintain(query, engine=engine)
    single = ivm.maintain(query, engine=engine)
    batched.apply(stream)
    for update in stream:
        single.apply([update])
    assert batched.result() == single.result()
    assert sorted(batched.enumerate()) == sorted(single.enumerate())
    restored = type(batched.engine).restore(batched.engine.snapshot())
    assert restored.result() == batched.result()
    assert sorted(restored.enumerate()) == sorted(batched.enumerate())
    for relation, row, _ in stream[:50]:
        assert restored.multiplicity(relation, row) == batched.engine.multiplicity(relation, row)


def _bad_updates(query: ivm.Query) -> list[tuple[str, tuple, str]]:
    """An update naming a relation outside ``query``, one row too long and one too short."""
    relation, arity = sorted(query.relations.items())[0]
    return [
        ("Zz", (1,) * arity, "unknown_relation"),
        (relation, (1,) * (arity + 1), "arity"),
        (relation, (1,) * (arity - 1), "arity"),
    ]


@pytest.mark.parametrize(("engine", "text"), CASES)
def test_bad_updates_are_refused_by_name_and_the_rest_applied(engine: str, text: str) -> None:
    """The precondition of ``Engine.apply`` (a relation of the query, a row of its arity) is kept by
    ``View.apply`` for every engine: updates that break it, anywhere in a batch, come back refused by
    name (kind and reason), change nothing, and every other update of the batch is applied."""
    query = ivm.parse(text)
    stream = random_stream(query, random.Random(11), 120, domain=4)
    bad = [(relation, row, 1) for relation, row, _ in _bad_updates(query)]
    kinds = [kind for _, _, kind in _bad_updates(query)]
    view = ivm.maintain(query, engine=engine)
    batch = [*stream[:40], bad[0], *stream[40:80], bad[1], bad[2], *stream[80:]]
    outcome = view.apply(batch)
    assert [(r.index, r.kind) for r in outcome.rejected] == [(40, kinds[0]), (81, kinds[1]), (82, kinds[2])]
    assert "Zz" in outcome.rejected[0].reason and "arity" in outcome.rejected[1].reason
    assert outcome.applied == len(stream)
    db, _ = apply_stream(stream)
    if query.free:
        assert dict(view.enumerate()) == count_answers(query, db)
    else:
        assert view.result() == count(query, db)
    for relation, row, _ in stream:
        assert view.engine.multiplicity(relation, row) == db.get(relation, {}).get(row, 0)
