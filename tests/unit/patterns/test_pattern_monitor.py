"""Pattern monitors (003 §4): levels I -> F -> A per relation, joint FIFO per pair, events and counters."""

from __future__ import annotations

import random

import pytest

import ivm
from ivm.patterns import PatternEvent, PatternMonitor
from ivm.patterns.streams import break_fifo, windowed_stream


def _feed(monitor: PatternMonitor, stream) -> list[PatternEvent]:
    events = []
    for u in stream:
        events += monitor.observe(u.relation, u.row, u.mult > 0)
    return events


def test_insert_only_stream_keeps_level_i() -> None:
    m = PatternMonitor(["R", "S"])
    assert _feed(m, [ivm.Update("R", (i,), 1) for i in range(100)]) == []
    assert m.level("R") == "I" and m.patterns().pair("R", "S") == "I"


def test_fifo_deletes_go_to_f_and_a_non_head_delete_to_a() -> None:
    m = PatternMonitor(["R"])
    for i in range(5):
        m.observe("R", (i,), True)
    (first,) = m.observe("R", (0,), False)
    assert (first.before, first.after, first.declared) == ("insert-only", "fifo", False)
    assert m.observe("R", (1,), False) == []
    (second,) = m.observe("R", (3,), False)
    assert (second.before, second.after) == ("fifo", "arbitrary")
    assert m.level("R") == "A"
    assert m.observe("R", (2,), False) == []  # levels only go down, once


def test_reinsert_is_a_new_logical_tuple_at_the_back() -> None:
    m = PatternMonitor(["R"])
    m.observe("R", (1,), True)
    m.observe("R", (2,), True)
    m.observe("R", (1,), False)
    m.observe("R", (1,), True)  # re-insert: now younger than (2,)
    assert m.observe("R", (2,), False) == []
    assert m.level("R") == "F"


def test_joint_fifo_of_a_pair_breaks_when_the_partner_has_an_older_tuple() -> None:
    m = PatternMonitor(["R", "S"])
    m.observe("S", (1,), True)
    m.observe("R", (1,), True)
    events = m.observe("R", (1,), False)  # R's own head, but S(1) is older
    assert [e.kind for e in events] == ["relation", "pair"]
    assert m.level("R") == "F" and not m.joint("R", "S")
    assert m.patterns().pair("R", "S") == "A"


def test_joint_window_stays_joint_and_separate_windows_do_not() -> None:
    q = ivm.parse("Q() :- R(a,b), S(b), T(a)")
    joint = PatternMonitor(q.relations)
    _feed(joint, windowed_stream(q, random.Random(1), 400, 30, 25))
    assert all(joint.joint(a, b) for a, b in [("R", "S"), ("R", "T"), ("S", "T")])
    assert {joint.level(r) for r in q.relations} == {"F"}
    separate = PatternMonitor(q.relations)
    _feed(separate, windowed_stream(q, random.Random(1), 400, 30, {"R": 40, "S": 5, "T": 12}))
    assert {separate.level(r) for r in q.relations} == {"F"}
    assert not any(separate.joint(a, b) for a, b in [("R", "S"), ("R", "T"), ("S", "T")])


def test_break_fifo_makes_relations_arbitrary() -> None:
    q = ivm.parse("Q() :- R(a,b), S(b)")
    stream = break_fifo(windowed_stream(q, random.Random(2), 300, 20, 30), random.Random(3), 0.05, start=100)
    m = PatternMonitor(q.relations)
    _feed(m, stream)
    assert "A" in {m.level(r) for r in q.relations}


def test_declared_patterns_are_verified_and_undeclared_are_arbitrary() -> None:
    seen: list[PatternEvent] = []
    m = PatternMonitor(["R", "S"], ["R=insert-only"], infer=False, on_event=seen.append)
    assert m.level("S") == "A" and m.level("R") == "I"
    m.observe("R", (1,), True)
    m.observe("R", (1,), False)
    assert len(seen) == 1 and seen[0].declared and m.stats()["pattern_violations_declared"] == 1
    assert m.stats()["pattern_level.R"] == 1


def test_declared_joint_group_is_monitored() -> None:
    m = PatternMonitor(["R", "S", "T"], ["R+S=fifo"], infer=False)
    assert m.joint("R", "S") and not m.joint("R", "T")
    m.observe("S", (1,), True)
    m.observe("R", (1,), True)
    events = m.observe("R", (1,), False)
    assert [e.kind for e in events] == ["pair"] and events[0].declared
    assert m.stats()["pattern_downgrades_pair"] == 1


def test_deletion_only_ends_at_the_first_insert_after_the_prefix() -> None:
    m = PatternMonitor(["R"], deletion_only=["R"])
    m.observe("R", (1,), True)
    assert not m.deletion_only("R")
    m.end_prefix()
    assert m.deletion_only("R")
    assert m.observe("R", (1,), False)[0].after == "fifo"  # first delete: I -> F, still deletion-only
    (event,) = m.observe("R", (2,), True)
    assert event.kind == "deletion_only" and not m.deletion_only("R")


@pytest.mark.parametrize("seed", range(5))
def test_monitor_agrees_with_the_definition_on_random_streams(seed: int) -> None:
    """Levels and pair flags equal the definitions of §1.3 recomputed from the whole history."""
    rng = random.Random(seed)
    q = ivm.parse("Q() :- R(a), S(a), T(a)")
    stream = windowed_stream(q, rng, 150, 8, rng.choice([10, {"R": 5, "S": 9, "T": 3}]))
    if seed % 2:
        stream = break_fifo(stream, rng, 0.03)
    m = PatternMonitor(q.relations)
    _feed(m, stream)
    lives = {}  # (relation, row, ins) -> del time
    open_: dict[tuple, int] = {}
    for t, u in enumerate(stream):
        if u.mult > 0:
            open_[(u.relation, u.row)] = t
        else:
            lives[(u.relation, u.row, open_.pop((u.relation, u.row)))] = t
    for (rel, row), t in open_.items():
        lives[(rel, row, t)] = float("inf")

    def fifo(rels: set[str]) -> bool:
        items = sorted((ins, d) for (r, _, ins), d in lives.items() if r in rels)
        return all(d1 < d2 or d2 == float("inf") for k, (_, d1) in enumerate(items) for _, d2 in items[k + 1 :])

    for r in q.relations:
        deletes = any(d != float("inf") for (rr, _, _), d in lives.items() if rr == r)
        expected = "A" if not fifo({r}) else ("F" if deletes else "I")
        assert m.level(r) == expected
    for a, b in [("R", "S"), ("R", "T"), ("S", "T")]:
        assert m.joint(a, b) == fifo({a, b})
