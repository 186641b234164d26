"""The q-hierarchical test and the canonical q-tree (002 §2, Def. 3.1, Def. 4.1, Lemma 4.2)."""

from __future__ import annotations

import itertools

import pytest

from ivm.query import Atom, Query, parse
from ivm.query.hierarchical import hierarchical
from ivm.query.q_hierarchical import q_hierarchical
from ivm.query.qtree import NotQHierarchical, QTree, canonical_qtrees

# 002 §8 "Classifier expectations" (q-hierarchical? and the failing condition).
TABLE = [
    ("Q(x,y) :- S(x), E(x,y), T(y)", False, "i"),
    ("Q() :- S(x), E(x,y), T(y)", False, "i"),
    ("Q(x) :- E(x,y), T(y)", False, "ii"),
    ("Q(y) :- E(x,y), T(y)", True, None),
    ("Q(x,y) :- E(x,y), T(y)", True, None),
    ("Q() :- E(x,y), T(y)", True, None),
    ("Q() :- E(x,x), E(x,y), E(y,y)", False, "i"),
    ("Q(x,y) :- E(x,x), E(x,y), E(y,y)", False, "i"),
    ("Q(x,y,z,w) :- E(x,y), E(y,z), E(z,w)", False, "i"),
    ("Q(x,y,z) :- E(x,y), E(y,z)", True, None),
    ("Q(y) :- E(x,y), E(y,z)", True, None),
    ("Q(x,z) :- E(x,y), E(y,z)", False, "ii"),
    ("Q(x) :- R(x,y), S(x,z), T(x)", True, None),
    ("Q(x,y,z) :- R(x,y), S(x,z), T(x)", True, None),
    ("Q(y) :- R(x,y), S(x,z), T(x)", False, "ii"),
    ("Q() :- R(a,b), S(b,c), T(c,a)", False, "i"),
    ("Q(z) :- R(x,y), S(x,y,z)", False, "ii"),
]


@pytest.mark.parametrize(("text", "expected", "condition"), TABLE)
def test_classifier_table(text: str, expected: bool, condition: str | None) -> None:
    verdict = q_hierarchical(parse(text))
    assert bool(verdict) is expected
    if condition is not None:
        assert verdict.witness.condition == condition
        assert f"condition ({condition})" in verdict.reason
    else:
        assert verdict.witness is None


def test_witness_atoms_form_the_obstruction() -> None:
    query = parse("Q() :- A(u), S(x), E(x,y), T(y)")
    w = q_hierarchical(query).witness
    psi_x, psi_xy, psi_y = (set(query.atoms[i].terms) for i in w.atoms)
    assert w.x in psi_x and w.y not in psi_x
    assert {w.x, w.y} <= psi_xy
    assert w.y in psi_y and w.x not in psi_y
    query = parse("Q(x) :- E(x,y), T(y)")
    w = q_hierarchical(query).witness
    psi_xy, psi_y = (set(query.atoms[i].terms) for i in w.atoms)
    assert {w.x, w.y} <= psi_xy and w.y in psi_y and w.x not in psi_y


def brute_force_q_hierarchical(query: Query) -> bool:
    """Def. 3.1 verbatim over all ordered pairs."""
    for x, y in itertools.permutations(query.variables, 2):
        ax, ay = query.atoms_of(x), query.atoms_of(y)
        if ax & ay and not (ax <= ay or ay <= ax):
            return False
        if ax < ay and x in query.free and y not in query.free:
            return False
    return True


def random_queries(n: int) -> list[Query]:
    import random

    rng = random.Random(11)
    out = []
    for _ in range(n):
        atoms = []
        for i in range(rng.randint(1, 4)):
            arity = rng.randint(0, 3)
            atoms.append(Atom(f"R{i % 3}{arity}", tuple(rng.choice("xyzwv") for _ in range(arity))))
        variables = sorted({v for a in atoms for v in a.terms})
        out.append(Query("Q", tuple(v for v in variables if rng.random() < 0.5), tuple(atoms)))
    return out


def check_qtree(query: Query, tree: QTree) -> None:
    """Def. 4.1: atoms are root paths, free nodes are a top part containing the root."""
    for i in tree.atoms:
        deepest = next(v for v in tree.nodes if i in tree.represented[v])
        assert set(tree.path(deepest)) == set(query.atoms[i].terms)
    if tree.free:
        assert tree.root in tree.free
        for v in tree.free:
            assert all(u in tree.free for u in tree.path(v))
    leaves = [v for v in tree.nodes if not tree.children[v]]
    assert all(tree.represented[v] for v in leaves), "every leaf represents an atom"


def test_random_queries_against_definition_and_lemma_4_2() -> None:
    seen = {True: 0, False: 0}
    for query in random_queries(1500):
        expected = brute_force_q_hierarchical(query)
        assert bool(q_hierarchical(query)) is expected, str(query)
        seen[expected] += 1
        if not hierarchical(query):
            assert not expected
        if expected:
            forest = canonical_qtrees(query)
            covered = [i for t in forest.trees for i in t.atoms] + list(forest.nullary)
            assert sorted(covered) == list(range(len(query.atoms)))
            assert sorted(v for t in forest.trees for v in t.nodes) == sorted(query.variables)
            for tree in forest.trees:
                check_qtree(query, tree)
        else:
            with pytest.raises(NotQHierarchical) as info:
                canonical_qtrees(query)
            assert info.value.witness == q_hierarchical(query).witness
    assert seen[True] > 100 and seen[False] > 100


def test_components_and_free_top_order() -> None:
    forest = canonical_qtrees(parse("Q(u,x) :- R(x,y), S(u,v), T(w), N()"))
    assert [t.root for t in forest.trees] == ["x", "u", "w"]
    assert forest.free_order == ("x", "u")
    assert forest.nullary == (3,)
    (tree,) = canonical_qtrees(parse("Q(x,y) :- E(x,y), E(x,z), E(x,x)")).trees
    assert tree.render() == "x*\n  y*\n  z"
    assert dict(tree.represented) == {"x": (2,), "y": (0,), "z": (1,)}
