"""Slices spread over the live shard hosts (``ivm.processor.placement.spark.rebalance``): even counts, the
fewest moves, and no slice left on a host that is gone."""

from __future__ import annotations

import random
from collections import Counter

from ivm.processor.placement.spark import rebalance

A, B, C = ("10.0.0.1", 1), ("10.0.0.2", 2), ("10.0.0.3", 3)


def test_an_added_host_takes_its_share_and_only_that() -> None:
    owners = {i: A if i % 2 else B for i in range(8)}
    before = dict(owners)
    moves = rebalance(owners, 8, [A, B, C])
    assert sorted(Counter(owners.values()).values()) == [2, 3, 3]
    assert len(moves) == 2 and all(to == C for _frm, to in moves.values())
    assert {i for i in range(8) if owners[i] != before[i]} == set(moves)
    assert rebalance(owners, 8, [A, B, C]) == {}, "balanced: nothing moves"


def test_a_lost_hosts_slices_go_to_the_live_ones() -> None:
    owners = {0: A, 1: A, 2: A, 3: B, 4: C, 5: C}
    moves = rebalance(owners, 6, [A, B])
    assert set(owners.values()) == {A, B} and sorted(Counter(owners.values()).values()) == [3, 3]
    assert {i for i, (frm, _to) in moves.items() if frm == C} == {4, 5}


def test_random_owners_end_balanced_on_live_hosts() -> None:
    rng = random.Random(5)
    hosts = [(f"10.0.0.{i}", i) for i in range(6)]
    for _ in range(200):
        slices = rng.randrange(1, 20)
        owners = {i: rng.choice(hosts) for i in range(slices) if rng.random() < 0.9}
        live = rng.sample(hosts, rng.randrange(1, 6))
        before = dict(owners)
        moves = rebalance(owners, slices, live)
        counts = Counter(owners[i] for i in range(slices))
        assert set(counts) <= set(live) and len(owners) == slices
        assert max(counts.values()) - min(counts.get(h, 0) for h in live) <= 1 or len(live) > slices
        for i, (frm, to) in moves.items():
            assert before.get(i) == frm and owners[i] == to and frm != to
