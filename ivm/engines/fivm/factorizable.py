"""Factorizable updates (F-IVM §6, Example 11, Example 12): a delta given as a union of products, kept factorized.

An update ``δR = ⊎_t ⊗_f δR_{t,f}`` is a union of products; each product's
factors are small relations over a partition of R's columns (a factor may
cover several of them).  Example 11: the block ``{(a_i, b_j) → 1 | i∈[n], j∈[m]}``
is ``{a_i → 1} ⊗ {b_j → 1}``, n + m values instead of nm.

Propagation (§6, Example 12, the ``OPTIMIZE`` step of Fig. 7).  Along R's
leaf-to-root path each product is kept as ``scalar ⊗ F_1[P_1] ⊗ … ⊗ F_k[P_k]``
over disjoint variable sets ``P_i`` covering the view's key.  At the parent
view ``V = ⊕_M (δV_j ⊗ ⊗_{i≠j} V_i)`` the factors and the siblings ``V_i``
are split into *components*, the connected parts of their hypergraph (shared
variables connect).  ``⊕_M`` distributes over the components, so

    δV = ⊗_components ⊕_{M ∩ vars(comp)} ( ⊗_{F ∈ comp} F ⊗ ⊗_{V_i ∈ comp} V_i ⊗ g )

and every component becomes one factor of δV over ``keys(V) ∩ vars(comp)``
(a scalar when that is empty).  Factors meet (their joint tuples are formed)
only where a sibling's key links them or the view's key needs them together;
a factor alone in its component whose variables all stay keys passes through
untouched.  For Example 12, ``δS = δS_A[A] ⊗ δS_C[C] ⊗ δS_E[E]`` gives
``δV_RST = (⊕_A V_R ⊗ δS_A) ⊗ (⊕_C V_T ⊗ δS_C) ⊗ (⊕_E δS_E)``.

Cost of a component: a factor ``F`` and one sibling ``V_i`` keyed by exactly
F's variables cost O(min(|V_i|, |F|)) (iterate the smaller, look up in the
other); a factor alone costs O(|F|) (O(1) when it passes through); otherwise
O(Π|F ∈ comp| · fan-out) with the siblings probed by primary or secondary
index, never scanned (§9 item 5).  A stored view on the path receives its
delta expanded (it stores tuples): O(|δV|) more there.  Once a product has a
single factor over the view's key (it *is* the tuple-wise delta) and no
cheaper swap is left at the parent, it is handed to the engine's per-tuple
delta rule.  Every product of every atom occurrence is propagated in sequence
against the state the previous ones left, as the engine does for self-joins
(§4 triggers); by linearity of the delta rule the views end as after the
expanded update.

Work is counted in :attr:`Propagator.work`: one unit per factor entry read,
sibling entry read or probe, and per tuple written or handed on.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import product as cartesian
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ivm.engines.fivm import columnar
from ivm.engines.fivm.view_tree import DeltaPlan, ViewNode
from ivm.query.model import Atom, Query
from ivm.rings.exact import exact

if TYPE_CHECKING:  # pragma: no cover
    from ivm.engines.fivm.engine import FIVM

Key = tuple[Any, ...]
#: one factor of a product over R's columns: (column positions, {values at those positions: number})
Columns = tuple[tuple[int, ...], dict[Key, Any]]


class Factor(NamedTuple):
    """One factor of a propagated product: ``{values over names: payload}``.

    ``raw``: the payloads are still the update's multiplicities m, read as the
    ring's ``m · 1`` where they are used (no pass over a factor that is only
    looked up, so the ``min`` of Example 12 holds).
    """

    names: tuple[str, ...]
    data: dict[Key, Any]
    raw: bool = False


# ---------------------------------------------------------------- the input
def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _column_names(query: Query, relation: str) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """Variable name → the columns it names in R's atoms, and the names whose columns differ between atoms."""
    mapping: dict[str, tuple[int, ...]] | None = None
    ambiguous: set[str] = set()
    for atom in query.atoms:
        if atom.relation != relation:
            continue
        here: dict[str, list[int]] = {}
        for p, v in enumerate(atom.terms):
            here.setdefault(v, []).append(p)
        columns = {v: tuple(ps) for v, ps in here.items()}
        if mapping is None:
            mapping = columns
            continue
        for v in set(mapping) | set(columns):
            if mapping.get(v) != columns.get(v):
                ambiguous.add(v)
    return mapping or {}, ambiguous


def normalize(query: Query, relation: str, products: Any, integers: bool = False) -> list[list[Columns]]:
    """Validate a union of products and name every factor by R's column positions.

    ``products`` is a list of products; a product is a list of factors
    ``(variables, data)``: ``variables`` a variable name of R's atom (a str),
    a column position (an int) or a sequence of them, ``data`` a mapping from
    value tuples (a bare value for a one-variable factor) to multiplicities.
    A name repeated in the atom (``E(x, x)``) names all its columns: the
    factor's value fills each of them.  The factors of a product must cover
    every column exactly once.  Entries of multiplicity 0 are dropped.
    ``integers`` requires int multiplicities (as :meth:`ivm.view.View.apply`
    does).  O(total size of the factors).
    """
    arity = query.relations.get(relation)
    if arity is None:
        raise ValueError(f"unknown relation {relation!r} (query uses {sorted(query.relations)})")
    shape = "factors must be a list of products, each a list of (variables, {tuple: multiplicity}) factors"
    if isinstance(products, (str, bytes, Mapping)) or not isinstance(products, Iterable):
        raise TypeError(shape)
    names, ambiguous = _column_names(query, relation)
    out: list[list[Columns]] = []
    for t, prod in enumerate(products):
        if isinstance(prod, (str, bytes, Mapping)) or not isinstance(prod, Iterable):
            raise TypeError(f"product {t}: {shape}")
        covered: dict[int, int] = {}
        columns: list[Columns] = []
        for f, factor in enumerate(prod):
            if not isinstance(factor, (tuple, list)) or len(factor) != 2 or not isinstance(factor[1], Mapping):
                raise TypeError(f"product {t}, factor {f}: {shape}")
            variables, data = factor
            names_given = (variables,) if isinstance(variables, (str, int)) else tuple(variables)
            if not names_given:
                raise ValueError(f"product {t}, factor {f}: a factor needs at least one variable")
            positions: list[int] = []
            spread: list[int] = []  # for each position: the index of the given variable that fills it
            for g, name in enumerate(names_given):
                if isinstance(name, bool) or not isinstance(name, (str, int)):
                    raise TypeError(f"product {t}, factor {f}: variable {name!r} is neither a name nor a column")
                if isinstance(name, int):
                    if not 0 <= name < arity:
                        raise ValueError(f"product {t}, factor {f}: column {name} out of range for {relation}/{arity}")
                    cols: tuple[int, ...] = (name,)
                elif name in ambiguous:
                    raise ValueError(
                        f"variable {name!r} names different columns in the atoms of {relation}; "
                        "give column positions (ints) instead"
                    )
                elif name not in names:
                    raise ValueError(f"product {t}, factor {f}: {name!r} is not a variable of {relation}'s atom")
                else:
                    cols = names[name]
                for p in cols:
                    if p in covered:
                        raise ValueError(
                            f"product {t}: column {p} of {relation} is covered by factors {covered[p]} and {f}"
                        )
                    covered[p] = f
                    positions.append(p)
                    spread.append(g)
            width = len(names_given)
            rows: dict[Key, Any] = {}
            for key, mult in data.items():
                values = key if isinstance(key, tuple) else (key,)
                if len(values) != width:
                    raise ValueError(f"product {t}, factor {f}: tuple {key!r} has {len(values)} values, not {width}")
                if integers and type(mult) is not int:
                    raise TypeError(f"multiplicity must be an int, got {mult!r}")
                if not _is_number(mult):
                    raise TypeError(f"product {t}, factor {f}: multiplicity {mult!r} is not a number")
                if mult:
                    full = tuple(values[g] for g in spread)
                    rows[full] = rows.get(full, 0) + mult
            columns.append((tuple(positions), {k: m for k, m in rows.items() if m}))
        missing = sorted(set(range(arity)) - set(covered))
        if missing:
            raise ValueError(f"product {t}: columns {missing} of {relation} are covered by no factor")
        out.append(columns)
    return out


def expand(product: list[Columns], arity: int) -> Iterator[tuple[Key, Any]]:
    """The tuples of one product with their multiplicities: O(Π|factor|)."""
    if any(not data for _, data in product):
        return
    row: list[Any] = [None] * arity
    for combo in cartesian(*(list(data.items()) for _, data in product)):
        mult: Any = 1
        for (positions, _), (values, m) in zip(product, combo, strict=True):
            for p, x in zip(positions, values, strict=True):
                row[p] = x
            mult = mult * m
        yield tuple(row), mult


def expand_net(products: list[list[Columns]], arity: int) -> dict[Key, Any]:
    """``⊎_t ⊗_f`` expanded: the net multiplicity of every tuple, zeros dropped: O(Σ_t Π_f |factor|)."""
    net: dict[Key, Any] = {}
    for prod in products:
        for row, m in expand(prod, arity):
            net[row] = net.get(row, 0) + m
    return {row: m for row, m in net.items() if m}


def contains(product: list[Columns], row: Key) -> bool:
    """Is ``row`` a tuple of ``product``?  O(#factors)."""
    return all(tuple(row[p] for p in positions) in data for positions, data in product)


def leaf_factors(
    atom: Atom, keys: tuple[str, ...], product: list[Columns]
) -> list[tuple[tuple[str, ...], dict]] | None:
    """A product over R's columns as factors over the atom leaf's variables, or ``None`` if the atom selects nothing.

    The leaf's key is the atom's distinct variables.  Factors sharing a
    repeated variable (``E(x, x)`` split over two factors) are joined into one;
    constants and repeated variables select, as :meth:`Atom.matches` does.
    O(Σ |factor|) plus the joins of factors that share a repeated variable.
    """
    n = len(product)
    var_sets = [{atom.terms[p] for p in positions} for positions, _ in product]
    group = list(range(n))

    def find(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if var_sets[i] & var_sets[j]:
                group[find(i)] = find(j)
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(find(i), []).append(i)
    fixed = dict(atom.constants)
    out: list[tuple[tuple[str, ...], dict]] = []
    for part in members.values():
        positions = [p for i in part for p in product[i][0]]
        if len(part) == 1:
            items: Iterable[tuple[Key, Any]] = product[part[0]][1].items()
        else:
            items = _joint(product, part)
        first: dict[str, int] = {}
        for i, p in enumerate(positions):
            first.setdefault(atom.terms[p], i)
        names = tuple(v for v in keys if v in first)
        checks = [(i, first[atom.terms[p]]) for i, p in enumerate(positions) if first[atom.terms[p]] != i]
        consts = [(i, fixed[p]) for i, p in enumerate(positions) if p in fixed]
        pick = [first[v] for v in names]
        merged: dict[Key, Any] = {}
        for values, m in items:
            if any(values[i] != c for i, c in consts) or any(values[i] != values[j] for i, j in checks):
                continue
            key = tuple(values[i] for i in pick)
            merged[key] = merged.get(key, 0) + m
        merged = {k: m for k, m in merged.items() if m}
        if not merged:
            return None
        out.append((names, merged))
    return out


def _joint(product: list[Columns], part: list[int]) -> Iterator[tuple[Key, Any]]:
    for combo in cartesian(*(list(product[i][1].items()) for i in part)):
        values: Key = ()
        mult: Any = 1
        for key, m in combo:
            values += key
            mult = mult * m
        yield values, mult


# ---------------------------------------------------------- the propagation
class Propagator:
    """Propagates factorized products up leaf-to-root paths of an engine's view tree (§6, Example 12).

    Works on every payload representation of :class:`~ivm.engines.fivm.engine.FIVM`:
    ring objects, ``(count, sum)`` lanes, and columnar stores (read as ring
    elements, written as blocks in the view's layout).
    """

    def __init__(self, engine: FIVM) -> None:
        self.engine = engine
        self.ring = engine.ring
        self.lanes = engine._lanes
        self.columnar = engine._columnar
        self.factorized_ring = engine._factorized
        self.sum_ring = engine.ring.second if self.lanes else None  # type: ignore[attr-defined]
        self.work = 0

    # -- payload arithmetic (ring objects or lanes)
    def from_mult(self, m: Any) -> Any:
        return (m, m) if self.lanes else self.ring.from_mult(m)

    def mul(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        if self.lanes:
            return (a[0] * b[0], a[1] * b[1])
        return a * b

    def add(self, a: Any, b: Any) -> Any:
        if self.lanes:
            return (a[0] + b[0], a[1] + b[1])
        return a + b

    def is_zero(self, a: Any) -> bool:
        return a == (0, 0) if self.lanes else self.ring.is_zero(a)

    def lift(self, variables: tuple[str, ...], values: Sequence[Any]) -> Any:
        if self.lanes:
            s: Any = 1
            for v, x in zip(variables, values, strict=True):
                k = self.sum_ring.power(v)  # type: ignore[union-attr]
                if k:
                    if type(x) is not int:
                        x = exact(x)  # a float is lifted as its exact dyadic rational (ivm.rings.exact)
                    s = s * (x if k == 1 else x**k)
            return (1, s)
        return self.ring.lift_tuple(variables, values)

    # -- store access (dict stores or column stores)
    def _get(self, store: Any, key: Key) -> Any:
        if self.columnar:
            row = store.rows.get(key)
            return None if row is None else store.payload(row)
        return store.data.get(key)

    def _bucket(self, store: Any, positions: tuple[int, ...], sub: Key) -> list[tuple[Key, Any]]:
        found = store.index(positions).get(sub)
        if not found:
            return []
        if self.columnar:
            return [(k, store.payload(r)) for k, r in found.items()]
        return list(found.items())

    def _items(self, store: Any) -> list[tuple[Key, Any]]:
        if self.columnar:
            return [(k, store.payload(r)) for k, r in store.rows.items()]
        return list(store.data.items())

    def _block(self, node: ViewNode, delta: dict[Key, Any]) -> columnar.Block:
        """``δV`` as a :class:`~.columnar.Block` in the view's layout (ring index → column of its support)."""
        support = node.layout.support  # type: ignore[attr-defined]
        dtype = self.engine._dtype
        k = len(support)
        column = {j: i for i, j in enumerate(support)}
        keys = list(delta)
        n = len(keys)
        C = np.zeros(n, dtype=dtype)
        S = np.zeros((n, k), dtype=dtype)
        Q = np.zeros((n, k, k), dtype=dtype)
        for i, key in enumerate(keys):
            p = delta[key]
            C[i] = p.c
            if p.idx:
                cols = [column[j] for j in p.idx]
                S[i, cols] = p.s
                Q[i][np.ix_(cols, cols)] = p.Q
        return columnar.Block(keys, C, S, columnar.pack(Q))  # a store keeps Q's upper triangle

    # -- the walk
    def run(self, leaf: ViewNode, factors: list[tuple[tuple[str, ...], dict]]) -> None:
        """Propagate one product, given as factors of multiplicities over the leaf's variables, to the root."""
        node = leaf
        scalar: Any = None  # None: the ring's 1
        current = [Factor(names, data, True) for names, data in factors]
        while True:
            parent = node.parent
            if len(current) <= 1 and (parent is None or not self._swap_ahead(node, current)):
                self._hand_off(node, self._expand(node, scalar, current))
                return
            if node.store is not None or parent is None:
                delta = self._expand(node, scalar, current)
                self._write(node, delta)
                if parent is None:
                    self._record(node, delta)
                    return
            assert parent is not None
            plan = next(p for p in parent.plans if p.child is node)  # by identity (dataclass __eq__ is deep)
            stepped = self._step(plan, scalar, current)
            if stepped is None:
                return
            scalar, current = stepped
            node = parent

    def _expand(self, node: ViewNode, scalar: Any, factors: list[Factor]) -> dict[Key, Any]:
        """``scalar ⊗ F_1 ⊗ … ⊗ F_k`` as tuples over ``node.keys``: O(Π|F_i|)."""
        if not factors:
            if scalar is None:
                scalar = (1, 1) if self.lanes else self.ring.one
            return {(): scalar}
        where: dict[str, tuple[int, int]] = {}
        for f, factor in enumerate(factors):
            for i, v in enumerate(factor.names):
                where[v] = (f, i)
        pick = [where[v] for v in node.keys]
        out: dict[Key, Any] = {}
        if len(factors) == 1:
            names, data, raw = factors[0]
            same = names == node.keys
            for key, payload in data.items():
                if raw:
                    payload = self.from_mult(payload)
                out[key if same else tuple(key[i] for _, i in pick)] = self.mul(scalar, payload)
            self.work += len(out)
            return out
        raws = [factor.raw for factor in factors]
        for combo in cartesian(*(list(factor.data.items()) for factor in factors)):
            payload = scalar
            for (_, p), raw in zip(combo, raws, strict=True):
                payload = self.mul(payload, self.from_mult(p) if raw else p)
            out[tuple(combo[f][0][i] for f, i in pick)] = payload
        self.work += len(out)
        return out

    def _hand_off(self, node: ViewNode, delta: dict[Key, Any]) -> None:
        """A product that is one factor over the key is a tuple-wise delta: the engine's delta rule takes it."""
        if self.columnar:
            self.engine._propagate_block(node, self._block(node, delta))
        else:
            self.engine._propagate(node, delta)

    def _write(self, node: ViewNode, delta: dict[Key, Any]) -> None:
        store = node.store
        if store is None:
            return
        if self.columnar:
            store.add(columnar.drop_zero(self._block(node, delta)))
        elif self.lanes:
            store.add_all_lanes(delta)
        else:
            is_zero = self.ring.is_zero
            for key, payload in delta.items():
                store.add(key, payload, is_zero)

    def _record(self, root: ViewNode, delta: dict[Key, Any]) -> None:
        engine = self.engine
        if not engine._tracking:
            return
        if self.columnar:
            engine._record_block(root, columnar.drop_zero(self._block(root, delta)))
        else:
            engine._record(root, {k: p for k, p in delta.items() if not self.is_zero(p)})

    # -- one level: the factorized delta rule
    def _components(self, factors: list[Factor], siblings: list[ViewNode]) -> list[tuple[list[int], list[ViewNode]]]:
        """The connected parts of the hypergraph of factors and siblings (shared variables connect)."""
        items: list[set[str]] = [set(f.names) for f in factors] + [set(s.keys) for s in siblings]
        n = len(items)
        group = list(range(n))

        def find(i: int) -> int:
            while group[i] != i:
                group[i] = group[group[i]]
                i = group[i]
            return i

        for i in range(n):
            for j in range(i + 1, n):
                if items[i] & items[j]:
                    group[find(i)] = find(j)
        parts: dict[int, tuple[list[int], list[ViewNode]]] = {}
        for i in range(n):
            part = parts.setdefault(find(i), ([], []))
            if i < len(factors):
                part[0].append(i)
            else:
                part[1].append(siblings[i - len(factors)])
        return list(parts.values())

    def _swap_ahead(self, node: ViewNode, factors: list[Factor]) -> bool:
        """Would the parent's rule iterate a sibling smaller than the one factor (the ``min`` of Example 12)?"""
        if not factors:
            return False
        parent = node.parent
        assert parent is not None
        plan = next(p for p in parent.plans if p.child is node)
        siblings = [step.sibling for step in plan.steps]
        for fidx, sibs in self._components(factors, siblings):
            if len(fidx) == 1 and len(sibs) == 1 and set(sibs[0].keys) == set(factors[fidx[0]].names):
                store = sibs[0].store
                if store is not None and len(store) < len(factors[fidx[0]].data):
                    return True
        return False

    def _step(self, plan: DeltaPlan, scalar: Any, factors: list[Factor]) -> tuple[Any, list[Factor]] | None:
        """``δV`` of ``plan.node`` from the child's factorized delta, factorized again; ``None`` if it is 0."""
        node = plan.node
        siblings = [step.sibling for step in plan.steps]
        out: list[Factor] = []
        for fidx, sibs in self._components(factors, siblings):
            comp_factors = [factors[i] for i in fidx]
            variables = {v for f in comp_factors for v in f.names} | {v for s in sibs for v in s.keys}
            keep = tuple(v for v in node.keys if v in variables)
            lifts = tuple(v for v in plan.lift_vars if v in variables)
            if (
                len(comp_factors) == 1
                and not sibs
                and not lifts
                and not self.factorized_ring
                and set(comp_factors[0].names) <= set(keep)
            ):
                out.append(comp_factors[0])  # nothing to join, sum or lift: the factor passes through
                continue
            result = self._evaluate(comp_factors, sibs, keep, lifts)
            if self.factorized_ring:  # §6.4: a view of X keeps only X's column in its payloads
                result = {k: p.marginalize_to((node.var,)) for k, p in result.items()}
            result = {k: p for k, p in result.items() if not self.is_zero(p)}
            if not result:
                return None
            if keep:
                out.append(Factor(keep, result))
            else:
                scalar = self.mul(scalar, result[()])
        if self.factorized_ring and scalar is not None:
            scalar = scalar.marginalize_to((node.var,))
        if scalar is not None and self.is_zero(scalar):
            return None
        return scalar, out

    def _evaluate(
        self, factors: list[Factor], siblings: list[ViewNode], keep: tuple[str, ...], lifts: tuple[str, ...]
    ) -> dict[Key, Any]:
        """``⊕_{vars ∖ keep} (⊗ factors ⊗ ⊗ siblings ⊗ g_lifts)`` of one component, keyed by ``keep``."""
        for s in siblings:
            assert s.store is not None, f"view {s.name} is not materialized"
        if len(factors) == 1 and len(siblings) == 1 and set(siblings[0].keys) == set(factors[0].names):
            return self._intersect(factors[0], siblings[0], keep, lifts)
        slot: dict[str, int] = {}
        for factor in factors:
            for v in factor.names:
                slot[v] = len(slot)
        # the sibling joins: a full scan only for a component without factors, then greedy index lookups
        steps: list[tuple[str, ViewNode, tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...]]] = []
        rest = list(siblings)
        while rest:
            best = max(
                rest,
                key=lambda s: (all(k in slot for k in s.keys), sum(k in slot for k in s.keys)),
            )
            rest.remove(best)
            bound_pos = tuple(p for p, k in enumerate(best.keys) if k in slot)
            bound_slots = tuple(slot[best.keys[p]] for p in bound_pos)
            fill = []
            for p, k in enumerate(best.keys):
                if k not in slot:
                    slot[k] = len(slot)
                    fill.append((p, slot[k]))
            if len(bound_pos) == len(best.keys):
                kind = "full"
            elif bound_pos:
                kind = "index"
            else:
                kind = "scan"
            steps.append((kind, best, bound_pos, bound_slots, tuple(fill)))
        values: list[Any] = [None] * len(slot)
        keep_slots = tuple(slot[v] for v in keep)
        lift_slots = tuple(slot[v] for v in lifts)
        out: dict[Key, Any] = {}
        nfactors, nsteps = len(factors), len(steps)
        factor_slots = [tuple(slot[v] for v in factor.names) for factor in factors]
        factor_items = [list(factor.data.items()) for factor in factors]
        factor_raw = [factor.raw for factor in factors]

        def finish(payload: Any) -> None:
            if lift_slots:
                payload = self.mul(payload, self.lift(lifts, [values[s] for s in lift_slots]))
            key = tuple(values[s] for s in keep_slots)
            old = out.get(key)
            out[key] = payload if old is None else self.add(old, payload)

        def join(i: int, payload: Any) -> None:
            if i == nsteps:
                finish(payload)
                return
            kind, sibling, bound_pos, bound_slots, fill = steps[i]
            store = sibling.store
            self.work += 1
            if kind == "full":
                found = self._get(store, tuple(values[s] for s in bound_slots))
                if found is not None:
                    join(i + 1, self.mul(payload, found))
                return
            bucket = (
                self._items(store)
                if kind == "scan"
                else self._bucket(store, bound_pos, tuple(values[s] for s in bound_slots))
            )
            self.work += len(bucket)
            for key, found in bucket:
                for p, s in fill:
                    values[s] = key[p]
                join(i + 1, self.mul(payload, found))

        def seed(f: int, payload: Any) -> None:
            if f == nfactors:
                join(0, payload)
                return
            slots, raw = factor_slots[f], factor_raw[f]
            self.work += len(factor_items[f])
            for key, p in factor_items[f]:
                for s, x in zip(slots, key, strict=True):
                    values[s] = x
                seed(f + 1, self.mul(payload, self.from_mult(p) if raw else p))

        seed(0, None)  # a component has a factor or a sibling, so every payload is a ring element
        return out

    def _intersect(
        self, factor: Factor, sibling: ViewNode, keep: tuple[str, ...], lifts: tuple[str, ...]
    ) -> dict[Key, Any]:
        """``⊕ F ⊗ V_i`` with V_i keyed by exactly F's variables: iterate the smaller, look up in the other.

        O(min(|V_i|, |F|)) (Example 12).
        """
        names, data, raw = factor
        store = sibling.store
        to_sibling = [names.index(v) for v in sibling.keys]
        to_factor = [sibling.keys.index(v) for v in names]
        keep_pos = [names.index(v) for v in keep]
        lift_pos = [names.index(v) for v in lifts]
        out: dict[Key, Any] = {}

        def emit(key: Key, a: Any, b: Any) -> None:  # key over the factor's variables
            payload = self.mul(self.from_mult(a) if raw else a, b)
            if lift_pos:
                payload = self.mul(payload, self.lift(lifts, [key[i] for i in lift_pos]))
            k = tuple(key[i] for i in keep_pos)
            old = out.get(k)
            out[k] = payload if old is None else self.add(old, payload)

        if len(store) < len(data):  # type: ignore[arg-type]
            entries = self._items(store)
            self.work += len(entries)
            for skey, sp in entries:
                fkey = tuple(skey[i] for i in to_factor)
                fp = data.get(fkey)
                if fp is not None:
                    emit(fkey, fp, sp)
        else:
            self.work += len(data)
            for fkey, fp in data.items():
                sp = self._get(store, tuple(fkey[i] for i in to_sibling))
                if sp is not None:
                    emit(fkey, fp, sp)
        return out
