"""IVM^eps with eps chosen per relation from the observed degrees (``engine="auto"``).

IVM^eps (Kara et al., ICDT'19, Theorem 3) maintains the triangle count in
O(N^max(eps,1-eps)) amortized time per single-tuple update; eps = 0 or 1 is
classical first-order IVM (Appendix A.1), which costs
O(min(deg_S(b), deg_T(a))) per update ``δR(a,b)`` (IVM^eps §1.1).  On real
graphs the degrees are mild, the first-order intersection is short and the
partition bookkeeping of eps = 1/2 costs more than it saves; on skewed data
first-order updates become linear.  This engine picks, per relation (slot),

- ``eps = 1`` (first-order: the slot is all light, no view reads it) while every
  key of the slot has degree below ``skew · √N``, and
- ``eps = hot_eps`` (1/2 by default: heavy/light partition, Theorem 3) once a key
  reaches that degree,

and goes back to ``eps = 1`` when the slot's largest degree has fallen below
``(skew/4) · √N`` (hysteresis: a factor 4 between the two cutoffs) and at least
``dwell · |D|`` updates have passed since the slot's last switch.  A switch
sets the slot's exponent and runs the engine's *major rebalancing* (strict
repartition with the current N, views recomputed, Figure 4); Q is unchanged by
a switch because the count does not depend on the partition (digest §7.3 note).

Guarantee.  While all slots are first-order every update costs
O(min(deg_j(β), deg_k(α))) ≤ O(skew · √N) worst-case, by the cutoff; a mix of
``eps = 1`` slots (all degrees below the cutoff) and ``hot_eps`` slots costs
O(skew · N^max(hot_eps, 1-hot_eps)) amortized (each term of Figure 3 iterates
either a light list of a cold slot, bounded by the cutoff, or a list bounded
as in Theorem 3).  A promotion costs a major rebalancing, O(N^{1+min}); a
demotion needs ``dwell·|D|`` updates in between, so the switches add
O(N^min/dwell) amortized, except the first promotion, which is paid once like
preprocessing (Proposition 8).  Overall: **O(√N) amortized per update at
hot_eps = 1/2**, the bound of Theorem 3, with first-order constants on
unskewed data.  Cutoffs are rechecked whenever N changes (a halving of N
lowers the cutoff: all first-order slots are rescanned, O(|D|), amortized over
the ≥ N/4 updates between two changes of N, §4.1).

The first-order mode runs its own tight loop over the light indexes of the
partitions (the same data structures, so a switch is a repartition, never a
copy); when every stored multiplicity of the two intersected slots is 1 (set
semantics, tracked by a per-slot counter of other values) the intersection
``Σ_z out[z]·into[z]`` is ``len(out.keys() & into.keys())``, computed in C.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ivm.engines.ivm_eps.engine import IVMEps
from ivm.engines.ivm_eps.triangle import IVMEpsTriangle, intersect
from ivm.query.model import Query
from ivm.updates import Row, Update

DEFAULT_SKEW = 8.0
DEFAULT_DWELL = 0.25
NEXT = (1, 2, 0)
PREV = (2, 0, 1)

#: numeric codes of :attr:`IVMEpsAdaptive.reason_code` (the metric); the words are in ``choice()``
REASONS = {0: "no skew observed", 1: "a key reached the skew cutoff", 2: "skew faded", 3: "requested"}


class IVMEpsAdaptive(IVMEpsTriangle):
    """Triangle count with per-relation eps chosen from degree statistics (see the module docstring).

    ``skew`` is the cutoff factor λ (a slot is partitioned once a key has degree
    ``≥ λ√N``), ``eps`` the exponent a skewed slot gets, ``dwell`` the fraction
    of |D| that must pass between two switches of a slot before it goes back.

    >>> from ivm.query.parse import parse
    >>> e = IVMEpsAdaptive(parse("Q() :- R(a,b), S(b,c), T(c,a)"))
    >>> e.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 1), 1)])
    >>> e.result(), e.stats()["partitioned"], e.stats()["eps"]
    (1, 0, 1.0)
    """

    name = "ivm_eps_auto"
    #: the fewest updates between two checks for fading skew (each costs O(heavy keys))
    min_check = 256

    def __init__(
        self, query: Query, eps: float = 0.5, skew: float = DEFAULT_SKEW, dwell: float = DEFAULT_DWELL
    ) -> None:
        if not 0.0 <= float(eps) <= 1.0:
            raise ValueError(f"eps must lie in [0, 1], got {eps}")
        if skew <= 0 or dwell < 0:
            raise ValueError("skew must be positive and dwell non-negative")
        super().__init__(query, eps=1.0)
        self.hot_eps = float(eps)
        self.eps = self.hot_eps  # what explain() reports as the exponent of a partitioned relation
        self.skew = float(skew)
        self.dwell = float(dwell)
        self.hot_cutoff = 1
        self._set_cutoffs()
        self.nonunit = [0, 0, 0]  # per slot: stored multiplicities other than 1 (first-order mode)
        self.promotions = 0
        self.demotions = 0
        self.reason_code = 0
        self.reason = REASONS[0]
        self.last_switch = [0, 0, 0]  # updates_applied at the slot's last switch
        self.switch_size = [0, 0, 0]  # |D| at the slot's last switch
        self.next_check = 0
        self.max_degree = 0  # largest key degree seen at the last check or switch

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        reason = IVMEpsTriangle.refuses(query)
        if reason is None:
            from ivm.engines.ivm_eps.engine import count_shape, is_direct_self_join

            shape = count_shape(query)
            if not isinstance(shape, str) and is_direct_self_join(shape):
                return "the one-relation triangle has its own engine (IVM^eps App. B, ivm_eps)"
        return reason

    # -- the current choice ------------------------------------------------------------

    @property
    def partitioned(self) -> bool:
        return any(p.eps != 1.0 for p in self.parts)

    def slot_eps(self) -> list[float]:
        return [p.eps for p in self.parts]

    def choice(self) -> dict[str, Any]:
        """The current eps per relation and why (shown by ``View.explain()``)."""
        eps = {e.relation: p.eps for e, p in zip(self.shape.edges, self.parts, strict=True)}
        return {
            "mode": "partitioned" if self.partitioned else "first_order",
            "eps": eps,
            "reason": self.reason,
            "skew_cutoff": f"a relation is partitioned (eps = {self.hot_eps:g}) once a key has degree "
            f"≥ {self.skew:g}·√N = {self.hot_cutoff} (N = {self.N}); it returns to first-order (eps = 1) "
            f"below {self.skew / 4:g}·√N after {self.dwell:g}·|D| updates",
            "promotions": self.promotions,
            "demotions": self.demotions,
            "max_degree_seen": self.max_degree,
        }

    def stats(self) -> dict[str, int | float]:
        out = super().stats()
        eps = self.slot_eps()
        out.update(
            {
                "eps": min(eps),
                "partitioned": int(self.partitioned),
                "mode_switches": self.promotions + self.demotions,
                "promotions": self.promotions,
                "demotions": self.demotions,
                "switch_reason": self.reason_code,
                "skew_cutoff": self.hot_cutoff,
                "max_degree_seen": self.max_degree,
            }
        )
        for edge, e in zip(self.shape.edges, eps, strict=True):
            out.setdefault(f"eps.{edge.relation}", e)
        return out

    # -- switching ---------------------------------------------------------------------

    def _set_cutoffs(self) -> None:
        root = math.sqrt(self.N)
        self.hot_cutoff = max(1, math.ceil(self.skew * root - 1e-9))
        self.cold_cutoff = self.skew / 4 * root

    def _switch(self, slots: list[int], eps: float, code: int, detail: str) -> None:
        """Set ``eps`` on ``slots`` and repartition (major rebalancing machinery; Q unchanged)."""
        for i in slots:
            self.parts[i].eps = eps
            self.last_switch[i] = self.updates_applied
            self.switch_size[i] = self.size
        before = self.count
        super().rebalance_major()
        self.major_rebalances -= 1  # a switch, not a size-triggered major rebalancing
        assert self.count == before
        if eps == 1.0:
            self.demotions += len(slots)
        else:
            self.promotions += len(slots)
        self.reason_code = code
        self.reason = detail
        if not self.partitioned:
            self._count_nonunit()
        self.next_check = self.updates_applied + self._check_every()

    def _count_nonunit(self) -> None:
        self.nonunit = [sum(1 for row in p.lf.values() for m in row.values() if m != 1) for p in self.parts]

    def _check_every(self) -> int:
        return max(self.min_check, self.size // 8)

    def _promote_hot_slots(self) -> None:
        """Promote every first-order slot with a key of degree ≥ the cutoff (O(keys) scan)."""
        for i, part in enumerate(self.parts):
            if part.eps != 1.0:
                continue
            deg = max((len(r) for r in part.lf.values()), default=0)
            self.max_degree = max(self.max_degree, deg)
            if deg >= self.hot_cutoff:
                self._promote(i, None, deg)

    def _promote(self, i: int, key: object, degree: int) -> None:
        relation = self.shape.edges[i].relation
        self.max_degree = max(self.max_degree, degree)
        who = f"key {key!r} of" if key is not None else "a key of"
        slots = [i]
        for other, part in enumerate(self.parts):  # one repartition for every slot over the cutoff
            hot = other != i and part.eps == 1.0
            if hot and max((len(r) for r in part.lf.values()), default=0) >= self.hot_cutoff:
                slots.append(other)
        self._switch(
            slots,
            self.hot_eps,
            1,
            f"{who} {relation} (slot {i}) has degree {degree} ≥ {self.skew:g}·√N = {self.hot_cutoff} (N = {self.N})",
        )

    def _checkpoint(self) -> None:
        """Demote partitioned slots whose skew faded (max degree < (skew/4)·√N after the dwell)."""
        self.next_check = self.updates_applied + self._check_every()
        cold = []
        largest = 0
        for i, part in enumerate(self.parts):
            if part.eps == 1.0:
                continue
            deg = max((len(r) for r in part.hf.values()), default=0)
            if part.up > self.cold_cutoff:
                deg = max(deg, max((len(r) for r in part.lf.values()), default=0))
            largest = max(largest, deg)
            waited = self.updates_applied - self.last_switch[i] >= self.dwell * self.switch_size[i]
            if deg < self.cold_cutoff and waited:
                cold.append(i)
        self.max_degree = largest
        if cold:
            names = ", ".join(self.shape.edges[i].relation for i in cold)
            self._switch(cold, 1.0, 2, f"the largest degree of {names} fell below {self.skew / 4:g}·√N")

    def bulk_load(self, updates: Any) -> None:
        """Static loading (Appendix A.3) in first-order form, then the skew test on the loaded degrees."""
        super().bulk_load(updates)
        self._set_cutoffs()
        if not self.partitioned:
            self._count_nonunit()
            self._promote_hot_slots()

    # -- updates -----------------------------------------------------------------------

    def apply(self, updates: Sequence[Update | tuple[str, Row, int]]) -> None:
        """Apply the updates in order: the first-order loop while no slot is partitioned,
        OnUpdate of IVM^eps (Figure 4) otherwise, switching modes between two updates."""
        start, total = 0, len(updates)
        while start < total:
            if self.partitioned:
                start = self._apply_partitioned(updates, start)
            else:
                start = self._apply_first_order(updates, start)

    def _apply_partitioned(self, updates: Sequence[Any], start: int) -> int:
        occurrences = self.occurrences
        # the cold (first-order) slots need the skew test after each of their updates
        on_update = self.on_update if any(p.eps == 1.0 for p in self.parts) else super().on_update
        for k in range(start, len(updates)):
            relation, row, m = updates[k]
            if not m:
                continue
            for i, flipped in occurrences[relation]:
                if flipped:
                    on_update(i, row[1], row[0], m)
                else:
                    on_update(i, row[0], row[1], m)
            self.updates_applied += 1
            if self.updates_applied >= self.next_check:
                self._checkpoint()
                if not self.partitioned or on_update != self.on_update:
                    return k + 1  # the mode or the set of cold slots may have changed
        return len(updates)

    def on_update(self, i: int, x: object, y: object, m: int) -> None:
        """OnUpdate (Figure 4), then the skew test for a first-order slot's updated key."""
        super().on_update(i, x, y, m)
        part = self.parts[i]
        if part.eps == 1.0:
            row = part.lf.get(x)
            if row is not None and len(row) >= self.hot_cutoff:
                self._promote(i, x, len(row))

    def rebalance_major(self) -> None:
        """Major rebalancing (Figure 4); a new N moves the cutoffs, so first-order slots are rescanned."""
        super().rebalance_major()
        lower = self.hot_cutoff
        self._set_cutoffs()
        if self.hot_cutoff < lower:
            self._promote_hot_slots()

    def _apply_first_order(self, updates: Sequence[Any], start: int) -> int:
        """First-order IVM (IVM^eps §1.1, eps = 1 everywhere) from ``updates[start]`` on.

        Returns the index of the next update to apply: the end, or just after the
        update that made a key reach the skew cutoff (then one slot is partitioned).
        Keeps the size invariant ``⌊N/4⌋ ≤ |D| < N`` (Definition 7) so that a
        switch finds the state of a major rebalancing.
        """
        parts = self.parts
        fwd = (parts[0].lf, parts[1].lf, parts[2].lf)
        bwd = (parts[0].lb, parts[1].lb, parts[2].lb)
        lsize = [parts[0].lsize, parts[1].lsize, parts[2].lsize]
        nonunit = self.nonunit
        occurrences = self.occurrences
        count, size, n, hot, skew = self.count, self.size, self.N, self.hot_cutoff, self.skew
        applied = 0
        stop = len(updates)
        hit: tuple[int, object, int] | None = None
        rescan = False
        resized = 0
        k = start
        for k in range(start, stop):
            relation, row, m = updates[k]
            if not m:
                continue
            for i, flipped in occurrences[relation]:
                if flipped:
                    x, y = row[1], row[0]
                else:
                    x, y = row[0], row[1]
                j, p = NEXT[i], PREV[i]
                out = fwd[j].get(y)
                if out is not None:
                    into = bwd[p].get(x)
                    if into is not None:
                        if nonunit[j] or nonunit[p]:
                            count += m * intersect(out, into)
                        else:
                            count += m * len(out.keys() & into.keys())
                f, b = fwd[i], bwd[i]
                r = f.get(x)
                if r is None:
                    f[x] = {y: m}
                    col = b.get(y)
                    if col is None:
                        b[y] = {x: m}
                    else:
                        col[x] = m
                    size += 1
                    lsize[i] += 1
                    if m != 1:
                        nonunit[i] += 1
                    if hot <= 1:
                        hit = (i, x, 1)
                else:
                    old = r.get(y, 0)
                    new = old + m
                    if new:
                        r[y] = new
                        col = b.get(y)
                        if col is None:
                            b[y] = {x: new}
                        else:
                            col[x] = new
                        if not old:
                            size += 1
                            lsize[i] += 1
                            if len(r) >= hot:
                                hit = (i, x, len(r))
                        if new != 1:
                            if old == 1 or not old:
                                nonunit[i] += 1
                        elif old:
                            nonunit[i] -= 1
                    else:
                        del r[y]
                        if not r:
                            del f[x]
                        col = b[y]
                        del col[x]
                        if not col:
                            del b[y]
                        size -= 1
                        lsize[i] -= 1
                        if old != 1:
                            nonunit[i] -= 1
                if size == n:
                    n *= 2
                    resized += 1
                    hot = max(1, math.ceil(skew * math.sqrt(n) - 1e-9))
                elif size < n // 4:
                    n = n // 2 - 1
                    resized += 1
                    rescan = True
            applied += 1
            if hit is not None or rescan:
                break
        self.count, self.size = count, size
        for i in range(3):
            parts[i].lsize = lsize[i]
        self.updates_applied += applied
        if n != self.N:
            self.N = n
            self._set_cutoffs()
        # each change of N is a major rebalancing whose strict repartition moves nothing at eps = 1
        self.major_rebalances += resized
        if hit is not None:
            self._promote(*hit)
        elif rescan:
            self._promote_hot_slots()
        return k + 1 if stop > start else start


__all__ = ["IVMEps", "IVMEpsAdaptive"]
