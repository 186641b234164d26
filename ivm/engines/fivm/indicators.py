"""Indicator projections for cyclic queries (F-IVM §7.4, Def. 29, Fig. 17) and GYO*.

``(∃_𝒜 R)[t] = 1`` iff some tuple of R with non-zero payload projects to t.
Joining a view with ``∃_𝒜 R`` for a relation R *not* below it changes no
result (``R ⊗ ∃_𝒜 R = R``) but can shrink the view: for the triangle,
``V^{@C}[A,B] = ⊕_C S ⊗ T`` has O(N²) keys, ``⊕_C S ⊗ T ⊗ ∃_{A,B} R`` O(N).

Fig. 17: at each view ``V^{@X}_rels[keys]`` let
``𝓘 = {∃_{pk} R | R ∉ rels, pk = sch(R) ∩ keys ≠ ∅}``; run GYO* on the
hypergraph of the atoms below X and 𝓘, and add as children the indicators
that survive in the cyclic residue.  An indicator keeps, per 𝒜-value, the
number of R-tuples with non-zero payload; a count going 0→1 emits
``{t → 1}``, 1→0 emits ``{t → −1}`` (so ``|δ(∃R)| ≤ |δR|``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ivm.engines.fivm.view_tree import ViewNode, ViewTree


def gyo_residue(edges: Sequence[frozenset[str]]) -> list[int]:
    """GYO reduction to a fixpoint; the indices of the edges left (empty iff the hypergraph is acyclic).

    Rules: remove a node in only one edge; remove an edge contained in another
    (or equal to an earlier one).  O(|E|² · |V|).

    >>> A, B, C = "ABC"
    >>> gyo_residue([frozenset({B, C}), frozenset({C, A}), frozenset({A, B})])
    [0, 1, 2]
    >>> gyo_residue([frozenset({A, B}), frozenset({B, C})])
    []
    """
    live = {i: set(e) for i, e in enumerate(edges)}
    changed = True
    while changed:
        changed = False
        for i, e in live.items():
            lonely = {v for v in e if not any(v in f for j, f in live.items() if j != i)}
            if lonely:
                e -= lonely
                changed = True
        for i in sorted(live):
            if any(j != i and live[i] <= live[j] and (live[i] != live[j] or j < i) for j in live):
                del live[i]
                changed = True
                break
        for i in [i for i, e in live.items() if not e]:
            del live[i]
            changed = True
    return sorted(live)


def gyo_star(atoms: Sequence[frozenset[str]], indicators: Sequence[frozenset[str]]) -> list[int]:
    """GYO*: the indices of ``indicators`` left in the residue of atoms ∪ indicators (Fig. 17)."""
    edges = [*atoms, *indicators]
    return [i - len(atoms) for i in gyo_residue(edges) if i >= len(atoms)]


def add_indicators(tree: ViewTree) -> list[ViewNode]:
    """Add the indicator children chosen by GYO* to every view of ``tree``; returns the new leaves."""
    query = tree.query
    added: list[ViewNode] = []

    def atoms_below(node: ViewNode) -> list[int]:
        return [n.atom for n in node.walk() if n.atom is not None and n.var is None and not n.name.startswith("∃")]

    for node in list(tree.nodes()):
        if node.is_leaf or not node.keys:
            continue
        below = atoms_below(node)
        keys = set(node.keys)
        candidates: list[tuple[int, frozenset[str]]] = []
        for i, atom in enumerate(query.atoms):
            if atom.relation in node.rels or i in below:
                continue
            pk = frozenset(atom.variables & keys)
            if pk and (i, pk) not in candidates:
                candidates.append((i, pk))
        if not candidates:
            continue
        chosen = gyo_star([query.atoms[i].variables for i in below], [pk for _, pk in candidates])
        for c in chosen:
            i, pk = candidates[c]
            atom = query.atoms[i]
            leaf = ViewNode(
                name=f"∃_{{{','.join(v for v in atom.terms if v in pk)}}}{atom.relation}",
                keys=tuple(v for v in dict.fromkeys(atom.terms) if v in pk),
                rels=frozenset({atom.relation}),
                atom=i,
                parent=node,
            )
            node.children.append(leaf)
            added.append(leaf)

    # rels grow upwards: a view now also depends on the indicators' relations
    def refresh(node: ViewNode) -> frozenset[str]:
        if node.children:
            node.rels = frozenset().union(*(refresh(c) for c in node.children))
        return node.rels

    for root in tree.roots:
        refresh(root)
    return added


def indicator_relations(leaves: Collection[ViewNode]) -> set[str]:
    return {next(iter(leaf.rels)) for leaf in leaves}
