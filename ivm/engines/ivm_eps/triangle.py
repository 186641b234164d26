"""IVM^eps for the triangle count ``Q() = Σ R(a,b)·S(b,c)·T(c,a)`` (IVM^eps §3-4).

Theorem 3: O(|D|^{3/2}) preprocessing, **O(|D|^max(eps,1-eps)) amortized
update time**, O(1) answer time and O(|D|^{1+min(eps,1-eps)}) space.

The three atoms are kept as three *slots* in cycle order: slot ``i`` holds the
directed edges ``(x_i, x_{i+1})`` of its relation (an atom written the other
way round, ``T(a,c)``, is stored flipped).  Slot ``i`` is a
:class:`HeavyLightPartition` on its first variable with threshold
``N^{eps_i}``; the generic form of the digest §2.5 keeps one view per slot,

    V[i](x_i, x_{i+2}) = Σ_{x_{i+1}} K_i^h(x_i, x_{i+1}) · K_{i+1}^l(x_{i+1}, x_{i+2})

so ``V[0] = V_RS``, ``V[1] = V_ST``, ``V[2] = V_TR`` (Figure 2).  An update to
part ``r`` of slot ``i`` at ``(α, β)`` with ``j = i+1``, ``k = i+2`` (Figure 3):

    δQ = m·[Σ_g K_j^h(β,g)K_k^h(g,α) + V[j](β,α) + Σ_g K_j^l(β,g)K_k^h(g,α) + Σ_g K_j^l(β,g)K_k^l(g,α)]
    r = h:  V[i](α,g) += m·K_j^l(β,g)       for g in K_j^l(β,·)    O(N^eps)
    r = l:  V[k](g,β) += K_k^h(g,α)·m       for g in K_k^h(·,α)    O(N^{1-eps})

A relation that occurs in several atoms (``E(a,b), E(c,b), F(c,a)``) is kept
as one copy per slot, and an update to it is applied to each of its slots in
turn (the "trivial option" of Appendix B): by telescoping, each slot update
is an exact single-tuple update of a distinct relation.  The one-relation
triangle in one orientation has its own engine (:mod:`.self_join`).

OnUpdate (Figure 4) routes the update by the key's part, then keeps the size
invariant ``⌊N/4⌋ ≤ |D| < N`` with major rebalancing (``N := 2N`` or
``N := ⌊N/2⌋ - 1``, strict repartition, views recomputed) or restores the
loose partition of the updated key with minor rebalancing.

``implementation`` picks where the partitions and views live: ``"python"``
keeps them as the dicts of dicts of this module (the reference),
``"compiled"`` in the compiled state (:mod:`.compact`: C tables of dense ids,
one compiled call per batch, the same algorithm and bounds), ``"auto"`` (the
default) the compiled state when it was built.  Both hold the same partitions,
views, N and counters after every update.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ivm.engines.ivm_eps.compact import (
    EV_BLOCKED,
    EV_DONE,
    EV_MAJOR,
    LIMIT,
    CompactPart,
    compact_parts,
    compact_views,
    new_partitioned_state,
    python_partitions,
    uses_compact_partitions,
    view_entries,
)
from ivm.engines.ivm_eps.engine import EpsSpec, IVMEps, count_shape, eps_for
from ivm.engines.ivm_eps.partition import HeavyLightPartition, Index, cutoffs, resized
from ivm.engines.ivm_eps.variants import register
from ivm.engines.memory import state_memory
from ivm.query.model import Query
from ivm.query.triangle import TriangleShape
from ivm.updates import Row, Update

View = dict[object, dict[object, int]]


def intersect(out: Mapping[object, int] | None, into: Mapping[object, int] | None) -> int:
    """``Σ_z out[z]·into[z]``, iterating the smaller map (digest §2.4 note); O(min size)."""
    if not out or not into:
        return 0
    if len(out) > len(into):
        out, into = into, out
    total = 0
    get = into.get
    for z, m in out.items():
        n = get(z)
        if n:
            total += m * n
    return total


def view_add(view: View, x: object, y: object, m: int) -> None:
    """``V(x, y) += m``, removing the entry when it becomes zero (digest §8 item 2)."""
    row = view.get(x)
    if row is None:
        view[x] = {y: m}
        return
    new = row.get(y, 0) + m
    if new:
        row[y] = new
    else:
        del row[y]
        if not row:
            del view[x]


def join_view(heavy_bwd: Index, light_fwd: Index) -> View:
    """``V(a, c) = Σ_b K^h(a,b)·K'^l(b,c)`` from scratch (Proposition 8, step 4).

    Runs over the join keys ``b`` present in both; the cost is the number of
    joining pairs, at most ``min(|K^h|·1.5N^eps, |K'^l|·2N^{1-eps})``.
    """
    view: View = {}
    if len(heavy_bwd) > len(light_fwd):
        keys: Iterable[object] = [b for b in light_fwd if b in heavy_bwd]
    else:
        keys = [b for b in heavy_bwd if b in light_fwd]
    for b in keys:
        right = light_fwd[b]
        for a, r in heavy_bwd[b].items():
            row = view.get(a)
            if row is None:
                view[a] = {c: r * s for c, s in right.items()}
            else:
                for c, s in right.items():
                    row[c] = row.get(c, 0) + r * s
    # Z-relations can cancel: drop zero entries.
    for a in [a for a, row in view.items() if 0 in row.values()]:
        row = {c: v for c, v in view[a].items() if v}
        if row:
            view[a] = row
        else:
            del view[a]
    return view


@register("count")
class IVMEpsTriangle(IVMEps):
    """IVM^eps for the triangle count (Theorem 3): O(N^max(eps,1-eps)) amortized per update.

    ``eps`` is one exponent in ``[0, 1]`` or a mapping relation -> exponent
    (per-relation eps, Appendix A.2).  ``eps = 0`` or ``1`` is first-order IVM
    (Appendix A.1); ``{"R": 0, "S": 0, "T": 1}`` is factorized IVM.

    >>> from ivm.query.parse import parse
    >>> e = IVMEps(parse("Q() :- R(a,b), S(b,c), T(c,a)"), eps=0.5)
    >>> e.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 1), 1)])
    >>> e.result(), type(e).__name__
    (1, 'IVMEpsTriangle')
    """

    #: ``implementation`` of a snapshot taken before the choice existed (Python partitions)
    implementation = "python"

    def __init__(self, query: Query, eps: EpsSpec = 0.5, implementation: str = "auto") -> None:
        super().__init__(query)
        shape = count_shape(query)
        assert isinstance(shape, TriangleShape)
        self.shape = shape
        self.eps = eps
        self.parts = tuple(HeavyLightPartition(eps_for(eps, e.relation)) for e in shape.edges)
        self.views: tuple[View, View, View] = ({}, {}, {})
        self.occurrences: dict[str, list[tuple[int, bool]]] = {}
        for i, edge in enumerate(shape.edges):
            self.occurrences.setdefault(edge.relation, []).append((i, edge.flipped))
        self.N = 1  # threshold base, ⌊N/4⌋ ≤ |D| < N (Definition 7)
        self.size = 0  # |D|: distinct tuples over all slots
        self.count = 0  # Q
        self.strict = True  # is the partition strict (just after preprocessing / major)?
        self.updates_applied = 0
        self.major_rebalances = 0
        self.minor_rebalances = 0
        self.tuples_moved = 0
        compact = uses_compact_partitions(implementation)  # validates the name; "compiled" needs the kernel
        self.implementation = implementation
        if compact:
            state = new_partitioned_state(self.occurrences, [p.eps for p in self.parts])
            self.parts = compact_parts(state)
            self.views = compact_views(state)  # type: ignore[assignment]

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        reason = IVMEps.refuses(query)
        if reason is None and query.free:
            return "the triangle count has no free variables (listing is IVMEpsListing)"
        return reason

    # -- the engine protocol ---------------------------------------------------------

    def apply(self, updates: Sequence[Update | tuple[str, Row, int]]) -> None:
        """Apply the updates one at a time, in order (OnUpdate, Figure 4): one compiled call per batch
        on the compiled partitions (:meth:`_apply_compact`), else the Python reference loop."""
        if not isinstance(updates, list | tuple):
            updates = list(updates)
        start = 0
        if isinstance(self.parts[0], CompactPart):
            start = self._apply_compact(updates, 0)
        occurrences = self.occurrences
        on_update = self.on_update
        for k in range(start, len(updates)):
            relation, row, m = updates[k]
            if not m:
                continue  # m = 0 is a no-op (digest §8 item 3)
            for i, flipped in occurrences[relation]:
                if flipped:
                    on_update(i, row[1], row[0], m)
                else:
                    on_update(i, row[0], row[1], m)
            self.updates_applied += 1

    def result(self) -> int:
        return self.count

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        if self.count:
            yield (), self.count

    def multiplicity(self, relation: str, row: Row) -> int:
        i, flipped = self.occurrences[relation][0]
        return self.parts[i].get(row[1], row[0]) if flipped else self.parts[i].get(row[0], row[1])

    # -- the compiled partitions (.compact) ----------------------------------------------

    def _apply_compact(self, updates: Sequence[Any], start: int) -> int:
        """OnUpdate (Figure 4) of ``updates[start:]`` on the compiled partitions, O(N^max) amortized each.

        One compiled call applies the updates in order (ApplyUpdate, minor
        rebalancing) and returns between two slot updates when the engine has a
        decision to make: a major rebalancing with the new N (the cutoffs are
        computed here, by :func:`~ivm.engines.ivm_eps.partition.cutoffs`), the
        adaptive engine's skew tests (:meth:`_compact_limits`), or a
        multiplicity the state does not store, after which the Python
        partitions take over (:meth:`_to_python_partitions`).  Returns the index
        of the first update not applied: ``len(updates)``, or where the engine
        leaves the compiled partitions.
        """
        state = self.parts[0].state  # type: ignore[attr-defined]
        k, occ, total = start, 0, len(updates)
        limits = self._compact_limits
        while k < total:
            hot, until = limits()
            k, occ, self.count, applied, event, slot, key, value, minors, moved, touched, self.size = (
                state.apply_partitioned(updates, k, occ, self.count, hot, until)
            )
            self.updates_applied += applied
            if minors:
                self.minor_rebalances += minors
                self.tuples_moved += moved
            if touched:
                self.strict = False
            if event == EV_DONE:
                return k
            if event == EV_MAJOR:  # OnUpdate's size test broke after slot `slot`'s update of key `key`
                self.N = value
                self.rebalance_major()
                self._after_on_update(slot, key)
            elif event == EV_BLOCKED:
                self._to_python_partitions()
                return k
            elif self._compact_event(event, slot, key, value):
                return k
        return k

    def _compact_limits(self) -> tuple[int, int]:
        """``(hot, until)`` of the next compiled call: no skew test and no check here (the adaptive
        engine has both)."""
        return sys.maxsize, sys.maxsize

    def _after_on_update(self, i: int, x: object) -> None:
        """What OnUpdate does after a major rebalancing it triggered (nothing here)."""

    def _compact_event(self, event: int, slot: int, key: object, value: int) -> bool:
        """An event of the compiled call other than a major rebalancing or a blocked update (EV_HIT,
        EV_CHECK: asked for by :meth:`_compact_limits`, which asks for none here); True when the
        engine left the compiled partitions."""
        raise AssertionError(f"event {event} was not asked for")

    def _to_python_partitions(self) -> None:
        """Copy the compiled partitions and views into the reference's Python ones (O(|D| + views)); the
        Python code paths continue from there, exactly."""
        state = self.parts[0].state  # type: ignore[attr-defined]
        parts, views = python_partitions(state)
        self.parts = tuple(parts)  # type: ignore[assignment]
        self.views = tuple(views)  # type: ignore[assignment]

    def stats(self) -> dict[str, int | float]:
        from ivm.engines.first_order.engine import compact_memory  # (first_order imports this package)

        heavy_keys = sum(len(p.hf) for p in self.parts)
        return {
            "result": self.count,
            "updates_applied": self.updates_applied,
            "state_tuples": self.size,
            "threshold_base": self.N,
            "heavy_keys": heavy_keys,
            "light_keys": sum(len(p.lf) for p in self.parts),
            "heavy_tuples": sum(p.hsize for p in self.parts),
            "light_tuples": sum(p.lsize for p in self.parts),
            "view_entries": sum(view_entries(v) for v in self.views),
            "major_rebalances": self.major_rebalances,
            "minor_rebalances": self.minor_rebalances,
            "tuples_moved": self.tuples_moved,
        } | (compact_memory(self.parts, self.size) or state_memory(self, self.size))  # state_bytes, bytes_per_tuple

    # -- OnUpdate / ApplyUpdate (Figures 3 and 4) --------------------------------------

    def on_update(self, i: int, x: object, y: object, m: int) -> None:
        """OnUpdate (Figure 4) for ``δK_i = {(x, y) ↦ m}``: route, apply, rebalance."""
        part = self.parts[i]
        heavy = x in part.hf or part.eps == 0.0
        self.apply_update(i, heavy, x, y, m)
        self.strict = False
        n = resized(self.size, self.N)
        if n is not None:
            self.N = n
            self.rebalance_major()
        elif part.crossed(x, heavy):
            self.rebalance_minor(i, x, to_heavy=not heavy)

    def apply_update(self, i: int, heavy: bool, x: object, y: object, m: int, count: bool = True) -> None:
        """ApplyUpdate (Figure 3, generic form of digest §2.5) on part ``r`` of slot ``i``.

        All deltas read pre-update values; the part itself changes last.
        Cost O(N^max(eps,1-eps)).  ``count=False`` skips δQ (used by minor
        rebalancing, whose moves leave Q unchanged).
        """
        parts = self.parts
        pj = parts[(i + 1) % 3]
        pk = parts[(i + 2) % 3]
        j_heavy_row = pj.hf.get(y)  # K_j^h(β,·)
        j_light_row = pj.lf.get(y)  # K_j^l(β,·); at most one of the two is non-empty
        k_heavy_col = pk.hb.get(x)  # K_k^h(·,α)
        if count:
            # set semantics in both slots: Σ_z K(β,z)·K'(z,α) is a key intersection, in C
            unit = not (pj.nonunit or pk.nonunit)
            delta = 0
            if j_heavy_row is not None:
                if k_heavy_col is not None:  # δQ_rhh, O(N^{1-eps})
                    if unit:
                        delta = len(j_heavy_row.keys() & k_heavy_col.keys())
                    else:
                        delta = intersect(j_heavy_row, k_heavy_col)
                vrow = self.views[(i + 1) % 3].get(y)
                if vrow is not None:
                    delta += vrow.get(x, 0)  # δQ_rhl = V[j](β,α), O(1)
            elif j_light_row is not None:
                if k_heavy_col is not None:  # δQ_rlh, O(N^min)
                    if unit:
                        delta = len(j_light_row.keys() & k_heavy_col.keys())
                    else:
                        delta = intersect(j_light_row, k_heavy_col)
                k_light_col = pk.lb.get(x)
                if k_light_col is not None:  # δQ_rll, O(N^eps)
                    if unit:
                        delta += len(j_light_row.keys() & k_light_col.keys())
                    else:
                        delta += intersect(j_light_row, k_light_col)
            self.count += m * delta
        if heavy:
            if j_light_row is not None:
                view = self.views[i]
                row = view.get(x)
                if row is None:
                    view[x] = {g: m * s for g, s in j_light_row.items()}
                else:
                    for g, s in j_light_row.items():
                        new = row.get(g, 0) + m * s
                        if new:
                            row[g] = new
                        else:
                            del row[g]
                    if not row:
                        del view[x]
        elif k_heavy_col is not None:
            view = self.views[(i + 2) % 3]
            for g, t in k_heavy_col.items():
                view_add(view, g, y, t * m)
        self.size += parts[i].add(heavy, x, y, m)

    # -- rebalancing (Figure 4) --------------------------------------------------------

    def rebalance_major(self) -> None:
        """MajorRebalancing: strict repartition with the new ``N^eps``, views recomputed.

        Q is unchanged.  Cost O(|D|^{1+min(eps,1-eps)}) (Proposition 11),
        amortized O(|D|^min) over the ≥ N/4 updates between two of them.  The
        compiled partitions do it in one call with the cutoffs of the new N.
        """
        if isinstance(self.parts[0], CompactPart):
            self.parts[0].state.major(self.N, [cutoffs(self.N, p.eps) for p in self.parts])
        else:
            for part in self.parts:
                part.strict_partition(self.N)
            self.recompute_views()
        self.strict = True
        self.major_rebalances += 1

    def recompute_views(self) -> None:
        """``V[i] = Σ K_i^h · K_{i+1}^l`` from the current parts (Proposition 8, step 4)."""
        p = self.parts
        self.views = tuple(join_view(p[i].hb, p[(i + 1) % 3].lf) for i in range(3))  # type: ignore[assignment]

    def rebalance_minor(self, i: int, x: object, to_heavy: bool) -> None:
        """MinorRebalancing: move every tuple of key ``x`` of slot ``i`` to the other part.

        Moves fewer than ``(3/2)N^eps + 1`` tuples, each a delete and an insert
        of cost O(N^max) with δQ skipped (its net effect is zero, digest §2.6
        note): O(N^{eps+max}) (Proposition 12), amortized O(N^max).
        """
        part = self.parts[i]
        source = part.lf if to_heavy else part.hf
        moved = list(source[x].items())  # iterate over a snapshot
        for y, m in moved:
            self.apply_update(i, not to_heavy, x, y, -m, count=False)
            self.apply_update(i, to_heavy, x, y, m, count=False)
        self.minor_rebalances += 1
        self.tuples_moved += len(moved)

    # -- preprocessing and static counting (Proposition 8, Appendix A.3) ----------------

    def bulk_load(self, updates: Iterable[Update | tuple[str, Row, int]]) -> None:
        """Load a whole database into an empty engine without rebalancing.

        Appendix A.3 (static counting, the variant with known degrees): the
        final degrees are computed first, ``N = 2|D| + 1`` (the initial state of
        Definition 7) and every relation is strictly partitioned with
        ``θ = N^eps``; then the tuples are inserted one by one with
        ApplyUpdate and no rebalancing.  Each insert costs worst-case
        O(N^max(eps,1-eps)), so the total is **O(|D|^{3/2}) at eps = 1/2** and
        the resulting state is the strict initial state of Proposition 8.
        A non-empty engine falls back to :meth:`apply`.
        """
        if self.size:
            self.apply(list(updates))
            return
        slot_rows: list[dict[tuple[object, object], int]] = [{}, {}, {}]
        compact = isinstance(self.parts[0], CompactPart)
        applied = 0
        for relation, row, m in updates:
            for i, flipped in self.occurrences[relation]:
                key = (row[1], row[0]) if flipped else (row[0], row[1])
                slot_rows[i][key] = slot_rows[i].get(key, 0) + m
            applied += 1
        degree: list[dict[object, int]] = [{}, {}, {}]
        total = 0
        for i, rows in enumerate(slot_rows):
            for (x, _), m in rows.items():
                if m:
                    degree[i][x] = degree[i].get(x, 0) + 1
                    total += 1
        if compact and any(abs(m) > LIMIT for rows in slot_rows for m in rows.values()):
            self._to_python_partitions()  # a multiplicity the compiled state does not store
            compact = False
        self.N = 2 * total + 1
        for part in self.parts:
            part.set_threshold(self.N)
        if compact:
            state = self.parts[0].state  # type: ignore[attr-defined]
            state.set_threshold_base(self.N)
        for i, rows in enumerate(slot_rows):
            part, deg = self.parts[i], degree[i]
            for (x, y), m in rows.items():
                if m and compact:
                    self.count += state.apply_update(i, deg[x] >= part.strict, x, y, m)
                elif m:
                    self.apply_update(i, deg[x] >= part.strict, x, y, m)
        if compact:
            self.size = state.total()
        self.updates_applied += applied
        self.strict = True

    # -- introspection -----------------------------------------------------------------

    def slot_relations(self) -> list[dict[tuple[object, object], int]]:
        """The three slots as plain maps ``(x_i, x_{i+1}) -> m`` (for checks and tests)."""
        return [{(x, y): m for x, y, m in p.items()} for p in self.parts]

    def describe(self) -> dict[str, Any]:
        """The eps per slot and the resulting update/space exponents (Theorem 3)."""
        eps = [p.eps for p in self.parts]
        # V[i] joins K_i^h (keys of degree ≥ θ_i/2, so ≤ 2N^{1-eps_i} per B-value)
        # with K_{i+1}^l (degree < 1.5N^{eps_{i+1}}).
        return {
            "eps": eps,
            "update_exponent": max(max(e, 1 - e) for e in eps),
            "space_exponent": max(1 + min(eps[(i + 1) % 3], 1 - eps[i]) for i in range(3)),
        }
