"""SQL's per-group aggregates beyond rings: AVG, MIN, MAX, COUNT(DISTINCT) and HAVING.

The idea (F-IVM §2.4 and Remark 18, read group by group): each of these
aggregates is a function of ring results over the same body, which the other
engines already maintain under inserts and deletes
(:func:`ivm.query.model.aggregate_inputs`):

- ``AVG(x) = SUM(x) / COUNT(*)``: both are the Z × Z/R payload of the SUM
  query, read per group when the result is read, O(1) per group; a sum of floats
  is exact (:mod:`ivm.rings.exact`), so the average is the exact quotient rounded
  once;
- ``MIN(x)``, ``MAX(x)`` and ``COUNT(DISTINCT x)`` are functions of the
  group's multiset of ``x`` values, ``x ↦`` the number of join results of the
  group with that ``x``: the COUNT grouped by the free variables plus ``x``.
  The inner view's answer changes (``drain_delta``, the changes of (group, x)
  counts) update, per group, the number of ``x`` values with a positive count
  (COUNT(DISTINCT), O(1) per change of a (group, x) count) and a sorted list of
  them (MIN and MAX, its ends: O(log n) per change, n the group's distinct
  values; ``sortedcontainers.SortedList``);
- ``HAVING`` filters the groups by these values when the result is read: a
  group that fails it is absent and reappears once it passes again.

A group exists while its count is positive, as in SQL: an emptied group has no
row (no 0/0 average, no minimum of nothing).  Without free variables the one
group always exists, as SQL's aggregate over no rows does: COUNT and
COUNT(DISTINCT) are then 0, AVG, MIN and MAX ``None`` (SQL's NULL), SUM 0 (the
library's convention); HAVING still applies to it (``None`` when it fails).

Each input query is maintained by the engine the planner chooses for it
(:func:`ivm.maintain`), so the update time is that engine's guarantee for the
derived query plus the per-change work above; ``ivm explain`` states both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sortedcontainers import SortedList

from ivm.engines.base import Engine
from ivm.engines.memory import state_memory
from ivm.query.model import VALUE_KINDS, Aggregate, Query, aggregate_inputs
from ivm.rings.exact import read_result
from ivm.updates import Row, Update

#: for the one group of a query without free variables: the aggregate over no rows (SQL; SUM is 0 here)
_EMPTY: dict[str, Any] = {"count": 0, "count_distinct": 0, "sum": 0, "avg": None, "min": None, "max": None}


class GroupValues:
    """The multiset of one variable's values per group, with the ends and the distinct number.

    Fed the changes of the counts ``(group..., x) ↦ n`` (the answers of the
    COUNT grouped by the free variables plus ``x``): O(1) per change, plus
    O(log n) when ``ordered`` (n = the group's distinct values), for the
    sorted list of the values with a positive count.

    >>> values = GroupValues(ordered=True)
    >>> for answer, d in [(("g", 5), 2), (("g", 3), 1), (("g", 3), -1), (("h", 1), 1)]:
    ...     values.change(answer, d)
    >>> values.minimum(("g",)), values.maximum(("g",)), values.distinct(("g",)), values.count(("g",))
    (5, 5, 1, 2)
    """

    def __init__(self, ordered: bool) -> None:
        self.counts: dict[Row, int] = {}  # (group..., x) -> count, non-zero
        self.totals: dict[Row, int] = {}  # group -> sum of its counts (the group's COUNT(*)), non-zero
        self.positive: dict[Row, int] = {}  # group -> number of x with a positive count
        self.sorted: dict[Row, SortedList] | None = {} if ordered else None

    def change(self, answer: Row, d: int) -> None:
        """The count of ``answer = (group..., x)`` changes by ``d``: O(1), O(log n) if ordered."""
        if not d:
            return
        group, x = answer[:-1], answer[-1]
        before = self.counts.get(answer, 0)
        after = before + d
        if after:
            self.counts[answer] = after
        else:
            del self.counts[answer]
        total = self.totals.get(group, 0) + d
        if total:
            self.totals[group] = total
        else:
            self.totals.pop(group, None)
        if (before > 0) == (after > 0):
            return
        positive = self.positive.get(group, 0) + (1 if after > 0 else -1)
        if positive:
            self.positive[group] = positive
        else:
            self.positive.pop(group, None)
        if self.sorted is None:
            return
        ordered = self.sorted.get(group)
        if after > 0:
            if ordered is None:
                ordered = self.sorted[group] = SortedList()
            ordered.add(x)
        else:
            assert ordered is not None
            ordered.remove(x)
            if not ordered:
                del self.sorted[group]

    def count(self, group: Row) -> int:
        """The group's COUNT(*): O(1)."""
        return self.totals.get(group, 0)

    def distinct(self, group: Row) -> int:
        """COUNT(DISTINCT x) of the group: O(1)."""
        return self.positive.get(group, 0)

    def minimum(self, group: Row) -> Any:
        """MIN(x) of the group, ``None`` without values: O(1)."""
        ordered = self.sorted.get(group) if self.sorted is not None else None
        return ordered[0] if ordered else None

    def maximum(self, group: Row) -> Any:
        """MAX(x) of the group, ``None`` without values: O(1)."""
        ordered = self.sorted.get(group) if self.sorted is not None else None
        return ordered[-1] if ordered else None


class GroupAggregates(Engine):
    """AVG, MIN, MAX, COUNT(DISTINCT) and HAVING per group, over inner ring views (module docstring).

    ``result()`` is ``{group: value}`` for the groups with rows that pass
    HAVING (the scalar, or ``None``, without free variables); ``enumerate()``
    lists those groups with their COUNT(*), as the ring engines list a SUM's
    groups; ``drain_delta()`` gives the changes of that listing.

    Costs: an update costs what the inner views' engines cost for it, plus
    O(log n) per change of a (group, x) count for MIN/MAX and O(1) for
    COUNT(DISTINCT); ``result()`` and ``enumerate()`` cost O(1) per group with
    rows (O(#HAVING conditions) more with HAVING) plus reading the inner SUM
    views' results; a query without free variables answers in O(1) from its
    one group.

    >>> import ivm
    >>> v = ivm.maintain("Q(a, MIN(c)) :- R(a, b), S(b, c) HAVING COUNT(*) >= 2")
    >>> _ = v.apply([("R", (1, 2), 1), ("S", (2, 7), 1), ("S", (2, 3), 1), ("R", (4, 5), 1), ("S", (5, 0), 1)])
    >>> v.engine.name, v.result()
    ('aggregates', {(1,): 3})
    >>> _ = v.apply([("S", (2, 3), -1), ("S", (5, 9), 1)])
    >>> v.result()
    {(4,): 0}
    """

    name = "aggregates"

    def __init__(self, query: Query, patterns: Any = None) -> None:
        super().__init__(query)
        import ivm  # the planner's engine for each input (ivm imports this module)

        self.inputs: tuple[Query, ...] = aggregate_inputs(query)
        self.engines: list[Engine] = [ivm.maintain(q, patterns=patterns).engine for q in self.inputs]
        free = query.free
        ordered = {a.variables[0] for a in query.aggregates if a.kind in ("min", "max")}
        #: per input: the multiset of its extra variable's values per group, or None for a ring input
        self.values: list[GroupValues | None] = []
        self.of_variable: dict[str, GroupValues] = {}
        for q, engine in zip(self.inputs, self.engines, strict=True):
            if len(q.free) > len(free):
                x = q.free[-1]
                values = self.of_variable[x] = GroupValues(ordered=x in ordered)
                self.values.append(values)
                drain = getattr(engine, "drain_delta", None)
                if drain is not None:
                    drain()  # starts the engine's change tracking (the first call lists what is there: nothing)
            else:
                self.values.append(None)
        self.sum_inputs = {q.aggregate.variables: i for i, q in enumerate(self.inputs) if q.aggregate.kind == "sum"}
        #: HAVING's conjuncts, each with the position of its group-by variable in the group key (-1: an aggregate)
        self.having = tuple((c, free.index(c.term) if isinstance(c.term, str) else -1) for c in query.having)
        self._last: dict[Row, int] | None = None
        self.value_changes = 0

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        if any(not atom.terms for atom in query.atoms):
            return "an atom without variables"
        if query.having and query.aggregate.kind == "covariance":
            return "HAVING next to COVAR: the result would be a covariance per group passing HAVING, not supported"
        return None

    # ---------------------------------------------------------------- updates
    def apply(self, updates: Sequence[Update]) -> None:
        """Apply the batch to every inner view, then feed the (group, x) count changes to the multisets."""
        if not isinstance(updates, list):
            updates = list(updates)
        for engine, values in zip(self.engines, self.values, strict=True):
            engine.apply(updates)
            if values is not None:
                for answer, d in self._changes(engine, values):
                    values.change(answer, d)
                    self.value_changes += 1

    @staticmethod
    def _changes(engine: Engine, values: GroupValues) -> list[tuple[Row, int]]:
        """The answer changes of an inner view: its own ``drain_delta`` (the cost of the update),
        else the difference of its listing and the multiset's counts (O(|listing|))."""
        drain = getattr(engine, "drain_delta", None)
        if drain is not None:
            return drain()
        current = dict(engine.enumerate())
        out = [(a, m - values.counts.get(a, 0)) for a, m in current.items() if m != values.counts.get(a, 0)]
        out += [(a, -m) for a, m in values.counts.items() if a not in current]
        return out

    # ----------------------------------------------------------------- results
    def _groups(self) -> Mapping[Row, int]:
        """Group -> COUNT(*) for the groups with a non-zero count."""
        for values in self.values:
            if values is not None:
                return values.totals
        return dict(self.engines[0].enumerate())

    def _ring_results(self) -> list[Any]:
        """Each ring input's result (``{group: value}``, or the value without free variables); None for others."""
        pairs = zip(self.engines, self.values, strict=True)
        return [engine.exact_result() if values is None else None for engine, values in pairs]

    def _value(self, aggregate: Aggregate, group: Row, count: int, rings: list[Any]) -> Any:
        """The aggregate of one group: O(1)."""
        kind = aggregate.kind
        if kind == "count":
            return count
        if count <= 0 and not self.query.free:
            if kind == "covariance":
                return rings[0]
            return _EMPTY[kind]
        if kind in VALUE_KINDS:
            (x,) = aggregate.variables
            if x in self.query.free:  # a group has one value of its own key
                return 1 if kind == "count_distinct" else group[self.query.free.index(x)]
            values = self.of_variable[x]
            if kind == "count_distinct":
                return values.distinct(group)
            return values.minimum(group) if kind == "min" else values.maximum(group)
        if kind == "covariance":
            found = rings[0]
            return read_result(found.get(group) if self.query.free else found)
        found = rings[self.sum_inputs[aggregate.variables]]
        total = found.get(group, 0) if self.query.free else found
        if kind == "avg":
            return total / count  # an exact sum (a Dyadic) divided once, correctly rounded
        return read_result(aggregate.coefficient * total)

    def _rows(self) -> Iterator[tuple[Row, int, Any]]:
        """(group, COUNT(*), value) of the groups in the result: O(1) per group (O(#HAVING) more)."""
        rings = self._ring_results()
        groups = self._groups()
        if not self.query.free:
            groups = {(): groups.get((), 0)}
        having = self.having
        value = self._value
        for group, count in groups.items():
            if count <= 0 and self.query.free:
                continue  # a group exists while it has rows
            if all(c.holds(group[i] if i >= 0 else value(c.term, group, count, rings)) for c, i in having):
                yield group, count, value(self.query.aggregate, group, count, rings)

    def result(self) -> Any:
        """``{group: value}`` (groups with rows that pass HAVING); the value, or ``None``, without free variables."""
        if not self.query.free:
            return next((v for _, _, v in self._rows()), None)
        return {group: v for group, _, v in self._rows()}

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        """The groups of the result with their COUNT(*) (the scalar's one group while it has rows)."""
        for group, count, _ in self._rows():
            if count > 0:
                yield group, count

    def drain_delta(self) -> list[tuple[Row, int]]:
        """Changes of :meth:`enumerate` since the last call (the first returns it whole): O(#groups)."""
        current = dict(self.enumerate())
        last = self._last or {}
        out = [(g, m - last.get(g, 0)) for g, m in current.items() if m != last.get(g, 0)]
        out += [(g, -m) for g, m in last.items() if g not in current]
        self._last = current
        return sorted(out, key=repr)

    def multiplicity(self, relation: str, row: Row) -> int:
        return self.engines[0].multiplicity(relation, row)

    def stats(self) -> dict[str, int | float]:
        inner = [engine.stats() for engine in self.engines]
        multisets = [v for v in self.values if v is not None]
        return {
            "inner_views": len(self.engines),
            "groups": len(self._groups()),
            "group_values": sum(len(v.counts) for v in multisets),
            "value_changes": self.value_changes,
            "view_keys": sum(int(s.get("view_keys", 0)) for s in inner) + sum(len(v.counts) for v in multisets),
            "updates_applied": int(inner[0].get("updates_applied", 0)),
        } | self._memory(inner)

    def _memory(self, inner: list[dict[str, int | float]]) -> dict[str, int | float]:
        """The inner engines' state (as each counts it) plus this engine's own (the value multisets, the
        groups), per tuple of the first inner engine's base relations."""
        own = state_memory(self, int(inner[0].get("base_tuples", 0)), exclude=("engines",))
        total = int(own["state_bytes"]) + sum(int(s.get("state_bytes", 0)) for s in inner)
        tuples = int(inner[0].get("base_tuples", 0)) or int(inner[0].get("state_tuples", 0))
        return {"state_bytes": total, "bytes_per_tuple": round(total / tuples, 1) if tuples else 0.0}
