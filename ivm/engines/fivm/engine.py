"""The F-IVM engine: higher-order IVM over one view tree with ring payloads (Kara et al., F-IVM).

One view tree τ(ω, F) per query (:mod:`ivm.engines.fivm.view_tree`), built on
the free-top variable order of :func:`ivm.query.variable_order.variable_order`;
views store ring payloads (:mod:`ivm.rings`); only the views chosen by μ for
the updatable relations are materialized (Fig. 8).

Updates (§4): a batch is pre-aggregated per relation into ``δR``; relations are
processed one at a time, and each atom occurrence of a relation (self-joins)
in sequence, each against the state already updated by the previous one, which
realizes the ``δV1 ⊗ δV2`` term of the delta rule.  The delta of each view on
the leaf-to-root path is ``⊕_X (δV_j ⊗ ⊗_{i≠j} V_i)`` (Fig. 7), joined by
index lookups.  Theorem 13: for a free-connex acyclic query a single-tuple
update costs O(N) ring operations (O(1) for q-hierarchical queries), and the
answers are enumerated with O(1) delay from the root view (its keys are the
free variables).  The exact per-query update exponent is
:func:`ivm.query.variable_order.update_exponent`.

Updates to a relation outside the updatable set U are applied by re-evaluating
the views from the base relations (the preprocessing step, O(N^s) for view
size exponent s), counted in ``stats()["rebuilds"]``.

Aggregates and rings (``ring=`` option, default from the query's aggregate):

- ``count``: Z; ``sum``: Z × Z/R (the count beside the sum, Remark 18; a float is
  lifted as its exact dyadic rational, :mod:`ivm.rings.exact`, and ``result()``
  rounds each sum once, correctly), both
  numeric rings, so its payloads are kept as ``(count, sum)`` lanes of plain
  numbers and computed without ring method calls (:mod:`ivm.engines.fivm.lanes`),
  in C loops over the same dicts and numbers when ``_lanes_kernel.pyx`` is built
  (``implementation="compiled"``, the default then; ``"python"`` is the reference);
- ``covariance``: the continuous covariance ring (``exact=True``, the default, keeps
  every entry exact: ints stay ints, floats are summed as the exact dyadic rationals of
  :mod:`ivm.rings.exact`, so an entry returns bit for bit to its value after updates that
  cancel; under ``implementation="compiled"`` each cell is a Shewchuk expansion of a few
  doubles in C, ``_covar_kernel.ExactPath``, with the reference's Python numbers as the
  escape for a value that does not fit; ``exact=False`` is an explicit choice of binary64
  payloads: faster, but an entry keeps the rounding of every value that ever passed
  through it); with ``categorical=(...)`` the
  generalized covariance ring (Def. 37, on the ring-object path).  Covariance
  payloads are kept in column stores (:mod:`ivm.engines.fivm.columnar`, §6.2's
  sized payloads, ``Q``'s upper triangle); float payloads go up the view tree
  in C where the path allows it (``implementation="compiled"``,
  ``_covar_kernel.pyx``), and the base relations are kept compact
  (:mod:`ivm.engines.fivm.base_relation`);
- ``listing`` / ``factorized``: the relational ring F[Z] over τ(ω, ∅) (§6.4).

View trees (``tree=`` option): ``"tau"`` (default) is τ(ω, F), the answers
are the root's keys; ``"nu"`` is ν(ω) of Fig. 9 (:mod:`ivm.engines.fivm.nu`),
the result kept factorized over H views in the key space and enumerated
top-down with O(1) delay (§7.1).

Factorizable updates (§6): :meth:`FIVM.apply_factorized` takes a union of
products and keeps each product factorized up the path
(:mod:`ivm.engines.fivm.factorizable`).
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterator, Sequence
from itertools import chain, islice, product, repeat
from operator import itemgetter, mul
from typing import Any

import numpy as np

from ivm.engines.base import Engine
from ivm.engines.fivm import base_relation, columnar, factorizable, lanes, nu
from ivm.engines.fivm.indicators import add_indicators
from ivm.engines.fivm.view_tree import (
    DeltaPlan,
    Store,
    ViewNode,
    ViewTree,
    build_view_tree,
    compile_plans,
    mu,
    projection,
)
from ivm.engines.keys import HIGH as KEY_HIGH
from ivm.engines.keys import NAN_MESSAGE, KeyDictionary
from ivm.query.model import Atom, Query
from ivm.query.variable_order import VariableOrder, _finish, update_exponent, variable_order
from ivm.rings.base import Pair, PairRing, Ring
from ivm.rings.covariance import Covariance, CovarianceRing
from ivm.rings.exact import NotFinite, exact, read_result
from ivm.rings.generalized_covariance import GeneralizedCovariance, GeneralizedCovarianceRing
from ivm.rings.numeric import NumericRing, SumRing
from ivm.rings.relational import Relation, RelationalRing
from ivm.updates import Row, Update, apply_to_base, by_relation, distinct_delta

RING_NAMES = ("count", "sum", "covariance", "generalized_covariance", "listing", "factorized")
TREE_NAMES = ("tau", "nu")

Delta = dict[tuple[Any, ...], Any]


try:  # the compiled index-join sum (``_count_kernel.pyx``), present when pip install compiled it
    from ivm.engines.fivm._count_kernel import direct_count, scan_sum, sum_by_key
except ImportError:  # no compiler at install time: the numpy rule and the loops below
    direct_count = scan_sum = sum_by_key = None

try:  # the compiled covariance path (``_covar_kernel.pyx``) and the batch parser of the compact base relations
    from ivm.engines.fivm._covar_kernel import ExactPath, Level, Path
    from ivm.engines.fivm._row_table import parse_batch
except ImportError:  # no compiler at install time: the numpy path (columnar.py) and dicts
    ExactPath = Level = Path = parse_batch = None

#: 2^53: the ints a double holds exactly are those up to it in magnitude
_EXACT_INT = 2.0**53

_NO_BUCKET: dict[Any, Any] = {}  # the bucket of an absent index key (never written)


def _scan_delta(plan: DeltaPlan, delta: Delta) -> Delta | None:
    """``δV = ⊕_X (δV_j ⊗ V_i)`` for one sibling joined through a secondary index, count payloads (Fig. 7).

    The plan of a path's inner view, e.g. ``V(b) = ⊕_c R2(b,c) ⊗ V_R3(c)`` when ``R3`` changes:
    every delta key meets its bucket ``σ_{bound} V_i``.  A sibling keyed by two ints with int64
    payloads keeps its buckets as contiguous blocks (:meth:`.Store.bucket_index`) and the whole sum
    is one C loop over them.  Otherwise the buckets are read and the products
    formed in C-level passes (``map``/``chain`` over the buckets' keys and values), and summed
    per output key by one ``dict`` build, or one tight loop when output keys repeat.  O(|δV_j| +
    |join|), the same sums as the general rule; Python ints, so exact.  ``None`` when the output
    key mixes the child's and the sibling's variables (the general rule handles it).
    """
    (step,) = plan.steps
    child = {slot: i for i, slot in enumerate(plan.child_slots)}
    fill = {slot: p for p, slot in step.fill}
    if step.full or not all(slot in child for slot in step.bound_slots):
        return None
    store = step.sibling.store
    assert store is not None, f"view {step.sibling.name} is not materialized"
    pair = len(step.sibling.keys) == 2 and len(step.bound_pos) == 1 and len(step.fill) == 1
    if pair and len(plan.key_slots) == 1 and plan.key_slots[0] in fill:
        compiled = store.bucket_index(step.bound_pos[0])  # a sibling keyed by int pairs: contiguous blocks
        if compiled is not None:
            summed = compiled.scan(delta, child[step.bound_slots[0]])
            if summed is not None:
                return summed
    index = store.index(step.bound_pos)
    bound_of = projection(tuple(child[slot] for slot in step.bound_slots))
    buckets = list(map(index.get, map(bound_of, delta), repeat(_NO_BUCKET, len(delta))))
    if all(slot in child for slot in plan.key_slots):  # the output key is the child's: one sum per bucket
        keys = list(map(projection(tuple(child[slot] for slot in plan.key_slots)), delta))
        values = list(map(mul, delta.values(), map(sum, map(dict.values, buckets))))
    elif all(slot in fill for slot in plan.key_slots):  # the output key is the sibling's
        if scan_sum is not None and len(plan.key_slots) == 1:
            rows = sum(map(len, buckets))  # keys of any type, summed by their codes (issue 38)
            summed = scan_sum(buckets, list(delta.values()), fill[plan.key_slots[0]], rows, store.codes())
            if summed is not None:
                return summed
        found = list(chain.from_iterable(buckets))
        payloads = list(chain.from_iterable(map(dict.values, buckets)))
        if len(plan.key_slots) == 1:
            lengths = list(map(len, buckets))
            summed = _sum_by_int(list(map(itemgetter(fill[plan.key_slots[0]]), found)), payloads, delta, lengths)
            if summed is not None:
                return summed
        each = chain.from_iterable(map(repeat, delta.values(), map(len, buckets)))
        keys = list(map(projection(tuple(fill[slot] for slot in plan.key_slots)), found))
        values = list(map(mul, payloads, each))
    else:
        return None
    return _sum_by_key(keys, values)


def _sum_by_key(keys: list[Any], values: list[Any]) -> Delta:
    """``{key: Σ value}``: one ``dict`` build when the keys are distinct, else one tight loop."""
    out = dict(zip(keys, values, strict=True))
    if len(out) < len(keys):  # output keys repeat: sum them
        if sum_by_key is not None:
            return sum_by_key(keys, values)  # the same loop in C
        out = {}
        get = out.get
        for key, value in zip(keys, values, strict=True):
            out[key] = get(key, 0) + value
    return out


def _sum_by_int(keys: list[Any], payloads: list[Any], delta: Delta, lengths: list[int]) -> Delta | None:
    """``{(k,): Σ payload · m}`` over equal ``k`` (``m``: the delta payload of the row's bucket,
    ``lengths[i]`` rows for the i-th), in int64 arrays if that is exact, else ``None``.

    Exact when the keys, payloads and delta payloads are Python ints and ``n · max|payload| ·
    max|m|`` stays below 2^62 (no product or sum overflows).  Keys in a range of at most 4n + 1024
    values are summed by one ``bincount`` (when every sum is below 2^53, so float weights are
    exact), others by one sort and one segment sum.  O(n) or O(n log n) in C, no row in Python.
    Keys whose sum is 0 are left out (the caller drops zero deltas anyway).
    """
    n = len(keys)
    if not n:
        return {}
    multipliers = list(delta.values())
    if set(map(type, keys)) != {int} or not set(map(type, payloads)) | set(map(type, multipliers)) <= {int}:
        return None
    try:
        k = np.fromiter(keys, dtype=np.int64, count=n)
        v = np.fromiter(payloads, dtype=np.int64, count=n)
        m = np.fromiter(multipliers, dtype=np.int64, count=len(multipliers))
    except OverflowError:
        return None
    bound = float(np.abs(v).max()) * float(np.abs(m).max()) * n
    if bound >= 2.0**62:
        return None
    products = v * np.repeat(m, lengths)
    low, high = int(k.min()), int(k.max())
    if bound < 2.0**53 and high - low <= 4 * n + 1024:
        sums = np.bincount(k - low, weights=products, minlength=high - low + 1)
        where = np.flatnonzero(sums)
        return dict(zip(zip((where + low).tolist()), sums[where].astype(np.int64).tolist(), strict=True))
    order = np.argsort(k, kind="stable")
    k = k[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    sums = np.add.reduceat(products[order], starts)
    return dict(zip(zip(k[starts].tolist()), sums.tolist(), strict=True))


class FIVM(Engine):
    """F-IVM: one view tree, ring payloads, materialization μ, delta view trees (F-IVM §3-§6).

    Options: ``ring`` (one of :data:`RING_NAMES`, default from the aggregate),
    ``categorical`` (categorical covariance variables), ``exact`` (exact
    covariance arithmetic, the default; ``False``: float64 payloads, inexact after
    cancelling updates), ``updatable`` (the set U for μ; default all
    relations), ``order`` (a :class:`VariableOrder`; default the planner's
    free-top order), ``tree`` (``"tau"`` or ``"nu"``, see :meth:`__init__`).

    >>> import ivm
    >>> v = ivm.maintain("Q(A, SUM(B)) :- R(A,B), S(A,C)", engine="fivm")
    >>> _ = v.apply([("R", (1, 5), 1), ("R", (1, 7), 1), ("S", (1, 0), 2)])
    >>> v.result(), sorted(v.enumerate())
    ({(1,): 24}, [((1,), 4)])
    """

    name = "fivm"
    _lanes = False  # (a class default: snapshots taken before lanes existed hold Pair payloads)
    # class defaults for snapshots taken before ν trees and factorizable updates existed
    _nu = False
    nu_plan: nu.NuPlan | None = None
    _negative_tuples = 0
    factorized_updates = 0
    #: columnar deltas of at most this many keys take the row path (:meth:`_propagate_row`); a class
    #: default, so snapshots taken before it existed get it too
    small_delta = columnar.SMALL_DELTA
    factorized_work = 0

    def __init__(
        self,
        query: Query,
        ring: str | None = None,
        categorical: Collection[str] = (),
        exact: bool = True,
        updatable: Collection[str] | None = None,
        order: VariableOrder | None = None,
        indicators: bool = False,
        fds: Sequence[tuple[Collection[str], str]] = (),
        implementation: str = "auto",
        tree: str = "tau",
    ) -> None:
        """Build the view tree, choose the views to store (μ) and the payload representation.

        ``tree="nu"`` builds ν(ω) (Fig. 9) on the free-top order instead of
        τ(ω, F): H views ``H^{@X}[{X} ∪ dep(X)]`` where X has k ≥ 2 children,
        V views ``V^{@X}[dep(X)] = ⊕_X …`` where X has a sibling, and
        enumeration reads the answers top-down over the H views with O(1)
        delay (§7.1, Theorem 13; :mod:`ivm.engines.fivm.nu`).  It is a view-tree
        option, not a ring: ν keeps the factorization of the result in the *key*
        space, so it works with every payload ring of the query (COUNT, SUM,
        covariance; an answer's payload is the product of the payload views of
        Fig. 11), whereas ``ring="factorized"`` (§6.4) keeps it in the *payload*
        space of τ(ω, ∅), where payloads are relations and no aggregate rides
        along.  Hence ``tree="nu"`` refuses the relational rings
        (``listing``/``factorized``) and indicator projections (cyclic queries are
        still maintained, with larger views).  The views stored are μ's plus the
        ones enumeration reads (§9 item 4).  For free-connex queries on the
        planner's order every view has O(N) keys (Theorem 13: O(N)
        preprocessing, O(1) delay, O(N) single-tuple updates; O(1) when
        q-hierarchical).
        """
        super().__init__(query)
        self.fds = tuple((tuple(lhs), rhs) for lhs, rhs in fds)
        self.ring_name = ring or self._default_ring(query, categorical)
        if self.ring_name not in RING_NAMES:
            raise ValueError(f"unknown ring {self.ring_name!r}; known: {RING_NAMES}")
        self.ring = self._make_ring(query, self.ring_name, categorical, exact)
        self.categorical = frozenset(categorical)
        self.order = order or (fd_variable_order(query, self.fds) if self.fds else variable_order(query))
        relational = self.ring_name in ("listing", "factorized")
        if tree not in TREE_NAMES:
            raise ValueError(f"unknown view tree {tree!r}; known: {TREE_NAMES}")
        self._nu = tree == "nu"
        self.tree: ViewTree
        if self._nu:
            if relational:
                raise ValueError(
                    f"tree='nu' keeps the result factorized in the key space; ring {self.ring_name!r} keeps it in "
                    "the payload space of τ(ω, ∅) (§6.4): use one or the other"
                )
            if indicators:
                raise ValueError("tree='nu' does not add indicator projections (use tree='tau' for them)")
            self.tree, self.nu_plan = nu.build_nu_tree(query, self.order)
        else:
            self.tree = build_view_tree(query, self.order, free=() if relational else None)
        self.indicator_leaves = add_indicators(self.tree) if indicators else []
        self.indicator_counts: list[dict[tuple[Any, ...], int]] = [{} for _ in self.indicator_leaves]
        self.updatable = frozenset(query.relations if updatable is None else updatable)
        unknown = self.updatable - set(query.relations)
        if unknown:
            raise ValueError(f"updatable relations {sorted(unknown)} are not in the query")
        mu(self.tree, self.updatable)
        if self.nu_plan is not None:
            for node in self.nu_plan.needed():  # enumeration reads them (§9 item 4)
                node.materialized = True
        if ring == "factorized" or self.ring_name == "factorized":
            for node in self.tree.nodes():  # enumeration walks every view top-down (§9 item 4)
                node.materialized = True
        compile_plans(self.tree, self.ring.lifts)
        # Z × Z/R of two numeric rings: (count, sum) tuples of plain numbers instead of Pair objects
        self._lanes = lanes.numeric_pair(self.ring)
        if self._lanes:
            self._compile_lane_lifts()
        self.implementation = self._choose_implementation(implementation, indicators)
        self._columnar = self.implementation in ("numpy", "compiled") and not self._lanes
        if self._columnar:
            self._dtype: Any = object if self.ring.exact else np.float64  # type: ignore[attr-defined]
            columnar.assign_layouts(self.tree.roots, self.ring.index)  # type: ignore[attr-defined]
        for node in self.tree.nodes():
            node.store = self._new_store(node) if node.materialized else None
        self.base: dict[str, Any] = {r: {} for r in query.relations}  # dicts or RowTables (base_relation)
        self._factorized = self.ring_name == "factorized"
        self._tracking = False
        self._pending: dict[Row, Any] = {}
        self._last: dict[Row, int] = {}
        self.updates_applied = 0
        self.rebuilds = 0
        self._init_compiled()

    # ------------------------------------------------------------------ setup
    def _init_compiled(self) -> None:
        """Compact base relations (columnar implementations) and the compiled paths' cache (built lazily).

        Called by ``__init__`` and after a restore: a snapshot's packed relations become tables again,
        an older snapshot's dicts are compacted, and column stores take int codes where they can.
        """
        self._paths: dict[int, CompiledPath | None] = {}
        # the SUM ring's lanes in C (``_lanes_kernel``): chosen by the implementation, present if built
        self._lane_kernel = self._lanes and self.implementation == "compiled" and lanes.kernel is not None
        self._relations = list(self.query.relations)
        self._relation_index = {r: i for i, r in enumerate(self._relations)}
        for r in self._relations:
            self.base[r] = base_relation.unpack(self.base[r])
        if getattr(self, "_columnar", False):  # any key value as an int64 code (ivm.engines.keys)
            if getattr(self, "_keydict", None) is None:  # (a snapshot from before the dictionary)
                self._keydict = KeyDictionary()
            for node in self.tree.nodes():
                if isinstance(node.store, columnar.ColumnStore):
                    node.store.attach(self._keydict)
        if getattr(self, "_columnar", False) and base_relation.RowTable is not None:
            arity = dict(self.query.relations)
            for r in self._relations:
                if isinstance(self.base[r], dict):
                    self.base[r] = base_relation.compact(self.base[r], arity[r])
            for node in self.tree.nodes():
                if isinstance(node.store, columnar.ColumnStore):
                    node.store.prefer_codes(len(node.keys))
        tables = [self.base[r] if base_relation.is_table(self.base[r]) else None for r in self._relations]
        in_tables = any(t is not None for t in tables)  # (an empty table is falsy)
        self._tables: list[Any] | None = tables if parse_batch is not None and in_tables else None
        # exact payloads under the compiled implementation: the stores keep exact cells (_covar_kernel.ExactPath)
        self._exact_cells = bool(
            getattr(self, "_columnar", False) and self.implementation == "compiled" and self.ring.exact  # type: ignore[attr-defined]
        )
        if self._exact_cells:
            self._float_vars: set[int] = getattr(self, "_float_vars", None) or set()
            self._to_cells()

    #: components a cell of a store with exact cells keeps (more than that: the store takes the reference numbers)
    exact_cell_width = 4
    #: the same for a store keyed by nothing (one row: the root of a Boolean query), whose cells sum every tuple
    exact_root_width = 8

    def _back_to_cells(self) -> None:
        """After a batch, while some store holds the reference numbers (a value did not fit its cells):
        try exact cells again after 1, 2, 4, ... such batches (O(store) each try, so the tries thin out
        while the values stay wide; once they cancel, the kernel takes the path again)."""
        if not self._exact_cells:
            return
        stores = [n.store for n in self.tree.nodes() if isinstance(n.store, columnar.ColumnStore)]
        if all(s.nc > 0 for s in stores):
            self._cells_wait = self._cells_waited = 0
            return
        self._cells_waited = getattr(self, "_cells_waited", 0) + 1
        wait = getattr(self, "_cells_wait", 0)
        if self._cells_waited >= wait:
            self._to_cells()
            self._cells_waited = 0
            self._cells_wait = max(1, 2 * wait)

    def _to_cells(self) -> None:
        """Every column store in exact cells (:meth:`.columnar.ColumnStore.to_cells`) where its values fit,
        sharing the engine's set of float variables (after ``__init__``, a restore or a rebuild)."""
        for node in self.tree.nodes():
            store = node.store
            if isinstance(store, columnar.ColumnStore):
                store.float_vars = self._float_vars
                store.to_cells(self.exact_root_width if store.arity == 0 else self.exact_cell_width)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_paths", "_tables", "_key_positions"):
            state.pop(name, None)
        if any(base_relation.is_table(b) for b in self.base.values()):  # (else the same dict: shared copies stay one)
            state["base"] = {r: base_relation.pack(b) for r, b in self.base.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "implementation" not in state:  # snapshots taken before the implementation option: ring objects
            self.implementation, self._columnar = "python", False
        self._init_compiled()

    def _choose_implementation(self, implementation: str, indicators: bool) -> str:
        """``"compiled"`` (:mod:`._covar_kernel` over column stores), ``"numpy"`` (batches as grouped array
        operations, :mod:`.columnar`) or ``"python"`` (ring objects).

        ``"auto"`` takes ``compiled`` for the continuous covariance ring on a τ tree when the extension is
        built (exact payloads, the default: exact cells, :class:`~._covar_kernel.ExactPath`; ``exact=False``:
        binary64 cells, :class:`~._covar_kernel.Path`), ``numpy`` for the covariance ring otherwise (exact
        payloads as Python numbers in object arrays), both without indicator projections, ``compiled`` for
        the SUM ring's ``(count, sum)`` lanes when ``_lanes_kernel``
        is built (the delta rules and store updates of :mod:`.lanes` in C loops over the same dicts
        and Python numbers), and the Python reference implementation for every other ring.  ``compiled``
        runs a batch's delta up each leaf-to-root path in C where the path allows it (direct
        plans, views keyed by at most one int variable, :meth:`_compiled_path`) and takes the numpy
        path elsewhere, over the same column stores.  Under numpy, deltas of at most
        :attr:`small_delta` keys take the row path (:func:`.columnar.row_delta`) and larger ones
        the grouped kernel (:func:`.columnar.delta_rule`).  Both columnar implementations keep the
        base relations compact (:mod:`.base_relation`) when the extension is built.
        """
        if implementation not in ("auto", "compiled", "numpy", "python"):
            raise ValueError(f"unknown implementation {implementation!r}; known: auto, compiled, numpy, python")
        if self._lanes and implementation in ("auto", "compiled"):  # the SUM ring: its lanes in C, if built
            if lanes.kernel is not None:
                return "compiled"
            if implementation == "compiled":
                raise ValueError("implementation='compiled' for the SUM ring needs the built extension (_lanes_kernel)")
            return "python"
        supported = self.ring_name == "covariance" and not indicators
        if implementation in ("numpy", "compiled") and not supported:
            raise ValueError(f"implementation={implementation!r} covers the covariance ring without indicators")
        compiled = supported and Path is not None and not self._nu
        if implementation == "compiled" and not compiled:
            raise ValueError("implementation='compiled' needs the built extension (_covar_kernel) and a tau view tree")
        if implementation == "auto":
            return ("compiled" if compiled else "numpy") if supported else "python"
        return implementation

    def _new_store(self, node: ViewNode) -> Any:
        if not self._columnar:
            return Store()
        support = node.layout.support  # type: ignore[attr-defined]
        store = columnar.ColumnStore(len(support), self._dtype, not self.ring.exact, len(node.keys))  # type: ignore[attr-defined]
        store.support = support
        keydict = getattr(self, "_keydict", None)  # (None while __init__ runs: _init_compiled attaches it)
        if keydict is not None:
            store.attach(keydict)
        return store

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        if any(not atom.terms for atom in query.atoms):
            return "an atom without variables"
        return None

    @property
    def lifted_variables(self) -> frozenset[str]:
        """The variables lifted as numbers: the SUM and covariance rings' (the generalized covariance
        ring's continuous ones only); none under the count and relational rings."""
        if self.ring_name not in ("sum", "covariance", "generalized_covariance"):
            return frozenset()
        return super().lifted_variables - getattr(self, "categorical", frozenset())

    @staticmethod
    def _default_ring(query: Query, categorical: Collection[str]) -> str:
        kind = query.aggregate.kind
        if kind == "covariance":
            return "generalized_covariance" if categorical else "covariance"
        return kind

    @staticmethod
    def _make_ring(query: Query, name: str, categorical: Collection[str], exact: bool) -> Ring:
        agg = query.aggregate
        if name == "count":
            return NumericRing()
        if name == "sum":
            powers: dict[str, int] = {}
            for v in agg.variables:
                powers[v] = powers.get(v, 0) + 1
            return PairRing(NumericRing(), SumRing(powers))
        if name == "covariance":
            return CovarianceRing(agg.variables or tuple(sorted(query.variables)), exact=exact)
        if name == "generalized_covariance":
            return GeneralizedCovarianceRing(agg.variables or tuple(sorted(query.variables)), categorical)
        return RelationalRing(query.free, factorized=name == "factorized")

    def _compile_lane_lifts(self) -> None:
        """Every delta plan's ``powers``: the lifted variables' positions (child key or join slots) and k."""
        sum_ring = self.ring.second  # type: ignore[attr-defined]
        for node in self.tree.nodes():
            for plan in node.plans:
                where = plan.direct.lift_positions if plan.direct is not None else plan.lift_slots
                plan.powers = lanes.lift_powers(sum_ring, plan.lift_vars, where)

    def _from_mult(self, mult: int) -> Any:
        """The payload ``mult · 1`` of a base tuple."""
        return (mult, mult) if self._lanes else self.ring.from_mult(mult)

    def _is_zero(self, payload: Any) -> bool:
        return payload == lanes.ZERO if self._lanes else self.ring.is_zero(payload)

    @property
    def _zero(self) -> Any:
        return lanes.ZERO if self._lanes else self.ring.zero

    # ---------------------------------------------------------------- updates
    def apply(self, updates: Sequence[Update]) -> None:
        """Apply a batch: pre-aggregate per relation, then one delta view tree per atom occurrence (§4).

        With compact base relations a batch of well-formed updates is parsed into cells in one C pass
        (:func:`~._row_table.parse_batch`), each relation's tuples consolidated while the table is
        updated (:meth:`~._row_table.RowTable.apply_cells`), and the delta read from the table's
        cells by the compiled paths; no Python tuple is made.  Any other batch takes the general
        route (:meth:`apply_deltas`).  O(|batch|) plus the delta view trees.
        """
        if self._tables is not None and not self._nu and isinstance(updates, list | tuple):
            parsed = parse_batch(updates, self._relation_index, self._tables)
            if parsed is not None:
                self._apply_parsed(parsed)
                return
        if self._lane_kernel:  # the batch grouped per relation in one C loop
            grouped = lanes.kernel.by_relation(updates)  # type: ignore[union-attr]
            if grouped is not None:
                self.apply_deltas(grouped)
                return
        self.apply_deltas(distinct_delta(updates) or by_relation(updates))

    def apply_columns(self, relation: str, columns: Sequence[Any], multiplicities: Any = 1) -> None:
        """:meth:`apply` of a batch of ``relation`` given as columns (:func:`ivm.updates.from_columns`),
        read straight into the relation's table: numpy arrays (or anything ``np.asarray`` takes) of
        ints and floats become the table's cells in a few array operations
        (:func:`~.base_relation.column_cells`), then the batch takes :meth:`apply`'s compiled route
        (:meth:`~._row_table.RowTable.apply_cells` and the leaf's compiled path), with no Python
        object per row.  Columns the table would not store as they are (strings, NaN, bools, a kind
        other than the column's) make the rows and take :meth:`apply`; the state is the same either
        way.  O(n · arity) plus the delta view trees.
        """
        index = self._relation_index.get(relation) if self._tables is not None and not self._nu else None
        table = self._tables[index] if index is not None else None  # type: ignore[index]
        parsed = base_relation.column_cells(table, columns, multiplicities) if table is not None else None
        if parsed is None:
            super().apply_columns(relation, columns, multiplicities)
        elif len(parsed[1]):
            self._apply_parsed([(index, *parsed)])  # type: ignore[list-item]

    def _apply_parsed(self, parsed: list[tuple[int, Any, Any, Any]]) -> None:
        """:meth:`apply_deltas` for a batch parsed into cells per relation (compact base relations)."""
        rebuild = False
        for index, cells, mults, kinds in parsed:
            relation = self._relations[index]
            table = self._tables[index]  # type: ignore[index]
            rows, nets, _, big = table.apply_cells(cells, mults, kinds)
            self.updates_applied += len(rows)
            if relation not in self.updatable:
                rebuild = True
            elif not rebuild and len(rows):
                leaves = self.tree.leaves.get(relation, ())
                path = self._paths.get(id(leaves[0])) if len(leaves) == 1 else None
                if path is not None and path.ready():  # one occurrence, compiled (the common case)
                    codes, values = self._gather(table, rows, path) or (None, None)
                    if codes is not None and path.takes(codes) and self._run_path(path, codes, values, nets, table):
                        pass
                    else:
                        self._propagate_columnar(relation, None, table, rows, nets)
                else:
                    self._propagate_columnar(relation, None, table, rows, nets)
            table.compact()
            if big:
                self._base_to_dict(relation)
        if rebuild:
            self._rebuild()
        self._back_to_cells()

    def _base_apply(self, relation: str, delta: dict[Row, int]) -> tuple[list[int], Any]:
        """``R += δR`` on the relation's dict or table: the old multiplicities (δR's order) and, for a
        table, the rows touched (for :meth:`_propagate_columnar`; compact the table after it)."""
        base = self.base[relation]
        if type(base) is dict:  # (the count and SUM rings: dicts, one call)
            if self._lane_kernel:
                return lanes.kernel.apply_base(base, delta), None  # type: ignore[union-attr]
            return apply_to_base(base, delta), None
        if base_relation.is_table(base):
            done = base_relation.apply_delta(base, delta)
            if done is not None:
                olds, rows, big = done
                if big:
                    self._base_to_dict(relation)
                    return olds, None
                return olds, rows
            base = self._base_to_dict(relation)
        return base_relation.apply_dict(base, delta), None

    def _base_to_dict(self, relation: str) -> dict[Row, int]:
        """Move a relation from its table to a dict for good (a row or multiplicity the table cannot hold)."""
        self.base[relation] = base = base_relation.to_dict(self.base[relation])
        if self._tables is not None:
            self._tables[self._relation_index[relation]] = None
            if all(t is None for t in self._tables):
                self._tables = None
        return base  # type: ignore[no-any-return]

    def apply_deltas(self, deltas: dict[str, dict[Row, int]]) -> dict[str, list[int]]:
        """:meth:`apply` of a batch already pre-aggregated per relation (:func:`~ivm.updates.by_relation`'s
        Z-sets, no zero multiplicities); returns each relation's old multiplicities, in ``δR``'s order.

        For a caller that keeps statistics over the base relations (the skew hybrid's degrees):
        it reads what changed from the old multiplicities instead of keeping its own copy of the
        relations.  Same cost as :meth:`apply`: O(|δR|) base updates plus the delta view trees
        (§4; Theorem 13 bounds a single-tuple update).
        """
        rebuild = False
        out: dict[str, list[int]] = {}
        if self._columnar:
            self._refuse_nan_keys(deltas)
        for relation, delta in deltas.items():
            olds, rows = self._base_apply(relation, delta)
            out[relation] = olds
            by_row = dict(zip(delta, olds, strict=True)) if self.indicator_leaves or self._nu else {}
            indicator_deltas = self._indicator_deltas(relation, by_row, delta) if self.indicator_leaves else []
            self.updates_applied += len(delta)
            if self._nu:
                self._count_negatives(by_row, delta)
            if relation not in self.updatable:
                rebuild = True
                if rows is not None:
                    self.base[relation].compact()
                continue
            if not rebuild and self._columnar:
                self._propagate_columnar(relation, delta, self.base[relation] if rows is not None else None, rows)
                if rows is not None:
                    self.base[relation].compact()
            elif not rebuild:
                single = len(delta) == 1 and not self._factorized and not self._lanes
                for leaf in self.tree.leaves.get(relation, []):
                    if single:  # a single-tuple update: one key up the whole path (_propagate_one)
                        ((row, m),) = delta.items()
                        key = self._leaf_key(leaf, row)
                        if key is not None and m:
                            self._propagate_one(leaf, key, self.ring.from_mult(m))
                    else:
                        self._propagate_leaf(leaf, delta)
                for leaf, d in indicator_deltas:  # after R's own paths (§7.4)
                    self._propagate(leaf, d)
        if rebuild:
            self._rebuild()
        self._back_to_cells()
        return out

    def _refuse_nan_keys(self, deltas: dict[str, dict[Row, int]]) -> None:
        """Refuse, before any change, a batch with NaN where a view is keyed (a NaN key has no code in the
        :class:`~ivm.engines.keys.KeyDictionary` and could never be found or deleted again: NaN ≠ NaN).
        Two C-level passes per key column of each relation; the float columns only are compared."""
        positions = getattr(self, "_key_positions", None)
        if positions is None:
            keyed = {v for node in self.tree.nodes() if node.atom is None for v in node.keys}
            positions = {}
            for atom in self.query.atoms:
                found = [p for p, t in enumerate(atom.terms) if t in keyed]
                positions[atom.relation] = sorted(set(positions.get(atom.relation, [])) | set(found))
            self._key_positions = positions
        for relation, delta in deltas.items():
            rows = list(delta)
            for p in positions.get(relation, ()):
                column = list(map(itemgetter(p), rows))
                if float in set(map(type, column)) and any(x != x for x in column if type(x) is float):
                    raise ValueError(f"{relation}: a NaN in key position {p}: {NAN_MESSAGE}")

    def apply_factorized(self, relation: str, factors: Sequence[Sequence[tuple[Any, Any]]]) -> int:
        """Apply ``δR = ⊎_t ⊗_f factor_{t,f}``, a union of products, keeping each product factorized (F-IVM §6).

        ``factors`` is a list of products; a product is a list of factors
        ``(variables, {tuple: multiplicity})`` over a partition of R's columns,
        named by the variables of R's atom (a str or a sequence of them) or by
        column positions (ints; needed when R's atoms name a column
        differently).  A factor may cover several variables; a bare value
        stands for a 1-tuple.  A multiplicity is an int, or any number for the
        tuple's payload ``m · 1`` (e.g. a float matrix entry in the count ring).
        Example 11: ``[[("A", {a: 1 for a in as_}), ("B", {b: 1 for b in bs})]]``
        is the n×m block with n + m values.

        The result, ``enumerate()``, every stored view and the base relation's
        multiplicities end as after :meth:`apply` of the expanded tuples (the
        net multiplicity of each tuple over all products).  Each product of
        each atom occurrence of R goes up the leaf-to-root path in sequence
        (:class:`.factorizable.Propagator`): at a view, the factors wholly
        inside one marginalized component are summed against the siblings
        (``⊕_X V_sibling ⊗ factor``) and factors are joined only where a
        sibling's or the view's key needs their joint tuple.  Relations
        outside ``updatable`` are re-evaluated, as in :meth:`apply`.

        Cost, for a product over disjoint variables: O(Σ min(|V_sibling|,
        |factor|)) per view on the path (Example 12: ``δS = δS_A ⊗ δS_C ⊗ δS_E``
        costs O(min(|V_R|, |δS_A|) + min(|V_T|, |δS_C|) + |δS_E|)), plus the
        size of the change of each *stored* view on the path (it stores
        tuples), versus O(Π |factor|) for the expanded update.  The base
        relation keeps one multiplicity per tuple (for :meth:`multiplicity` and
        re-evaluation), so its bookkeeping is O(Π |factor|) dictionary updates,
        without ring operations.  Returns the number of tuples whose
        multiplicity changed; ``stats()`` counts the calls
        (``factorized_updates``) and the propagation's work
        (``factorized_work``: factor and sibling entries read, probes, tuples
        written).

        >>> import ivm
        >>> e = FIVM(ivm.parse("Q() :- R(A,B), S(A,C,E), T(C,D)"))
        >>> e.apply([("R", (1, 1), 1), ("R", (2, 1), 1), ("T", (1, 1), 1)])
        >>> e.apply_factorized("S", [[("A", {1: 1, 2: 1}), ("C", {1: 1}), ("E", {7: 1, 8: 1, 9: -1})]])
        6
        >>> e.result(), e.multiplicity("S", (2, 1, 9))
        (2, -1)
        """
        products = factorizable.normalize(self.query, relation, factors)
        net = factorizable.expand_net(products, self.query.relations[relation])
        old_list, rows = self._base_apply(relation, net)
        if rows is not None:
            self.base[relation].compact()
        olds: dict[Row, int] = dict(zip(net, old_list, strict=True))
        self.updates_applied += len(net)
        self.factorized_updates += 1
        if self._nu:
            self._count_negatives(olds, net)
        if not net:
            return 0
        indicator_deltas = self._indicator_deltas(relation, olds, net) if self.indicator_leaves else []
        if relation not in self.updatable:
            self._rebuild()
            return len(net)
        propagator = factorizable.Propagator(self)
        for leaf in self.tree.leaves.get(relation, []):
            atom = self.query.atoms[leaf.atom]  # type: ignore[index]
            for prod in products:
                start = factorizable.leaf_factors(atom, leaf.keys, prod)
                if start is not None:
                    propagator.run(leaf, start)
        for leaf, d in indicator_deltas:  # after R's own paths (§7.4)
            self._propagate(leaf, d)
        self.factorized_work += propagator.work
        return len(net)

    def _indicator_deltas(
        self, relation: str, olds: dict[Row, int], delta: dict[Row, int]
    ) -> list[tuple[ViewNode, Delta]]:
        """δ(∃_𝒜 R) from the per-𝒜-value counts of present tuples (Def. 29): O(|δR|) per indicator."""
        out = []
        for leaf, counts in zip(self.indicator_leaves, self.indicator_counts, strict=True):
            atom = self.query.atoms[leaf.atom]  # type: ignore[index]
            if atom.relation != relation:
                continue
            positions = [atom.terms.index(v) for v in leaf.keys]
            change: dict[tuple[Any, ...], int] = {}
            for row, m in delta.items():
                was, now = olds[row] != 0, olds[row] + m != 0
                if was != now and atom.matches(row):
                    pk = tuple(row[p] for p in positions)
                    change[pk] = change.get(pk, 0) + (1 if now else -1)
            d: Delta = {}
            for pk, c in change.items():
                before = counts.get(pk, 0)
                after = before + c
                if after:
                    counts[pk] = after
                else:
                    counts.pop(pk, None)
                if (before > 0) != (after > 0):
                    d[pk] = self._from_mult(1 if after > 0 else -1)
            if d:
                out.append((leaf, d))
        return out

    def _propagate_columnar(
        self, relation: str, delta: dict[Row, int] | None, table: Any, rows: Any, nets: Any = None
    ) -> None:
        """Every atom occurrence of ``relation``: its compiled path (:meth:`_compiled_path`) when it is
        ready, else the numpy path (the row path for at most :attr:`small_delta` keys).

        The delta is ``delta`` (distinct rows, general route) or, from the parsed route, ``rows`` and
        ``nets`` of ``table`` (:meth:`~._row_table.RowTable.apply_cells`), turned into a dict only if
        some occurrence takes the numpy path.  Each occurrence in turn (self-joins), against the
        state the previous one left (§4).
        """
        for leaf in self.tree.leaves.get(relation, []):
            path = self._compiled_path(leaf)
            if path is not None and path.ready():
                arrays = None
                rows_in = None
                if nets is None:
                    assert delta is not None
                    nets = [m for m in delta.values() if m]
                if table is not None and rows is not None:
                    arrays = self._gather(table, rows, path)
                elif delta is not None:
                    rows_in = [r for r, m in delta.items() if m]
                    arrays = _delta_arrays(rows_in, path.code_cols, path.value_cols, self._keydict)
                if (
                    arrays is not None
                    and path.takes(arrays[0])
                    and self._run_path(path, arrays[0], arrays[1], nets, table if rows is not None else None, rows_in)
                ):
                    continue
            if delta is None:
                delta = table.delta_dict(rows, nets)
            if len(delta) <= self.small_delta:  # a few tuples: one row at a time (columnar.row_delta)
                for key, m in self._leaf_rows(leaf, delta):
                    self._propagate_row(leaf, key, m, None, None)
            else:
                self._propagate_block(leaf, self._leaf_block(leaf, delta))

    def _compiled_path(self, leaf: ViewNode) -> CompiledPath | None:
        """The compiled path of an atom leaf (``_covar_kernel.Path``), or ``None`` where it does not apply.

        It applies under ``implementation="compiled"`` when the atom has neither constants nor a
        repeated variable (its tuples are the leaf's keys), the leaf is not stored, every plan from
        the leaf to the root is direct (each sibling found by primary key, §4 / Theorem 13's
        single-tuple path), every view on the path and every sibling is keyed by at most one
        variable, and each sibling's key and each view's key is one column of the leaf's tuple at
        the first step.  Built once per leaf
        (stores change only on a rebuild, which drops the cache).
        """
        key = id(leaf)
        if key in self._paths:
            return self._paths[key]
        path = self._build_path(leaf) if self.implementation == "compiled" and Path is not None else None
        if path is not None and path.lifts_codes:  # a key lifted above the first level: carry its value
            path = self._build_path(leaf, key_values=True)
        self._paths[key] = path
        return path

    def _build_path(self, leaf: ViewNode, key_values: bool = False) -> CompiledPath | None:
        """The path's levels; ``key_values``: carry each view key's value beside its code (the tuple's key
        column read as a value at the first level, ``Level.out_val``), for a level that lifts its key variable
        (the code of an interned key, a non-integral float, is not its value; issue 38)."""
        atom = self.query.atoms[leaf.atom]  # type: ignore[index]
        if atom.constants or len(leaf.keys) != len(atom.terms) or leaf.store is not None:
            return None  # (a stored leaf is keyed by whole tuples: the numpy path keeps it)
        code_cols: list[int] = []
        value_cols: list[int] = []

        def code(position: int) -> int:
            if position not in code_cols:
                code_cols.append(position)
            return code_cols.index(position)

        def value(position: int) -> int:
            if position not in value_cols:
                value_cols.append(position)
            return value_cols.index(position)

        levels = []
        lifted_above: list[bool] = []
        value_vars: dict[int, int] = {}  # a value column -> the ring index of the variable lifted from it
        key_col = -1  # the value column of the view key carried up (key_values)
        written: list[columnar.ColumnStore] = []
        siblings: list[columnar.ColumnStore] = []
        child, node = leaf, leaf.parent
        while node is not None:
            i = next(i for i, p in enumerate(node.plans) if p.child is child)
            plan = node.plans[i]
            direct = plan.direct
            if direct is None or len(node.keys) > 1:
                return None
            stores = [step.sibling.store for step in plan.steps]
            if any(s is None or len(step.sibling.keys) > 1 for s, step in zip(stores, plan.steps, strict=True)):
                return None
            if any(len(p) > 1 for p in direct.sibling_positions):
                return None
            first = child is leaf
            sib_src = [(code(p[0]) if first else 0) if p else -1 for p in direct.sibling_positions]
            out_src = (code(direct.key_positions[0]) if first else 0) if direct.key_positions else -1
            lift_src = [value(p) if first else 0 for p in direct.lift_positions]
            lifted_above.append(not first and bool(lift_src))
            out_val = -1
            if key_values and direct.key_positions:
                out_val = value(direct.key_positions[0]) if first else 0
                if first:
                    key_col = out_val
            layout = node.layout  # type: ignore[attr-defined]
            for t, col in enumerate(lift_src):
                var = layout.support[layout.lift_offset + t]
                if first:
                    value_vars[col] = var
                elif key_col >= 0:
                    value_vars[key_col] = var
            child_block, sibling_blocks = layout.plans[i]
            blocks = [child_block, *sibling_blocks]
            if layout.lift_size:
                blocks.append((layout.lift_offset, layout.lift_size))
            if layout.lift_size != len(lift_src):
                return None
            levels.append(
                Level(
                    node.store,
                    stores,
                    sib_src,
                    out_src,
                    lift_src,
                    len(layout.support),
                    child_block[1],
                    blocks,
                    len(node.keys) == 1,
                    out_val,
                )
            )
            if node.store is not None:
                written.append(node.store)  # type: ignore[arg-type]
            siblings.extend(stores)  # type: ignore[arg-type]
            child, node = node, node.parent
        # a level above the first lifts its key from the key's code (the kernel: value = code, exact for ints)
        lifts_codes = not key_values and any(lifted_above)
        if self._exact_cells:
            if ExactPath is None:
                return None
            kernel = ExactPath(levels)
        else:
            kernel = Path(levels)
        path = CompiledPath(kernel, code_cols, value_cols, written, siblings, child, lifts_codes)
        if self._exact_cells:
            path.exact = True
            path.value_vars = [value_vars.get(j, -1) for j in range(len(value_cols))]
        return path

    def _gather(self, table: Any, rows: Any, path: CompiledPath) -> tuple[np.ndarray, np.ndarray] | None:
        """A delta's ``(codes, values)`` for the compiled path from the table's cells (issue 38).

        An int column's cells are their codes (an int below ``-2**62``, the interned range, is interned);
        a float column is read as doubles and coded by the engine's :class:`~ivm.engines.keys.KeyDictionary`
        (an integral float is its int, ``-0.0`` is 0, any other float one interned id): float keys take
        the same kernel as int keys.  ``None`` if some column cannot be read so (then the numpy path)."""
        got = table.gather(rows, path.code_cols, path.value_cols)
        if got is None:
            kinds = table.kinds_of()
            cols = path.code_cols.tolist()
            floats = [c for c in cols if kinds[c] == "float"]
            ints = [c for c in cols if kinds[c] != "float"]
            nv = len(path.value_cols)
            got = table.gather(rows, np.array(ints, np.intp), np.array([*path.value_cols.tolist(), *floats], np.intp))
            if got is None:
                return None
            int_codes, values = got
            codes = np.empty((len(values), len(cols)), dtype=np.int64)
            for j, c in enumerate(cols):
                if c in floats:
                    codes[:, j] = self._keydict.float_codes(values[:, nv + floats.index(c)])
                else:
                    codes[:, j] = int_codes[:, ints.index(c)]
            return codes, values[:, :nv]
        codes, values = got
        if codes.size and int(codes.min()) < KEY_HIGH:  # ints of the interned range: interned (rare)
            for j in range(codes.shape[1]):
                codes[:, j] = self._keydict.codes(codes[:, j].tolist())
        return codes, values

    def _run_path(
        self, path: CompiledPath, codes: np.ndarray, values: np.ndarray, nets: Any, table: Any = None, rows: Any = None
    ) -> bool:
        """One leaf's delta up its compiled path; the root's changes recorded for :meth:`drain_delta`.

        With exact cells (:class:`~._covar_kernel.ExactPath`): a NaN or an infinity is refused
        (:class:`~ivm.rings.exact.NotFinite`, as the reference path does); the variables lifted from float
        values are recorded (their sums read as exact dyadic rationals, the others as ints); and when the
        kernel cannot take the batch exactly (a multiplicity or an int value beyond 2^53, which the arrays
        hold as doubles, or a cell that would need more components than it keeps) the path's stores take
        the reference numbers and False is returned: the caller runs the numpy path, no value rounded."""
        if path.exact:
            values = np.asarray(values, dtype=np.float64)
            if values.size and not np.isfinite(values).all():
                bad = values[~np.isfinite(values)][0]
                raise NotFinite(f"{float(bad)!r} has no exact value to sum (NaN and infinities are refused)")
            mults = np.asarray(nets, dtype=np.float64)  # (exact for multiplicities below 2^53 in size)
            ok = not (mults.size and float(np.abs(mults).max()) >= _EXACT_INT)
            if ok and values.size:
                self._note_floats(path, values, table, rows)
                big = np.abs(values).max(axis=0) >= _EXACT_INT
                if big.any():  # a value of 2^53 or more read from an int column may not be that int
                    kinds = table.kinds_of() if table is not None else None
                    cols = path.value_cols.tolist()
                    ok = kinds is not None and all(kinds[cols[j]] == "float" for j in np.flatnonzero(big).tolist())
            root = path.kernel.run(codes, values, mults, self._tracking) if ok else False
            if root is False:
                for store in (*path.written, *path.siblings):
                    store.to_numbers()
                return False
        else:
            root = path.kernel.run(codes, values, nets, self._tracking)
        if root is not None and len(root[0]):
            self._record_codes(path.root, *root)
        return True

    def _note_floats(self, path: CompiledPath, values: np.ndarray, table: Any, rows: Any) -> None:
        """Record the variables this delta lifts from floats (exact cells: their sums read as dyadic
        rationals, as the reference path's ``exact(x)`` makes them; ints stay ints)."""
        cols = path.value_cols.tolist()
        if table is not None and hasattr(table, "kinds_of"):
            kinds = table.kinds_of()
            floats = [j for j, c in enumerate(cols) if kinds[c] == "float"]
        else:  # the rows' own types (the general route): values read as float(x)
            floats = [j for j, c in enumerate(cols) if any(type(r[c]) is not int for r in rows or ())]
        for j in floats:
            var = path.value_vars[j]
            if var >= 0 and var not in self._float_vars:
                self._float_vars.add(var)

    def _record_codes(self, root: ViewNode, codes: np.ndarray, counts: np.ndarray) -> None:
        """:meth:`_record_block` for the root's delta as int codes (keys ``(code,)``, or ``()``)."""
        if len(self.tree.roots) > 1 or self._nu:
            return  # diffed at drain time
        names, free = list(root.keys), list(self.query.free)
        values = codes.tolist()
        if names and len(codes) and int(codes.min()) < KEY_HIGH:
            values = self._keydict.values(values)
        for code, c in zip(values, counts.tolist(), strict=True):
            key: tuple[Any, ...] = (code,) if names else ()
            if names != free:
                binding = dict(zip(names, key, strict=True))
                key = tuple(binding[v] for v in free)
            self._pending[key] = self._pending.get(key, 0) + c

    def _leaf_block(self, leaf: ViewNode, delta: dict[Row, int]) -> columnar.Block:
        """``δR`` at an atom leaf as a :class:`~.columnar.Block` of multiplicities (empty support)."""
        atom = self.query.atoms[leaf.atom]  # type: ignore[index]
        if not atom.constants and len(leaf.keys) == len(atom.terms):
            keys, mults = list(delta), list(delta.values())
        else:
            positions = [atom.terms.index(v) for v in leaf.keys]
            merged: dict[tuple[Any, ...], int] = {}
            for row, m in delta.items():
                if atom.matches(row):
                    key = tuple(row[p] for p in positions)
                    merged[key] = merged.get(key, 0) + m
            keys, mults = list(merged), list(merged.values())
        n = len(keys)
        C = np.array(mults, dtype=self._dtype) if n else np.zeros(0, dtype=self._dtype)
        return columnar.Block(keys, C, np.zeros((n, 0), dtype=self._dtype), np.zeros((n, 0), dtype=self._dtype))

    def _leaf_rows(self, leaf: ViewNode, delta: dict[Row, int]) -> list[tuple[tuple[Any, ...], int]]:
        """:meth:`_leaf_block` as ``(key, multiplicity)`` pairs, without arrays (for :meth:`_propagate_row`)."""
        atom = self.query.atoms[leaf.atom]  # type: ignore[index]
        if not atom.constants and len(leaf.keys) == len(atom.terms):
            return list(delta.items())
        positions = [atom.terms.index(v) for v in leaf.keys]
        merged: dict[tuple[Any, ...], int] = {}
        for row, m in delta.items():
            if atom.matches(row):
                key = tuple(row[p] for p in positions)
                merged[key] = merged.get(key, 0) + m
        return list(merged.items())

    def _lift_values(self, rows: list[tuple[Any, ...]]) -> np.ndarray:
        """The lifted values as an ``(n, width)`` array of the payload dtype (floats: one C-level pass).

        Exact payloads (object arrays): a float becomes its exact dyadic rational (:func:`ivm.rings.exact.exact`),
        ints stay ints, so the grouped and row kernels sum exactly."""
        if not rows:
            return np.array(rows, dtype=self._dtype)
        if self._dtype is object:
            out = np.empty((len(rows), len(rows[0])), dtype=object)
            out[:] = [[x if type(x) is int else exact(x) for x in row] for row in rows]
            return out
        n, width = len(rows), len(rows[0])
        return np.fromiter(chain.from_iterable(rows), dtype=self._dtype, count=n * width).reshape(n, width)

    def _propagate_block(self, node: ViewNode, block: columnar.Block) -> None:
        """Maintain every materialized view on the path from ``node`` to the root, a batch at a time (§4, Fig. 7).

        Each level is one :func:`.columnar.delta_rule`: grouped array operations
        over the whole delta, O(|join| · k²) array work and O(|join|) lookups.
        A delta of at most :attr:`small_delta` keys continues one row at a time
        (:meth:`_propagate_row`): the grouped kernel's fixed cost (about 20 array
        calls per pair of factor blocks) exceeds a few rows' work.
        """
        while True:
            block = columnar.drop_zero(block)
            if not block.keys:
                return
            if node.store is not None:
                node.store.add(block)
            parent = node.parent
            if parent is None:
                if self._tracking:
                    self._record_block(node, block)
                return
            for plan in parent.plans:
                if plan.child is node:
                    break
            block = columnar.delta_rule(plan, block, self._dtype, self._lift_values)
            node = parent
            if 0 < len(block) <= self.small_delta:
                k = block.S.shape[1]
                for i, (key, c) in enumerate(zip(block.keys, block.C.tolist(), strict=True)):
                    self._propagate_row(node, key, c, block.S[i] if k else None, block.Q[i] if k else None)
                return

    def _propagate_row(self, node: ViewNode, key: tuple[Any, ...], c: Any, s: Any, q: Any) -> None:
        """:meth:`_propagate_block` for a delta of one key: :func:`.columnar.row_delta` per direct plan.

        Same sums as the grouped kernel on the same stored arrays (one state):
        per view one store update (:meth:`.columnar.ColumnStore.add_row`) and one
        primary-key lookup per sibling, O(k²) arithmetic in O(#siblings) array
        calls, the O(1)-per-level single-tuple step of Theorem 13.  A plan that
        needs an index scan (fan-out) hands the row to :func:`.columnar.delta_rule`
        and the result to :meth:`_propagate_block`.
        """
        floats = self._dtype is not object
        while True:
            if c == 0 and columnar.row_is_zero(c, s, q, False):
                return
            store = node.store
            if store is not None:
                store.add_row(key, c, s, q)  # type: ignore[union-attr]
            parent = node.parent
            if parent is None:
                if self._tracking:
                    self._record_row(node, key, c)
                return
            i = next(i for i, p in enumerate(parent.plans) if p.child is node)
            plan = parent.plans[i]
            rule = columnar.row_rules(parent)[i]
            if rule is None:
                k = len(node.layout.support)  # type: ignore[attr-defined]
                block = columnar.Block(
                    [key],
                    np.array([c], dtype=self._dtype),
                    s[None] if k else np.zeros((1, 0), dtype=self._dtype),
                    q[None] if k else np.zeros((1, 0), dtype=self._dtype),
                )
                self._propagate_block(parent, columnar.delta_rule(plan, block, self._dtype, self._lift_values))
                return
            out = columnar.row_delta(plan, rule, key, c, s, q, floats)
            if out is None:
                return
            key, c, s, q = out
            node = parent

    def _record_row(self, root: ViewNode, key: tuple[Any, ...], c: Any) -> None:
        """:meth:`_record_block` for one key."""
        if len(self.tree.roots) > 1 or self._nu:
            return  # diffed at drain time
        names, free = list(root.keys), list(self.query.free)
        if names != free:
            binding = dict(zip(names, key, strict=True))
            key = tuple(binding[v] for v in free)
        self._pending[key] = self._pending.get(key, 0) + c

    def _record_block(self, root: ViewNode, block: columnar.Block) -> None:
        if len(self.tree.roots) > 1 or self._nu:
            return  # diffed at drain time
        names, free = list(root.keys), list(self.query.free)
        for key, c in zip(block.keys, block.C.tolist(), strict=True):
            if names != free:
                binding = dict(zip(names, key, strict=True))
                key = tuple(binding[v] for v in free)
            self._pending[key] = self._pending.get(key, 0) + c

    def _rebuild_columnar(self) -> None:
        """:meth:`_rebuild` with columnar stores: each view from its first child's contents by the delta rule."""
        for node in self.tree.nodes():
            node.store = self._new_store(node)

        def evaluate(node: ViewNode) -> None:
            if node.is_leaf:
                rel = self.query.atoms[node.atom].relation  # type: ignore[index]
                node.store.add(columnar.drop_zero(self._leaf_block(node, self.base[rel])))  # type: ignore[union-attr]
                return
            for child in node.children:
                evaluate(child)
            contents = node.children[0].store.block()  # type: ignore[union-attr]
            delta = columnar.delta_rule(node.plans[0], contents, self._dtype, self._lift_values)
            node.store.add(columnar.drop_zero(delta))  # type: ignore[union-attr]

        for root in self.tree.roots:
            evaluate(root)
        for node in self.tree.nodes():
            if not node.materialized:
                node.store = None

    def _leaf_key(self, leaf: ViewNode, row: Row) -> tuple[Any, ...] | None:
        """The key of ``row`` in the atom leaf, or ``None`` if the atom does not select it."""
        atom = self.query.atoms[leaf.atom]  # type: ignore[index]
        if atom.constants or len(leaf.keys) != len(atom.terms):
            if not atom.matches(row):
                return None
            return tuple(row[atom.terms.index(v)] for v in leaf.keys)
        return row

    def _leaf_delta(self, leaf: ViewNode, delta: dict[Row, int]) -> Delta:
        atom = self.query.atoms[leaf.atom]  # type: ignore[index]
        positions = [atom.terms.index(v) for v in leaf.keys]
        simple = not atom.constants and len(positions) == len(atom.terms)
        from_mult = self._from_mult
        if simple:  # the rows are the keys
            if self._lanes:
                if self._lane_kernel:
                    return lanes.kernel.from_mults(delta)  # type: ignore[no-any-return,union-attr]
                return {row: (m, m) for row, m in delta.items()}
            if type(self.ring) is NumericRing:  # from_mult(m) is m: the delta itself
                return dict(delta)
            return {row: from_mult(m) for row, m in delta.items()}
        mults: dict[tuple[Any, ...], int] = {}  # rows projecting to one key (repeated variables) add up
        for row, m in delta.items():
            if atom.matches(row):
                key = tuple(row[p] for p in positions)
                mults[key] = mults.get(key, 0) + m
        return {key: from_mult(m) for key, m in mults.items()}

    def _propagate_leaf(self, leaf: ViewNode, delta: dict[Row, int]) -> None:
        """:meth:`_propagate` of a base relation's delta from its atom's leaf.

        On the compiled lanes, an unstored leaf whose rows are its keys and whose parent's plan
        is direct hands the multiplicities to the parent's delta rule as they are
        (:func:`.lanes.compiled_direct_delta` reads m as ``(m, m)``): no leaf dict.  O(|δR|).
        """
        parent = leaf.parent
        if self._lane_kernel and leaf.store is None and parent is not None:
            atom = self.query.atoms[leaf.atom]  # type: ignore[index]
            if not atom.constants and len(leaf.keys) == len(atom.terms):
                plan = next(plan for plan in parent.plans if plan.child is leaf)
                if plan.direct is not None:
                    self._propagate(parent, lanes.compiled_direct_delta(plan, delta, plan.powers, mults=True))
                    return
        self._propagate(leaf, self._leaf_delta(leaf, delta))

    def _propagate(self, node: ViewNode, delta: Delta) -> None:
        """Maintain every materialized view on the path from ``node`` to its root (Fig. 7 triggers).

        Payloads kept as ``(count, sum)`` lanes (:mod:`.lanes`) are zero-tested
        with ``==`` and added to a store in one call per delta; a single key then
        takes the same delta rule (:func:`.lanes.direct_delta` is one lookup per
        sibling for it) instead of :meth:`_propagate_one`.
        """
        in_lanes = self._lanes
        compiled = self._lane_kernel
        is_zero = self.ring.is_zero
        one_by_one = not self._factorized and not in_lanes
        counts = type(self.ring) is NumericRing
        while True:
            if compiled:
                delta = lanes.kernel.nonzero(delta)  # type: ignore[union-attr]
            elif in_lanes:
                delta = {k: p for k, p in delta.items() if p != lanes.ZERO}
            elif counts:
                if 0 in delta.values():  # one C-level scan; a copy only when some key is 0
                    delta = {k: p for k, p in delta.items() if p != 0}
            else:
                delta = {k: p for k, p in delta.items() if not is_zero(p)}
            if not delta:
                return
            if one_by_one and len(delta) == 1:
                ((key, payload),) = delta.items()
                self._propagate_one(node, key, payload)
                return
            store = node.store
            if store is not None:
                if in_lanes:
                    store.add_all_lanes(delta, compiled)
                elif counts:
                    store.add_numbers(delta)
                else:
                    add = store.add
                    for key, payload in delta.items():
                        add(key, payload, is_zero)
            parent = node.parent
            if parent is None:
                if self._tracking:
                    self._record(node, delta)
                return
            for plan in parent.plans:  # by identity: ViewNode's dataclass __eq__ compares whole subtrees
                if plan.child is node:
                    break
            delta = self._delta(plan, delta)
            node = parent

    def _propagate_one(self, node: ViewNode, key: tuple[Any, ...], payload: Any) -> None:
        """:meth:`_propagate` for a delta with one key: no dicts while the plans are direct.

        A single-tuple update of a q-hierarchical view tree stays one key all the
        way up (every :class:`DirectPlan` maps a key to one key), so each level is
        one store update and one lookup per sibling: O(depth · siblings), the O(1)
        of Theorem 13.  At the first plan that needs an index scan it hands the
        (then general) delta back to :meth:`_propagate`.
        """
        ring = self.ring
        is_zero = ring.is_zero
        while True:
            if is_zero(payload):
                return
            if node.store is not None:
                node.store.add(key, payload, is_zero)
            parent = node.parent
            if parent is None:
                if self._tracking:
                    self._record(node, {key: payload})
                return
            for plan in parent.plans:
                if plan.child is node:
                    break
            direct = plan.direct
            if direct is None:
                self._propagate(parent, self._delta(plan, {key: payload}))
                return
            for step, project in zip(plan.steps, direct.siblings, strict=True):
                found = step.sibling.store.data.get(project(key))  # type: ignore[union-attr]
                if found is None:
                    return
                payload = payload * found
            if plan.lift_vars:
                payload = payload * ring.lift_tuple(plan.lift_vars, direct.lift(key))
            if not direct.identity:
                key = direct.key(key)
            node = parent

    def _delta(self, plan: DeltaPlan, delta: Delta) -> Delta:
        """``δV = ⊕_X (δV_j ⊗ ⊗_{i≠j} V_i)`` with sibling lookups by index; cost O(|δV_j| · fan-out)."""
        if self._lanes:
            if self._lane_kernel:
                kernel = lanes.compiled_join_delta if plan.direct is None else lanes.compiled_direct_delta
            else:
                kernel = lanes.join_delta if plan.direct is None else lanes.direct_delta
            return kernel(plan, delta, plan.powers)
        if plan.direct is not None and not self._factorized:
            return self._direct_delta(plan, delta)
        if len(plan.steps) == 1 and type(self.ring) is NumericRing:
            scanned = _scan_delta(plan, delta)
            if scanned is not None:
                return scanned
        out: Delta = {}
        slots: list[Any] = [None] * plan.width
        steps = plan.steps
        nsteps = len(steps)
        ring = self.ring
        lift_vars, lift_slots = plan.lift_vars, plan.lift_slots
        key_of = projection(plan.key_slots)
        factorized = self._factorized
        var = plan.node.var

        def finish(payload: Any) -> None:
            if lift_vars:
                payload = payload * ring.lift_tuple(lift_vars, [slots[s] for s in lift_slots])
            if factorized:
                payload = payload.marginalize_to((var,))
            key = key_of(slots)  # type: ignore[arg-type]
            old = out.get(key)
            out[key] = payload if old is None else old + payload

        def join(i: int, payload: Any) -> None:
            if i == nsteps:
                finish(payload)
                return
            step = steps[i]
            store = step.sibling.store
            assert store is not None, f"view {step.sibling.name} is not materialized"
            if step.full:
                found = store.data.get(tuple(slots[s] for s in step.key_slots))
                if found is not None:
                    join(i + 1, payload * found)
                return
            bucket = store.index(step.bound_pos).get(tuple(slots[s] for s in step.bound_slots))
            if not bucket:
                return
            fill = step.fill
            for key, found in list(bucket.items()):
                for p, s in fill:
                    slots[s] = key[p]
                join(i + 1, payload * found)

        child_slots = plan.child_slots
        for key, payload in delta.items():
            for s, value in zip(child_slots, key, strict=True):
                slots[s] = value
            join(0, payload)
        return out

    def _direct_delta(self, plan: DeltaPlan, delta: Delta) -> Delta:
        """The delta rule when the child key binds every sibling's key (:class:`DirectPlan`).

        One primary-key lookup per sibling and delta key, no secondary index and
        no fan-out: O(|δV_j| · #siblings), the O(1) single-tuple step of
        Theorem 13 for q-hierarchical view trees.  Same sums as the general rule.
        """
        direct = plan.direct
        assert direct is not None
        lookups = []
        for step, project in zip(plan.steps, direct.siblings, strict=True):
            store = step.sibling.store
            assert store is not None, f"view {step.sibling.name} is not materialized"
            lookups.append((store.data, project))
        key_of = None if direct.identity else direct.key
        if type(self.ring) is NumericRing:  # counts: lookups, products and sums in C-level passes
            if direct_count is not None:  # one C loop
                whole = tuple(range(len(plan.child.keys)))
                out = direct_count(
                    delta,
                    [data for data, _ in lookups],
                    [None if p == whole else p for p in direct.sibling_positions],
                    None if key_of is None or direct.key_positions == whole else direct.key_positions,
                    not plan.key_slots,
                )
                if out is not None:
                    return out
            keys, payloads, n = list(delta), list(delta.values()), len(delta)
            for data, project in lookups:
                payloads = list(map(mul, payloads, map(data.get, map(project, keys), repeat(0, n))))
            if not plan.key_slots:
                return {(): sum(payloads)}
            return _sum_by_key(keys if key_of is None else list(map(key_of, keys)), payloads)
        lift = direct.lift if plan.lift_vars else None
        ring, lift_vars = self.ring, plan.lift_vars
        out: Delta = {}
        for key, payload in delta.items():
            for data, project in lookups:
                found = data.get(project(key))
                if found is None:
                    break
                payload = payload * found
            else:
                if lift is not None:
                    payload = payload * ring.lift_tuple(lift_vars, lift(key))
                if key_of is not None:
                    key = key_of(key)
                old = out.get(key)
                out[key] = payload if old is None else old + payload
        return out

    def _rebuild(self) -> None:
        """Re-evaluate every view bottom-up from the base relations (preprocessing, §3)."""
        self.rebuilds += 1
        self._paths = {}  # the stores are new
        if self._columnar:
            self._rebuild_columnar()
            self._rebuild_tracking()
            if self._exact_cells:
                self._to_cells()
            return
        for node in self.tree.nodes():
            node.store = Store()

        def evaluate(node: ViewNode) -> None:
            assert node.store is not None
            if node in self.indicator_leaves:
                counts = self.indicator_counts[self.indicator_leaves.index(node)]
                contents = {pk: self._from_mult(1) for pk, c in counts.items() if c > 0}
            elif node.is_leaf:
                rel = self.query.atoms[node.atom].relation  # type: ignore[index]
                contents = self._leaf_delta(node, self.base[rel])
            else:
                for child in node.children:
                    evaluate(child)
                first = node.children[0]
                assert first.store is not None
                contents = self._delta(node.plans[0], dict(first.store.data))
            for key, payload in contents.items():
                if self._lanes:
                    node.store.add_lanes(key, payload)
                else:
                    node.store.add(key, payload, self.ring.is_zero)

        for root in self.tree.roots:
            evaluate(root)
        for node in self.tree.nodes():
            if not node.materialized:
                node.store = None
        self._rebuild_tracking()

    def _rebuild_tracking(self) -> None:
        if self._tracking:
            current = dict(self.enumerate())
            self._pending = {}
            for key in set(current) | set(self._last):
                d = current.get(key, 0) - self._last.get(key, 0)
                if d:
                    self._pending[key] = d

    # ----------------------------------------------------------------- results
    def _multiplicity_of(self, payload: Any) -> int:
        if self._lanes:
            return payload[0]
        if isinstance(payload, Pair):
            return payload.first
        if isinstance(payload, (Covariance, GeneralizedCovariance)):
            return payload.c
        return payload

    def _roots_product(self) -> Iterator[tuple[tuple[Any, ...], Any, list[str]]]:
        """(key over the roots' concatenated keys, payload product, variable names) of the top product."""
        roots = self.tree.roots
        names = [v for r in roots for v in r.keys]
        stores = [r.store.data for r in roots]  # type: ignore[union-attr]
        if len(roots) == 1:
            for key, payload in stores[0].items():
                yield key, payload, names
            return
        for combo in product(*(s.items() for s in stores)):
            key: tuple[Any, ...] = ()
            payload = (1, 1) if self._lanes else self.ring.one
            for k, p in combo:
                key += k
                payload = (payload[0] * p[0], payload[1] * p[1]) if self._lanes else payload * p
            if not self._is_zero(payload):
                yield key, payload, names

    def _answers(self) -> Iterator[tuple[Row, Any]]:
        """(answer over the query's free variables, payload), with constant delay from the root(s)."""
        free = self.query.free
        if self._nu:
            yield from self._nu_answers()
            return
        if self.ring_name in ("listing", "factorized"):
            for _, payload, _ in self._roots_product():
                rel: Relation = payload
                pos = [rel.schema.index(v) for v in free]
                for t, m in rel.items():
                    yield tuple(t[p] for p in pos), m
            return
        for key, payload, names in self._roots_product():
            if list(names) == list(free):
                yield key, payload
            else:
                binding = dict(zip(names, key, strict=True))
                yield tuple(binding[v] for v in free), payload

    def _count_negatives(self, olds: dict[Row, int], delta: dict[Row, int]) -> None:
        """Keep the number of base tuples with a negative multiplicity (ν enumeration's mode): O(|δR|)."""
        for row, m in delta.items():
            old = olds[row]
            self._negative_tuples += (old + m < 0) - (old < 0)

    def _nu_answers(self) -> Iterator[tuple[Row, Any]]:
        """(answer, payload) from a ν tree: the bindings top-down, the payload by Fig. 11 times the free liftings.

        O(1) delay for non-negative multiplicities (:func:`.nu.enumerate_bindings`);
        otherwise the payload views' join (:func:`.nu.join_bindings`).
        """
        plan = self.nu_plan
        assert plan is not None
        free = self.query.free
        in_lanes = self._lanes
        one = (1, 1) if in_lanes else self.ring.one
        lifted = tuple(v for v in free if self.ring.lifts(v))
        sum_ring = self.ring.second if in_lanes else None  # type: ignore[attr-defined]
        for view in plan.payload_views:  # a scalar view at 0 (a bound component without answers): no answer
            if not view.keys and () not in view.store.data:  # type: ignore[union-attr]
                return
        binding: dict[str, Any] = {}
        walk = nu.join_bindings if self._negative_tuples else nu.enumerate_bindings
        for _ in walk(plan, binding):
            payload = one
            for view in plan.payload_views:
                found = view.store.data.get(tuple(binding[v] for v in view.keys))  # type: ignore[union-attr]
                if found is None:
                    break
                payload = (payload[0] * found[0], payload[1] * found[1]) if in_lanes else payload * found
            else:
                if lifted:
                    values = [binding[v] for v in lifted]
                    if in_lanes:
                        payload = lanes.lift(payload, values, lanes.lift_powers(sum_ring, lifted))
                    else:
                        payload = payload * self.ring.lift_tuple(lifted, values)
                yield tuple(binding[v] for v in free), payload

    def _current(self) -> Iterator[tuple[Row, int]]:
        for answer, payload in self._answers():
            m = self._multiplicity_of(payload)
            if m:
                yield answer, m

    def _finish_value(self, payload: Any) -> Any:
        if self._lanes:
            return payload[1] * self.query.aggregate.coefficient
        if isinstance(payload, Pair):
            return payload.second * self.query.aggregate.coefficient
        if isinstance(payload, Covariance):  # a view's payload is sized to its subtree; results are full (§6.2)
            return self.ring.expand(payload)  # type: ignore[attr-defined]
        return payload

    def result(self) -> Any:
        """The aggregate: a ring value for Boolean queries, else ``{group: value}`` without zeros (a SUM's
        group is there while it has rows, its count in Z × Z/R, even when the sum is 0: SQL's GROUP BY).

        ``count``: exact ints; ``sum``: ``coefficient · SUM``; ``covariance``: a
        :class:`~ivm.rings.covariance.Covariance`; ``listing``/``factorized``: the
        root relation (factorized: the root's payload, over the top variable).  Sums of floats are
        kept exactly (:mod:`ivm.rings.exact`) and read out here, each rounded once to the nearest
        float: :meth:`exact_result` without the rounding.
        """
        return read_result(self.exact_result())

    def exact_result(self) -> Any:
        """:meth:`result` with sums of floats as their exact :class:`~ivm.rings.exact.Dyadic` values
        (what shards and derived aggregates combine before rounding once)."""
        if self.ring_name == "factorized":
            roots = self.tree.roots
            out = self.ring.one
            for r in roots:
                out = out * r.store.data.get((), self.ring.zero)  # type: ignore[union-attr]
            return out
        if self.ring_name == "listing":
            return dict(self._answers())
        if not self.query.free:
            roots = self.tree.roots
            if len(roots) == 1:  # O(1): the root view keeps one payload, under the empty key
                payload = roots[0].store.data.get(())  # type: ignore[union-attr]
                return self._finish_value(self._zero if payload is None else payload)
            payload = next((p for _, p in self._answers()), None)
            if payload is None:
                payload = self._zero
            return self._finish_value(payload)
        out_groups: dict[Row, Any] = {}
        for answer, payload in self._answers():
            # Z × Z/R: a group exists while its count is non-zero, as in SQL (a SUM of 0 over rows is a row)
            if self._lanes:
                if payload[0] == 0:
                    continue
            elif isinstance(payload, Pair) and payload.first == 0:
                continue
            out_groups[answer] = self._finish_value(payload)
        return out_groups

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        """Answers with their multiplicities (COUNT), constant delay (Theorem 13).

        τ keeps the answers as the root's keys; the factorized ring walks the
        factorized payloads top-down instead (§6.4, Fig. 11): O(depth) per answer
        for non-negative multiplicities.  A ν tree reads the answers top-down
        over its H views (§7.1, :mod:`.nu`): O(1) delay while every base tuple
        has a non-negative multiplicity; with negative ones, the join of the
        payload views (exact, delay not constant).
        """
        if self.ring_name == "factorized":
            return self._enumerate_factorized()
        return self._current()

    def _enumerate_factorized(self) -> Iterator[tuple[Row, int]]:
        free = self.query.free

        def gen(node: ViewNode, binding: dict[str, Any]) -> Iterator[tuple[dict[str, Any], int]]:
            assert node.store is not None
            payload = node.store.data.get(tuple(binding[v] for v in node.keys))
            if payload is None:
                return
            if node.var is None or node.var not in free or node.is_leaf:
                total = payload.data.get((), 0)
                if total:
                    yield {}, total
                return
            for (x,), _ in list(payload.items()):
                inner = dict(binding)
                inner[node.var] = x
                yield from combine(node.children, inner, {node.var: x}, 1)

        def combine(
            nodes: list[ViewNode], binding: dict[str, Any], acc: dict[str, Any], mult: int
        ) -> Iterator[tuple[dict[str, Any], int]]:
            if not nodes:
                yield acc, mult
                return
            for part, m in gen(nodes[0], binding):
                merged = {**acc, **part}
                yield from combine(nodes[1:], {**binding, **part}, merged, mult * m)

        for assignment, m in combine(list(self.tree.roots), {}, {}, 1):
            if m:
                yield tuple(assignment[v] for v in free), m

    def drain_delta(self) -> list[tuple[Row, int]]:
        """Changes of answer multiplicities since the last call (the first returns the whole result).

        With one root the changes are the root's deltas (the cost of the update);
        a forest of roots, the factorized ring and ν trees diff the result (O(|result|)).
        """
        if not self._tracking:
            self._tracking = True
            self._pending = {}
            self._last = dict(self.enumerate())
            return sorted(self._last.items(), key=repr)
        if len(self.tree.roots) > 1 or self._factorized or self._nu:
            current = dict(self.enumerate())
            out = {k: current.get(k, 0) - self._last.get(k, 0) for k in set(current) | set(self._last)}
            self._last = current
            self._pending = {}
            return sorted(((k, d) for k, d in out.items() if d), key=repr)
        out2 = [(k, d) for k, d in self._pending.items() if d]
        for k, d in out2:
            new = self._last.get(k, 0) + d
            if new:
                self._last[k] = new
            else:
                self._last.pop(k, None)
        self._pending = {}
        return sorted(out2, key=repr)

    def _record(self, root: ViewNode, delta: Delta) -> None:
        if len(self.tree.roots) > 1 or self._factorized or self._nu:
            return  # diffed at drain time
        if self.ring_name in ("listing", "factorized"):
            free = self.query.free
            for payload in delta.values():
                pos = [payload.schema.index(v) for v in free]
                for t, m in payload.items():
                    key = tuple(t[p] for p in pos)
                    self._pending[key] = self._pending.get(key, 0) + m
            return
        names = list(root.keys)
        for key, payload in delta.items():
            if names != list(self.query.free):
                binding = dict(zip(names, key, strict=True))
                key = tuple(binding[v] for v in self.query.free)
            self._pending[key] = self._pending.get(key, 0) + self._multiplicity_of(payload)

    def multiplicity(self, relation: str, row: Row) -> int:
        return self.base.get(relation, {}).get(tuple(row), 0)

    def multiplicities(self, relation: str, rows: Sequence[Row]) -> list[int]:
        return base_relation.multiplicities(self.base.get(relation, {}), rows)

    # ------------------------------------------------------------------ intro
    def views(self) -> dict[str, dict[tuple[Any, ...], Any]]:
        """The materialized views by name (payloads by key)."""
        convert: Any = lanes.to_pair if self._lanes else None  # lanes are shown as the Pair they stand for
        if isinstance(self.ring, CovarianceRing):  # sized payloads are shown over the ring's full support
            convert = self.ring.expand
        return {
            n.name: {k: convert(p) for k, p in n.store.data.items()} if convert else dict(n.store.data)
            for n in self.tree.nodes()
            if n.store is not None
        }

    def explain(self) -> str:
        """The view tree with ``*`` on materialized views, then each stored view's size and bytes per payload."""
        lines = [self.tree.render(), "stored views (keys, bytes, bytes per payload, payload support):"]
        for name, (keys, total, per, support) in self.view_memory().items():
            lines.append(f"  {name}: {keys} keys, {total} B, {per:.0f} B/payload, {support} variables")
        return "\n".join(lines)

    def view_memory(self) -> dict[str, tuple[int, int, float, int]]:
        """Per stored view: (keys, bytes, bytes per stored payload, variables in its payloads' support).

        A covariance payload of a view holds only its subtree's variables (§6.2),
        so bytes per payload differ per view.  Bytes count the payloads and keys
        (Python objects measured on a sample of up to 32 payloads per view, O(1)
        per view; columnar stores exactly) and the store's tables.
        """
        out: dict[str, tuple[int, int, float, int]] = {}
        for node in self.tree.materialized():
            store = node.store
            if store is None:
                continue
            support = len(self._support(node)) if isinstance(self.ring, CovarianceRing) else 0
            if hasattr(store, "memory"):
                keys, total, per = store.memory()  # type: ignore[union-attr]
            else:
                keys, total, per = _dict_store_memory(store)
            out[node.name] = (keys, total, per, support)
        return out

    def _support(self, node: ViewNode) -> tuple[int, ...]:
        """The ring indices of the covariance variables lifted in ``node``'s subtree: its payloads' support."""
        lifted = [v for n in node.walk() for v in n.lifted]
        return self.ring.support(lifted)  # type: ignore[attr-defined]

    def stats(self) -> dict[str, int | float]:
        views = self.tree.materialized()
        memory = self.view_memory()
        keys = sum(m[0] for m in memory.values())
        total = sum(m[1] for m in memory.values())
        out: dict[str, int | float] = {
            "materialized_views": len(views),
            "view_keys": sum(len(n.store) for n in views if n.store is not None),
            "updates_applied": self.updates_applied,
            "rebuilds": self.rebuilds,
            "update_exponent": update_exponent(self.query, self.order),
            "indicators": len(self.indicator_leaves),
            "view_bytes": total,
            "bytes_per_payload": round(total / keys, 1) if keys else 0.0,
            "factorized_updates": self.factorized_updates,
            "factorized_work": self.factorized_work,
            "base_tuples": sum(len(b) for b in self.base.values()),
            "base_bytes": sum(base_relation.nbytes(b) for b in self.base.values()),
        }
        keydict = getattr(self, "_keydict", None)  # (the column stores' key values, ivm.engines.keys)
        out["key_dictionary_values"] = len(keydict) if keydict is not None else 0
        out["key_dictionary_bytes"] = keydict.memory() if keydict is not None else 0
        # the whole state per stored base tuple (issue 38): views, base relations and the key dictionary
        out["state_bytes"] = int(total + out["base_bytes"] + out["key_dictionary_bytes"])
        tuples = out["base_tuples"]
        out["bytes_per_tuple"] = round(out["state_bytes"] / tuples, 1) if tuples else 0.0
        for name, (_, view_total, per, _) in memory.items():
            out[f"view_bytes[{name}]"] = view_total
            out[f"bytes_per_payload[{name}]"] = round(per, 1)
        return out


class CompiledPath:
    """A leaf's compiled path (:class:`~._covar_kernel.Path`): which tuple columns key the views and
    siblings (``code_cols``) and which are lifted (``value_cols``), the stores it writes and reads."""

    __slots__ = (
        "_epoch",
        "_ready",
        "code_cols",
        "exact",
        "kernel",
        "lifts_codes",
        "root",
        "siblings",
        "value_cols",
        "value_vars",
        "written",
    )

    def __init__(
        self,
        kernel: Any,
        code_cols: list[int],
        value_cols: list[int],
        written: list[columnar.ColumnStore],
        siblings: list[columnar.ColumnStore],
        root: ViewNode,
        lifts_codes: bool = False,
    ) -> None:
        self.kernel = kernel
        #: some level above the first lifts its key variable, which the kernel reads off the key's code
        self.lifts_codes = lifts_codes
        self.code_cols = np.array(code_cols, dtype=np.intp)
        self.value_cols = np.array(value_cols, dtype=np.intp)
        self.written = written
        self.siblings = siblings
        self.root = root
        self._epoch = -1
        self._ready = False
        #: an exact kernel (:class:`~._covar_kernel.ExactPath`): its stores must keep exact cells
        self.exact = False
        #: per value column, the ring index of the variable lifted from it (-1: none)
        self.value_vars: list[int] = []

    def takes(self, codes: np.ndarray) -> bool:
        """Whether the kernel may run a delta with these codes: always, unless it lifts a key from its code
        and some code is an interned id (a non-integral float key, whose code is not its value; issue 38):
        that batch takes the numpy path, which lifts the values themselves."""
        return not self.lifts_codes or not codes.size or int(codes.min()) >= KEY_HIGH

    def ready(self) -> bool:
        """Every store in int mode, and no secondary index on a store it writes (it keeps none); the
        answer is kept until some store leaves int mode or gains an index (:data:`.columnar.EPOCH`)."""
        if self._epoch != columnar.EPOCH.value:
            self._epoch = columnar.EPOCH.value
            self._ready = all(s.codes is not None and not s.indexes for s in self.written) and all(
                s.codes is not None for s in self.siblings
            )
            if self.exact:  # (a store that took the reference numbers: the numpy path from now on)
                self._ready = self._ready and all(s.nc > 0 for s in (*self.written, *self.siblings))
        return self._ready


def _delta_arrays(
    rows: list[Row], code_cols: Any, value_cols: Any, keydict: KeyDictionary | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """A delta's tuples as the compiled path's arrays: int64 codes of ``code_cols`` (any value through
    ``keydict``, :mod:`ivm.engines.keys`; without one Python ints in int64 only, else ``None``) and float64
    values of ``value_cols`` (as ``float(x)``)."""
    n = len(rows)
    codes = np.empty((n, len(code_cols)), dtype=np.int64)
    for j, col in enumerate(code_cols):
        column = list(map(itemgetter(col), rows))
        if keydict is not None:
            codes[:, j] = keydict.codes(column)
            continue
        if n and set(map(type, column)) != {int}:
            return None
        try:
            codes[:, j] = np.fromiter(column, dtype=np.int64, count=n)
        except OverflowError:
            return None
    if not len(value_cols):  # (a list, or a CompiledPath's intp array)
        return codes, np.zeros((n, 0))
    pick = itemgetter(*value_cols) if len(value_cols) > 1 else (lambda row: (row[value_cols[0]],))
    try:
        width = len(value_cols)
        values = np.fromiter(chain.from_iterable(map(pick, rows)), dtype=np.float64, count=n * width).reshape(n, width)
    except (TypeError, ValueError):
        return None
    return codes, values


def payload_nbytes(payload: Any) -> int:
    """Bytes of one stored payload: the object and what it owns (covariance arrays, lanes' numbers)."""
    if isinstance(payload, Covariance):
        return payload.nbytes()
    if isinstance(payload, tuple):
        return sys.getsizeof(payload) + sum(sys.getsizeof(x) for x in payload)
    if isinstance(payload, Pair):
        return sys.getsizeof(payload) + payload_nbytes(payload.first) + payload_nbytes(payload.second)
    return sys.getsizeof(payload)


def _dict_store_memory(store: Store, sample: int = 32) -> tuple[int, int, float]:
    """(keys, bytes, bytes per payload) of a dict store, payloads and keys measured on a sample."""
    n = len(store.data)
    if not n:
        return 0, sys.getsizeof(store.data), 0.0
    picked = list(islice(store.data.items(), sample))
    per_payload = sum(payload_nbytes(p) for _, p in picked) / len(picked)
    per_key = sum(sys.getsizeof(k) for k, _ in picked) / len(picked)
    tables = sys.getsizeof(store.data) + sum(sys.getsizeof(i) for i in store.indexes.values())
    tables += store.compiled_nbytes()
    return n, int(tables + n * (per_payload + per_key)), per_payload


def closure(variables: Collection[str], fds: Sequence[tuple[Collection[str], str]]) -> frozenset[str]:
    """CLOSURE of a variable set under functional dependencies ``lhs -> rhs`` (§7.3).

    >>> sorted(closure({"A", "B", "C"}, [({"A"}, "D"), ({"B", "D"}, "E")]))
    ['A', 'B', 'C', 'D', 'E']
    """
    out = set(variables)
    changed = True
    while changed:
        changed = False
        for lhs, rhs in fds:
            if set(lhs) <= out and rhs not in out:
                out.add(rhs)
                changed = True
    return frozenset(out)


def fd_variable_order(query: Query, fds: Sequence[tuple[Collection[str], str]]) -> VariableOrder:
    """The variable order of the Σ-reduct, used for the original query (§7.3, Theorem 26).

    The Σ-reduct extends every atom's schema by its closure; its (canonical,
    if q-hierarchical) free-top order is also a variable order of the original
    query (every original atom lies on the path of its extension), with
    ``dep`` recomputed for the original atoms.  Example 27 (C and D occur in
    every atom of the reduct, so ``C → D`` and ``D → C`` are equally canonical):

    >>> from ivm.query.parse import parse
    >>> q = parse("Q(A, B, C, D) :- R(A,B), S(B,C), T(C,D)")
    >>> o = fd_variable_order(q, [("B", "C"), ("C", "D")])
    >>> o.parent, sorted(o.dep["B"]), sorted(o.dep["A"])
    ({'C': None, 'D': 'C', 'B': 'D', 'A': 'B'}, ['C'], ['B'])
    """
    atoms = []
    for atom in query.atoms:
        extra = sorted(closure(atom.variables, fds) - atom.variables)
        atoms.append(Atom(atom.relation, atom.terms + tuple(extra)))
    reduct = Query(query.name, query.free, tuple(atoms), query.aggregate)
    return _finish(query, dict(variable_order(reduct).parent))
