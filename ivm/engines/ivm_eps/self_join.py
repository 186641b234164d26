"""IVM^eps for triangles in one edge relation: ``Q() = Σ R(a,b)·R(b,c)·R(c,a)`` (Appendix B).

The direct option of Appendix B: ``R`` is partitioned once, on its first
column, with ``θ = N^eps``, and the three views of the general case coincide
in **one view** ``V(a,c) = Σ_b R_h(a,b)·R_l(b,c)``.  Theorem 3's bounds carry
over: O(N^max(eps,1-eps)) amortized update, O(1) answer,
O(N^{1+min(eps,1-eps)}) space.

The delta of ``δR = {(α,β) ↦ m}`` (pre-update values, digest §5.1)::

    δQ = 3·m·Σ_{v,w∈{h,l}} Σ_c R_v(β,c)·R_w(c,α)         (the (h,l) term is V(β,α))
       + [α = β]·(3·m²·(R_h(α,α) + R_l(α,α)) + m³)

and Figure 5 with the **corrected line 13**: a light update maintains
``V(a,β) += R_h(a,α)·m`` (the paper prints ``R_h(a,β)``, which is wrong).

``implementation="compiled"`` (and ``"auto"``, the default, when it was built)
keeps ``R``'s partition and ``V`` in the compiled state (:mod:`.compact`, one
slot and one view of a state built for the self-join): Figure 5, OnUpdate and
both rebalancings in C, one call per batch, the same bounds; ``"python"`` is
the reference below.  A minor rebalancing there moves the key's row as a whole:
``V`` changes by ``E·R_l' - R_h·E`` to heavy and ``R_h'·E - E·R_l`` to light
(``E`` the row, ``'`` without it), which is what the per-tuple moves of Figure
4 add up to.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ivm.engines.ivm_eps.compact import (
    EV_BLOCKED,
    EV_DONE,
    EV_MAJOR,
    CompactPart,
    CompactView,
    new_partitioned_state,
    python_partitions,
    uses_compact_partitions,
    view_entries,
)
from ivm.engines.ivm_eps.engine import EpsSpec, IVMEps, count_shape, eps_for, is_direct_self_join
from ivm.engines.ivm_eps.partition import HeavyLightPartition, cutoffs, resized
from ivm.engines.ivm_eps.triangle import View, intersect, join_view, view_add
from ivm.engines.ivm_eps.variants import register
from ivm.engines.memory import state_memory
from ivm.query.model import Query
from ivm.query.triangle import TriangleShape
from ivm.updates import Row, Update


@register("self_join")
class IVMEpsSelfJoin(IVMEps):
    """The self-join triangle count (Appendix B, Figure 5 corrected); O(N^max) amortized.

    >>> from ivm.query.parse import parse
    >>> e = IVMEps(parse("Q() :- E(a,b), E(b,c), E(c,a)"), eps=0.5)
    >>> e.apply([("E", (1, 2), 1), ("E", (2, 3), 1), ("E", (3, 1), 1)])
    >>> e.result(), type(e).__name__
    (3, 'IVMEpsSelfJoin')
    """

    #: ``implementation`` of a snapshot taken before the choice existed (Python partition)
    implementation = "python"

    def __init__(self, query: Query, eps: EpsSpec = 0.5, implementation: str = "auto") -> None:
        super().__init__(query)
        shape = count_shape(query)
        assert isinstance(shape, TriangleShape)
        self.shape = shape
        self.relation = shape.edges[0].relation
        self.flipped = shape.edges[0].flipped
        self.eps = eps
        self.part = HeavyLightPartition(eps_for(eps, self.relation))
        self.view: View = {}
        self.N = 1
        self.count = 0
        self.strict = True
        self.updates_applied = 0
        self.major_rebalances = 0
        self.minor_rebalances = 0
        self.tuples_moved = 0
        compact = uses_compact_partitions(implementation)  # validates the name; "compiled" needs the kernel
        self.implementation = implementation
        if compact:
            state = new_partitioned_state({self.relation: [(0, self.flipped)]}, [self.part.eps], selfjoin=True)
            self.part = CompactPart(state, 0)
            self.view = CompactView(state, 0)  # type: ignore[assignment]

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        reason = IVMEps.refuses(query)
        if reason is not None:
            return reason
        shape = count_shape(query)
        assert isinstance(shape, TriangleShape)
        if query.free:
            return "the triangle count has no free variables"
        if not is_direct_self_join(shape):
            return "not one relation read the same way round in all three atoms"
        return None

    @property
    def size(self) -> int:
        return self.part.size

    def apply(self, updates: Sequence[Update | tuple[str, Row, int]]) -> None:
        """Apply the updates one at a time, in order (OnUpdate, Figure 4 on one relation): one compiled
        call per batch on the compiled partition (:meth:`_apply_compact`), else the Python loop."""
        if not isinstance(updates, list | tuple):
            updates = list(updates)
        start = self._apply_compact(updates) if isinstance(self.part, CompactPart) else 0
        flipped = self.flipped
        for k in range(start, len(updates)):
            _, row, m = updates[k]
            if not m:
                continue
            if flipped:
                self.on_update(row[1], row[0], m)
            else:
                self.on_update(row[0], row[1], m)
            self.updates_applied += 1

    def _apply_compact(self, updates: Sequence[Any]) -> int:
        """OnUpdate (Figure 4, Figure 5 corrected) of the updates on the compiled partition, O(N^max)
        amortized each; returns to Python for a major rebalancing's cutoffs and when a multiplicity is
        not stored there (the Python partition takes over from that update).  Returns the index of
        the first update not applied."""
        state = self.part.state  # type: ignore[attr-defined]
        k, occ, total = 0, 0, len(updates)
        while k < total:
            k, occ, self.count, applied, event, _, _, value, minors, moved, touched, _ = state.apply_partitioned(
                updates, k, occ, self.count
            )
            self.updates_applied += applied
            if minors:
                self.minor_rebalances += minors
                self.tuples_moved += moved
            if touched:
                self.strict = False
            if event == EV_MAJOR:
                self.N = value
                self.rebalance_major()
            elif event == EV_BLOCKED:
                parts, views = python_partitions(state, slots=1)
                self.part, self.view = parts[0], views[0]
                return k
            else:
                assert event == EV_DONE, event
                return k
        return k

    def result(self) -> int:
        return self.count

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        if self.count:
            yield (), self.count

    def multiplicity(self, relation: str, row: Row) -> int:
        return self.part.get(row[1], row[0]) if self.flipped else self.part.get(row[0], row[1])

    def stats(self) -> dict[str, int | float]:
        from ivm.engines.first_order.engine import compact_memory  # (first_order imports this package)

        return {
            "result": self.count,
            "updates_applied": self.updates_applied,
            "state_tuples": self.part.size,
            "threshold_base": self.N,
            "heavy_keys": len(self.part.hf),
            "light_keys": len(self.part.lf),
            "view_entries": view_entries(self.view),
            "major_rebalances": self.major_rebalances,
            "minor_rebalances": self.minor_rebalances,
            "tuples_moved": self.tuples_moved,
        } | (compact_memory([self.part], self.part.size) or state_memory(self, self.part.size))

    def on_update(self, x: object, y: object, m: int) -> None:
        """OnUpdate (Figure 4) for ``δR = {(x, y) ↦ m}``."""
        part = self.part
        heavy = x in part.hf or part.eps == 0.0
        self.apply_update(heavy, x, y, m)
        self.strict = False
        n = resized(part.size, self.N)
        if n is not None:
            self.N = n
            self.rebalance_major()
        elif part.crossed(x, heavy):
            self.rebalance_minor(x, to_heavy=not heavy)

    def apply_update(self, heavy: bool, x: object, y: object, m: int, count: bool = True) -> None:
        """Figure 5 (line 13 corrected) for ``δR_r = {(x, y) ↦ m}``; O(N^max(eps,1-eps))."""
        part = self.part
        hf, lf, hb, lb = part.hf, part.lf, part.hb, part.lb
        if count:
            h_row = hf.get(y)  # R_h(β,·)
            l_row = lf.get(y)  # R_l(β,·)
            h_col = hb.get(x)  # R_h(·,α)
            delta = 0
            if h_row is not None:
                if h_col is not None:
                    delta = intersect(h_row, h_col)  # line 3
                vrow = self.view.get(y)
                if vrow is not None:
                    delta += vrow.get(x, 0)  # line 4
            elif l_row is not None:
                if h_col is not None:
                    delta = intersect(l_row, h_col)  # line 5
                l_col = lb.get(x)
                if l_col is not None:
                    delta += intersect(l_row, l_col)  # line 6
            self.count += 3 * m * delta
            if x == y:  # lines 7-9: the self-loop terms
                self.count += 3 * m * m * part.get(x, x) + m * m * m
        if heavy:
            l_row = lf.get(y)
            if l_row is not None:  # line 11
                for c, s in l_row.items():
                    view_add(self.view, x, c, m * s)
        else:
            h_col = hb.get(x)
            if h_col is not None:  # line 13, corrected: R_h(a, α)
                for a, r in h_col.items():
                    view_add(self.view, a, y, r * m)
        part.add(heavy, x, y, m)  # line 14

    def rebalance_major(self) -> None:
        """Strict repartition with the new ``N^eps`` and ``V`` recomputed; Q unchanged.
        O(|D|^{1+min(eps,1-eps)}) (Proposition 11)."""
        if isinstance(self.part, CompactPart):
            self.part.state.major(self.N, [cutoffs(self.N, self.part.eps)])
        else:
            self.part.strict_partition(self.N)
            self.view = join_view(self.part.hb, self.part.lf)
        self.strict = True
        self.major_rebalances += 1

    def rebalance_minor(self, x: object, to_heavy: bool) -> None:
        """Move every tuple of key ``x`` to the other part, maintaining only ``V``."""
        source = self.part.lf if to_heavy else self.part.hf
        moved = list(source[x].items())
        for y, m in moved:
            self.apply_update(not to_heavy, x, y, -m, count=False)
            self.apply_update(to_heavy, x, y, m, count=False)
        self.minor_rebalances += 1
        self.tuples_moved += len(moved)

    def slot_relations(self) -> list[dict[tuple[object, object], int]]:
        rel = {(x, y): m for x, y, m in self.part.items()}
        return [rel, rel, rel]
