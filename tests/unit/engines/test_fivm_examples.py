"""F-IVM §8 worked examples (T1-T9 of the digest) on the view tree of the running example."""

from __future__ import annotations

import numpy as np
import pytest

import ivm
from ivm.engines.fivm import FIVM
from ivm.engines.fivm.view_tree import build_view_tree, mu
from ivm.query.variable_order import variable_order
from ivm.rings.relational import Relation

R = [("a1", "b1"), ("a1", "b2"), ("a2", "b3"), ("a3", "b4")]
S = [("a1", "c1", "e1"), ("a1", "c1", "e2"), ("a1", "c2", "e3"), ("a2", "c2", "e4")]
T = [("c1", "d1"), ("c2", "d2"), ("c2", "d3"), ("c3", "d4")]
NUM = {"a1": 1, "a2": 2, "a3": 3, "b1": 1, "b2": 2, "b3": 3, "b4": 4, "c1": 1, "c2": 2, "c3": 3}
NUM |= {f"d{i}": i for i in range(1, 5)} | {f"e{i}": i for i in range(1, 5)}


def load(engine: FIVM, numeric: bool = False) -> None:
    f = (lambda row: tuple(NUM[x] for x in row)) if numeric else (lambda row: row)
    batch = [ivm.Update("R", f(r), 1) for r in R]
    batch += [ivm.Update("S", f(s), 1) for s in S]
    batch += [ivm.Update("T", f(t), 1) for t in T]
    engine.apply(batch)


def views(engine: FIVM) -> dict[str, dict]:
    return {name.split("}_")[0] + "}": data for name, data in engine.views().items()}


def test_t1_count_views_and_t2_delta() -> None:
    engine = FIVM(ivm.parse("Q() :- R(A,B), S(A,C,E), T(C,D)"))
    load(engine)
    v = views(engine)
    assert v["V^{@B}"] == {("a1",): 2, ("a2",): 1, ("a3",): 1}
    assert v["V^{@D}"] == {("c1",): 1, ("c2",): 2, ("c3",): 1}
    assert v["V^{@E}"] == {("a1", "c1"): 2, ("a1", "c2"): 1, ("a2", "c2"): 1}
    assert v["V^{@C}"] == {("a1",): 4, ("a2",): 2}
    assert engine.result() == 10
    # Example 9: δT = {(c1,d1) -> -1, (c2,d2) -> 3}
    engine.apply([ivm.Update("T", ("c1", "d1"), -1), ivm.Update("T", ("c2", "d2"), 3)])
    assert engine.result() == 15
    assert views(engine)["V^{@D}"] == {("c2",): 5, ("c3",): 1}
    assert views(engine)["V^{@C}"] == {("a1",): 5, ("a2",): 5}


def test_t3_materialization_example_10() -> None:
    q = ivm.parse("Q() :- R(A,B), S(A,C,E), T(C,D)")
    tree = build_view_tree(q, variable_order(q))
    short = lambda nodes: sorted(n.name.split("}_")[0] + "}" for n in nodes)  # noqa: E731
    assert short(mu(tree, {"T"})) == ["V^{@A}", "V^{@B}", "V^{@E}"]
    assert short(mu(tree, {"R", "S", "T"})) == ["V^{@A}", "V^{@B}", "V^{@C}", "V^{@D}", "V^{@E}"]
    assert short(mu(tree, set())) == ["V^{@A}"]
    # an engine with U={T} keeps exactly those and still counts right; R updates rebuild
    engine = FIVM(q, updatable={"T"})
    load(engine)
    assert engine.stats()["materialized_views"] == 3 and engine.result() == 10
    engine.apply([ivm.Update("T", ("c1", "d1"), -1), ivm.Update("T", ("c2", "d2"), 3)])
    assert engine.result() == 15


def test_t5_numeric_covariance_and_sum_group_by() -> None:
    engine = FIVM(ivm.parse("Q(COVAR(A,B,C,D,E)) :- R(A,B), S(A,C,E), T(C,D)"))
    load(engine, numeric=True)
    cov = engine.result()
    join = np.array(
        [
            (1, 1, 1, 1, 1),
            (1, 1, 1, 1, 2),
            (1, 1, 2, 2, 3),
            (1, 1, 2, 3, 3),
            (1, 2, 1, 1, 1),
            (1, 2, 1, 1, 2),
            (1, 2, 2, 2, 3),
            (1, 2, 2, 3, 3),
            (2, 3, 2, 2, 4),
            (2, 3, 2, 3, 4),
        ]
    )
    assert cov.c == 10 and cov.s.tolist() == [12, 18, 16, 19, 26]
    assert cov.Q.tolist() == (join.T @ join).tolist()
    assert all(type(x) is int for x in cov.Q.ravel())  # exact arithmetic on integer inputs
    # V_ST^{@C}[a2] (Example 35 with numbers)
    vst = views(engine)["V^{@C}"][(2,)]
    assert vst.c == 2 and vst.s.tolist() == [0, 0, 4, 5, 8]
    assert (vst.Q[2, 2], vst.Q[2, 3], vst.Q[2, 4], vst.Q[3, 3], vst.Q[3, 4], vst.Q[4, 4]) == (8, 10, 16, 13, 20, 32)
    grouped = FIVM(ivm.parse("Q(A, C, SUM(B*D*E)) :- R(A,B), S(A,C,E), T(C,D)"))
    load(grouped, numeric=True)
    assert grouped.result() == {(1, 1): 9, (1, 2): 45, (2, 2): 60}


def test_t7_generalized_covariance_example_38() -> None:
    engine = FIVM(ivm.parse("Q(COVAR(A,B,C,D,E)) :- R(A,B), S(A,C,E), T(C,D)"), categorical={"C"})
    load(engine, numeric=True)
    vst = views(engine)["V^{@C}"][(2,)]
    assert vst.s[2] == {(2,): 2} and vst.entry(2, 2) == {(2,): 2}
    assert vst.entry(2, 3) == {(2,): 5} and vst.entry(2, 4) == {(2,): 8}
    assert vst.entry(3, 3) == {(): 13} and vst.entry(4, 4) == {(): 32} and vst.entry(3, 4) == {(): 20}


def test_t8_listing_and_factorized_payloads() -> None:
    q = ivm.parse("Q(A,B,C,D) :- R(A,B), S(A,C,E), T(C,D)")
    listing = FIVM(q, ring="listing")
    load(listing)
    expected = {
        ("a1", "b1", "c1", "d1"): 2,
        ("a1", "b1", "c2", "d2"): 1,
        ("a1", "b1", "c2", "d3"): 1,
        ("a1", "b2", "c1", "d1"): 2,
        ("a1", "b2", "c2", "d2"): 1,
        ("a1", "b2", "c2", "d3"): 1,
        ("a2", "b3", "c2", "d2"): 1,
        ("a2", "b3", "c2", "d3"): 1,
    }
    assert listing.result() == expected and dict(listing.enumerate()) == expected
    vst = views(listing)["V^{@C}"]
    assert vst[("a1",)].marginalize_to(("C", "D")) == Relation(
        ("C", "D"), {("c1", "d1"): 2, ("c2", "d2"): 1, ("c2", "d3"): 1}
    )
    fact = FIVM(q, ring="factorized")
    load(fact)
    assert fact.result() == Relation(("A",), {("a1",): 8, ("a2",): 2})
    v = views(fact)
    assert v["V^{@C}"] == {("a1",): Relation(("C",), {("c1",): 2, ("c2",): 2}), ("a2",): Relation(("C",), {("c2",): 2})}
    assert v["V^{@B}"][("a1",)] == Relation(("B",), {("b1",): 1, ("b2",): 1})
    assert v["V^{@D}"][("c2",)] == Relation(("D",), {("d2",): 1, ("d3",): 1})
    assert v["V^{@E}"][("a1", "c1")] == Relation((), {(): 2})


def test_listing_deltas_follow_the_root() -> None:
    q = ivm.parse("Q(A,B,C,D) :- R(A,B), S(A,C,E), T(C,D)")
    engine = FIVM(q, ring="listing")
    load(engine)
    assert len(engine.drain_delta()) == 8
    engine.apply([ivm.Update("T", ("c2", "d2"), -1)])
    assert engine.drain_delta() == sorted(
        [(("a1", "b1", "c2", "d2"), -1), (("a1", "b2", "c2", "d2"), -1), (("a2", "b3", "c2", "d2"), -1)], key=repr
    )


@pytest.mark.parametrize("ring", ["count", "listing"])
def test_group_by_deltas(ring: str) -> None:
    engine = FIVM(ivm.parse("Q(A, C) :- R(A,B), S(A,C,E), T(C,D)"), ring=ring)
    load(engine)
    assert dict(engine.drain_delta()) == {("a1", "c1"): 4, ("a1", "c2"): 4, ("a2", "c2"): 2}
    engine.apply([ivm.Update("R", ("a2", "b3"), -1), ivm.Update("T", ("c1", "d9"), 1)])
    assert dict(engine.drain_delta()) == {("a2", "c2"): -2, ("a1", "c1"): 4}
