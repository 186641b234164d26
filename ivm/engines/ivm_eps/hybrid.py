"""IVM^eps beyond the triangle under ``engine="auto"``: F-IVM until a join value gets heavy.

IVM^eps bounds the update time of the 4-path count (App. G, Thm 27), the
Loomis-Whitney counts (App. F, Thm 25) and the 3R^2/3R^3 counts (App. H,
Thm 37) by O(N^max(eps,1-eps)) amortized, optimal at eps = 1/2 under OMv
(Props. 26, 28, 38).  The bound matters only when some value is heavy: while
every value of a join variable occurs in fewer than ``skew·√N`` tuples of each
atom, every list a delta join iterates is shorter than that, and F-IVM's batch
kernels (``ivm.engines.fivm.columnar``) do the same joins with a much smaller
constant (bench/paper_queries.py, bench/line3.py).  :class:`SkewHybrid` runs

- the **cold** engine (``fivm``) while every join-variable degree is below
  ``max(skew · √N, floor)`` (N the threshold base, ``⌊N/4⌋ ≤ |D| < N``), and
- the **hot** engine (``ivm_eps_3r``, ``ivm_eps_lw`` or ``ivm_eps_path4`` at
  ``eps``) from the end of the batch in which a degree reaches it (F-IVM applies
  a batch whole; within one, a single update is a batch): the hot engine is built
  from the current database (its preprocessing, O(N^{1+min(eps,1-eps)}), paid
  like a major rebalancing), the cold one dropped;
- back to the cold engine (O(N) to build) when the largest degree has fallen
  below a quarter of that cutoff and ``dwell·|D|`` updates have passed since the last
  switch, checked every ``max(256, |D|/8)`` updates (O(keys) per check).

The constants are measured, not derived (they change no bound): F-IVM's batch
kernels walk a list element in numpy, IVM^eps's updates run in Python, so the
switch pays only for lists well above √N.  With the triangle's ``skew = 8`` the
line-3 count over facebook (bench/line3.py, edges inserted in sorted order)
switched when one hub of degree 1,045 met a small N (|D| ≈ 7,500) and ran its
inserts at 125k/s instead of 651k/s; at ``skew = 32`` it stays on F-IVM (631k-776k inserts/s
and 409k-498k updates/s over the whole stream in bench/README), while the adversarial streams of
bench/paper_queries.py, whose hubs grow with N, still switch.  ``floor = 1024``
keeps short lists on F-IVM at small N.

The degree of a value ``v`` of a join variable ``X`` in atom ``i`` is the number
of distinct tuples of atom ``i``'s relation with ``X = v``; it bounds the degree
of every partition key of the hot engine that contains ``X`` (so a heavy key of
the hot engine is a heavy value here: the switch is late by at most the rest of
one batch, and may be early).  Kept exactly, O(#join variables of the atom) per update that creates or
removes a distinct tuple.

Guarantee.  Hot: the hot engine's bound.  Cold: F-IVM's, on data where every
join value occurs in fewer than ``max(skew·√N, floor)`` tuples of an atom (for
the acyclic 3R^2 paths and the 4-path each delta join walks such a list; F-IVM
states no bound for the cyclic Loomis-Whitney counts, where it was measured
faster than IVM^eps at eps = 1 on data without skew: 126k vs 95k updates/s on a
random degree-4 stream of 3.2·10^5 updates).  Switches: a promotion costs one
preprocessing of the hot engine, a demotion needs ``dwell·|D|`` updates after the
last switch, so at eps = 1/2 the switches add O(√N / dwell) amortized (the
first promotion is paid once, like preprocessing).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import compress, repeat
from operator import add, countOf, itemgetter, sub
from typing import Any

from ivm.engines.base import Engine
from ivm.query.four_path import four_path
from ivm.query.loomis_whitney import loomis_whitney
from ivm.query.model import Query
from ivm.query.three_relations import as_distinct_relations, three_relation_class
from ivm.updates import Row, Update, by_relation, distinct_delta, mult_of, relation_of, row_of

DEFAULT_SKEW = 32.0
DEFAULT_DWELL = 0.25
#: no switch for lists shorter than this: walking them costs less than the partitions' bookkeeping
DEFAULT_FLOOR = 1024
MIN_CHECK = 256
COLD = "fivm"


def hot_engine_name(query: Query) -> str | None:
    """The IVM^eps engine of ``query``'s shape: 3R^2/3R^3, Loomis-Whitney of degree ≥ 4, or the 4-path."""
    if query.free or query.aggregate.kind != "count" or query.having:
        return None
    if len(query.atoms) == 3:
        verdict = three_relation_class(as_distinct_relations(query))
        return "ivm_eps_3r" if verdict and verdict.witness.i >= 2 else None
    lw = loomis_whitney(query)
    if lw and lw.witness.degree >= 4:
        return "ivm_eps_lw"
    return "ivm_eps_path4" if four_path(query) else None


def _registered(name: str) -> type[Engine] | None:
    from ivm.engines import ENGINES

    return ENGINES.get(name)


class SkewHybrid(Engine):
    """F-IVM while no join value is heavy, IVM^eps once one is (the module docstring).

    >>> from ivm.query.parse import parse
    >>> e = SkewHybrid(parse("Q() :- R(a,b), S(b,c), T(c,d)"), skew=1.0, floor=1)
    >>> e.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 4), 1)])
    >>> e.result(), e.mode
    (1, 'fivm')
    >>> e.apply([("S", (2, c), 1) for c in range(4, 9)])
    >>> e.result(), e.mode
    (1, 'ivm_eps_3r')
    """

    name = "ivm_eps_hybrid"
    #: the fewest updates between two checks for faded skew (each costs O(keys))
    min_check = MIN_CHECK

    def __init__(
        self,
        query: Query,
        eps: float = 0.5,
        skew: float = DEFAULT_SKEW,
        dwell: float = DEFAULT_DWELL,
        floor: int = DEFAULT_FLOOR,
    ) -> None:
        super().__init__(query)
        if not 0.0 <= float(eps) <= 1.0:
            raise ValueError(f"eps must lie in [0, 1], got {eps}")
        if skew <= 0 or dwell < 0:
            raise ValueError("skew must be positive and dwell non-negative")
        self.eps = float(eps)
        self.skew = float(skew)
        self.dwell = float(dwell)
        self.floor = max(1, int(floor))
        self.hot_name = hot_engine_name(query) or ""
        occurs: dict[str, int] = {}
        for atom in query.atoms:
            for v in atom.variables:
                occurs[v] = occurs.get(v, 0) + 1
        #: per relation: (atom index, position) of each join variable in each of its atoms
        self.watch: dict[str, list[tuple[int, int]]] = {}
        for i, atom in enumerate(query.atoms):
            positions = sorted({atom.terms.index(v) for v in atom.variables if occurs[v] > 1})
            self.watch.setdefault(atom.relation, []).extend((i, p) for p in positions)
        self.degrees: dict[tuple[int, int], dict[Any, int]] = {w: {} for ws in self.watch.values() for w in ws}
        self.base: dict[str, dict[Row, int]] = {r: {} for r in self.watch}
        self.size = 0
        self.N = 1
        self.updates_applied = 0
        self.promotions = 0
        self.demotions = 0
        self.last_switch = 0
        self.switch_size = 0
        self.next_check = self.min_check
        self.largest = 0
        #: an upper bound of the largest degree (``None``: unknown), kept by the batch path
        self._bound: int | None = None
        self.reason = "no heavy join value observed"
        self._set_cutoffs()
        self.mode = COLD
        self.engine: Engine = self._build(COLD)
        self._share_base()

    # -- protocol ------------------------------------------------------------------------

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        name = hot_engine_name(query)
        if name is None:
            return (
                "it runs IVM^eps for 3R^2/3R^3 counts, Loomis-Whitney counts of degree >= 4 and the 4-path "
                "count (IVM^eps App. F-H); this query is none of them"
            )
        for engine in (name, COLD):
            cls_ = _registered(engine)
            if cls_ is None:
                return f"engine {engine!r} is not registered"
            reason = cls_.refuses(query)
            if reason:
                return f"engine {engine!r} refuses it: {reason}"
        return None

    @classmethod
    def runtime_choices(cls, query: Query) -> list[dict[str, str]]:
        hot = hot_engine_name(query) or "IVM^eps"
        return [
            {
                "choice": f"the engine: {COLD} (no heavy join value) or {hot} (heavy/light partitions at eps = 0.5)",
                "statistic": "the largest number of distinct tuples of one atom sharing a value of a join "
                "variable, against √N (N = the threshold base, ⌊N/4⌋ ≤ |D| < N); rechecked whenever N changes",
                "rule": f"{COLD} while every such degree is below max({DEFAULT_SKEW:g}·√N, {DEFAULT_FLOOR}); {hot} "
                "from the end of the batch in which one reaches it (built from the current database, the count "
                "unchanged); back "
                f"to {COLD} when the largest degree falls below a quarter of that and {DEFAULT_DWELL:g}·|D| updates "
                "have passed since the last switch; explain()['choice'] and stats() ('hot', 'promotions') show the "
                "current choice",
            }
        ]

    def apply(self, updates: Sequence[Update | tuple[str, Row, int]]) -> None:
        """Track the degrees, hand the batch to the engine in force; switch between two updates."""
        if self._apply_cold_batch(updates):
            return
        self._bound = None  # the loop may raise degrees anywhere: the bound is recomputed when needed
        pending: list[Any] = []
        base, watch, degrees = self.base, self.watch, self.degrees
        hot_cutoff = self.hot_cutoff
        cold = self.mode == COLD
        shared = self._shared  # F-IVM writes the base relations: the changes not yet handed to it
        unsent: dict[tuple[str, Row], int] = {}
        for relation, row, m in updates:
            if not m:
                continue
            table = base.get(relation)
            if table is None:
                raise KeyError(f"relation {relation!r} is not in {self.query}")
            row = tuple(row)
            if shared:
                key = (relation, row)
                before = unsent.get(key, 0)
                unsent[key] = before + m
                old = table.get(row, 0) + before
                new = old + m
            else:
                old = table.get(row, 0)
                new = old + m
                if new:
                    table[row] = new
                else:
                    del table[row]
            pending.append((relation, row, m))
            self.updates_applied += 1
            if (old == 0) == (new == 0):
                continue
            step = 1 if new else -1
            self.size += step
            heavy = False
            for w in watch[relation]:
                column = degrees[w]
                value = row[w[1]]
                d = column.get(value, 0) + step
                if d:
                    column[value] = d
                    if d >= hot_cutoff and cold:
                        heavy = True
                else:
                    del column[value]
            if heavy or not (self.N // 4 <= self.size < self.N):
                self.engine.apply(pending)
                pending = []
                unsent = {}
                self._resize()
                hot_cutoff = self.hot_cutoff
                if cold and self._max_degree() >= hot_cutoff:
                    self._switch(
                        self.hot_name, f"a join value has degree ≥ max({self.skew:g}·√N, {self.floor}) = {hot_cutoff}"
                    )
                    cold = False
                    shared = self._shared
        if pending:
            self.engine.apply(pending)
        if not cold and self.updates_applied >= self.next_check:
            self._checkpoint()

    def _apply_cold_batch(self, updates: Sequence[Update | tuple[str, Row, int]]) -> bool:
        """:meth:`apply` while F-IVM is in force, a batch at a time in C-level passes (``False``: use the loop).

        The batch is grouped per relation once (:func:`~ivm.updates.by_relation`) and handed to
        F-IVM, which updates the base relations (shared with this engine while F-IVM is in force)
        and answers the old multiplicities; the degrees follow from them, per relation and
        watched position in C-level passes (a :class:`~collections.Counter` of the values whose
        tuples appeared or vanished).  Then ``N`` is resized and the switch rule applied once, at
        the batch's end.  So a promotion comes at the end of the batch in which a degree reaches
        the cutoff (the loop switches at that update); the count is exact either way, and that
        one batch costs F-IVM's work.  The largest degree is kept as an upper bound (plus, per
        batch, the most updates any value has) and recomputed in O(#values) only when the bound
        reaches the cutoff.  O(|batch|) on top of F-IVM's work.
        """
        if not self._shared or not isinstance(updates, list | tuple) or not updates:
            return False
        relations = set(map(relation_of, updates))
        if not relations <= self.base.keys() or set(map(type, map(row_of, updates))) != {tuple}:
            return False
        mults = set(map(mult_of, updates))
        if set(map(type, mults)) != {int}:
            return False
        deltas = distinct_delta(updates, relations, mults) or by_relation(updates)
        olds_of = self.engine.apply_deltas(deltas)  # type: ignore[attr-defined]
        gain = 0
        for relation, delta in deltas.items():
            olds = olds_of[relation]
            was = list(map(bool, olds))
            if not any(was):  # every tuple was absent (a δ payload is not 0): each appears
                up, down = list(delta), []
            else:
                now = list(map(bool, map(add, olds, delta.values())))
                if all(was) and not any(now):  # every tuple vanishes
                    up, down = [], list(delta)
                else:
                    steps = list(map(sub, now, was))
                    if not any(steps):
                        continue
                    rows = list(delta)
                    up = list(compress(rows, map((1).__eq__, steps)))
                    down = list(compress(rows, map((-1).__eq__, steps)))
            self.size += len(up) - len(down)
            for w in self.watch[relation]:
                column, value_of = self.degrees[w], itemgetter(w[1])
                if up:
                    counts = Counter(map(value_of, up))
                    gain = max(gain, max(counts.values()))
                    grown = list(map(add, map(column.get, counts, repeat(0)), counts.values()))
                    column.update(zip(counts, grown, strict=True))
                if down:
                    counts = Counter(map(value_of, down))
                    left = list(map(sub, map(column.__getitem__, counts), counts.values()))
                    column.update(zip(counts, left, strict=True))
                    if 0 in left:
                        for value in compress(counts, map((0).__eq__, left)):
                            del column[value]
        self.updates_applied += len(updates) - (countOf(map(mult_of, updates), 0) if 0 in mults else 0)
        if not self.N // 4 <= self.size < self.N:
            self._resize()
        bound = getattr(self, "_bound", None)
        bound = self._max_degree() if bound is None else bound + gain
        if bound >= self.hot_cutoff:
            bound = self._max_degree()
            if bound >= self.hot_cutoff:
                self._bound = None
                self._switch(
                    self.hot_name, f"a join value has degree ≥ max({self.skew:g}·√N, {self.floor}) = {self.hot_cutoff}"
                )
                return True
        self._bound = bound
        return True

    def result(self) -> Any:
        return self.engine.result()

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        return self.engine.enumerate()

    def multiplicity(self, relation: str, row: Row) -> int:
        return self.base[relation].get(tuple(row), 0)

    def multiplicities(self, relation: str, rows: Sequence[Row]) -> list[int]:
        base = self.base[relation]
        return list(map(base.get, rows, repeat(0, len(rows))))

    def stats(self) -> dict[str, int | float]:
        out: dict[str, int | float] = {f"{self.mode}.{k}": v for k, v in self.engine.stats().items()}
        out.update(
            {
                "result": self.result(),
                "hot": int(self.mode != COLD),
                "eps": self.eps if self.mode != COLD else 1.0,
                "promotions": self.promotions,
                "demotions": self.demotions,
                "max_degree": self.largest,
                "hot_cutoff": self.hot_cutoff,
                "threshold_base": self.N,
                "base_tuples": self.size,
                "updates_applied": self.updates_applied,
            }
        )
        for key in ("state_bytes", "bytes_per_tuple"):  # the running engine's, unprefixed (issue 38's metric)
            if f"{self.mode}.{key}" in out:
                out[key] = out[f"{self.mode}.{key}"]
        return out

    def choice(self) -> dict[str, Any]:
        """The live decision (``View.explain()["choice"]``)."""
        return {
            "engine": self.mode,
            "eps": self.eps if self.mode != COLD else None,
            "reason": self.reason,
            "hot_cutoff": self.hot_cutoff,
            "promotions": self.promotions,
            "demotions": self.demotions,
        }

    def describe(self) -> dict[str, Any]:
        inner = getattr(self.engine, "describe", None)
        return {"mode": self.mode, "hot_engine": self.hot_name, "inner": inner() if callable(inner) else {}}

    # -- switching -----------------------------------------------------------------------

    def _set_cutoffs(self) -> None:
        root = math.sqrt(self.N)
        self.hot_cutoff = max(self.floor, math.ceil(self.skew * root - 1e-9))
        self.cold_cutoff = self.hot_cutoff / 4

    def _resize(self) -> None:
        """Keep ``⌊N/4⌋ ≤ |D| < N`` (Definition 7's size invariant) and the cutoffs with it."""
        n = self.N
        while self.size >= n:
            n *= 2
        while self.size < n // 4:
            n = n // 2 - 1
        if n != self.N:
            self.N = n
            self._set_cutoffs()

    def _max_degree(self) -> int:
        self.largest = max((d for column in self.degrees.values() for d in column.values()), default=0)
        return self.largest

    def _build(self, name: str) -> Engine:
        """A fresh engine ``name`` loaded with the current database (its preprocessing)."""
        cls = _registered(name)
        if cls is None:
            raise RuntimeError(f"engine {name!r} is not registered")
        engine = cls(self.query) if name == COLD else cls(self.query, eps=self.eps)  # type: ignore[call-arg]
        rows = [(relation, row, m) for relation, table in self.base.items() for row, m in table.items()]
        for i in range(0, len(rows), 10_000):
            engine.apply(rows[i : i + 10_000])
        return engine

    def _share_base(self) -> None:
        """While F-IVM is in force, its base relations are this engine's (one copy, written by F-IVM).

        F-IVM keeps the multiplicities every engine must answer (:meth:`multiplicity`) and hands
        back the old ones (:meth:`~ivm.engines.fivm.engine.FIVM.apply_deltas`), from which the
        degrees follow; the hot engines keep their own, so this engine writes its copy then.
        """
        base = getattr(self.engine, "base", None)
        self._shared = (
            self.mode == COLD
            and callable(getattr(self.engine, "apply_deltas", None))
            and isinstance(base, dict)
            and base.keys() == self.base.keys()
        )
        if self._shared:
            self.base = base  # type: ignore[assignment]

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "_shared" not in state:  # a snapshot taken when both engines kept a copy: one again
            self._share_base()

    def _switch(self, name: str, reason: str) -> None:
        before = self.engine.result()
        self.engine = self._build(name)
        after = self.engine.result()
        if after != before:
            raise AssertionError(f"switching to {name} changed the count from {before} to {after}")
        if name == COLD:
            self.demotions += 1
        else:
            self.promotions += 1
        self.mode = name
        self._share_base()
        self.reason = reason
        self.last_switch = self.updates_applied
        self.switch_size = self.size
        self.next_check = self.updates_applied + max(self.min_check, self.size // 8)

    def _checkpoint(self) -> None:
        """Back to the cold engine when the skew faded (largest degree < (skew/4)·√N after the dwell)."""
        self.next_check = self.updates_applied + max(self.min_check, self.size // 8)
        degree = self._max_degree()
        waited = self.updates_applied - self.last_switch >= self.dwell * self.switch_size
        if waited and degree < self.cold_cutoff:
            self._switch(COLD, f"the largest join-value degree {degree} fell below {self.cold_cutoff:g}")
