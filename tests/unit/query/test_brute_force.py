"""Each structural test against a brute-force reading of its definition, on small random queries."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ivm.query import parse
from ivm.query.acyclic import acyclic
from ivm.query.core import core, find_homomorphism
from ivm.query.free_connex import free_connex
from ivm.query.hierarchical import hierarchical
from ivm.query.join_tree import fifo_tree, height_one_tree, validate_join_tree
from ivm.query.mixdetect import mixdetect
from ivm.query.model import Atom, Query
from ivm.query.patterns import parse_patterns
from ivm.query.q_hierarchical import q_hierarchical
from ivm.query.three_relations import three_relation_class
from ivm.query.weak_q_hierarchical import weak_q_hierarchical

VARS = "abcde"


@st.composite
def queries(draw, max_atoms: int = 5, max_vars: int = 5, self_joins: bool = False) -> Query:
    pool = VARS[: draw(st.integers(2, max_vars))]
    n = draw(st.integers(1, max_atoms))
    atoms = []
    for i in range(n):
        if self_joins:
            terms = tuple(draw(st.sampled_from(pool)) for _ in range(2))
            atoms.append(Atom("E", terms))
        else:
            k = draw(st.integers(1, min(3, len(pool))))
            terms = tuple(draw(st.permutations(pool))[:k])
            atoms.append(Atom(f"R{i}", terms))
    used = sorted({v for a in atoms for v in a.terms})
    free = tuple(v for v in used if draw(st.booleans()))
    return Query("Q", free, tuple(atoms))


# ------------------------------------------------------------ brute force readings
def _trees(n: int):
    """Every labelled tree on n nodes, as edge lists (Prüfer sequences)."""
    if n == 1:
        yield []
        return
    if n == 2:
        yield [(0, 1)]
        return
    for seq in itertools.product(range(n), repeat=n - 2):
        degree = [1] * n
        for x in seq:
            degree[x] += 1
        edges = []
        for x in seq:
            leaf = min(i for i in range(n) if degree[i] == 1)
            edges.append((leaf, x))
            degree[leaf] -= 1
            degree[x] -= 1
        u, w = [i for i in range(n) if degree[i] == 1]
        edges.append((u, w))
        yield edges


def _has_join_tree(edges: list[frozenset[str]]) -> bool:
    """A tree over the hyperedges where each variable's holders are connected."""
    n = len(edges)
    variables = set().union(*edges)
    for tree in _trees(n):
        ok = True
        for v in variables:
            holders = {i for i in range(n) if v in edges[i]}
            start = next(iter(holders))
            seen, stack = {start}, [start]
            while stack:
                x = stack.pop()
                for a, b in tree:
                    for p, q in ((a, b), (b, a)):
                        if p == x and q in holders and q not in seen:
                            seen.add(q)
                            stack.append(q)
            if seen != holders:
                ok = False
                break
        if ok:
            return True
    return False


def _forests(variables: list[str]):
    """Every rooted forest over the variables, as parent maps."""
    for parents in itertools.product([None, *variables], repeat=len(variables)):
        parent = dict(zip(variables, parents, strict=True))
        if any(parent[v] == v for v in variables):
            continue
        ok = True
        for v in variables:
            seen, p = set(), v
            while p is not None and ok:
                if p in seen:
                    ok = False
                seen.add(p)
                p = parent[p]
        if ok:
            yield parent


def _path(parent: dict, v: str) -> frozenset[str]:
    out = set()
    while v is not None:
        out.add(v)
        v = parent[v]
    return frozenset(out)


def _has_qtree(query: Query, free_matters: bool) -> bool:
    """A forest in which every atom's variables form a root path; with ``free_matters``,
    the free variables of each tree are upward closed and include its root (Def. 4.1)."""
    variables = sorted(query.variables)
    free = set(query.free)
    for parent in _forests(variables):
        if not all(any(_path(parent, v) == a.variables for v in variables) for a in query.atoms):
            continue
        if free_matters and any(v in free and parent[v] is not None and parent[v] not in free for v in variables):
            continue
        return True
    return False


def _min_core_size(query: Query) -> int:
    fixed = set(query.free)
    n = len(query.atoms)
    for k in range(1, n + 1):
        for subset in itertools.combinations(range(n), k):
            if find_homomorphism(query, range(n), subset, fixed) is not None:
                return k
    return n


def _hook_or_path_core(query: Query, printed_hook: bool = False) -> bool:
    """Lemma 3.11's hardness cores (Hu & Wang §3.3), searched exhaustively.

    The hook core is the corrected one (``ivm/query/weak_q_hierarchical.py``): x1 ∈ y, x2, x3 ∈ ȳ,
    x1, x2 ∈ e1, x2, x3 ∈ e2, x3 ∈ e3 ≠ e2, no atom holds x1 and x3.  ``printed_hook`` adds the
    paper's ``x2 ∉ e3``, which misses twins such as ``Q(c) :- R0(a,b), R1(a,b), R2(a,c)``.
    The path core is as printed: x_i ∈ e_i ∩ e_(i+1) and no atom holds x_i, x_j for |i − j| > 1
    (which makes e1..e5 distinct).
    """
    free = set(query.free)
    sets = [a.variables for a in query.atoms]
    variables = sorted(query.variables)
    idx = range(len(sets))

    def together(x: str, y: str) -> bool:
        return any(x in e and y in e for e in sets)

    for x1, x2, x3 in itertools.permutations(variables, 3):
        if x1 not in free or x2 in free or x3 in free or together(x1, x3):
            continue
        for e1, e2, e3 in itertools.permutations(idx, 3):
            if printed_hook and x2 in sets[e3]:
                continue
            if x1 in sets[e1] and x2 in sets[e1] & sets[e2] and x3 in sets[e2] & sets[e3]:
                return True
    for xs in itertools.permutations(variables, 4):
        if any(together(xs[i], xs[j]) for i in range(4) for j in range(i + 2, 4)):
            continue
        for es in itertools.permutations(idx, 5):
            if all(xs[i] in sets[es[i]] & sets[es[i + 1]] for i in range(4)):
                return True
    return False


def _has_height_two_tree(query: Query, extenders: bool = True) -> bool:
    """Is there a free-connex join tree of height ≤ 2 (003 §1.6: cover, connect, above, guard, connex)?

    Brute force over the atoms' places.  By *above* and height ≤ 2, an atom sits either at level 1
    (the root, or under generalized nodes only) or is a leaf under a level-1 atom p.  Then:

    - connect: every attribute a leaf e shares with another atom is in p;
    - connex: a leaf with outputs outside p holds them alone, so it is in ``E_con``: ``e ∩ p ⊆ y``
      and p is in ``E_con``.  With ``extenders`` (003 §3.3 [PROPOSAL]) such a leaf is an EXTENDER
      enumerated from its key ``e ∩ p ⊆ y``, and p need not be in ``E_con``;
    - without the leaves, the level-1 atoms form a height-1 free-connex tree of ``Q[L1]`` (its
      outputs are covered there), with every p that must be in ``E_con`` marked by a fresh output
      attribute only p holds; by Lemma 2.2 such a tree exists iff that query is q-hierarchical.

    Conversely, hanging the leaves under their p in the Lemma 2.2 tree gives a valid tree.
    """
    sets = [a.variables for a in query.atoms]
    free = set(query.free)
    n = len(sets)
    places: list[list[int]] = []  # per atom: itself (level 1) or a possible level-1 parent
    for e in range(n):
        shared = sets[e] & set().union(*(sets[j] for j in range(n) if j != e))
        own_free = sets[e] & free
        options = [e]
        for p in range(n):
            if p == e or not shared <= sets[p]:
                continue
            if own_free - sets[p] and not sets[e] & sets[p] <= free:
                continue
            options.append(p)
        places.append(options)
    for parent in itertools.product(*places):
        if any(parent[parent[e]] != parent[e] for e in range(n)):
            continue  # a leaf's parent must sit at level 1
        level_one = [e for e in range(n) if parent[e] == e]
        attrs = {p: set(sets[p]) for p in level_one}
        marks: list[str] = []
        if not extenders:
            for e in range(n):
                if parent[e] != e and sets[e] & free - sets[parent[e]]:
                    marks.append(f"_in_connex_{parent[e]}")
                    attrs[parent[e]].add(marks[-1])
        atoms = tuple(Atom(f"L{p}", tuple(sorted(attrs[p]))) for p in level_one)
        held = set().union(*attrs.values())
        if q_hierarchical(Query("Q", tuple(sorted(free & held)) + tuple(marks), atoms)):
            return True
    return False


Q_CX = parse("Q(z,x,u) :- R1(z,x,w,a), R7(a), R6(z,x,w,p), R8(p), R3(z,q), R9(q), R2(x,u)")
"""003 §1.6: weak-q-hierarchical, no hardness core, a height-2 tree only with an EXTENDER."""

TWINS = parse("Q(c) :- R0(a,b), R1(a,b), R2(a,c)")
"""Not weak-q-hierarchical, no height-2 tree; only the corrected hook core (x2 = a ∈ e3) finds it."""

HYPOTHESIS_FINDS = [
    TWINS,
    parse("Q(d) :- R0(a,b), R1(a,b,c), R2(d,b)"),
    parse("Q(b,c) :- R0(a,d), R1(a,b,c), R2(a,b,d)"),
    parse("Q(a) :- R0(a), R1(a,b), R2(b,c), R3(b,c,d)"),
]
"""Queries on which the printed hook core (x2 ∉ e3) disagreed with TRIM."""


# ------------------------------------------------------------ the tests
@settings(max_examples=150, deadline=None)
@given(queries())
def test_acyclic_matches_join_tree_existence(query):
    assert bool(acyclic(query)) == _has_join_tree([a.variables for a in query.atoms])


@settings(max_examples=150, deadline=None)
@given(queries())
def test_free_connex_matches_definition(query):
    edges = [a.variables for a in query.atoms]
    expected = _has_join_tree(edges) and _has_join_tree([*edges, frozenset(query.free)])
    assert bool(free_connex(query)) == expected


@settings(max_examples=150, deadline=None)
@given(queries(max_vars=4))
def test_hierarchical_matches_variable_forest(query):
    assert bool(hierarchical(query)) == _has_qtree(query, free_matters=False)


@settings(max_examples=150, deadline=None)
@given(queries(max_vars=4))
def test_q_hierarchical_matches_q_tree_existence(query):
    assert bool(q_hierarchical(query)) == _has_qtree(query, free_matters=True)


@settings(max_examples=100, deadline=None)
@given(queries(max_atoms=4, max_vars=4, self_joins=True))
def test_core_is_minimal_and_equivalent(query):
    result = core(query)
    kept = [i for i, a in enumerate(query.atoms) if a in result.query.atoms]
    assert find_homomorphism(query, range(len(query.atoms)), kept, set(query.free)) is not None
    assert len(set(result.query.atoms)) == _min_core_size(query)


@settings(max_examples=150, deadline=None)
@given(queries(max_atoms=3))
def test_3r_hierarchical_iff_at_most_one_pair_join_tuple(query):
    """IVM^eps Prop. 41."""
    verdict = three_relation_class(query.with_free(()))
    if len(query.atoms) == 3:
        assert (verdict.witness.i <= 1) == bool(hierarchical(query))


@settings(max_examples=200, deadline=None)
@given(queries(max_atoms=5, max_vars=5))
def test_weak_q_matches_height_two_tree(query):
    """Lemma 3.7 with EXTENDER leaves (003 §3.3): weak-q-hierarchical iff a height-≤2 free-connex tree."""
    if free_connex(query):
        assert bool(weak_q_hierarchical(query)) == _has_height_two_tree(query)


@settings(max_examples=200, deadline=None)
@given(queries(max_atoms=5, max_vars=5))
@example(TWINS)
@example(HYPOTHESIS_FINDS[1])
@example(HYPOTHESIS_FINDS[2])
@example(HYPOTHESIS_FINDS[3])
def test_weak_q_matches_hardness_cores(query):
    """Lemma 3.11 (hook core corrected) with Thm 3.12 and Lemma 3.8: a free-connex query is
    weak-q-hierarchical iff it has no hook or path core."""
    if free_connex(query):
        assert bool(weak_q_hierarchical(query)) == (not _hook_or_path_core(query))


@pytest.mark.parametrize("query", HYPOTHESIS_FINDS, ids=str)
def test_printed_hook_core_misses_twins(query):
    """Lemma 3.11 as printed (x2 ∉ e3) finds no core, yet no height-2 tree exists."""
    assert free_connex(query) and not weak_q_hierarchical(query)
    assert not _has_height_two_tree(query) and not _has_height_two_tree(query, extenders=False)
    assert _hook_or_path_core(query) and not _hook_or_path_core(query, printed_hook=True)


def test_q_cx_needs_an_extender():
    """003 §1.6: Q_cx is weak-q-hierarchical with no hardness core; its height-2 tree needs an EXTENDER."""
    assert weak_q_hierarchical(Q_CX) and not _hook_or_path_core(Q_CX)
    assert _has_height_two_tree(Q_CX) and not _has_height_two_tree(Q_CX, extenders=False)
    assert validate_join_tree(fifo_tree(Q_CX), Q_CX) == []


@settings(max_examples=120, deadline=None)
@given(queries())
def test_mixdetect_recovers_the_uniform_dichotomies(query):
    """003 §2: all I -> free-connex; all jointly FIFO -> weak-q; all A -> q-hierarchical."""
    names = list(query.relations)
    fc = bool(free_connex(query))
    assert bool(mixdetect(query, parse_patterns([f"{r}=I" for r in names]))) == fc
    assert bool(mixdetect(query, parse_patterns(["+".join(names) + "=fifo"]))) == bool(weak_q_hierarchical(query))
    assert bool(mixdetect(query, parse_patterns([]))) == (fc and bool(q_hierarchical(query)))


@settings(max_examples=120, deadline=None)
@given(queries())
def test_generated_trees_are_valid(query):
    if q_hierarchical(query):
        tree = height_one_tree(query)
        assert tree.height == 1 and validate_join_tree(tree, query) == []
    if weak_q_hierarchical(query):
        tree = fifo_tree(query)
        assert tree.height <= 2
        assert validate_join_tree(tree, query) == []


@settings(max_examples=150, deadline=None)
@given(queries(self_joins=False) | queries(self_joins=True))
def test_rule_syntax_round_trips(query):
    assert parse(str(query)) == query
