"""Which join tree the propagation engine maintains under the current update patterns.

Best first (Hu & Wang; 003 §3.2–§3.4):

1. q-hierarchical: the height-1 tree, O(1) expected per update (hash lookups; Lemma 2.2, 003 §3.5);
2. every relation deletion-only after the prefix: any free-connex tree, O(1)
   amortized (App. C: counters only decrease);
3. MixDetect accepts σ: the compatible tree (insert-only pairs pre-joined as
   FILTER/EXTENDER children, FIFO children hung under their anchors), O(1)
   amortized (Lemma 4.16; Cor 1.6 insert-only; Lemma 3.8 FIFO, height ≤ 2);
4. otherwise a free-connex tree from repeated anchor reductions (003 §3.2,
   the all-insert-only compatible tree), O(λ) amortized ≤ O(N) (Lemma 1.4):
   correct for any stream, not constant time.

:func:`rooted_tree` builds the pattern-*oblivious* trees used to show that
the tree matters (Ex. 2.8: the height-3 tree of Q_hier).
"""

from __future__ import annotations

from dataclasses import dataclass

from ivm.query.free_connex import free_connex
from ivm.query.join_tree import JoinTree, JoinTreeNode, compatible_tree, height_one_tree, validate_join_tree
from ivm.query.mixdetect import mixdetect
from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.patterns import UpdatePatterns
from ivm.query.q_hierarchical import q_hierarchical


@dataclass(frozen=True)
class TreePlan:
    """A join tree with the guarantee it carries under the patterns it was chosen for."""

    tree: JoinTree
    kind: str  # q-hierarchical | mixdetect | deletion-only | fallback | pinned
    constant_time: bool
    update: str
    reason: str


def choose_tree(query: Query, sigma: UpdatePatterns, deletion_only: bool = False) -> TreePlan:
    """The best tree for ``query`` under ``sigma`` (see the module docstring).

    >>> q = parse("Q() :- R1(x1,x2), R2(x2), R3(x1)")
    >>> choose_tree(q, UpdatePatterns()).kind, choose_tree(q, UpdatePatterns({"R1": "I", "R2": "I", "R3": "I"})).kind
    ('fallback', 'mixdetect')
    """
    fc = free_connex(query)
    if not fc:
        raise ValueError(f"the propagation engine needs a free-connex query: {fc.reason}")
    if q_hierarchical(query):
        return TreePlan(
            height_one_tree(query), "q-hierarchical", True, "O(1) expected", "q-hierarchical: height-1 tree"
        )
    insert_only = UpdatePatterns(dict.fromkeys(query.relations, "I"))
    tree = compatible_tree(query, insert_only)
    if deletion_only:
        return TreePlan(tree, "deletion-only", True, "O(1) amortized", "every relation deletion-only (App. C)")
    mix = mixdetect(query, sigma)
    if mix:
        return TreePlan(
            compatible_tree(query, sigma), "mixdetect", True, "O(1) amortized", f"{mix.reason} (Lemma 4.16)"
        )
    return TreePlan(
        tree,
        "fallback",
        False,
        "O(λ) amortized ≤ O(N)",
        f"{mix.reason}; maintained on a free-connex tree in O(λ) amortized (Lemma 1.4)",
    )


def rooted_tree(query: Query, root: int) -> JoinTree:
    """A join tree of a *Boolean* acyclic query with atom ``root`` on top (under the
    generalized root ``[]``), built as a maximum-weight spanning tree of the atoms'
    shared variables and checked with the validator.

    The height-3 tree of Ex. 2.8, R2 ← R1 ← R3 for Q_hier (λ > 1 on FIFO streams):

    >>> q = parse("Q() :- R1(x1,x2), R2(x2), R3(x1)")
    >>> print(rooted_tree(q, 1).render(q))
    [] *
      R2(x2)
        R1(x1, x2)
          R3(x1)
    """
    if query.free:
        raise ValueError("rooted_tree builds trees of Boolean queries (E_con = {root})")
    atoms = [a.variables for a in query.atoms]
    n = len(atoms)
    inside = {root}
    parent: dict[int, int] = {}
    order = [root]
    while len(inside) < n:
        best = max(
            ((len(atoms[a] & atoms[b]), -b, a, b) for a in inside for b in range(n) if b not in inside),
        )
        _, _, a, b = best
        parent[b] = a
        inside.add(b)
        order.append(b)
    nodes = [JoinTreeNode(frozenset(), None, None)]
    node_of: dict[int, int] = {}
    for e in order:
        node_of[e] = len(nodes)
        nodes.append(JoinTreeNode(atoms[e], e, 0 if e == root else node_of[parent[e]]))
    tree = JoinTree(tuple(nodes), frozenset([0]))
    problems = validate_join_tree(tree, query)
    if problems:
        raise ValueError(f"no join tree rooted at {query.atoms[root]}: {'; '.join(problems)}")
    return tree


def same_tree(a: JoinTree, b: JoinTree) -> bool:
    """Do two trees have the same shape (so no rebuild is needed)?"""
    return a == b
