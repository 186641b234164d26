"""ν view trees (F-IVM §7.1, Fig. 9-11): FIVM(tree="nu").

The construction: Fig. 10's view tree for ``Q(A,B,C)`` over the running
example, view by view; H views exactly where X has k ≥ 2 children, V views
exactly where X has a sibling (plus the boundary rule of :mod:`ivm.engines.fivm.nu`);
Example 19's enumeration views and payload views.  Enumeration: equal to a
brute-force join of the base relations and to τ's ``enumerate()`` on random
insert/delete streams (bag streams in the O(1)-delay mode, with no dead end
met; Z-relation streams with negative multiplicities in the join mode), the
same results for COUNT, SUM and covariance payloads, ``drain_delta``,
snapshots, and the refusals.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest

import ivm
from ivm.engines.fivm import FIVM, nu
from ivm.engines.fivm.view_tree import ViewNode
from ivm.query.model import Query
from tests.unit.engines.test_fivm_columnar import stream as z_stream
from tests.unit.engines.test_fivm_duckdb import random_query, random_stream

FIG10 = "Q(A, B, C) :- R(A,B), S(A,C,E), T(C,D)"
R = [("a1", "b1"), ("a1", "b2"), ("a2", "b3"), ("a3", "b4")]
S = [("a1", "c1", "e1"), ("a1", "c1", "e2"), ("a1", "c2", "e3"), ("a2", "c2", "e4")]
T = [("c1", "d1"), ("c2", "d2"), ("c2", "d3"), ("c3", "d4")]


def shape(node: ViewNode) -> tuple[Any, ...]:
    """(name, keys, marginalized, children's shapes): the view tree as nested tuples."""
    return (node.name, node.keys, node.marginalized, tuple(shape(c) for c in node.children))


def brute_force(query: Query, base: dict[str, dict[tuple, int]]) -> dict[tuple, int]:
    """``Q[free] = Σ_bound Π_atoms R[t]`` by backtracking over the atoms (an independent oracle)."""
    out: dict[tuple, int] = {}

    def go(i: int, binding: dict[str, Any], mult: int) -> None:
        if i == len(query.atoms):
            key = tuple(binding[v] for v in query.free)
            out[key] = out.get(key, 0) + mult
            return
        atom = query.atoms[i]
        for row, m in base[atom.relation].items():
            if not atom.matches(row):
                continue
            if any(binding.get(v, x) != x for v, x in zip(atom.terms, row, strict=True)):
                continue
            go(i + 1, {**binding, **dict(zip(atom.terms, row, strict=True))}, mult * m)

    go(0, {}, 1)
    return {k: m for k, m in out.items() if m}


# ------------------------------------------------------------------ the construction
def test_fig10_view_tree_has_exactly_the_views_of_fig10() -> None:
    engine = FIVM(ivm.parse(FIG10), tree="nu")
    (root,) = engine.tree.roots
    assert shape(root) == (
        "H^{@A}_{R,S,T}",
        ("A",),
        (),
        (
            ("V^{@B}_{R}", ("A",), ("B",), (("R", ("A", "B"), (), ()),)),
            (
                "V^{@C}_{S,T}",
                ("A",),
                ("C",),
                (
                    (
                        "H^{@C}_{S,T}",
                        ("A", "C"),
                        (),
                        (
                            ("V^{@E}_{S}", ("A", "C"), ("E",), (("S", ("A", "C", "E"), (), ()),)),
                            ("V^{@D}_{T}", ("C",), ("D",), (("T", ("C", "D"), (), ()),)),
                        ),
                    ),
                ),
            ),
        ),
    )
    views = {n.name: n.keys for n in engine.tree.nodes() if not n.is_leaf}
    assert views == {
        "H^{@A}_{R,S,T}": ("A",),
        "V^{@B}_{R}": ("A",),
        "V^{@C}_{S,T}": ("A",),
        "H^{@C}_{S,T}": ("A", "C"),
        "V^{@D}_{T}": ("C",),
        "V^{@E}_{S}": ("A", "C"),
    }
    # lifting: only the bound variables, once, where they are summed out
    assert {n.name: n.lifted for n in engine.tree.nodes() if n.lifted} == {"V^{@E}_{S}": ("E",), "V^{@D}_{T}": ("D",)}
    # Example 19: A-values from H_RST^{@A}, B-values from R[a, B], C-values from H_ST^{@C}[a, C];
    # the payload of (a, b, c) is R[a, b] · H_ST^{@C}[a, c]
    plan = engine.nu_plan
    assert plan is not None
    (top,) = plan.groups
    assert (top.view.name, top.variables, top.fixed) == ("H^{@A}_{R,S,T}", ("A",), ())
    assert sorted((g.view.name, g.variables, g.fixed) for g in top.children) == [
        ("H^{@C}_{S,T}", ("C",), ("A",)),
        ("R", ("B",), ("A",)),
    ]
    assert [n.name for n in plan.payload_views] == ["R", "H^{@C}_{S,T}"]


def test_where_nu_creates_h_and_v_views() -> None:
    """k ≥ 2: H (and V on top iff X has a sibling); k = 1: V iff X has a sibling, else the child's tree."""

    def tree(q: str, **options: Any) -> tuple[Any, ...]:
        (root,) = FIVM(ivm.parse(q), tree="nu", **options).tree.roots
        return shape(root)

    # a free chain with one child each and no siblings: no view at all, the relation is the root
    assert tree("Q(A, B) :- R(A,B)") == ("R", ("A", "B"), (), ())
    # Fig. 12/13 (q-hierarchical Q_h): every variable of the canonical order, H at A and C, V at B, C, D, E
    qh = tree("Q(A, B, C) :- R(A,B), S(A,C,E), T(A,C,D)")
    assert qh[0] == "H^{@A}_{R,S,T}" and [c[0] for c in qh[3]] == ["V^{@B}_{R}", "V^{@C}_{S,T}"]
    h_st = qh[3][1][3][0]
    assert h_st[:2] == ("H^{@C}_{S,T}", ("A", "C"))
    assert sorted((c[0], c[1]) for c in h_st[3]) == [("V^{@D}_{T}", ("A", "C")), ("V^{@E}_{S}", ("A", "C"))]
    # Example 27 with its fds B -> C, C -> D: V_R^{@A}[B], H_RS^{@B}[B,C], V_RS^{@B}[C], H_RST at the top
    ex27 = FIVM(ivm.parse("Q(A, B, C, D) :- R(A,B), S(B,C), T(C,D)"), tree="nu", fds=[("B", "C"), ("C", "D")])
    views = {n.name: set(n.keys) for n in ex27.tree.nodes() if not n.is_leaf}
    assert views == {
        "V^{@A}_{R}": {"B"},
        "H^{@B}_{R,S}": {"B", "C"},
        "V^{@B}_{R,S}": {"C"},
        "H^{@D}_{R,S,T}": {"C", "D"},
    }
    # the boundary rule: a bound variable under a free one is summed out even without a sibling
    assert tree("Q(A) :- R(A,B), S(B,C)") == (
        "V^{@B}_{R,S}",
        ("A",),
        ("B",),
        (
            (
                "H^{@B}_{R,S}",
                ("A", "B"),
                (),
                (("V^{@C}_{S}", ("B",), ("C",), (("S", ("B", "C"), (), ()),)), ("R", ("A", "B"), (), ())),
            ),
        ),
    )
    assert tree("Q(A) :- R(A,B,C)") == ("V^{@B}_{R}", ("A",), ("B", "C"), (("R", ("A", "B", "C"), (), ()),))
    # a Boolean query: the bound root is summed out to the empty key
    assert tree("Q() :- R(A,B), S(B,C)")[:3] == ("V^{@B}_{R,S}", (), ("B",))


def test_enumeration_views_are_stored_whatever_is_updatable() -> None:
    for updatable in ({"T"}, {"R"}, set()):
        engine = FIVM(ivm.parse(FIG10), tree="nu", updatable=updatable)
        stored = {n.name for n in engine.tree.materialized()}
        assert {"H^{@A}_{R,S,T}", "R", "H^{@C}_{S,T}"} <= stored
    engine = FIVM(ivm.parse(FIG10), tree="nu", updatable={"T"})
    # μ: V_R^{@B} and V_S^{@E} (siblings of T's path); enumeration: H_RST^{@A}, R, H_ST^{@C}
    assert {n.name for n in engine.tree.materialized()} == {
        "H^{@A}_{R,S,T}",
        "V^{@B}_{R}",
        "R",
        "H^{@C}_{S,T}",
        "V^{@E}_{S}",
    }


# ------------------------------------------------------------------ enumeration
def test_example_19_on_the_example_database() -> None:
    q = ivm.parse(FIG10)
    batch = [("R", r, 1) for r in R] + [("S", s, 1) for s in S] + [("T", t, 1) for t in T]
    n, t = FIVM(q, tree="nu"), FIVM(q)
    n.apply(batch)
    t.apply(batch)
    answers = dict(n.enumerate())
    assert answers == dict(t.enumerate()) == brute_force(q, n.base)
    # (a1, b1, c1): R[a1,b1] · H_ST^{@C}[a1,c1] = 1 · (2 · 1)
    assert answers[("a1", "b1", "c1")] == 2 and len(answers) == 5  # a1: {b1,b2} x {c1,c2}; a2: b3, c2
    h_st = n.views()["H^{@C}_{S,T}"]
    assert all(m == n.views()["R"][(a, b)] * h_st[(a, c)] for (a, b, c), m in answers.items())


def enumerate_counting_dead_ends(engine: FIVM, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, int, int]:
    """The answers, and how many times a step of the top-down walk found nothing below it (a dead end).

    The outermost call finds nothing only when there is no answer at all (O(1) then).  Also the number of
    answers the walk over the groups' views produced (all of them, unless the join of payload views ran)."""
    original = nu._product
    dead, depth, walked = [0], [0], [0]

    def counting(groups: list[nu.Group], binding: dict[str, object]) -> Any:
        produced = False
        walked[0] += not groups
        depth[0] += 1
        inner = depth[0] > 1
        try:
            for x in original(groups, binding):
                produced = True
                yield x
        finally:
            depth[0] -= 1
        dead[0] += inner and not produced

    monkeypatch.setattr(nu, "_product", counting)
    answers = dict(engine.enumerate())
    monkeypatch.setattr(nu, "_product", original)
    return answers, dead[0], walked[0]


@pytest.mark.parametrize("seed", range(90))
def test_random_streams_equal_brute_force_and_tau(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    kind = ("count", "sum", "covariance")[seed % 3]
    query = random_query(rng, kind)
    bag = seed % 2 == 0  # bag streams: multiplicities stay >= 0; else Z-relations with negative ones
    updates = random_stream(query, rng, 90) if bag else z_stream(query, rng, 90, False)
    n, t = FIVM(query, tree="nu"), FIVM(query)
    n.drain_delta()
    t.drain_delta()
    for i in range(0, len(updates), 9):
        batch = updates[i : i + 9]
        n.apply(batch)
        t.apply(batch)
        answers, dead, walked = enumerate_counting_dead_ends(n, monkeypatch)
        where = f"{query} after {i + len(batch)} updates"
        assert answers == brute_force(query, n.base), where
        assert answers == dict(t.enumerate()), where
        assert n.result() == t.result(), where
        assert n.drain_delta() == t.drain_delta(), where
        if n._negative_tuples == 0:  # the O(1)-delay walk over the H views: no step without an answer below
            assert dead == 0 and walked >= len(answers), where
        else:
            assert walked == 0, where
    assert n.base == t.base


@pytest.mark.parametrize(
    "q",
    [
        FIG10,
        "Q(A, B, C) :- R(A,B), S(A,C,E), T(A,C,D)",
        "Q(A, C, SUM(B*D*E)) :- R(A,B), S(A,C,E), T(C,D)",
        "Q(A, SUM(A*B)) :- R(A,B), S(B,C)",
        "Q(A, B, COVAR(B, C, D)) :- R(A,B), S(B,C), T(A,D)",
        "Q() :- R(A,B), S(B,C), T(C,D)",
        "Q(A, E) :- R(A,B), S(A,C), U(E,F)",
        "Q(A) :- R(A, 1), S(A, A)",
    ],
)
def test_free_connex_queries_equal_tau(q: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Free-connex (and q-hierarchical) queries, SUM and covariance payloads, selections, a forest."""
    query = ivm.parse(q)
    rng = random.Random(q)
    updates = random_stream(query, rng, 150)
    n, t = FIVM(query, tree="nu"), FIVM(query)
    for i in range(0, len(updates), 25):
        n.apply(updates[i : i + 25])
        t.apply(updates[i : i + 25])
        answers, dead, walked = enumerate_counting_dead_ends(n, monkeypatch)
        assert answers == dict(t.enumerate()) == brute_force(query, n.base)
        assert dead == 0 and n._negative_tuples == 0 and walked >= len(answers)
        assert n.result() == t.result()


def test_negative_multiplicities_use_the_join_of_payload_views() -> None:
    """V_R^{@B}[a] can cancel to 0 (R[a,b1] = 1, R[a,b2] = -1) while (a,b1,c), (a,b2,c) are answers."""
    q = ivm.parse(FIG10)
    n, t = FIVM(q, tree="nu"), FIVM(q)
    batch = [("R", (1, 1), 1), ("R", (1, 2), -1), ("S", (1, 5, 0), 1), ("T", (5, 0), 1)]
    n.apply(batch)
    t.apply(batch)
    assert (1,) not in n.views()["H^{@A}_{R,S,T}"]  # the H view lost a
    assert n._negative_tuples == 1
    assert dict(n.enumerate()) == dict(t.enumerate()) == {(1, 1, 5): 1, (1, 2, 5): -1}
    n.apply([("R", (1, 2), 1)])
    t.apply([("R", (1, 2), 1)])
    assert n._negative_tuples == 0 and dict(n.enumerate()) == dict(t.enumerate()) == {(1, 1, 5): 1}


def test_snapshot_options_and_refusals() -> None:
    q = ivm.parse(FIG10)
    v = ivm.maintain(FIG10, engine="fivm", options={"tree": "nu"})
    v.apply([("R", r, 1) for r in R] + [("S", s, 1) for s in S] + [("T", t, 1) for t in T])
    engine = v.engine
    assert isinstance(engine, FIVM) and engine.nu_plan is not None
    copy = FIVM.restore(engine.snapshot())
    assert dict(copy.enumerate()) == dict(engine.enumerate())
    copy.apply([("T", ("c1", "d9"), 1)])
    assert dict(copy.enumerate())[("a1", "b1", "c1")] == 4
    assert pickle.loads(pickle.dumps(copy)).result() == copy.result()
    with pytest.raises(ValueError, match="payload space"):
        FIVM(q, tree="nu", ring="factorized")
    with pytest.raises(ValueError, match="payload space"):
        FIVM(q, tree="nu", ring="listing")
    with pytest.raises(ValueError, match="indicator"):
        FIVM(q, tree="nu", indicators=True)
    with pytest.raises(ValueError, match="unknown view tree"):
        FIVM(q, tree="sigma")
    bound_on_top = FIVM(q).order
    from ivm.query.variable_order import _finish

    not_free_top = _finish(q, {"D": None, "C": "D", "A": "C", "B": "A", "E": "A"})
    assert bound_on_top.free_top and not not_free_top.free_top
    with pytest.raises(ValueError, match="free-top"):
        FIVM(q, tree="nu", order=not_free_top)
