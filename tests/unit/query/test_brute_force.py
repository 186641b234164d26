"""Each structural test against a brute-force reading of its definition, on small random queries."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
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


def _hook_or_path_core(query: Query) -> bool:
    """Lemma 3.11's hardness cores, searched exhaustively."""
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
            if x1 in sets[e1] and x2 in sets[e1] & sets[e2] and x2 not in sets[e3] and x3 in sets[e2] & sets[e3]:
                return True
    for xs in itertools.permutations(variables, 4):
        if any(together(xs[i], xs[j]) for i in range(4) for j in range(i + 2, 4)):
            continue
        for es in itertools.permutations(idx, 5):
            if all(xs[i] in sets[es[i]] & sets[es[i + 1]] for i in range(4)):
                return True
    return False


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


@settings(max_examples=120, deadline=None)
@given(queries(max_atoms=5, max_vars=5))
def test_weak_q_matches_hardness_cores(query):
    """Lemma 3.11: a free-connex query is weak-q-hierarchical iff it has no hook or path core.

    Twin atoms (equal variable sets) are excluded: ``Q(c) :- R0(a,b), R1(a,b), R2(a,c)`` has no
    hook or path core, yet TRIM (with V• fixed on the original query, where b is not unique)
    keeps {R1, R2}, which is not q-hierarchical, and no free-connex tree of height <= 2 exists;
    Def. 3.4 (TRIM) is the definition we implement.
    """
    if len({a.variables for a in query.atoms}) < len(query.atoms):
        return
    if free_connex(query):
        assert bool(weak_q_hierarchical(query)) == (not _hook_or_path_core(query))


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
