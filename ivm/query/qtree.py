"""The canonical q-tree of each connected component (Berkholz et al., Def. 4.1, Lemma 4.2).

A q-tree of a connected CQ is a rooted tree whose nodes are the query's
variables such that (1) the variables of every atom form a directed path
starting at the root, and (2) the free variables form a connected node set
containing the root (free on top; descendants of bound nodes are bound).
A query is q-hierarchical iff every connected component has a q-tree.

The construction follows Claim 4.3: a connected q-hierarchical CQ has a
variable occurring in every atom, chosen free when the component has free
variables; it becomes the root and the construction recurses on the atoms with
that variable removed, split into connected components.  An atom is
*represented* at its deepest variable (the node whose root path is exactly
its variable set).  Ties are broken by the query's variable order (head order
first), so the tree is canonical.  Cost poly(|φ|).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.q_hierarchical import QHierarchyViolation, q_hierarchical


class NotQHierarchical(ValueError):
    """The query has no q-tree; ``witness`` is the violating pair (Def. 3.1)."""

    def __init__(self, message: str, witness: QHierarchyViolation) -> None:
        super().__init__(message)
        self.witness = witness


@dataclass(frozen=True, eq=False)
class QTree:
    """The q-tree of one connected component (Def. 4.1).

    ``nodes`` lists the variables in document (pre-)order, ``parent`` maps a
    node to its parent (``None`` at the root), ``children`` lists each node's
    children in document order, ``represented`` the indices of the atoms whose
    deepest variable is the node, ``atoms`` the component's atom indices and
    ``free`` its free variables in document order.
    """

    root: str
    nodes: tuple[str, ...]
    parent: Mapping[str, str | None]
    children: Mapping[str, tuple[str, ...]]
    represented: Mapping[str, tuple[int, ...]]
    atoms: tuple[int, ...]
    free: tuple[str, ...]

    def path(self, node: str) -> tuple[str, ...]:
        """``path[v]``: the nodes from the root down to ``node``, inclusive."""
        out = [node]
        parent = self.parent[node]
        while parent is not None:
            out.append(parent)
            parent = self.parent[parent]
        return tuple(reversed(out))

    def render(self) -> str:
        """The tree as nested text, free nodes marked with ``*``."""
        lines: list[str] = []

        def walk(node: str, depth: int) -> None:
            mark = "*" if node in self.free else ""
            lines.append("  " * depth + node + mark)
            for child in self.children[node]:
                walk(child, depth + 1)

        walk(self.root, 0)
        return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class QForest:
    """One :class:`QTree` per connected component, and the nullary atoms.

    Atoms without variables (``R()``) belong to no component: they are global
    factors (002 §7 [derived]).
    """

    trees: tuple[QTree, ...]
    nullary: tuple[int, ...]

    @property
    def free_order(self) -> tuple[str, ...]:
        """The free variables in document order, components concatenated (Algorithm 1)."""
        return tuple(v for tree in self.trees for v in tree.free)


def canonical_qtrees(query: Query) -> QForest:
    """The canonical q-tree of every connected component (Lemma 4.2).

    Raises :class:`NotQHierarchical` with the witness when the query is not
    q-hierarchical.

    >>> forest = canonical_qtrees(parse("Q(x,y,z) :- R(x,y,w), S(x,y), T(x,z), U(x,u)"))
    >>> print(forest.trees[0].render())
    x*
      y*
        w
      z*
      u
    >>> forest.free_order, dict(forest.trees[0].represented)
    (('x', 'y', 'z'), {'x': (), 'y': (1,), 'w': (0,), 'z': (2,), 'u': (3,)})
    >>> [t.root for t in canonical_qtrees(parse("Q(x,u) :- R(x,y), S(u,v), T(w)")).trees]
    ['x', 'u', 'w']
    >>> print(canonical_qtrees(parse("Q(y) :- E(x,y), T(y)")).trees[0].render())
    y*
      x
    >>> canonical_qtrees(parse("Q(x) :- E(x,y), T(y)"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ivm.query.qtree.NotQHierarchical: not q-hierarchical, condition (ii): x is free, y is bound and ...
    """
    verdict = q_hierarchical(query)
    if not verdict:
        raise NotQHierarchical(verdict.reason, verdict.witness)
    rank = {v: i for i, v in enumerate(query.variable_order())}
    free = set(query.free)
    remaining = {i: set(atom.terms) for i, atom in enumerate(query.atoms)}
    nullary = tuple(i for i, rest in remaining.items() if not rest)
    trees = []
    for component in _components([i for i in remaining if remaining[i]], remaining):
        parent: dict[str, str | None] = {}
        children: dict[str, list[str]] = {}
        represented: dict[str, list[int]] = {}
        root = _build(component, remaining, None, free, rank, parent, children, represented)
        nodes = _preorder(root, children)
        trees.append(
            QTree(
                root=root,
                nodes=nodes,
                parent=parent,
                children={v: tuple(children[v]) for v in nodes},
                represented={v: tuple(represented[v]) for v in nodes},
                atoms=tuple(sorted(component)),
                free=tuple(v for v in nodes if v in free),
            )
        )
    return QForest(tuple(trees), nullary)


def _build(
    component: list[int],
    remaining: dict[int, set[str]],
    above: str | None,
    free: set[str],
    rank: dict[str, int],
    parent: dict[str, str | None],
    children: dict[str, list[str]],
    represented: dict[str, list[int]],
) -> str:
    """Attach the subtree of one component of remaining atoms under ``above``; return its root."""
    common = set.intersection(*(remaining[i] for i in component))
    has_free = any(v in free for i in component for v in remaining[i])
    # Claim 4.3: q-hierarchical guarantees a common variable, free if any is free.
    candidates = [v for v in common if v in free] if has_free else list(common)
    assert candidates, "q_hierarchical() accepted a query without a q-tree"
    root = min(candidates, key=rank.__getitem__)
    parent[root] = above
    children[root] = []
    represented[root] = []
    if above is not None:
        children[above].append(root)
    rest = {i: remaining[i] - {root} for i in component}
    represented[root].extend(i for i in component if not rest[i])
    for sub in _components([i for i in component if rest[i]], rest):
        _build(sub, rest, root, free, rank, parent, children, represented)
    return root


def _components(indices: list[int], remaining: Mapping[int, set[str]]) -> list[list[int]]:
    """Split atoms into components connected by shared remaining variables, in index order."""
    out: list[list[int]] = []
    seen: set[int] = set()
    for start in indices:
        if start in seen:
            continue
        seen.add(start)
        comp, stack, variables = [], [start], set()
        while stack:
            i = stack.pop()
            comp.append(i)
            variables |= remaining[i]
            for j in indices:
                if j not in seen and remaining[j] & variables:
                    seen.add(j)
                    stack.append(j)
        out.append(sorted(comp))
    return out


def _preorder(root: str, children: Mapping[str, list[str]]) -> tuple[str, ...]:
    out: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(children[node]))
    return tuple(out)
