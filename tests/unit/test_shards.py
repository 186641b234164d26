"""Sharded state: identical results for 1, 2, 8 and 27 shards, for every engine.

HyperCube routing must find every join tuple in exactly one shard, so the
combined result equals the unsharded one after every batch, including
self-joins (per-atom copies) and rejected updates (reported once).
"""

from __future__ import annotations

import random

import pytest

import ivm
from ivm.shards import HyperCube, shares
from tests.oracles import apply_stream, count, count_answers
from tests.unit.test_engine_protocol import CASES, random_stream


@pytest.mark.parametrize(("engine", "text"), CASES)
@pytest.mark.parametrize("shards", [2, 8, 27])
def test_sharded_equals_oracle_after_every_batch(engine: str, text: str, shards: int) -> None:
    rng = random.Random(shards)
    query = ivm.parse(text)
    view = ivm.maintain(query, engine=engine, shards=shards)
    assert len(view.shards) == shards
    stream = random_stream(query, rng, 250, domain=7)
    done = []
    for i in range(0, len(stream), 25):
        batch = stream[i : i + 25]
        assert view.apply(batch).rejected == []
        done += batch
        db, _ = apply_stream(done)
        if query.free:
            assert dict(view.enumerate()) == count_answers(query, db)
        else:
            assert view.result() == count(query, db)


@pytest.mark.parametrize("shards", [1, 2, 8, 27])
def test_shard_counts_agree_on_a_skewed_triangle_stream(shards: int) -> None:
    rng = random.Random(5)
    stream = [(rel, (rng.choice([0, 0, 1, rng.randrange(30)]), rng.randrange(30)), 1) for rel in "RST" * 400]
    view = ivm.maintain("Q() :- R(a,b), S(b,c), T(c,a)", engine="first_order", shards=shards)
    view.apply(stream)
    db, _ = apply_stream(stream)
    assert view.result() == count(ivm.parse("Q() :- R(a,b), S(b,c), T(c,a)"), db)


def test_rejections_are_reported_once_and_change_nothing() -> None:
    view = ivm.maintain("Q() :- R(a,b), S(b,c), T(c,a)", engine="first_order", shards=8)
    outcome = view.apply([("S", (1, 2), 1), ("S", (1, 2), -2), ("S", (5, 5), -1)])
    assert [r.index for r in outcome.rejected] == [1, 2]
    assert view.multiplicity("S", (1, 2)) == 1


def test_hierarchical_queries_route_without_replication() -> None:
    query = ivm.parse("Q(a) :- R(a,b), S(a,c)")
    cube = HyperCube(query, 8)
    assert cube.shares == {"a": 8}
    for value in range(50):
        assert len(cube.route(("a", "b"), (value, 1))) == 1


def test_triangle_shares_replicate_to_the_cube_root() -> None:
    query = ivm.parse("Q() :- R(a,b), S(b,c), T(c,a)")
    assert sorted(shares(query, 27).values()) == [3, 3, 3]
    cube = HyperCube(query, 27)
    assert {len(cube.route(("a", "b"), (i, i + 1))) for i in range(20)} == {3}
    assert shares(query, 2) == {"a": 2, "b": 1, "c": 1}


def test_shards_snapshot_independently() -> None:
    view = ivm.maintain("Q() :- R(a,b), S(b,c), T(c,a)", engine="first_order", shards=8)
    view.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 1), 1)])
    restored = [type(s.engine).restore(s.engine.snapshot()) for s in view.shards]
    assert sum(e.result() for e in restored) == 1


@pytest.mark.parametrize("values", ["ints", "mixed"])
def test_batch_routing_with_arrays_equals_routing_one_by_one(values: str) -> None:
    """``_route_many`` (numpy hashes per relation) sends every update where ``_route`` sends it, each
    shard's updates in the batch's order: self-joins, negative and 64-bit ints, and values numpy cannot
    hash (big ints, strings) alike."""
    from ivm.shards import ShardSlice, stable_hash, stable_hashes
    from ivm.updates import Update

    rng = random.Random(5)
    view = ivm.maintain("Q() :- E(a,b), E(b,c), R(c,a)", shards=8)
    pool = [0, 1, -3, 2**63 - 1, -(2**63)] + (["x", 2**70, 1.5] if values == "mixed" else [])
    updates = [
        Update(rng.choice("ER"), (rng.choice(pool + list(range(20))), rng.choice(pool + list(range(20)))), 1)
        for _ in range(500)
    ]
    expected: list[list[Update]] = [[] for _ in range(8)]
    for update in updates:
        for shard, routed in view._route(update):
            expected[shard].append(routed)
    assert view._route_many(updates) == expected
    one = ShardSlice.of(ivm.maintain("Q() :- E(a,b), E(b,c), R(c,a)", shards=8), 3)
    assert one._route_many(updates, keep=3)[3] == expected[3]
    column = [u.row[0] for u in updates]
    assert [int(h) for h in stable_hashes(column, 7)] == [stable_hash(v, 7) for v in column]
