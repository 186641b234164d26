"""IVM^eps: the traces of the digest's §7.1-7.2, replayed exactly, invariants after each update."""

from __future__ import annotations

import math

import pytest

import ivm
from ivm.engines.ivm_eps import IVMEps, IVMEpsSelfJoin, IVMEpsTriangle, check_invariants
from ivm.query import parse

TRIANGLE = parse("Q() :- R(a,b), S(b,c), T(c,a)")
SELF_JOIN = parse("Q() :- E(a,b), E(b,c), E(c,a)")


def step(engine, *updates) -> None:
    engine.apply(list(updates))
    check_invariants(engine)


def test_preprocessed_trace() -> None:
    e = IVMEps(TRIANGLE, eps=0.5)
    e.bulk_load([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 1), 1)])
    check_invariants(e)
    assert (e.size, e.N, e.result()) == (3, 7, 1)
    assert math.isclose(7**0.5, 2.6457513, rel_tol=1e-6)
    assert all(not p.hf for p in e.parts)  # all keys light
    step(e, ("R", (1, 2), 2))
    assert e.result() == 3
    step(e, ("T", (3, 1), -1))
    assert (e.result(), e.size) == (0, 2)
    step(e, ("S", (2, 3), -1))
    assert (e.result(), e.size, e.N) == (0, 1, 7)


def test_doubling_and_halving_trace() -> None:
    e = IVMEps(TRIANGLE, eps=0.5)
    assert (e.N, e.size, e.result()) == (1, 0, 0)
    seen = []
    for b in range(10):
        majors = e.major_rebalances
        step(e, ("R", (0, b), 1))
        if e.major_rebalances > majors:
            seen.append((e.size, e.N))
            assert e.size * 2 == e.N  # a major happens exactly when |D| hits N
        if e.N == 2:
            assert 0 in e.parts[0].lf  # light at N = 2 (θ = 1.414, degree 1)
        if e.N >= 4:
            assert 0 in e.parts[0].hf  # heavy from N = 4 on
    assert seen == [(1, 2), (2, 4), (4, 8), (8, 16)]
    trace = []
    for b in range(10):
        minors = e.minor_rebalances
        step(e, ("R", (0, b), -1))
        trace.append((e.size, e.N, e.minor_rebalances - minors))
    assert [n for size, n, _ in trace if size >= 4] == [16] * 6
    assert trace[6] == (3, 7, 0)  # |D| = 3 < ⌊16/4⌋: N = ⌊16/2⌋ - 1
    assert trace[8] == (1, 7, 1)  # degree 1 < 0.5·√7: minor heavy -> light
    assert trace[9] == (0, 2, 0)  # |D| = 0 < ⌊7/4⌋: N = ⌊7/2⌋ - 1


def test_minor_thresholds_trace() -> None:
    e = IVMEps(TRIANGLE, eps=0.5)
    e.bulk_load([("S", (100 + i, 200 + i), 1) for i in range(40)])
    assert (e.N, e.parts[0].strict) == (81, 9)
    for b in range(1, 20):
        step(e, ("R", (7, b), 1))
        assert (7 in e.parts[0].hf) == (b >= 14), b
    assert e.minor_rebalances == 1
    for b in range(19, 0, -1):
        step(e, ("R", (7, b), -1))
        degree = b - 1
        if degree:
            assert (7 in e.parts[0].hf) == (degree >= 5), degree  # 4 < 4.5 = θ/2
    assert e.minor_rebalances == 2
    assert e.N == 81


def test_heavy_to_light_exactly_at_degree_four() -> None:
    e = IVMEps(TRIANGLE, eps=0.5)
    e.bulk_load([("S", (100 + i, 200 + i), 1) for i in range(40)])
    for b in range(1, 15):
        step(e, ("R", (7, b), 1))
    assert 7 in e.parts[0].hf
    for b in range(14, 0, -1):
        step(e, ("R", (7, b), -1))
        if b - 1 >= 5:
            assert 7 in e.parts[0].hf
        if b - 1 == 4:
            assert 7 in e.parts[0].lf  # 4 < 4.5 = θ/2


@pytest.mark.parametrize("eps", [0.0, 0.5, 1.0])
def test_self_join_traces(eps: float) -> None:
    e = IVMEps(SELF_JOIN, eps=eps)
    assert isinstance(e, IVMEpsSelfJoin)
    step(e, ("E", (1, 1), 1))
    assert e.result() == 1
    step(e, ("E", (1, 1), -1))
    for arc in [(1, 2), (2, 3), (3, 1)]:
        step(e, ("E", arc, 1))
    assert e.result() == 3
    for arc in [(2, 1), (3, 2), (1, 3)]:
        step(e, ("E", arc, 1))
    assert e.result() == 6
    step(e, ("E", (1, 2), -1))
    assert e.result() == 3


def test_self_join_line_13_correction() -> None:
    """A light insert whose key has heavy in-neighbours: the printed R_h(a,β) gives a wrong V."""
    e = IVMEps(SELF_JOIN, eps=0.5)
    for x in range(6):
        e.apply([("E", (0, 10 + x), 1)])  # key 0 heavy
    e.apply([("E", (0, 5), 1), ("E", (5, 7), 1), ("E", (7, 0), 1)])
    check_invariants(e)
    assert 0 in e.part.hf and 5 in e.part.lf
    assert e.result() == 3


def test_multiplicities_hand_computed() -> None:
    for eps in (0.0, 0.5, 1.0):
        e = IVMEps(TRIANGLE, eps=eps)
        step(e, ("R", (1, 2), 2), ("S", (2, 3), 3), ("T", (3, 1), -1))
        assert e.result() == -6


@pytest.mark.parametrize(("u", "v", "expected"), [((1, 0), (1, 0), 1), ((1, 0), (0, 1), 0), ((1, 1), (1, 1), 2)])
def test_oumv_reduction(u: tuple[int, int], v: tuple[int, int], expected: int) -> None:
    """Figure 6: S holds M, R(a,i) = u(i), T(i,a) = v(i); then Q = uᵀ M v."""
    e = IVMEps(TRIANGLE, eps=0.5)
    m = [[1, 0], [0, 1]]
    for i in range(2):
        for j in range(2):
            if m[i][j]:
                step(e, ("S", (i, j), m[i][j]))
    a = "a"
    for r_u, r_v in [((0, 1), (1, 1)), (u, v)]:  # a first round, then the round under test
        for i in range(2):
            diff = r_u[i] - e.multiplicity("R", (a, i))
            if diff:
                step(e, ("R", (a, i), diff))
            diff = r_v[i] - e.multiplicity("T", (i, a))
            if diff:
                step(e, ("T", (i, a), diff))
    assert e.result() == expected


def test_maintain_passes_eps_and_policy_rejects() -> None:
    view = ivm.maintain("Q() :- R(a,b), S(b,c), T(c,a)", engine="ivm_eps", eps=0.25)
    assert isinstance(view.engine, IVMEpsTriangle)
    assert all(p.eps == 0.25 for p in view.engine.parts)
    out = view.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 1), 1), ("T", (9, 9), -1)])
    assert view.result() == 1 and len(out.rejected) == 1
    check_invariants(view.engine)


def test_per_relation_eps_is_factorized_ivm() -> None:
    e = IVMEps(TRIANGLE, eps={"R": 0, "S": 0, "T": 1})
    for a in range(5):
        for b in range(5):
            step(e, ("S", (a, b), 1), ("T", (b, a), 1))
    assert not e.parts[2].hf and not e.parts[0].lf and not e.parts[1].lf
    assert not e.views[0] and not e.views[2]  # only V_ST = S_h·T_l is non-empty
    step(e, ("R", (0, 1), 1))
    assert e.result() == 5
    assert e.describe()["space_exponent"] == 2.0


def test_refusals() -> None:
    assert IVMEps.refuses(parse("Q(a) :- R(a,b), S(b,c), T(c,a)"))
    assert IVMEps.refuses(parse("Q() :- R(a,b), S(b,c)"))
    assert IVMEps.refuses(TRIANGLE) is None
    assert IVMEps.refuses(parse("Q(c,a,b) :- R(a,b), S(b,c), T(c,a)")) is None


def test_snapshot_round_trip() -> None:
    e = IVMEps(TRIANGLE, eps=0.5)
    e.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 1), 1)])
    back = IVMEps.restore(e.snapshot())
    assert isinstance(back, IVMEpsTriangle) and back.result() == 1
    back.apply([("R", (1, 2), 1)])
    check_invariants(back)
    assert back.result() == 2 and e.result() == 1


def test_invariant_checker_catches_corruption() -> None:
    from ivm.engines.ivm_eps import InvariantViolation

    e = IVMEps(TRIANGLE, eps=0.5, implementation="python")  # the corruption below writes the Python parts
    for b in range(6):
        e.apply([("R", (0, b), 1), ("S", (b, 9), 1), ("T", (9, 0), 1)])
    check_invariants(e)
    e.count += 1
    with pytest.raises(InvariantViolation, match=r"inv\. 6"):
        check_invariants(e)
    e.count -= 1
    e.parts[1].lf.setdefault("x", {})["y"] = 1  # an entry missing from the backward index
    with pytest.raises(InvariantViolation, match="backward index"):
        check_invariants(e)


def test_printed_line_13_fails_where_the_corrected_one_holds() -> None:
    """Appendix B's printed ``V(a,β) += R_h(a,β)·m`` breaks V; the corrected R_h(a,α) keeps it."""
    from ivm.engines.ivm_eps import InvariantViolation
    from ivm.engines.ivm_eps.triangle import view_add

    class Printed(IVMEpsSelfJoin):
        def apply_update(self, heavy, x, y, m, count=True):  # type: ignore[no-untyped-def]
            super().apply_update(heavy, x, y, m, count)
            if not heavy:  # swap the corrected line 13 for the printed one (R_h is unchanged)
                for a, r in (self.part.hb.get(x) or {}).items():
                    view_add(self.view, a, y, -r * m)
                for a, r in (self.part.hb.get(y) or {}).items():
                    view_add(self.view, a, y, r * m)

    updates = [("E", (0, 10 + x), 1) for x in range(6)] + [("E", (5, 0), 1), ("E", (0, 5), 1), ("E", (5, 7), 1)]
    good, bad = IVMEps(SELF_JOIN, eps=0.5), Printed(SELF_JOIN, eps=0.5, implementation="python")
    good.apply(updates)
    check_invariants(good)
    bad.apply(updates)
    with pytest.raises(InvariantViolation, match="V: differs from its definition"):
        check_invariants(bad)


@pytest.mark.parametrize("text", ["Q() :- E(a,b), E(b,c), E(c,a)", "Q(a,b,c) :- R(a,b), S(b,c), T(c,a)"])
def test_snapshot_round_trip_variants(text: str) -> None:
    e = IVMEps(parse(text), eps=0.5)
    rel = sorted(parse(text).relations)
    e.apply([(r, (i % 4, (i * 3) % 5), 1) for i in range(30) for r in rel])
    back = IVMEps.restore(e.snapshot())
    assert type(back) is type(e) and back.result() == e.result()
    check_invariants(back)
