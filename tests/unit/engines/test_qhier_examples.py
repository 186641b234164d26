"""The worked examples A–G of the q-hierarchical digest (002 §8), through the public API.

The paper uses set semantics (a duplicate insert and a delete of an absent
tuple are no-ops); the view's set policy gives exactly that: such updates are
rejected and change nothing.
"""

from __future__ import annotations

import pickle

import pytest

import ivm
from ivm.engines import ENGINES, EngineRefused
from ivm.engines.qhier.compact import compact_available
from ivm.engines.qhier.engine import QHierEngine, StaleEnumeration
from ivm.policy import Policy
from ivm.query import parse

SET = Policy(negative="reject", duplicate="reject")


def view(query: str, **relations: list) -> ivm.View:
    v = ivm.maintain(query, engine="qhier", policy=SET)
    v.apply([(rel, row if isinstance(row, tuple) else (row,), 1) for rel, rows in relations.items() for row in rows])
    return v


def answers(v: ivm.View) -> set:
    rows = [row for row, _ in v.enumerate()]
    assert len(rows) == len(set(rows)), "enumeration repeated an answer"
    return set(rows)


def step(v: ivm.View, rel: str, row: object, mult: int) -> QHierEngine:
    v.apply([(rel, row if isinstance(row, tuple) else (row,), mult)])
    engine = v.engine
    assert isinstance(engine, QHierEngine)
    return engine


def test_example_a_unary_and_binary() -> None:
    v = view("Q(x,y) :- R(x), S(x,y)", R=[1, 2], S=[(1, "a"), (1, "b"), (3, "c")])
    e = v.engine
    assert isinstance(e, QHierEngine)
    assert e.count() == 2 and answers(v) == {(1, "a"), (1, "b")}
    assert step(v, "R", 3, +1).count() == 3 and (3, "c") in answers(v)
    assert step(v, "S", (2, "d"), +1).count() == 4
    assert step(v, "S", (1, "a"), -1).count() == 3
    assert answers(v) == {(1, "b"), (2, "d"), (3, "c")}
    assert len(v.apply([("R", (7,), -1)]).rejected) == 1 and e.count() == 3  # absent: no-op
    assert len(v.apply([("R", (1,), +1)]).rejected) == 1 and e.count() == 3  # duplicate: no-op
    assert step(v, "R", 1, -1).count() == 2
    assert answers(v) == {(2, "d"), (3, "c")}
    assert e.contains((2, "d")) and not e.contains((1, "b"))


def test_example_b_free_root_bound_child() -> None:
    v = view("Q(y) :- E(x,y), T(y)", E=[(1, "a"), (2, "a"), (3, "b")], T=["a", "b", "c"])
    e = v.engine
    assert isinstance(e, QHierEngine)
    assert (e.count(), answers(v), e.bag_count()) == (2, {("a",), ("b",)}, 3)
    assert e.multiplicity_of(("a",)) == 2
    steps = [
        ("T", "a", -1, 1, {("b",)}, 1),
        ("E", (5, "c"), +1, 2, {("b",), ("c",)}, 2),
        ("E", (3, "b"), -1, 1, {("c",)}, None),
        ("T", "a", +1, 2, {("a",), ("c",)}, 3),
        ("E", (1, "a"), -1, 2, {("a",), ("c",)}, 2),
    ]
    for rel, row, mult, count, expected, bag in steps:
        step(v, rel, row, mult)
        assert e.count() == count and answers(v) == expected
        if bag is not None:
            assert e.bag_count() == bag


def test_example_c_refused_with_witness() -> None:
    q = parse("Q(x) :- E(x,y), T(y)")
    reason = QHierEngine.refuses(q)
    assert reason is not None and "condition (ii)" in reason and "x is free, y is bound" in reason
    with pytest.raises(EngineRefused, match=r"condition \(ii\)"):
        ivm.maintain(q, engine="qhier")


def test_example_e_two_level() -> None:
    v = view(
        "Q(x,y,z) :- R(x,y,w), S(x,y), T(x,z), U(x,u)",
        R=[(1, 1, 7), (1, 1, 8), (1, 2, 7), (2, 1, 7)],
        S=[(1, 1), (1, 2), (2, 1), (2, 2)],
        T=[(1, 5), (1, 6), (2, 5)],
        U=[(1, 9), (1, 9.5)],
    )
    e = v.engine
    assert isinstance(e, QHierEngine)
    assert e.count() == 4 and e.bag_count() == 12
    assert answers(v) == {(1, 1, 5), (1, 1, 6), (1, 2, 5), (1, 2, 6)}
    step(v, "U", (2, 0), +1)
    assert (e.count(), e.bag_count()) == (5, 13) and (2, 1, 5) in answers(v)
    step(v, "U", (1, 9), -1)
    assert (e.count(), e.bag_count()) == (5, 7)
    step(v, "U", (1, 9.5), -1)
    assert (e.count(), e.bag_count(), answers(v)) == (1, 1, {(2, 1, 5)})
    step(v, "S", (1, 2), -1)
    assert e.count() == 1
    step(v, "T", (2, 6), +1)
    assert answers(v) == {(2, 1, 5), (2, 1, 6)}


def test_example_d_boolean_loops_via_core() -> None:
    q = parse("Q() :- E(x,x), E(x,y), E(y,y)")
    assert QHierEngine.refuses(q) is not None  # not q-hierarchical: bag semantics refused
    engine = QHierEngine(q, semantics="set")
    engine.apply([ivm.Update("E", (1, 2), 1), ivm.Update("E", (2, 3), 1)])
    assert not engine.answer()
    engine.apply([ivm.Update("E", (3, 3), 1)])
    assert engine.answer() and engine.result() == 1
    engine.apply([ivm.Update("E", (3, 3), -1)])
    assert not engine.answer()


def test_example_f_self_join_not_a_core() -> None:
    v = view("Q(x,y) :- E(x,y), E(x,z), E(x,x)", E=[(1, 1), (1, 2), (2, 3), (3, 3)])
    e = v.engine
    assert isinstance(e, QHierEngine)
    assert (e.count(), e.bag_count(), answers(v)) == (3, 5, {(1, 1), (1, 2), (3, 3)})
    step(v, "E", (2, 2), +1)
    assert (e.count(), e.bag_count()) == (5, 9)
    step(v, "E", (1, 1), -1)
    assert (e.count(), e.bag_count(), answers(v)) == (3, 5, {(2, 2), (2, 3), (3, 3)})


def test_example_g_components_and_boolean_filter() -> None:
    v = view("Q(x,u) :- R(x,y), S(u,v), T(w)", R=[(1, 1), (1, 2), (2, 1)], S=[(5, 1), (6, 1)])
    e = v.engine
    assert isinstance(e, QHierEngine)
    assert e.count() == 0 and answers(v) == set()
    step(v, "T", 0, +1)
    assert (e.count(), e.bag_count()) == (4, 6)
    assert answers(v) == {(1, 5), (1, 6), (2, 5), (2, 6)}
    step(v, "T", 1, +1)
    assert (e.count(), e.bag_count()) == (4, 12)
    step(v, "T", 0, -1)
    assert (e.count(), e.bag_count()) == (4, 6)


def test_stale_enumeration_fails_fast() -> None:
    v = view("Q(x,y) :- R(x), S(x,y)", R=[1], S=[(1, "a"), (1, "b")])
    it = v.enumerate()
    next(it)
    v.apply([("R", (2,), 1)])
    with pytest.raises(StaleEnumeration):
        next(it)
    assert len(list(v.enumerate())) == 2  # a restarted enumeration works


def test_drain_delta_follows_the_answers() -> None:
    v = view("Q(x,y) :- R(x), S(x,y)", R=[1, 2], S=[(1, "a"), (1, "b"), (3, "c")])
    e = v.engine
    assert isinstance(e, QHierEngine)
    assert sorted(e.drain_delta()) == [((1, "a"), 1), ((1, "b"), 1)]
    assert e.drain_delta() == []
    v.apply([("R", (3,), 1), ("S", (2, "d"), 1), ("S", (1, "a"), -1)])
    assert sorted(e.drain_delta()) == [((1, "a"), -1), ((2, "d"), 1), ((3, "c"), 1)]
    v.apply([("R", (4,), 1), ("R", (4,), -1)])  # cancels within the batch
    assert e.drain_delta() == []


def test_boolean_query_result_and_planner() -> None:
    v = ivm.maintain("Q() :- E(x,y), T(y)", engine="qhier")
    v.apply([("E", (1, 2), 1), ("E", (3, 2), 1), ("T", (2,), 1)])
    assert v.result() == 2 and list(v.enumerate()) == [((), 2)]
    assert ENGINES["qhier"] is QHierEngine
    # a COUNT whose F-IVM tree is O(1) runs on qhier's compact state when it is built (measured faster, same
    # bounds), else on fivm (tests/unit/query/test_measured_defaults.py); the other q-hierarchical queries on qhier
    assert ivm.maintain("Q() :- E(x,y), T(y)").engine.name == ("qhier" if compact_available() else "fivm")
    assert ivm.maintain("Q(x,y) :- E(x,y), T(y)").engine.name == "qhier"


def test_snapshot_round_trip() -> None:
    v = view("Q(x,y,z) :- R(x,y,w), S(x,y), T(x,z), U(x,u)", R=[(1, 1, 7)], S=[(1, 1)], T=[(1, 5)], U=[(1, 2)])
    e = v.engine
    assert isinstance(e, QHierEngine)
    e.drain_delta()
    e.apply([ivm.Update("T", (1, 6), 1)])
    restored = QHierEngine.restore(e.snapshot())
    assert isinstance(restored, QHierEngine)
    assert dict(restored.enumerate()) == dict(e.enumerate())
    assert restored.drain_delta() == [((1, 1, 6), 1)]
    assert pickle.loads(pickle.dumps(restored)).count() == 2
