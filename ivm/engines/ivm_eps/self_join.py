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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ivm.engines.ivm_eps.engine import EpsSpec, IVMEps, count_shape, eps_for, is_direct_self_join
from ivm.engines.ivm_eps.partition import HeavyLightPartition, resized
from ivm.engines.ivm_eps.triangle import View, intersect, join_view, view_add
from ivm.query.model import Query
from ivm.query.triangle import TriangleShape
from ivm.updates import Row, Update


class IVMEpsSelfJoin(IVMEps):
    """The self-join triangle count (Appendix B, Figure 5 corrected); O(N^max) amortized.

    >>> from ivm.query.parse import parse
    >>> e = IVMEps(parse("Q() :- E(a,b), E(b,c), E(c,a)"), eps=0.5)
    >>> e.apply([("E", (1, 2), 1), ("E", (2, 3), 1), ("E", (3, 1), 1)])
    >>> e.result(), type(e).__name__
    (3, 'IVMEpsSelfJoin')
    """

    def __init__(self, query: Query, eps: EpsSpec = 0.5) -> None:
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
        """Apply the updates one at a time, in order (OnUpdate, Figure 4 on one relation)."""
        flipped = self.flipped
        for _, row, m in updates:
            if not m:
                continue
            if flipped:
                self.on_update(row[1], row[0], m)
            else:
                self.on_update(row[0], row[1], m)
            self.updates_applied += 1

    def result(self) -> int:
        return self.count

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        if self.count:
            yield (), self.count

    def multiplicity(self, relation: str, row: Row) -> int:
        return self.part.get(row[1], row[0]) if self.flipped else self.part.get(row[0], row[1])

    def stats(self) -> dict[str, int | float]:
        return {
            "result": self.count,
            "updates_applied": self.updates_applied,
            "state_tuples": self.part.size,
            "threshold_base": self.N,
            "heavy_keys": len(self.part.hf),
            "light_keys": len(self.part.lf),
            "view_entries": sum(len(r) for r in self.view.values()),
            "major_rebalances": self.major_rebalances,
            "minor_rebalances": self.minor_rebalances,
            "tuples_moved": self.tuples_moved,
        }

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
        """Strict repartition with the new ``N^eps`` and ``V`` recomputed; Q unchanged."""
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
