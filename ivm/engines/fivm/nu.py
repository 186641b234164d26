"""View trees ν(ω) for free-top variable orders with a factorized result (F-IVM §7.1, Fig. 9, Fig. 11).

ν builds, for every variable X of a free-top order ω (digest's reading of
Fig. 9, with the recursion on ν, not τ):

- ``H^{@X}_rels[{X} ∪ dep(X)] = ⊗_i V_i`` when X has k ≥ 2 children: the
  product of the children, nothing marginalized.  It lists the X-values paired
  with each ``dep(X)``-tuple: the view enumeration reads (§7.1);
- ``V^{@X}_rels[dep(X)] = ⊕_X H^{@X}`` on top of it when X has a sibling: the
  view the updates of the siblings' subtrees join with;
- with one child, no H view: ``V^{@X} = ⊕_X V_1`` if X has a sibling, else
  the child's tree itself (X stays a key of the child's root view).

Fig. 10 for ``Q(A,B,C) :- R(A,B), S(A,C,E), T(C,D)``: ``H_RST^{@A}[A]`` over
``V_R^{@B}[A]`` (over ``R``) and ``V_ST^{@C}[A]`` over ``H_ST^{@C}[A,C]``
over ``V_T^{@D}[C]`` (over ``T``) and ``V_S^{@E}[A,C]`` (over ``S``).

One addition to Fig. 9, needed for its own payload rule (Fig. 11): a bound
variable X that is a root of ω or the child of a free variable gets its
``V^{@X}`` even without a sibling (the *boundary* rule).  Fig. 9 would keep X
(and every bound variable of a sibling-less chain below it) as a key of the
views above, so no view over free variables only would hold the answers'
payloads and a Boolean query would keep its bound root in the key.  In a
view tree where every bound variable below the free ones has a sibling (as
in Fig. 10) the rule adds nothing.  A V view sums out every key of its child
outside ``dep(X)`` (a sibling-less chain below X included) and lifts those
that are bound; free variables are lifted where the answers' payloads are
read, never in a view.

Enumeration (§7.1, "Enumeration"; Example 19): the free variables, top-down,
read their values from ``E(X) = H^{@X}`` (k ≥ 2) or the root view of X's
only child.  Consecutive free variables of a sibling-less chain share one
view ``E`` and are read together (each key of ``E`` under the values fixed
above is one distinct combination); the branches below are independent
given the values above.  Each step is one bucket of a secondary index on the
fixed key positions (Remark 20), so with non-negative multiplicities (every
key of a view has a derivation) there is no dead end: O(1) delay in data
complexity.  The payload of an answer is the product of the *payload views*,
the topmost views whose key is exactly the free variables of their subtree
(Fig. 11; Example 19: ``R[a,b] · H_ST^{@C}[a,c]``), times the liftings of the
free variables.  With negative multiplicities a view's sum over a group can
cancel although the group has answers, so :func:`join_bindings` enumerates
the natural join of the payload views instead: exact, without the O(1) delay.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ivm.engines.fivm.view_tree import ViewNode, ViewTree
from ivm.query.model import Query
from ivm.query.variable_order import VariableOrder


@dataclass
class Group:
    """Free variables read together from one enumeration view, under the values fixed by the groups above."""

    view: ViewNode
    variables: tuple[str, ...]
    positions: tuple[int, ...]  # of ``variables`` in ``view.keys``
    fixed: tuple[str, ...]  # the other keys of ``view``: free ancestors, fixed above
    fixed_positions: tuple[int, ...]
    children: list[Group] = field(default_factory=list)


@dataclass
class NuPlan:
    """What enumeration reads in a ν view tree: the groups (top-down) and the payload views (Fig. 11)."""

    groups: list[Group]
    payload_views: list[ViewNode]
    enumeration_views: list[ViewNode]

    def needed(self) -> list[ViewNode]:
        """The views enumeration reads (materialized beside μ's choice, §9 item 4)."""
        out: dict[int, ViewNode] = {}
        for node in [*self.enumeration_views, *self.payload_views]:
            out[id(node)] = node
        return list(out.values())


def build_nu_tree(query: Query, order: VariableOrder) -> tuple[ViewTree, NuPlan]:
    """ν(ω) (Fig. 9, with the boundary rule above) and its enumeration plan: O(|Q|²) to build.

    >>> from ivm.query.parse import parse
    >>> from ivm.query.variable_order import variable_order
    >>> q = parse("Q(A, B, C) :- R(A,B), S(A,C,E), T(C,D)")
    >>> tree, plan = build_nu_tree(q, variable_order(q))
    >>> print(tree.render())
    H^{@A}_{R,S,T}[A] *
      V^{@B}_{R}[A]
        R[A, B]
      V^{@C}_{S,T}[A]
        H^{@C}_{S,T}[A, C]
          V^{@E}_{S}[A, C]
            S[A, C, E]
          V^{@D}_{T}[C]
            T[C, D]
    >>> [n.name for n in plan.payload_views]
    ['R', 'H^{@C}_{S,T}']
    """
    if not order.free_top:
        raise ValueError("ν view trees need a free-top variable order (no bound variable above a free one)")
    free = set(query.free)
    children: dict[str | None, list[str]] = {}
    for v, p in order.parent.items():
        children.setdefault(p, []).append(v)
    leaves: dict[str, list[ViewNode]] = {}
    enum_view: dict[str, ViewNode] = {}

    def ordered(variables: set[str]) -> tuple[str, ...]:
        return tuple(w for w in order.parent if w in variables)

    def rels_name(rels: frozenset[str]) -> str:
        return ",".join(sorted(rels))

    def leaf(i: int) -> ViewNode:
        atom = query.atoms[i]
        node = ViewNode(
            name=atom.relation, keys=tuple(dict.fromkeys(atom.terms)), rels=frozenset({atom.relation}), atom=i
        )
        leaves.setdefault(atom.relation, []).append(node)
        return node

    def v_view(x: str, child: ViewNode) -> ViewNode:
        keys = ordered(set(order.dep[x]))
        marginalized = tuple(w for w in child.keys if w not in keys)
        node = ViewNode(f"V^{{@{x}}}_{{{rels_name(child.rels)}}}", keys, child.rels, var=x, children=[child])
        node.marginalized = marginalized
        node.lifted = tuple(w for w in marginalized if w not in free)
        child.parent = node
        return node

    def nu(x: str, has_sibling: bool) -> ViewNode:
        kid_vars = children.get(x, [])
        kid_atoms = [i for i in order.atoms_at.get(x, ()) if query.atoms[i].terms]
        k = len(kid_vars) + len(kid_atoms)
        subtrees = [nu(c, k >= 2) for c in kid_vars] + [leaf(i) for i in kid_atoms]
        parent = order.parent[x]
        boundary = x not in free and (parent is None or parent in free)
        if k >= 2:
            rels = frozenset().union(*(t.rels for t in subtrees))
            top = ViewNode(
                f"H^{{@{x}}}_{{{rels_name(rels)}}}", ordered({x} | set(order.dep[x])), rels, var=x, children=subtrees
            )
            for t in subtrees:
                t.parent = top
        else:
            (top,) = subtrees
        enum_view[x] = top
        if has_sibling or boundary:
            return v_view(x, top)
        return top

    roots = [nu(r, False) for r in children.get(None, [])]
    for root in roots:
        root.materialized = True
    tree = ViewTree(query, order, tuple(query.free), roots, leaves)

    def start(x: str) -> Group:
        view = enum_view[x]
        chain = [x]
        while True:
            kids = children.get(chain[-1], [])
            atoms_here = order.atoms_at.get(chain[-1], ())
            if len(kids) == 1 and not atoms_here and kids[0] in free and enum_view[kids[0]] is view:
                chain.append(kids[0])
            else:
                break
        fixed = tuple(v for v in view.keys if v not in chain)
        above = set(order.ancestors(x))
        if set(chain) - set(view.keys) or set(fixed) - above or set(fixed) - free:
            raise AssertionError(f"ν enumeration view {view.name} does not hold {chain} under free ancestors")
        group = Group(
            view,
            tuple(chain),
            tuple(view.keys.index(v) for v in chain),
            fixed,
            tuple(view.keys.index(v) for v in fixed),
        )
        group.children = [start(c) for c in children.get(chain[-1], []) if c in free]
        return group

    groups = [start(r) for r in children.get(None, []) if r in free]

    def below_free(node: ViewNode) -> set[str]:
        return {v for n in node.walk() for v in n.keys if v in free}

    payload_views: list[ViewNode] = []

    def collect(node: ViewNode) -> None:
        if set(node.keys) == below_free(node):
            payload_views.append(node)
            return
        if node.is_leaf:  # pragma: no cover - ruled out by the boundary rule
            raise AssertionError(f"no view over free variables only above {node.name}")
        for child in node.children:
            collect(child)

    for root in roots:
        collect(root)

    def views_of(gs: list[Group]) -> list[ViewNode]:
        return [v for g in gs for v in [g.view, *views_of(g.children)]]

    return tree, NuPlan(groups, payload_views, views_of(groups))


def enumerate_bindings(plan: NuPlan, binding: dict[str, object]) -> Iterator[None]:
    """Fill ``binding`` with one answer after another, top-down over the groups' views (§7.1): O(1) delay.

    Yields once per distinct answer (the caller reads ``binding``); each step
    reads one bucket of a secondary index on the fixed key positions.  The
    trees of a forest are independent: if one has no answer, none is produced
    (checked first, so the others are not walked in vain).
    """
    if any(not len(group.view.store) for group in plan.groups):  # type: ignore[arg-type]
        return
    yield from _product(plan.groups, binding)


def _product(groups: list[Group], binding: dict[str, object]) -> Iterator[None]:
    if not groups:
        yield None
        return
    first, rest = groups[0], groups[1:]
    for _ in _group(first, binding):
        yield from _product(rest, binding)


def _group(group: Group, binding: dict[str, object]) -> Iterator[None]:
    store = group.view.store
    assert store is not None, f"enumeration view {group.view.name} is not materialized"
    if group.fixed_positions:
        bucket = store.index(group.fixed_positions).get(tuple(binding[v] for v in group.fixed))
        if not bucket:
            return
        keys = iter(bucket)
    else:
        keys = iter(store.data)
    for key in keys:  # no copy: the first answer of a bucket costs O(1), not O(|bucket|)
        for v, p in zip(group.variables, group.positions, strict=True):
            binding[v] = key[p]
        yield from _product(group.children, binding)


def join_bindings(plan: NuPlan, binding: dict[str, object]) -> Iterator[None]:
    """The natural join of the payload views' keys, top-down (exact for any multiplicities; delay not O(1)).

    Q[t] = Π_L L[π_L t] over the payload views L (their bound variables are
    disjoint), so the answers are exactly the tuples joining all of them.
    """
    views = plan.payload_views

    def go(i: int) -> Iterator[None]:
        if i == len(views):
            yield None
            return
        view = views[i]
        store = view.store
        assert store is not None, f"payload view {view.name} is not materialized"
        fixed = tuple(p for p, v in enumerate(view.keys) if v in binding)
        new = [(p, v) for p, v in enumerate(view.keys) if v not in binding]
        if len(fixed) == len(view.keys):
            if tuple(binding[v] for v in view.keys) in store.data:
                yield from go(i + 1)
            return
        if fixed:
            bucket = store.index(fixed).get(tuple(binding[view.keys[p]] for p in fixed))
            keys = list(bucket) if bucket else []
        else:
            keys = list(store.data)
        for key in keys:
            for p, v in new:
                binding[v] = key[p]
            yield from go(i + 1)
        for _, v in new:
            binding.pop(v, None)

    yield from go(0)
