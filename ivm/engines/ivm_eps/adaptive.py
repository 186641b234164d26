"""IVM^eps with eps chosen per relation from the observed work or degrees (``engine="auto"``).

IVM^eps (Kara et al., ICDT'19, Theorem 3) maintains the triangle count in
O(N^max(eps,1-eps)) amortized time per single-tuple update; eps = 0 or 1 is
classical first-order IVM (Appendix A.1), which costs
O(min(deg_S(b), deg_T(a))) per update ``δR(a,b)`` (IVM^eps §1.1).  On real
graphs the intersections are short and the partition bookkeeping of eps = 1/2
costs more than it saves; on skewed data first-order updates can become
linear.  This engine starts with every relation (slot) at ``eps = 1``
(first-order: the slot is all light, no view reads it) and partitions slots
(``eps = hot_eps``, 1/2 by default: heavy/light partition, Theorem 3) by one of
two promotion policies (``promote``):

- ``"work"`` (the default): a ski-rental rule on the first-order work itself.
  While every slot is first-order, update ``δK_i(x,y)`` costs
  ``w = min(deg_j(y), deg_k(x))`` element steps (the smaller row its
  intersection walks, summed over the slots the relation feeds); the engine
  keeps the excess ``E := max(0, E + w - r)`` with ``r = min(c_p, λ√N)`` the
  estimated cost of one update in the partitioned mode in the same units, and
  partitions once ``E ≥ L = |D|`` (the buy cost: a major rebalancing is
  Ω(|D|)).  The slots partitioned are the first-order slots with a key of
  degree ``≥ N^hot_eps`` (IVM^eps's heavy threshold; all first-order slots if
  none has one); a slot left at eps = 1 beside a partitioned one is
  partitioned by the degree rule below (its keys stay under ``λ√N``).  A
  switch starts a new epoch (``E = 0``).  ``E`` counts elements, never
  time, so replays and snapshots decide alike; it is part of the snapshot.
- ``"degree"``: a slot is partitioned as soon as a key of it reaches degree
  ``λ·√N`` (``skew`` = λ = 8 by default), in first-order mode too.

Both return a slot to ``eps = 1`` when its largest degree has fallen below
``(λ/4)·√N`` (hysteresis: a factor 4 between the two cutoffs) and at least
``dwell · |D|`` updates have passed since the slot's last switch.  A switch
sets the slot's exponent and runs the engine's *major rebalancing* (strict
repartition with the current N, views recomputed, Figure 4); Q is unchanged by
a switch because the count does not depend on the partition (digest §7.3 note).

**c_p** (``cost``, :data:`DEFAULT_COST` = 4096) was measured on the compact
state (2 cores, 2026-11-27, load 2-3): on the two-hub database of
``bench/first_order_kernel.py`` (10^6 tuples) the partitioned path costs
1.6-1.7 µs per load update against 0.8-1.1 µs first-order (hubs-0 stream:
1.41 against 1.08), an extra 0.33-0.7 µs per update; a first-order hub-hub
update walks w = 40,031 elements in 4.2 µs, about 0.08-0.1 ns per element
step (the hubs' rows are bitsets).  0.33-0.7 µs / 0.08-0.1 ns is 3,300-8,700
steps; c_p = 4096 sits at the low end (promote rather earlier).  The Python
loops pay ~20 ns per step, so for ``implementation="python"`` the same c_p
promotes later than its own costs would suggest (within a constant factor);
one constant keeps the implementations deciding identically.

Guarantee (work rule).  Within a first-order epoch of U updates with works
w_1..w_U, each update raises E by at most ``w_t - r``, so while E < L the
total work is ``Σ w_t ≤ r·U + E ≤ r·U + L``; the epoch ends at the first
update with ``E ≥ L``, whose own cost is at most N: **total ≤ r·U + L + N**
with ``r ≤ λ√N`` and ``L = |D| ≤ N``.  The first promotion is paid like
preprocessing (Proposition 8) and later ones, as under the degree rule, are
separated from the demotion before them by ``dwell·|D|`` updates, so the
switches add O(N^min/dwell) amortized; **O(√N) amortized per update at
hot_eps = 1/2** (Theorem 3) holds.  Against the better of staying first-order
and partitioning at the start, in hindsight, the rule is 2-competitive up to
the estimate c_p (ski rental: when it buys, it has paid ``E ≥ L`` beyond
the rent r per update; when it never buys, it paid at most ``r·U + L``).
What it gives up: the **worst-case** O(λ√N) bound per update in first-order
mode — a single hub-hub update may cost O(N) before the switch.  Thrashing:
a slot demoted with max degree below (λ/4)√N can exceed r per update only on
updates that join two rows over r; a re-promotion needs ``E ≥ |D|`` again,
i.e. at least |D| element steps paid beyond the estimate, and every demotion
waits ``dwell·|D|`` updates, so switches stay at most one per ``dwell·|D|``
updates as under the degree rule.  A bulk load (Appendix A.3, static
counting) never promotes under the work rule: it is preprocessing, not
evidence of the stream's cost; the degree rule partitions after it as before.

Guarantee (degree rule).  While all slots are first-order every update costs
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
the ≥ N/4 updates between two changes of N, §4.1; under the work rule a new N
only moves r).

While no relation is partitioned the slots are
:class:`~ivm.engines.ivm_eps.partition.AllLightPartition` values (the
partition at eps = 1 stored as key sets, the multiplicities other than 1
aside) and updates run the first-order loop of
:func:`~ivm.engines.first_order.engine.apply_first_order`, which counts
``Σ_z K_j(β,z)·K_k(z,α)`` as ``|K_j(β,·) ∩ K_k(·,α)|`` when neither slot
stores another multiplicity.  ``implementation`` picks the state and loop:
``"compiled"`` keeps the three slots in the compact C state
(:class:`~ivm.engines.first_order.engine.CompactSlot` over ``TriangleFirstOrder``,
``ivm/engines/first_order/_triangle_kernel.pyx``: dense integer ids, open-addressing
tables, one compiled call per batch), ``"python"`` the key sets and the
reference loop, ``"auto"`` (the default) the compact state when it was built;
all cost O(min(deg)) per update and hold the same relations.  A multiplicity the
compact state does not store moves the slots to key sets (O(|D|), once), where
the loop of :func:`~ivm.engines.first_order.engine.first_order_kernel` continues.  A promotion
turns the key sets into heavy/light partitions before its major rebalancing,
and the return of the last partitioned relation turns them back, each O(|D|),
within the O(N^{1+min}) of the rebalancing itself.  On the compact state the
partitioned mode runs there too (:mod:`.compact`: heavy flags, the heavy part's
backward index and the views beside the same tables, IVM^eps's OnUpdate and
both rebalancings in C): a promotion marks the state partitioned and its major
rebalancing partitions it in place, the return of the last relation clears
the heavy parts and views, and no tuple is copied either way.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from ivm.engines.first_order.engine import (
    IMPLEMENTATIONS,
    CompactSlot,
    compact_memory,
    compact_slots,
    first_order_kernel,
    first_order_plan,
    key_set_slots,
    uses_compact,
    work_exceeded,
)
from ivm.engines.ivm_eps.compact import EV_CHECK, EV_HIT, CompactPart, compact_parts, compact_views
from ivm.engines.ivm_eps.engine import IVMEps
from ivm.engines.ivm_eps.partition import AllLightPartition, HeavyLightPartition, cutoffs
from ivm.engines.ivm_eps.triangle import IVMEpsTriangle
from ivm.engines.memory import state_memory
from ivm.query.model import Query
from ivm.updates import Row, Update

DEFAULT_SKEW = 8.0
DEFAULT_DWELL = 0.25
#: c_p: the estimated cost of one update in the partitioned mode, in first-order element steps
#: (one step = one row element an intersection walks); see the module docstring for how it was measured
DEFAULT_COST = 4096
#: the promotion policies: ``"work"`` (ski rental on the observed first-order work, the default) and
#: ``"degree"`` (a key's degree reaching ``skew·√N``)
PROMOTE = ("work", "degree")
#: the degree cutoff passed to the first-order loops under the work rule (no degree test there)
NEVER = sys.maxsize

#: numeric codes of :attr:`IVMEpsAdaptive.reason_code` (the metric); the words are in ``choice()``
REASONS = {
    0: "no skew observed",
    1: "a key reached the skew cutoff",
    2: "skew faded",
    3: "requested",
    4: "first-order work exceeded the partitioned estimate by the cost of a repartition",
}


class IVMEpsAdaptive(IVMEpsTriangle):
    """Triangle count with per-relation eps chosen from the observed work or degrees (module docstring).

    ``promote`` picks the promotion policy: ``"work"`` (ski rental on the
    first-order work, the default) or ``"degree"``; ``cost`` is c_p, the
    partitioned mode's estimated cost per update in element steps (``r =
    min(c_p, λ√N)``); ``skew`` is the cutoff factor λ (the degree rule
    partitions a slot once a key has degree ``≥ λ√N``; a slot returns below
    ``(λ/4)√N``), ``eps`` the exponent a partitioned slot gets, ``dwell`` the
    fraction of |D| that must pass between two switches of a slot before it goes back.

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
        self,
        query: Query,
        eps: float = 0.5,
        skew: float = DEFAULT_SKEW,
        dwell: float = DEFAULT_DWELL,
        implementation: str = "auto",
        promote: str = "work",
        cost: int = DEFAULT_COST,
    ) -> None:
        if promote not in PROMOTE:
            raise ValueError(f"promote must be one of {PROMOTE}, got {promote!r}")
        if int(cost) < 1:
            raise ValueError(f"cost must be a positive number of element steps, got {cost}")
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
        uses_compact(implementation)  # "compiled" fails here when the extension is not built
        self.implementation = implementation
        #: int value -> the one object of it the key sets store (identity hits in the probes); not
        #: part of the state: dropped from snapshots, cleared when it outgrows 2|D| (see _bound_interned)
        self._interned: dict[int, int] = {}
        if not 0.0 <= float(eps) <= 1.0:
            raise ValueError(f"eps must lie in [0, 1], got {eps}")
        if skew <= 0 or dwell < 0:
            raise ValueError("skew must be positive and dwell non-negative")
        super().__init__(query, eps=1.0, implementation="python")  # Python partitions, replaced below
        self.implementation = implementation
        self.hot_eps = float(eps)
        self.eps = self.hot_eps  # what explain() reports as the exponent of a partitioned relation
        self.skew = float(skew)
        self.dwell = float(dwell)
        self.promote = promote
        self.cost = int(cost)
        #: the work rule's counter [E, r, W] (first_order.WORK): excess, partitioned estimate per
        #: update, first-order work of the epoch; the loops update it in place
        self.work = [0, 0, 0]
        self.epoch_start = 0  # updates_applied when the current first-order epoch began
        self.hot_cutoff = 1
        self._set_cutoffs()
        # first-order mode (no relation partitioned): the slots are key-set partitions at eps = 1,
        # compact (C tables) or Python dicts of sets
        compact = compact_slots(self.occurrences) if uses_compact(implementation) else None
        self.parts = compact or (AllLightPartition(), AllLightPartition(), AllLightPartition())  # type: ignore[assignment]
        self.plan = None if compact else first_order_plan(self.parts, self.occurrences)  # type: ignore[arg-type]
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

    def multiplicity(self, relation: str, row: Row) -> int:
        """``relation(row)`` in O(1), from whichever partition the relation's slot has now."""
        i, flipped = self.occurrences[relation][0]
        x, y = (row[1], row[0]) if flipped else row
        return self.parts[i].get(x, y)

    # -- the current choice ------------------------------------------------------------

    @property
    def partitioned(self) -> bool:
        a, b, c = self.parts  # the three slots, unrolled: read once per batch, also at batch size 1
        return a.eps != 1.0 or b.eps != 1.0 or c.eps != 1.0

    def slot_eps(self) -> list[float]:
        return [p.eps for p in self.parts]

    def choice(self) -> dict[str, Any]:
        """The current eps per relation and why (shown by ``View.explain()``)."""
        eps = {e.relation: p.eps for e, p in zip(self.shape.edges, self.parts, strict=True)}
        back = f"it returns to first-order (eps = 1) below {self.skew / 4:g}·√N after {self.dwell:g}·|D| updates"
        if self.promote == "work":
            excess, rate, spent = self.work
            rule = (
                f"while every relation is first-order, each update's work w (the smaller row its "
                f"intersections walk) feeds the excess E := max(0, E + w - r), r = min(c_p, {self.skew:g}·√N) "
                f"= {rate} (c_p = {self.cost}); once E ≥ L = |D| the relations with a key of degree ≥ "
                f"N^{self.hot_eps:g} are partitioned (eps = {self.hot_eps:g}; all of them if none has one); "
                f"no worst-case bound per update in first-order mode (one update may cost O(N) before "
                f"the switch), O(√N) amortized (Theorem 3); a first-order relation beside a partitioned one "
                f"is partitioned once a key has degree ≥ {self.skew:g}·√N = {self.hot_cutoff}; {back}"
            )
        else:
            excess, rate, spent = 0, 0, 0
            rule = (
                f"a relation is partitioned (eps = {self.hot_eps:g}) once a key has degree "
                f"≥ {self.skew:g}·√N = {self.hot_cutoff} (N = {self.N}); {back}"
            )
        return {
            "mode": "partitioned" if self.partitioned else "first_order",
            "eps": eps,
            "reason": self.reason,
            "promote": self.promote,
            "skew_cutoff": rule,
            "work": {
                "excess_E": excess,
                "buy_cost_L": self.size,
                "rate_r": rate,
                "epoch_work": spent,
                "epoch_updates": self.updates_applied - self.epoch_start,
            },
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
                "work_excess": self.work[0],
                "work_rate": self.work[1],
                "work_buy_cost": self.size,
            }
        )
        for edge, e in zip(self.shape.edges, eps, strict=True):
            out.setdefault(f"eps.{edge.relation}", e)
        tuples = sum(p.lsize + p.hsize for p in self.parts)
        out.update(compact_memory(self.parts, tuples) or state_memory(self, tuples))
        return out

    # -- switching ---------------------------------------------------------------------

    def _set_cutoffs(self) -> None:
        root = math.sqrt(self.N)
        self.hot_cutoff = max(1, math.ceil(self.skew * root - 1e-9))
        self.cold_cutoff = self.skew / 4 * root
        self.work[1] = min(self.cost, self.hot_cutoff)  # r = min(c_p, λ√N)

    def _switch(self, slots: list[int], eps: float, code: int, detail: str) -> None:
        """Set ``eps`` on ``slots`` and repartition (major rebalancing machinery; Q unchanged).

        Leaving first-order mode turns the key-set slots into heavy/light partitions
        first; when no relation stays partitioned they become key sets again (O(|D|) each).
        """
        if not self.partitioned:
            if isinstance(self.parts[0], CompactSlot):  # the same tables: every key light until the major
                state = self.parts[0].state
                state.set_partitioned(True)
                for i in range(3):
                    state.set_eps(i, 1.0)
                    state.set_cutoffs(i, *cutoffs(1, 1.0))
                self.parts = compact_parts(state)
                self.views = compact_views(state)  # type: ignore[assignment]
            else:
                self.parts = tuple(p.to_heavy_light() for p in self.parts)  # type: ignore[union-attr]
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
        self.work[0] = self.work[2] = 0  # a new epoch of the work rule (first-order again or not)
        self.epoch_start = self.updates_applied
        if not self.partitioned:
            self._to_first_order()
        self.next_check = self.updates_applied + self._check_every()

    def _to_first_order(self) -> None:
        """Store every slot as key sets (all relations at eps = 1, no views); O(|D|).

        Compact slots (:class:`~ivm.engines.first_order.engine.CompactSlot`) when the
        implementation uses them and every multiplicity fits, else Python key sets.
        """
        self.views = ({}, {}, {})
        parts = self.parts
        if isinstance(parts[0], CompactPart):  # every slot at eps = 1 after the major: no heavy part, no view
            state = parts[0].state
            state.set_partitioned(False)
            self.parts = (CompactSlot(state, 0), CompactSlot(state, 1), CompactSlot(state, 2))
            self.plan = None
            return
        if uses_compact(self.implementation):
            if not all(isinstance(p, CompactSlot) for p in parts):
                compact = compact_slots(self.occurrences, parts)
                if compact is not None:
                    self.parts = compact  # type: ignore[assignment]
                    self.plan = None
                    return
            else:
                self.plan = None
                return
        convert = AllLightPartition.from_heavy_light
        keysets = key_set_slots([p if isinstance(p, AllLightPartition) else convert(p) for p in parts])
        self.parts = keysets  # type: ignore[assignment]
        self.plan = first_order_plan(keysets, self.occurrences)

    def _to_key_sets(self) -> None:
        """Compact slots to Python key sets (a multiplicity they do not store); O(|D|)."""
        self.parts = key_set_slots(self.parts)  # type: ignore[assignment,arg-type]
        self.plan = first_order_plan(self.parts, self.occurrences)  # type: ignore[arg-type]

    def __getstate__(self) -> dict[str, Any]:
        """The snapshot: the engine's state without the table of shared int objects."""
        state = self.__dict__.copy()
        state.pop("_interned", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a snapshot; one taken before the key-set slots existed is converted."""
        self.__dict__.update(state)
        self._interned = {}
        self.__dict__.pop("nonunit", None)
        self.__dict__.setdefault("implementation", "auto")  # a snapshot from before the choice existed
        if "promote" not in state:  # a snapshot from before the work rule: it keeps deciding by degree
            self.promote = "degree"
            self.cost = DEFAULT_COST
            self.work = [0, min(DEFAULT_COST, self.hot_cutoff), 0]
            self.epoch_start = self.updates_applied
        if not self.partitioned and not isinstance(self.parts[0], CompactSlot):
            self._to_first_order()

    def _check_every(self) -> int:
        return max(self.min_check, self.size // 8)

    def _promote_hot_slots(self) -> None:
        """Promote the first-order slots with a key of degree ≥ the cutoff (O(keys) scan, one switch)."""
        for i, part in enumerate(self.parts):
            if part.eps != 1.0:
                continue
            deg = light_max_degree(part)
            self.max_degree = max(self.max_degree, deg)
            if deg >= self.hot_cutoff:
                self._promote(i, None, deg)  # also takes every other slot over the cutoff
                return

    def _promote_work(self) -> None:
        """The work rule's promotion (E ≥ L = |D|): partition the first-order slots with a key of degree
        ``≥ N^hot_eps`` (IVM^eps's heavy threshold, Definition 7), or all first-order slots when none has
        one, by one major rebalancing (:meth:`_switch`).  O(ids) to find the slots."""
        strict = cutoffs(self.N, self.hot_eps)[0]
        cold = [i for i, part in enumerate(self.parts) if part.eps == 1.0]
        degrees = {i: light_max_degree(self.parts[i]) for i in cold}
        self.max_degree = max(self.max_degree, *degrees.values())
        slots = [i for i in cold if degrees[i] >= strict] or cold
        excess, rate, spent = self.work
        names = ", ".join(self.shape.edges[i].relation for i in slots)
        self._switch(
            slots,
            self.hot_eps,
            4,
            f"first-order work exceeded the partitioned estimate: excess E = {excess} ≥ L = |D| = {self.size} "
            f"(r = {rate} steps per update; {spent} steps over {self.updates_applied - self.epoch_start} updates "
            f"in first-order mode); {names} partitioned (max degree "
            f"{', '.join(str(degrees[i]) for i in slots)}, heavy from N^{self.hot_eps:g} = {strict})",
        )

    def _promote(self, i: int, key: object, degree: int) -> None:
        relation = self.shape.edges[i].relation
        self.max_degree = max(self.max_degree, degree)
        who = f"key {key!r} of" if key is not None else "a key of"
        slots = [i]
        for other, part in enumerate(self.parts):  # one repartition for every slot over the cutoff
            hot = other != i and part.eps == 1.0
            if hot and light_max_degree(part) >= self.hot_cutoff:
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
            deg = heavy_max_degree(part)
            if part.up > self.cold_cutoff:
                deg = max(deg, light_max_degree(part))
            largest = max(largest, deg)
            waited = self.updates_applied - self.last_switch[i] >= self.dwell * self.switch_size[i]
            if deg < self.cold_cutoff and waited:
                cold.append(i)
        self.max_degree = largest
        if cold:
            names = ", ".join(self.shape.edges[i].relation for i in cold)
            self._switch(cold, 1.0, 2, f"the largest degree of {names} fell below {self.skew / 4:g}·√N")

    def bulk_load(self, updates: Iterable[Update | tuple[str, Row, int]]) -> None:
        """Load a database into an empty engine, then run the skew test on the loaded degrees.

        The tuples go in by the first-order loop with no switch and no size
        invariant on the way (Appendix A.3: static counting, O(|D|^{3/2}) in all,
        since an update costs the smaller of two degrees); then ``N = 2|D| + 1``
        (the initial state of Definition 7) and the slots whose largest degree
        reaches ``skew·√N`` are partitioned by one major rebalancing.  A
        non-empty engine falls back to :meth:`apply`.
        """
        batch = list(updates)
        if self.size or self.partitioned:
            self.apply(batch)
            return
        start = 0
        if isinstance(self.parts[0], CompactSlot):
            start, self.count, applied, _, blocked = self.parts[0].state.apply(batch, 0, self.count)
            self.updates_applied += applied
            if blocked:
                self._to_key_sets()
        if not isinstance(self.parts[0], CompactSlot):
            kernel = self._key_set_loop()
            plan = self.plan
            _, self.count, applied, _ = kernel(self.parts, plan, batch, start, self.count, intern=self._interned)
            self.updates_applied += applied
        self.size = sum(p.lsize for p in self.parts)
        self.N = 2 * self.size + 1
        self.strict = True
        self._set_cutoffs()
        if self.promote == "degree":
            self._promote_hot_slots()

    # -- updates -----------------------------------------------------------------------

    def apply(self, updates: Sequence[Update | tuple[str, Row, int]]) -> None:
        """Apply the updates in order: the first-order loop while no slot is partitioned,
        OnUpdate of IVM^eps (Figure 4) otherwise, switching modes between two updates."""
        start, total = 0, len(updates)
        while start < total:
            kind = type(self.parts[0])
            if kind is CompactSlot:  # first-order, on the compiled state (every slot at eps = 1)
                start = self._apply_first_order(updates, start)
            elif kind is CompactPart:  # partitioned, on the compiled state
                start = self._apply_compact(updates, start)
            elif self.partitioned:
                start = self._apply_partitioned(updates, start)
            else:
                start = self._apply_first_order(updates, start)

    def _apply_partitioned(self, updates: Sequence[Any], start: int) -> int:
        """OnUpdate of IVM^eps (Figure 4) with the skew test of the first-order slots and the check for
        fading skew, from ``updates[start]`` until the end or a return to first-order mode: one
        compiled call per batch on the compact state (:meth:`_apply_compact`), else per update."""
        if isinstance(self.parts[0], CompactPart):
            return self._apply_compact(updates, start)
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

    def _compact_limits(self) -> tuple[int, int]:
        """The compiled call's skew test (a key of a slot at eps = 1 reaching degree ``hot_cutoff``: the
        call tests only such slots, as :meth:`on_update` does) and the updates until the next check
        for fading skew (``next_check``)."""
        return self.hot_cutoff, self.next_check - self.updates_applied

    def _after_on_update(self, i: int, x: object) -> None:
        """The skew test of :meth:`on_update` after a major rebalancing of the compiled call."""
        part = self.parts[i]
        if part.eps == 1.0:
            degree = part.degree(x)  # type: ignore[attr-defined]
            if degree >= self.hot_cutoff:
                self._promote(i, x, degree)

    def _compact_event(self, event: int, slot: int, key: object, value: int) -> bool:
        """A key of a first-order slot reached the cutoff (EV_HIT: promote) or the check for fading skew
        is due (EV_CHECK); True when the engine is back in first-order mode."""
        if event == EV_HIT:
            self._promote(slot, key, value)
            return False
        assert event == EV_CHECK, event
        self._checkpoint()
        return not self.partitioned

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

    def _key_set_loop(self) -> Any:
        """The first-order loop over Python key sets (:func:`~ivm.engines.first_order.engine.first_order_kernel`):
        the reference for ``"python"``, else the Cython loop over the same sets when built."""
        return first_order_kernel("python" if self.implementation == "python" else "auto")

    def _apply_first_order(self, updates: Sequence[Any], start: int) -> int:
        """First-order IVM (IVM^eps §1.1, eps = 1 everywhere) from ``updates[start]`` on.

        Runs the first-order loop (:func:`~ivm.engines.first_order.engine.first_order_kernel`
        of ``implementation``, O(min(deg)) per update) until the end or
        an update after which a key reached the skew cutoff or ``|D|`` left
        ``[⌊N/4⌋, N)``; then keeps the size invariant (Definition 7: ``N := 2N``
        or ``N := ⌊N/2⌋ - 1``, a major rebalancing whose strict repartition moves
        nothing at eps = 1), moves the cutoffs with N and partitions a slot whose
        key reached the cutoff.  Returns the index of the next update to apply.
        """
        n = self.N
        a = self.parts[0]
        if isinstance(a, CompactSlot) and self.implementation == "python":
            self._to_key_sets()  # the choice was changed on a compact engine
            a = self.parts[0]
        work = self.work if self.promote == "work" else None
        hot = self.hot_cutoff if work is None else NEVER  # the work rule has no degree test here
        if isinstance(a, CompactSlot):
            state = a.state
            nxt, self.count, applied, hit, blocked = state.apply(updates, start, self.count, n // 4, n, hot, work)
            self.size = size = state.total()
            if blocked:  # updates[nxt] has a multiplicity the compact state does not store
                self._to_key_sets()
        else:
            nxt, self.count, applied, hit = self._key_set_loop()(
                self.parts,
                self.plan,
                updates,
                start,
                self.count,
                n // 4,
                n,
                hot,
                self._interned,
                work,
            )
            a, b, c = self.parts
            self.size = size = a.lsize + b.lsize + c.lsize
            if len(self._interned) > 2 * size + 4096:  # values no longer stored: at most 2|D| are, O(1) amortized
                self._interned.clear()
        self.updates_applied += applied
        while size >= n:
            n *= 2
            self.major_rebalances += 1
        while size < n // 4:
            n = n // 2 - 1
            self.major_rebalances += 1
        if n != self.N:
            lower = self.hot_cutoff
            self.N = n
            self._set_cutoffs()  # also r = min(c_p, λ√N)
            if work is None and self.hot_cutoff < lower:  # a smaller N lowers the cutoff: rescan, O(|D|)
                self._promote_hot_slots()
                return nxt
        if work is not None:
            if work_exceeded(work[0], size):
                self._promote_work()
        elif hit is not None and hit[2] >= self.hot_cutoff:
            self._promote(*hit)
        return nxt


def light_max_degree(part: AllLightPartition | HeavyLightPartition) -> int:
    """The largest degree of a light key of a slot: O(ids) in C for a compact slot or part, else O(keys)."""
    if isinstance(part, CompactSlot):
        return part.max_degree()
    if isinstance(part, CompactPart):
        return part.max_degrees()[1]
    return max((len(r) for r in part.lf.values()), default=0)


def heavy_max_degree(part: HeavyLightPartition) -> int:
    """The largest degree of a heavy key of a partitioned slot (0 without one): O(ids) in C for a compact
    part, else O(heavy keys)."""
    if isinstance(part, CompactPart):
        return part.max_degrees()[0]
    return max((len(r) for r in part.hf.values()), default=0)


__all__ = ["IVMEps", "IVMEpsAdaptive"]
