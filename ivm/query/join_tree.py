"""Free-connex join trees of height ≤ 2 and compatible join trees (Hu & Wang §2–§4; 003 §1.6, §3.3, §3.4).

Nodes are input relations (atoms) and *generalized* relations (attribute sets
inside some input relation).  A valid tree satisfies (003 §1.6):

- cover: every atom is a node, and every leaf is an atom;
- connect: for every attribute, the nodes containing it form a connected subtree;
- above: no atom is an ancestor of a generalized node;
- guard: a generalized node is ⊆ each of its children;
- connex: a connected set ``E_con`` contains the root, every non-root
  ``e ∈ E_con`` has ``e ∩ parent(e) ⊆ y``, and ``∪E_con ⊇ y``.

*Height* counts atoms on a root-to-leaf path.  Lemma 2.2: height 1 iff
q-hierarchical; Lemma 3.7: weak-q-hierarchical queries get height 2 by hanging
every atom TRIM removed under a skeleton anchor.  The only-if direction of 3.7
fails for ``Q_cx`` (003 §1.6): an atom reducible by rule (ii) with unique output
attributes hangs under its anchor as an EXTENDER (003 §3.3 [PROPOSAL]), whose
outputs are enumerated from the anchor's key; the validator accepts extender
outputs as covered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ivm.query.mixdetect import mixdetect
from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.patterns import UpdatePatterns, parse_patterns  # noqa: F401  (doctests)
from ivm.query.q_hierarchical import q_hierarchical
from ivm.query.weak_q_hierarchical import trim, weak_q_hierarchical

Role = Literal["", "filter", "extender"]


@dataclass(frozen=True)
class JoinTreeNode:
    """A node: ``atom`` is the atom index of an input relation, ``None`` for a generalized one."""

    attrs: frozenset[str]
    atom: int | None
    parent: int | None
    role: Role = ""


@dataclass(frozen=True)
class JoinTree:
    """A rooted join tree (node 0 is the root) with its connex set ``E_con``."""

    nodes: tuple[JoinTreeNode, ...]
    connex: frozenset[int]

    def children(self, node: int) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.parent == node]

    @property
    def height(self) -> int:
        """The maximum number of atoms on a root-to-leaf path."""

        def depth(i: int) -> int:
            here = self.nodes[i].atom is not None
            return here + max((depth(c) for c in self.children(i)), default=0)

        return depth(0)

    def render(self, query: Query) -> str:
        """The tree as indented text: atoms by name, generalized nodes as ``[attrs]``, ``*`` on E_con."""
        lines: list[str] = []

        def label(i: int) -> str:
            node = self.nodes[i]
            text = str(query.atoms[node.atom]) if node.atom is not None else "[" + ", ".join(_sorted(node.attrs)) + "]"
            if node.role:
                text += f"  ({node.role})"
            return text + (" *" if i in self.connex else "")

        def walk(i: int, depth: int) -> None:
            lines.append("  " * depth + label(i))
            for c in self.children(i):
                walk(c, depth + 1)

        walk(0, 0)
        return "\n".join(lines)


def height_one_tree(query: Query, atoms: Iterable[int] | None = None) -> JoinTree:
    """The height-1 free-connex join tree of a q-hierarchical query (003 §1.6 [derived]).

    >>> print(height_one_tree(parse("Q(x2,x3) :- R1(x1,x2,x3), R2(x2,x3,x4), R3(x3,x5)")).render(
    ...     parse("Q(x2,x3) :- R1(x1,x2,x3), R2(x2,x3,x4), R3(x3,x5)")))
    [] *
      [x3] *
        [x2, x3] *
          [x1, x2, x3]
            R1(x1, x2, x3)
          [x2, x3, x4]
            R2(x2, x3, x4)
        [x3, x5]
          R3(x3, x5)
    """
    indices = sorted(range(len(query.atoms)) if atoms is None else set(atoms))
    sub = query.induced(indices)
    verdict = q_hierarchical(sub)
    if not verdict:
        raise ValueError(f"no height-1 join tree (Lemma 2.2): {verdict.reason}")
    free = set(sub.free)
    classes: dict[tuple[frozenset[int], bool], list[str]] = {}
    for v in sub.variable_order():
        classes.setdefault((sub.atoms_of(v), v in free), []).append(v)

    def depth_key(c: tuple[frozenset[int], bool]) -> tuple[int, bool]:
        return (len(c[0]), c[1])  # smaller atom sets sit lower; a bound class sits below its free twin

    def ancestors(c: tuple[frozenset[int], bool]) -> list[tuple[frozenset[int], bool]]:
        return [d for d in classes if d != c and d[0] >= c[0] and (d[0] != c[0] or (d[1] and not c[1]))]

    nodes: list[JoinTreeNode] = [JoinTreeNode(frozenset(), None, None)]
    node_of: dict[tuple[frozenset[int], bool], int] = {}
    anc: dict[tuple[frozenset[int], bool], frozenset[str]] = {}
    for c in sorted(classes, key=lambda c: (-len(c[0]), not c[1])):  # parents first
        up = ancestors(c)
        parent = min(up, key=depth_key) if up else None
        anc[c] = frozenset(classes[c]) | (anc[parent] if parent else frozenset())
        node_of[c] = len(nodes)
        nodes.append(JoinTreeNode(anc[c], None, node_of[parent] if parent else 0))
    for local, atom in enumerate(sub.atoms):
        mine = [c for c in classes if local in c[0]]
        home = node_of[min(mine, key=depth_key)] if mine else 0
        nodes.append(JoinTreeNode(atom.variables, indices[local], home))
    connex = frozenset([0]) | {node_of[c] for c in classes if anc[c] <= free}
    return JoinTree(tuple(nodes), connex)


def fifo_tree(query: Query) -> JoinTree:
    """The height-2 tree of a weak-q-hierarchical query (FIFO_PLAN, 003 §3.3).

    Q_hier = π_∅ R1(x1,x2) ⋈ R2(x2) ⋈ R3(x1) (Ex. 2.8: height 2 gives λ = 1):

    >>> q = parse("Q() :- R1(x1,x2), R2(x2), R3(x1)")
    >>> print(fifo_tree(q).render(q))
    [] *
      [x1, x2]
        R1(x1, x2)
          R2(x2)  (filter)
          R3(x1)  (filter)
    """
    verdict = weak_q_hierarchical(query)
    if not verdict:
        raise ValueError(f"no height-2 join tree: {verdict.reason}")
    result = trim(query)
    tree = height_one_tree(query, result.skeleton)
    nodes = list(tree.nodes)
    for e in sorted(result.anchors):
        anchor = result.skeleton_anchor(e)
        nodes.append(JoinTreeNode(query.atoms[e].variables, e, _node_of_atom(nodes, anchor), _role(query, e, anchor)))
    return JoinTree(tuple(nodes), tree.connex)


def compatible_tree(query: Query, patterns: UpdatePatterns | None = None) -> JoinTree:
    """A join tree compatible with the update patterns (the paper's Alg. 3, reconstructed in 003 §3.4).

    Q_hook with R2, R3 insertion-only: R2 hangs under R1, R3 filters R2.

    >>> q = parse("Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)")
    >>> print(compatible_tree(q, parse_patterns(["R2=I", "R3=I"])).render(q))
    [] *
      [x1] *
        [x1, x2]
          R1(x1, x2)
            R2(x2, x3)  (filter)
              R3(x3)  (filter)
    """
    verdict = mixdetect(query, patterns)
    if not verdict:
        raise ValueError(f"no compatible join tree: {verdict.reason}")
    trace = verdict.witness
    tree = height_one_tree(query, trace.e_circ)
    nodes = list(tree.nodes)
    succ: dict[int, list[int]] = {}
    for a, b in trace.edges:
        succ.setdefault(a, []).append(b)
    placed = set(trace.e_circ)
    stack = list(reversed(trace.e_circ))
    while stack:
        a = stack.pop()
        for b in succ.get(a, []):
            if b not in placed:
                placed.add(b)
                nodes.append(JoinTreeNode(query.atoms[b].variables, b, _node_of_atom(nodes, a), _role(query, b, a)))
                stack.append(b)
    for e, anchor in reversed(list(trace.filters.items())):
        nodes.append(JoinTreeNode(query.atoms[e].variables, e, _node_of_atom(nodes, anchor), _role(query, e, anchor)))
    return JoinTree(tuple(nodes), tree.connex)


def _node_of_atom(nodes: list[JoinTreeNode], atom: int) -> int:
    return next(i for i, n in enumerate(nodes) if n.atom == atom)


def _role(query: Query, e: int, parent: int) -> Role:
    """An atom with output attributes its parent lacks is an EXTENDER, otherwise a FILTER (003 §3.2)."""
    own = query.atoms[e].variables - query.atoms[parent].variables
    return "extender" if own & set(query.free) else "filter"


def validate_join_tree(tree: JoinTree, query: Query, patterns: UpdatePatterns | None = None) -> list[str]:
    """The violated properties (cover, connect, above, guard, connex; with ``patterns``,
    strong compatibility of every atom->atom edge, 003 §1.6).  Empty when valid.

    >>> q = parse("Q() :- R1(x1,x2), R2(x2), R3(x1)")
    >>> validate_join_tree(fifo_tree(q), q)
    []
    """
    problems: list[str] = []
    nodes = tree.nodes
    kids = {i: tree.children(i) for i in range(len(nodes))}
    atoms = [n.atom for n in nodes if n.atom is not None]
    if sorted(atoms) != list(range(len(query.atoms))):
        problems.append(f"cover: the atoms in the tree are {sorted(atoms)}")
    for i, n in enumerate(nodes):
        if not kids[i] and n.atom is None and i != 0:
            problems.append(f"cover: generalized leaf {_sorted(n.attrs)}")
        if n.atom is not None and n.attrs != query.atoms[n.atom].variables:
            problems.append(f"cover: node of {query.atoms[n.atom]} has attributes {_sorted(n.attrs)}")
    for v in query.variables:
        holders = {i for i, n in enumerate(nodes) if v in n.attrs}
        tops = [i for i in holders if nodes[i].parent not in holders]
        if len(tops) != 1:
            problems.append(f"connect: the nodes holding {v} are not connected")
    for i, n in enumerate(nodes):
        if n.atom is None:
            p = n.parent
            while p is not None:
                if nodes[p].atom is not None:
                    problems.append(f"above: atom {query.atoms[nodes[p].atom]} is above a generalized node")
                p = nodes[p].parent
            for c in kids[i]:
                if not n.attrs <= nodes[c].attrs:
                    problems.append(f"guard: [{', '.join(_sorted(n.attrs))}] is not inside its child")
    free = set(query.free)
    if 0 not in tree.connex:
        problems.append("connex: E_con does not contain the root")
    covered: set[str] = set()
    for i in tree.connex:
        p = nodes[i].parent
        if i and (p not in tree.connex or not (nodes[i].attrs & nodes[p].attrs) <= free):
            problems.append(f"connex: node {i} joins its parent on bound attributes or hangs outside E_con")
        covered |= nodes[i].attrs
    for n in nodes:
        if n.role == "extender":
            parent = nodes[n.parent].attrs if n.parent is not None else frozenset()
            if not (n.attrs & parent) <= free:  # its outputs are enumerated from the key e ∩ p (003 §3.2)
                problems.append(f"connex: extender {query.atoms[n.atom]} joins its parent on bound attributes")
            covered |= n.attrs & free
    if not free <= covered:
        problems.append(f"connex: E_con misses the outputs {_sorted(free - covered)}")
    if patterns is not None:
        for n in nodes:
            if n.atom is None or n.parent is None or nodes[n.parent].atom is None:
                continue
            child, parent = query.atoms[n.atom], query.atoms[nodes[n.parent].atom]
            level = patterns.level(child.relation)
            joint = patterns.pair(child.relation, parent.relation)
            if level != "I" and joint not in ("I", "F"):
                problems.append(f"compatible: {child} under {parent} is neither insert-only nor jointly FIFO")
    return problems


def _sorted(attrs: Iterable[str]) -> list[str]:
    return sorted(attrs)
