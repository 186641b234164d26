"""Variable orders for F-IVM view trees (F-IVM §3, Def. 6; §5).

A variable order is a rooted forest over the query's variables in which every
atom's variables lie on one root-to-leaf path; atoms hang under their lowest
variable.  ``dep(X)`` is the set of ancestors of X on which some variable in
X's subtree depends (shares an atom with).  The view at X has keys
``dep(X) ∪ (free ∩ vars(subtree X))`` (Fig. 4).

For q-hierarchical queries the canonical free-top order is the q-tree
(:mod:`ivm.query.qtree`), where updates cost O(1).  Otherwise the order is
built top-down: in each connected component pick a free variable if any
remains (free-top, needed for constant-delay enumeration), preferring the one
in most atoms; then recurse on the components of the remaining variables.
Among all such choices (searched exhaustively for small queries) it keeps the
one with the smallest update exponent :func:`update_exponent`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.q_hierarchical import q_hierarchical


@dataclass(frozen=True)
class VariableOrder:
    """``parent`` per variable (``None`` at a root), atoms hung under their lowest variable, and ``dep``."""

    parent: dict[str, str | None]
    atoms_at: dict[str, tuple[int, ...]]
    dep: dict[str, frozenset[str]]
    free_top: bool

    def children(self, v: str | None) -> list[str]:
        return [c for c, p in self.parent.items() if p == v]

    def ancestors(self, v: str) -> list[str]:
        out = []
        p = self.parent[v]
        while p is not None:
            out.append(p)
            p = self.parent[p]
        return out

    def render(self, query: Query) -> str:
        """Indented text, ``*`` on free variables, ``dep`` in braces, atoms under their variable."""
        lines: list[str] = []

        def walk(v: str, depth: int) -> None:
            star = "*" if v in query.free else ""
            dep = ", ".join(sorted(self.dep[v]))
            lines.append("  " * depth + f"{v}{star} {{{dep}}}")
            for i in self.atoms_at.get(v, ()):
                lines.append("  " * (depth + 1) + str(query.atoms[i]))
            for c in self.children(v):
                walk(c, depth + 1)

        for root in self.children(None):
            walk(root, 0)
        return "\n".join(lines)


def variable_order(query: Query, exhaustive_limit: int = 7) -> VariableOrder:
    """A good free-top variable order for the query's F-IVM view tree.

    F-IVM's running example (§3) with free {A, B, C}:

    >>> q = parse("Q(A, B, C) :- R(A,B), S(A,C,E), T(C,D)")
    >>> print(variable_order(q).render(q))
    A* {}
      B* {A}
        R(A, B)
      C* {A}
        E {A, C}
          S(A, C, E)
        D {C}
          T(C, D)
    >>> update_exponent(q, variable_order(q))
    1
    """
    if q_hierarchical(query):
        from ivm.query.qtree import canonical_qtrees

        forest = canonical_qtrees(query)
        parent = {v: t.parent[v] for t in forest.trees for v in t.nodes}
        return _finish(query, parent)
    best: VariableOrder | None = None
    best_cost: tuple[int, int] | None = None
    for parent in _orders(query, exhaustive=len(query.variables) <= exhaustive_limit):
        order = _finish(query, parent)
        cost = (update_exponent(query, order), sum(len(d) for d in order.dep.values()))
        if best_cost is None or cost < best_cost:
            best, best_cost = order, cost
    assert best is not None
    return best


def update_exponent(query: Query, order: VariableOrder) -> int:
    """k such that a single-tuple update costs O(N^k) in the view tree of ``order``.

    An update to atom R binds vars(R); the delta of the view at each ancestor X
    of R ranges over the values of ``({X} ∪ keys(X)) − vars(R)``, at most N^ρ
    of them, ρ the number of atoms needed to cover those variables (an integral
    edge cover, AGM-style).  k is the maximum over atoms and ancestors.
    """
    free = set(query.free)
    worst = 0
    for lowest, indices in order.atoms_at.items():
        for i in indices:
            bound_by_update = query.atoms[i].variables
            for x in [lowest, *order.ancestors(lowest)]:
                subtree = _subtree(order, x)
                keys = order.dep[x] | (free & subtree)
                worst = max(worst, _cover_number(query, ({x} | keys) - bound_by_update))
    return worst


def view_keys(query: Query, order: VariableOrder, x: str) -> frozenset[str]:
    """``keys(X) = dep(X) ∪ (free ∩ vars(subtree X))``, the key of the view at X (F-IVM Fig. 4)."""
    return frozenset(order.dep[x] | (set(query.free) & _subtree(order, x)))


def size_exponent(query: Query, order: VariableOrder) -> int:
    """s such that every view of the tree has O(N^s) tuples (integral edge cover of its keys)."""
    return max((_cover_number(query, set(view_keys(query, order, x))) for x in order.parent), default=0)


def _subtree(order: VariableOrder, x: str) -> set[str]:
    out = {x}
    for c in order.children(x):
        out |= _subtree(order, c)
    return out


def _cover_number(query: Query, variables: set[str]) -> int:
    if not variables:
        return 0
    edges = [a.variables & variables for a in query.atoms if a.variables & variables]
    for k in range(1, len(edges) + 1):
        if any(set().union(*combo) >= variables for combo in combinations(edges, k)):
            return k
    return len(variables)  # pragma: no cover - every variable is in some atom


def _orders(query: Query, exhaustive: bool) -> list[dict[str, str | None]]:
    """Candidate parent maps, built top-down over connected components."""
    free = set(query.free)
    results: list[dict[str, str | None]] = []
    rank = {v: i for i, v in enumerate(query.variable_order())}

    def components(rest: dict[int, set[str]]) -> list[list[int]]:
        left = [i for i in rest if rest[i]]
        comps: list[list[int]] = []
        while left:
            comp, frontier = [left.pop(0)], None
            frontier = set(rest[comp[0]])
            changed = True
            while changed:
                changed = False
                for i in list(left):
                    if rest[i] & frontier:
                        comp.append(i)
                        frontier |= rest[i]
                        left.remove(i)
                        changed = True
            comps.append(comp)
        return comps

    def expand(tasks: list[tuple[dict[int, set[str]], str | None]], parent: dict[str, str | None]) -> None:
        if len(results) > 2000:
            return
        if not tasks:
            results.append(dict(parent))
            return
        rest, above = tasks[0]
        comps = components(rest)
        if not comps:
            expand(tasks[1:], parent)
            return
        comp = comps[0]
        others = [({i: rest[i] for i in c}, above) for c in comps[1:]]
        variables = set().union(*(rest[i] for i in comp))
        candidates = sorted(variables & free or variables, key=lambda v: (-sum(v in rest[i] for i in comp), rank[v]))
        for v in candidates if exhaustive else candidates[:1]:
            below = {i: rest[i] - {v} for i in comp}
            parent[v] = above
            expand([(below, v), *others, *tasks[1:]], parent)
            del parent[v]

    expand([({i: set(a.terms) for i, a in enumerate(query.atoms)}, None)], {})
    return results


def _finish(query: Query, parent: dict[str, str | None]) -> VariableOrder:
    def ancestors(v: str) -> list[str]:
        out = []
        p = parent[v]
        while p is not None:
            out.append(p)
            p = parent[p]
        return out

    atoms_at: dict[str, list[int]] = {}
    for i, atom in enumerate(query.atoms):
        if atom.terms:
            lowest = max(atom.variables, key=lambda v: len(ancestors(v)))
            atoms_at.setdefault(lowest, []).append(i)
    children: dict[str, list[str]] = {}
    for v, p in parent.items():
        if p is not None:
            children.setdefault(p, []).append(v)

    def subtree(v: str) -> set[str]:
        out = {v}
        for c in children.get(v, []):
            out |= subtree(c)
        return out

    dep = {}
    for v in parent:
        below = subtree(v)
        touching = {w for a in query.atoms if a.variables & below for w in a.variables}
        dep[v] = frozenset(a for a in ancestors(v) if a in touching)
    free = set(query.free)
    free_top = all(p is None or p in free or v not in free for v, p in parent.items())
    ordered = {v: parent[v] for v in sorted(parent, key=lambda v: len(ancestors(v)))}
    return VariableOrder(ordered, {v: tuple(i) for v, i in atoms_at.items()}, dep, free_top)
