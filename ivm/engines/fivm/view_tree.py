"""View trees τ(ω, F) over a variable order, the materialization choice μ, and delta plans (F-IVM §3, §4).

A :class:`ViewTree` has one view per variable of the variable order ω (Fig. 4,
reconstructed in the digest) plus one leaf per atom occurrence:

- the view at X is ``V^{@X}_rels[keys]`` with ``keys = dep(X) ∪ (F ∩ vars(ω_X))``;
  it joins its children and, when X is bound, marginalizes X with the lifting
  ``g_X`` (X ∈ F: X stays a key; it is still lifted once, here);
- a chain of bound variables whose subtree holds a single atom is collapsed
  into one view that marginalizes them all at once (§3, "practical tweak";
  Housing's relations become one view each);
- μ (Fig. 8): the roots are stored, and a view is stored iff some sibling is
  defined over an updatable relation (its delta must join with it); base
  relations count as views.

For every view and every child j, :class:`DeltaPlan` is the delta rule of
Fig. 7 compiled once: ``δV = ⊕_X (δV_j ⊗ ⊗_{i≠j} V_i)``, the siblings joined by
primary-index lookup when the delta binds all their keys and by a secondary
index on the bound keys otherwise (§2.2 storage contract, Remark 20, §9 item 5),
never by scanning a sibling.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import add, itemgetter, not_
from typing import Any

from ivm.engines.keys import KeyDictionary
from ivm.query.model import Query
from ivm.query.variable_order import VariableOrder

try:  # the compiled secondary index (``_bucket_index.pyx``), present when pip install compiled it
    from ivm.engines.fivm._bucket_index import BucketIndex
except ImportError:  # no compiler at install time: the dict indices alone
    BucketIndex = None
try:  # V += δV in one C loop (``_store_kernel.pyx``)
    from ivm.engines.fivm._store_kernel import add_numbers as add_numbers_kernel
except ImportError:  # the C-level passes of Store.add_numbers
    add_numbers_kernel = None
try:  # V += δV for (count, sum) lanes, secondary indexes kept, in one C loop (``_lanes_kernel.pyx``)
    from ivm.engines.fivm._lanes_kernel import add_lanes as add_lanes_kernel
except ImportError:  # Store.add_lanes per key
    add_lanes_kernel = None


class Store:
    """A materialized view: payloads by key (primary index) and lazily built secondary indices.

    A secondary index on key positions P maps ``π_P key`` to ``{key: payload}``
    so that ``σ_{P = t} V`` is enumerated with constant delay (§2.2).  Every
    operation is amortized O(1) per index (§2.2 storage contract).

    A count view whose keys are two ints may also keep compiled secondary indices
    (:meth:`bucket_index`, ``_bucket_index.pyx``): one contiguous block of
    ``(other value, payload)`` rows per bound value, maintained by the same
    operations at O(1) expected per key.  One is dropped for good (the dict index
    takes over) when a key or payload it cannot hold arrives; it is derived data,
    so snapshots leave it out and it is rebuilt on the next use.
    """

    __slots__ = ("_buckets", "_codes", "_projected", "data", "indexes")

    def __init__(self) -> None:
        self.data: dict[tuple[Any, ...], Any] = {}
        self.indexes: dict[tuple[int, ...], dict[tuple[Any, ...], dict[tuple[Any, ...], Any]]] = {}
        self._projected: list[tuple[Projection, dict[tuple[Any, ...], dict[tuple[Any, ...], Any]]]] = []
        #: compiled indices by bound position (``None``: refused, this view's keys or payloads do not fit)
        self._buckets: dict[int, Any] = {}
        #: the compiled indices' codes of non-int key values (derived like them: left out of snapshots)
        self._codes: KeyDictionary | None = None

    def index(self, positions: tuple[int, ...]) -> dict[tuple[Any, ...], dict[tuple[Any, ...], Any]]:
        idx = self.indexes.get(positions)
        if idx is None:
            idx = {}
            project = key_projection(positions)
            for key, payload in self.data.items():
                idx.setdefault(project(key), {})[key] = payload
            self.indexes[positions] = idx
            self._projected.append((project, idx))
        return idx

    def bucket_index(self, bound: int) -> Any:
        """The compiled index on key position ``bound`` (0 or 1) of a view keyed by pairs, or ``None``.

        Key values of any type: the index holds int64 codes from the store's
        :class:`~ivm.engines.keys.KeyDictionary` (ints are their own code; issue 38) and answers values.
        Built from the view on first use, O(|V|); ``None`` without the compiled extension, or when
        some key is not a pair or holds NaN, or some payload is not an int64 int (then never again for
        this position, until a restore).
        """
        if bound in self._buckets:
            return self._buckets[bound]
        idx = None
        if BucketIndex is not None:
            idx = BucketIndex(bound, self.codes())
            if not idx.build(self.data):
                idx = None
        self._buckets[bound] = idx
        return idx

    def codes(self) -> KeyDictionary:
        """The int64 codes of this view's key values in its compiled indices and scans (created on first use;
        derived, so left out of snapshots: codes never leave a kernel call or an index, values come back)."""
        if self._codes is None:
            self._codes = KeyDictionary()
        return self._codes

    def compiled_nbytes(self) -> int:
        """Bytes of the compiled indices (their blocks and tables)."""
        codes = self._codes.memory() if self._codes is not None and len(self._codes) else 0
        return codes + sum(idx.nbytes for idx in self._buckets.values() if idx is not None)

    def _bucket_write(self, keys: Any, payloads: list[Any]) -> None:
        """Write ``keys → payloads`` (0: removed) into every live compiled index; drop one that refuses."""
        for bound, idx in self._buckets.items():
            if idx is not None and not idx.update(keys, payloads):
                self._buckets[bound] = None

    def add(self, key: tuple[Any, ...], delta: Any, is_zero: Any) -> None:
        """``V[key] += delta``, deleting the key when the payload becomes 0 (§9 item 1)."""
        old = self.data.get(key)
        new = delta if old is None else old + delta
        if is_zero(new):
            if old is not None:
                self._delete(key)
            return
        self.data[key] = new
        for project, idx in self._projected:
            idx.setdefault(project(key), {})[key] = new
        if self._buckets:
            self._bucket_write([key], [new])

    def add_numbers(self, delta: dict[tuple[Any, ...], Any]) -> None:
        """:meth:`add` of every key for number payloads (zero is ``== 0``): C-level passes, O(|δ|).

        Lookups, sums and the write are one ``map``/``dict.update`` each; only the keys that drop
        to 0 and the dict secondary indexes take a loop (a compiled index takes the whole delta
        in one call).
        """
        data = self.data
        if add_numbers_kernel is not None and not self._projected:  # one C loop (no dict index to keep)
            news = add_numbers_kernel(data, delta)
            if self._buckets:
                self._bucket_write(delta, news)
            return
        news = list(map(add, map(data.get, delta, repeat(0, len(delta))), delta.values()))
        if self._buckets:
            self._bucket_write(delta, news)
        if 0 in news:  # keys that drop to 0 leave; the rest are written below
            zeros = list(compress(delta, map(not_, news)))
            zeros = list(compress(zeros, map(data.__contains__, zeros)))  # (a key absent with δ = 0 stays so)
            if self._projected:
                for key in zeros:
                    self._unindex(key)
            list(map(data.__delitem__, zeros))
            keep = dict(compress(zip(delta, news, strict=True), news))
            data.update(keep)
            written = keep.items()
        else:
            data.update(zip(delta, news, strict=True))
            written = zip(delta, news, strict=True)  # type: ignore[assignment]
        if self._projected:
            for key, new in written:
                for project, idx in self._projected:
                    idx.setdefault(project(key), {})[key] = new

    def add_lanes(self, key: tuple[Any, ...], delta: tuple[Any, Any]) -> None:
        """:meth:`add` for payloads of Z × Z/R kept as ``(count, sum)`` lanes (:mod:`ivm.engines.fivm.lanes`)."""
        old = self.data.get(key)
        new = delta if old is None else (old[0] + delta[0], old[1] + delta[1])
        if new == (0, 0):  # both lanes 0 (0.0 == 0)
            if old is not None:
                self._delete(key)
            return
        self.data[key] = new
        for project, idx in self._projected:
            idx.setdefault(project(key), {})[key] = new
        if self._buckets:
            self._bucket_write([key], [new])

    def add_all_lanes(self, delta: dict[tuple[Any, ...], tuple[Any, Any]], compiled: bool = False) -> None:
        """``V += δV`` with :meth:`add_lanes` per key; one call per delta when there is no secondary index.

        ``compiled``: the whole delta in one C loop (``_lanes_kernel.add_lanes``, the same sums and
        index writes), when the extension is built and no compiled count index is kept.
        O(|δV| · (1 + #indexes)) expected.
        """
        if compiled and add_lanes_kernel is not None and not self._buckets:
            add_lanes_kernel(self.data, delta, list(self.indexes.items()))
            return
        if self._projected or self._buckets:
            for key, payload in delta.items():
                self.add_lanes(key, payload)
            return
        data = self.data
        for key, (c, s) in delta.items():
            old = data.get(key)
            if old is None:
                if c != 0 or s != 0:
                    data[key] = (c, s)
                continue
            new = (old[0] + c, old[1] + s)
            if new == (0, 0):
                del data[key]
            else:
                data[key] = new

    def _delete(self, key: tuple[Any, ...]) -> None:
        del self.data[key]
        self._unindex(key)
        if self._buckets:
            self._bucket_write([key], [0])

    def _unindex(self, key: tuple[Any, ...]) -> None:
        """Take ``key`` out of the dict secondary indexes."""
        for project, idx in self._projected:
            sub = project(key)
            bucket = idx[sub]
            del bucket[key]
            if not bucket:
                del idx[sub]

    def __getstate__(self) -> tuple[dict[tuple[Any, ...], Any], dict[tuple[int, ...], Any]]:
        return (self.data, self.indexes)  # the projections and compiled indices are rebuilt

    def __setstate__(self, state: tuple[Any, Any]) -> None:
        if state[0] is None:  # pickled by the default protocol of slotted classes: (None, {slot: value})
            state = (state[1]["data"], state[1]["indexes"])
        self.data, self.indexes = state
        self._projected = [(key_projection(positions), idx) for positions, idx in self.indexes.items()]
        self._buckets = {}
        self._codes = None

    def __len__(self) -> int:
        return len(self.data)


@dataclass
class ViewNode:
    """``V^{@X}_rels[keys]`` (``var`` X, or an atom leaf when ``atom`` is set)."""

    name: str
    keys: tuple[str, ...]
    rels: frozenset[str]
    var: str | None = None
    atom: int | None = None
    children: list[ViewNode] = field(default_factory=list)
    parent: ViewNode | None = None
    marginalized: tuple[str, ...] = ()
    lifted: tuple[str, ...] = ()
    materialized: bool = False
    store: Store | None = None
    plans: list[DeltaPlan] = field(default_factory=list)

    @property
    def is_leaf(self) -> bool:
        return self.atom is not None

    def walk(self) -> Iterator[ViewNode]:
        yield self
        for child in self.children:
            yield from child.walk()

    def render(self, depth: int = 0) -> str:
        mark = " *" if self.materialized else ""
        lines = ["  " * depth + f"{self.name}[{', '.join(self.keys)}]{mark}"]
        lines += [child.render(depth + 1) for child in self.children]
        return "\n".join(lines)


@dataclass
class JoinStep:
    """Join one sibling: by primary key if ``full``, else through the index on ``bound_pos``."""

    sibling: ViewNode
    full: bool
    key_slots: tuple[int, ...]  # slot of each sibling key (full lookups)
    bound_pos: tuple[int, ...]  # sibling key positions already bound (index lookups)
    bound_slots: tuple[int, ...]
    fill: tuple[tuple[int, int], ...]  # (sibling key position, slot) newly bound


Projection = Callable[[tuple[Any, ...]], tuple[Any, ...]]


def projection(positions: tuple[int, ...]) -> Projection:
    """``key ↦ tuple(key[p] for p in positions)``, as fast as Python allows (``itemgetter``).

    >>> projection((2, 0))(("a", "b", "c")), projection((1,))(("a", "b")), projection(())(("a",))
    (('c', 'a'), ('b',), ())
    """
    if len(positions) >= 2:
        return itemgetter(*positions)  # type: ignore[return-value]
    if len(positions) == 1:
        p = positions[0]
        return lambda key: (key[p],)
    return lambda key: ()


def key_projection(positions: tuple[int, ...]) -> Projection:
    """:func:`projection` for tuple keys only: consecutive positions are one slice, ``key[i:j]``, in C.

    >>> key_projection((1,))(("a", "b", "c")), key_projection((1, 2))(("a", "b", "c"))
    (('b',), ('b', 'c'))
    """
    if positions and positions == tuple(range(positions[0], positions[0] + len(positions))):
        return itemgetter(slice(positions[0], positions[0] + len(positions)))  # type: ignore[return-value]
    return projection(positions)


@dataclass
class DirectPlan:
    """A delta plan whose child key binds every key of every sibling (all steps are primary-key lookups).

    Then the join at the node has no other variables than the child's keys, so
    each sibling key, the node's key and the lifted values are projections of the
    child key, and ``δV`` costs one dict lookup per sibling and delta key: the
    single-tuple path of q-hierarchical and free-connex view trees (F-IVM §5,
    Theorem 13).  Callables are rebuilt after unpickling (:meth:`__getstate__`).
    """

    sibling_positions: tuple[tuple[int, ...], ...]
    key_positions: tuple[int, ...]
    lift_positions: tuple[int, ...]
    identity: bool = False  # the node's key is the child key itself

    def __post_init__(self) -> None:
        self._compile()

    def _compile(self) -> None:
        self.siblings = tuple(key_projection(p) for p in self.sibling_positions)
        self.key = key_projection(self.key_positions)
        self.lift = key_projection(self.lift_positions)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("siblings", "key", "lift")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compile()


@dataclass
class DeltaPlan:
    """The delta rule of Fig. 7 for the view ``node`` and its child ``child`` (compiled once)."""

    node: ViewNode
    child: ViewNode
    width: int  # number of slots: the variables of the join at the node
    child_slots: tuple[int, ...]
    steps: list[JoinStep]
    key_slots: tuple[int, ...]
    lift_vars: tuple[str, ...]
    lift_slots: tuple[int, ...]
    direct: DirectPlan | None = None  # set when every step is a primary-key lookup
    # (position, k) per variable lifted by g_X(x) = x^k, for numeric rings: positions in the child key
    # for a direct plan, else slots of the join (set by the engine, see ivm.engines.fivm.lanes)
    powers: tuple[tuple[int, int], ...] = ()


@dataclass
class ViewTree:
    """The view tree τ(ω, F) of a query: roots (a forest gives a product at the top) and leaves per relation."""

    query: Query
    order: VariableOrder
    free: tuple[str, ...]
    roots: list[ViewNode]
    leaves: dict[str, list[ViewNode]]  # relation -> its atom-occurrence leaves, in atom order

    def nodes(self) -> Iterator[ViewNode]:
        for root in self.roots:
            yield from root.walk()

    def materialized(self) -> list[ViewNode]:
        return [n for n in self.nodes() if n.materialized]

    def render(self) -> str:
        return "\n".join(root.render() for root in self.roots)


def build_view_tree(query: Query, order: VariableOrder, free: Collection[str] | None = None) -> ViewTree:
    """τ(ω, F) (F-IVM Fig. 4): one view per variable, atoms as leaves, private bound chains collapsed.

    O(|Q|²) to build.  ``free`` defaults to the query's free variables; the
    relational ring builds τ(ω, ∅) and lifts the free variables instead (§6.4).

    >>> from ivm.query.parse import parse
    >>> from ivm.query.variable_order import variable_order
    >>> q = parse("Q() :- R(A,B), S(A,C,E), T(C,D)")
    >>> print(build_view_tree(q, variable_order(q)).render())
    V^{@A}_{R,S,T}[] *
      V^{@B}_{R}[A]
        R[A, B]
      V^{@C}_{S,T}[A]
        V^{@E}_{S}[A, C]
          S[A, C, E]
        V^{@D}_{T}[C]
          T[C, D]
    """
    F = set(query.free if free is None else free)
    qfree = set(query.free)
    children: dict[str | None, list[str]] = {}
    for v, p in order.parent.items():
        children.setdefault(p, []).append(v)

    def subtree(v: str) -> list[str]:
        out = [v]
        for c in children.get(v, []):
            out += subtree(c)
        return out

    def atoms_below(v: str) -> list[int]:
        return [i for w in subtree(v) for i in order.atoms_at.get(w, ())]

    leaves: dict[str, list[ViewNode]] = {}

    def leaf(i: int) -> ViewNode:
        atom = query.atoms[i]
        node = ViewNode(
            name=atom.relation, keys=tuple(dict.fromkeys(atom.terms)), rels=frozenset({atom.relation}), atom=i
        )
        leaves.setdefault(atom.relation, []).append(node)
        return node

    def rels_name(rels: Collection[str]) -> str:
        return ",".join(sorted(rels))

    def build(v: str) -> ViewNode:
        below = subtree(v)
        keys = tuple(w for w in order.parent if w in order.dep[v] or (w in F and w in below))
        atoms = atoms_below(v)
        if v not in F and len(atoms) == 1 and not (qfree & set(below)):
            child = leaf(atoms[0])
            marg = tuple(w for w in child.keys if w in below)
            node = ViewNode(f"V^{{@{v}}}_{{{child.name}}}", keys, child.rels, var=v, children=[child])
            node.marginalized = marg
            node.lifted = marg
            child.parent = node
            return node
        kids = [build(c) for c in children.get(v, [])] + [leaf(i) for i in order.atoms_at.get(v, ())]
        rels = frozenset().union(*(k.rels for k in kids))
        node = ViewNode(f"V^{{@{v}}}_{{{rels_name(rels)}}}", keys, rels, var=v, children=kids)
        node.marginalized = () if v in F else (v,)
        node.lifted = (v,)
        for k in kids:
            k.parent = node
        return node

    roots = [build(r) for r in children.get(None, [])]
    for root in roots:
        root.materialized = True
    # atoms without variables (arity 0) hang directly at the top
    for i, atom in enumerate(query.atoms):
        if not atom.terms:
            node = leaf(i)
            node.materialized = True
            roots.append(node)
    return ViewTree(query, order, tuple(query.free if free is None else free), roots, leaves)


def mu(tree: ViewTree, updatable: Collection[str]) -> list[ViewNode]:
    """μ(τ, U) (F-IVM Fig. 8): mark and return the views to materialize for updatable relations U.

    The roots, plus every view one of whose siblings is over an updatable
    relation.  Example 10 (T3): U={T} stores the root, V_R^{@B} and V_S^{@E}.

    >>> from ivm.query.parse import parse
    >>> from ivm.query.variable_order import variable_order
    >>> q = parse("Q() :- R(A,B), S(A,C,E), T(C,D)")
    >>> tree = build_view_tree(q, variable_order(q))
    >>> sorted(n.name for n in mu(tree, {"T"}))
    ['V^{@A}_{R,S,T}', 'V^{@B}_{R}', 'V^{@E}_{S}']
    >>> len(mu(tree, {"R", "S", "T"})), [n.name for n in mu(tree, set())]
    (5, ['V^{@A}_{R,S,T}'])
    """
    U = set(updatable)
    for node in tree.nodes():
        node.materialized = False
    for root in tree.roots:
        root.materialized = True
    for node in tree.nodes():
        for i, child in enumerate(node.children):
            if any(j != i and other.rels & U for j, other in enumerate(node.children)):
                child.materialized = True
    return tree.materialized()


def compile_plans(tree: ViewTree, lifts: Any) -> None:
    """Compile :class:`DeltaPlan` for every (view, child) pair (Fig. 7 with the OPTIMIZE join order).

    Siblings are joined greedily: the next is the one with the most keys
    already bound (a full primary-key lookup first).  ``lifts(var)`` says
    whether the ring's ``g_var`` is non-trivial (trivial lifts are skipped).
    """
    for node in tree.nodes():
        node.plans = []
        if node.is_leaf:
            continue
        variables: list[str] = []
        for child in node.children:
            for k in child.keys:
                if k not in variables:
                    variables.append(k)
        for k in (*node.keys, *node.marginalized):
            if k not in variables:  # pragma: no cover - keys come from the children
                variables.append(k)
        slot = {v: i for i, v in enumerate(variables)}
        for child in node.children:
            bound = set(child.keys)
            rest = [c for c in node.children if c is not child]
            steps: list[JoinStep] = []
            while rest:
                best = max(
                    rest,
                    key=lambda c: (sum(k in bound for k in c.keys) == len(c.keys), sum(k in bound for k in c.keys)),
                )
                rest.remove(best)
                full = all(k in bound for k in best.keys)
                bound_pos = tuple(p for p, k in enumerate(best.keys) if k in bound)
                fill = tuple((p, slot[k]) for p, k in enumerate(best.keys) if k not in bound)
                steps.append(
                    JoinStep(
                        best,
                        full,
                        tuple(slot[k] for k in best.keys),
                        bound_pos,
                        tuple(slot[best.keys[p]] for p in bound_pos),
                        fill,
                    )
                )
                bound |= set(best.keys)
            lift_vars = tuple(v for v in node.lifted if lifts(v))
            node.plans.append(
                DeltaPlan(
                    node,
                    child,
                    len(variables),
                    tuple(slot[k] for k in child.keys),
                    steps,
                    tuple(slot[k] for k in node.keys),
                    lift_vars,
                    tuple(slot[v] for v in lift_vars),
                    _direct(child, node, steps, lift_vars),
                )
            )


def _direct(child: ViewNode, node: ViewNode, steps: list[JoinStep], lift_vars: tuple[str, ...]) -> DirectPlan | None:
    """The :class:`DirectPlan` of a (node, child) delta rule, or ``None`` if some sibling needs an index scan."""
    if not all(step.full for step in steps):
        return None
    where = {k: p for p, k in enumerate(child.keys)}
    if not all(k in where for k in (*node.keys, *lift_vars)):  # pragma: no cover - implied by full steps
        return None
    key_positions = tuple(where[k] for k in node.keys)
    return DirectPlan(
        tuple(tuple(where[k] for k in step.sibling.keys) for step in steps),
        key_positions,
        tuple(where[v] for v in lift_vars),
        identity=key_positions == tuple(range(len(child.keys))),
    )
