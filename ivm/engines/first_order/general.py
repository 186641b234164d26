"""First-order IVM for any conjunctive query: one delta query per aggregate (F-IVM §1, 1-IVM).

The baseline F-IVM is compared against (F-IVM §7: "1-IVM materializes only
the result and computes one delta query per updated relation, with no extra
views").  It stores the base relations (hash-indexed on the join variables) and
the result; a batch ``δR`` is pre-aggregated, and for every *scalar* aggregate
(1 for COUNT and SUM; ``1 + m + m(m+1)/2`` for a degree-m covariance matrix,
as DBToaster's 1-IVM runs them) the delta query ``Q[δR]`` is evaluated by
index nested loops over the other atoms.  An update costs
O(#aggregates · |δR| · fan-out of δR in the join): the join is re-enumerated
for every aggregate, nothing is shared between aggregates or updates.

Self-joins: the occurrences of R are processed in sequence, occurrence i
joining the new state of the occurrences before it and the old state of those
after it (the ``δR ⊗ δR`` term).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import combinations_with_replacement
from typing import Any

import numpy as np

from ivm.engines.base import Engine
from ivm.engines.memory import state_memory
from ivm.query.model import Query
from ivm.rings.covariance import Covariance
from ivm.rings.exact import exact, read_result
from ivm.updates import Row, Update

Term = tuple[str, ...]  # the variables whose product one scalar aggregate sums (with repeats)


class FirstOrderDelta(Engine):
    """1-IVM: base relations plus the result, one delta query per scalar aggregate.

    >>> import ivm
    >>> v = ivm.maintain("Q(a, SUM(c)) :- R(a,b), S(b,c)", engine="first_order_delta")
    >>> _ = v.apply([("R", (1, 2), 1), ("S", (2, 5), 2), ("S", (2, 7), 1)])
    >>> v.result(), sorted(v.enumerate())
    ({(1,): 17}, [((1,), 3)])
    """

    name = "first_order_delta"

    def __init__(self, query: Query) -> None:
        super().__init__(query)
        agg = query.aggregate
        self.terms: list[Term] = [()]
        if agg.kind == "sum":
            self.terms.append(tuple(agg.variables))
        elif agg.kind == "covariance":
            self.terms += [(v,) for v in agg.variables]
            self.terms += [(agg.variables[i], agg.variables[j]) for i, j in self._pairs()]
        self.base: dict[str, dict[Row, int]] = {r: {} for r in query.relations}
        self.indexes: dict[tuple[str, tuple[int, ...]], dict[Row, dict[Row, int]]] = {}
        self.totals: dict[Row, list[Any]] = {}  # group -> one value per scalar aggregate
        self.plans = {i: self._plan(i) for i in range(len(query.atoms))}
        self.delta_queries = 0

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        if any(not a.terms for a in query.atoms):
            return "an atom without variables"
        return None

    def _pairs(self) -> list[tuple[int, int]]:
        return list(combinations_with_replacement(range(len(self.query.aggregate.variables)), 2))

    def _plan(self, start: int) -> list[tuple[int, tuple[int, ...], tuple[str, ...]]]:
        """Join order from atom ``start``: (atom, positions bound on arrival, their variables)."""
        atoms = self.query.atoms
        bound = set(atoms[start].terms)
        rest = [j for j in range(len(atoms)) if j != start]
        plan = []
        while rest:
            j = max(rest, key=lambda k: sum(v in bound for v in atoms[k].terms))
            rest.remove(j)
            pos = tuple(p for p, v in enumerate(atoms[j].terms) if v in bound)
            plan.append((j, pos, tuple(atoms[j].terms[p] for p in pos)))
            bound |= set(atoms[j].terms)
        return plan

    def _index(self, relation: str, positions: tuple[int, ...]) -> dict[Row, dict[Row, int]]:
        key = (relation, positions)
        idx = self.indexes.get(key)
        if idx is None:
            idx = {}
            for row, m in self.base[relation].items():
                idx.setdefault(tuple(row[p] for p in positions), {})[row] = m
            self.indexes[key] = idx
        return idx

    def _set(self, relation: str, row: Row, new: int) -> None:
        if new:
            self.base[relation][row] = new
        else:
            self.base[relation].pop(row, None)
        for (rel, positions), idx in self.indexes.items():
            if rel != relation:
                continue
            sub = tuple(row[p] for p in positions)
            if new:
                idx.setdefault(sub, {})[row] = new
            else:
                bucket = idx.get(sub)
                if bucket is not None:
                    bucket.pop(row, None)
                    if not bucket:
                        del idx[sub]

    def apply(self, updates: Sequence[Update]) -> None:
        per_relation: dict[str, dict[Row, int]] = {}
        for relation, row, mult in updates:
            d = per_relation.setdefault(relation, {})
            d[row] = d.get(row, 0) + mult
        for relation, delta in per_relation.items():
            delta = {r: m for r, m in delta.items() if m}
            occurrences = [i for i, a in enumerate(self.query.atoms) if a.relation == relation]
            for done, i in enumerate(occurrences):
                # occurrences before i see the new state: apply δ to them by evaluating after the update
                for t, term in enumerate(self.terms):
                    self.delta_queries += 1
                    for group, value in self._delta_query(i, delta, term, set(occurrences[:done])).items():
                        vals = self.totals.setdefault(group, [0] * len(self.terms))
                        vals[t] += value
            for row, m in delta.items():
                self._set(relation, row, self.base[relation].get(row, 0) + m)
        for group in [g for g, v in self.totals.items() if not any(v)]:
            del self.totals[group]

    def _delta_query(self, start: int, delta: dict[Row, int], term: Term, newer: set[int]) -> dict[Row, Any]:
        """``Σ_{bound} δR_start ⊗ ⊗_{j≠start} R_j · Π term`` grouped by the free variables."""
        atoms = self.query.atoms
        free = self.query.free
        out: dict[Row, Any] = {}
        plan = self.plans[start]
        n = len(plan)

        def rows_of(j: int, pos: tuple[int, ...], sub: Row) -> list[tuple[Row, int]]:
            found = dict(self._index(atoms[j].relation, pos).get(sub, {}))
            if j in newer:  # an earlier occurrence of the updated relation: new = old ⊎ δ
                for row, m in delta.items():
                    if tuple(row[p] for p in pos) == sub:
                        found[row] = found.get(row, 0) + m
            return [(r, m) for r, m in found.items() if m]

        def extend(k: int, binding: dict[str, Any], weight: int) -> None:
            if k == n:
                value: Any = weight
                for v in term:
                    value = value * exact(binding[v])  # floats as exact dyadic rationals (ivm.rings.exact)
                group = tuple(binding[v] for v in free)
                out[group] = out.get(group, 0) + value
                return
            j, pos, names = plan[k]
            atom = atoms[j]
            for row, m in rows_of(j, pos, tuple(binding[v] for v in names)):
                if not atom.matches(row):
                    continue
                new = dict(binding)
                if all(new.setdefault(v, x) == x for v, x in zip(atom.terms, row, strict=True)):
                    extend(k + 1, new, weight * m)

        atom = atoms[start]
        for row, m in delta.items():
            if atom.matches(row):
                extend(0, dict(zip(atom.terms, row, strict=True)), m)
        return out

    def result(self) -> Any:
        """The aggregate, sums of floats rounded once, correctly (:meth:`exact_result` keeps them exact)."""
        return read_result(self.exact_result())

    def exact_result(self) -> Any:
        agg = self.query.aggregate
        if agg.kind == "covariance":
            m = len(agg.variables)

            def cov(vals: list[Any]) -> Covariance:
                s = np.array(vals[1 : 1 + m], dtype=object)
                Q = np.zeros((m, m), dtype=object)
                for (i, j), q in zip(self._pairs(), vals[1 + m :], strict=True):
                    Q[i, j] = Q[j, i] = q
                return Covariance(vals[0], s, Q)

            if not self.query.free:
                return cov(self.totals.get((), [0] * len(self.terms)))
            return {g: cov(v) for g, v in self.totals.items()}
        t = 1 if agg.kind == "sum" else 0
        scale = agg.coefficient if agg.kind == "sum" else 1
        if not self.query.free:
            return self.totals.get((), [0, 0])[t] * scale
        # a group exists while it has join results (its count), as in SQL: a SUM of 0 over rows is a row
        return {g: v[t] * scale for g, v in self.totals.items() if v[0]}

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        for group, vals in self.totals.items():
            if vals[0]:
                yield group, vals[0]

    def multiplicity(self, relation: str, row: Row) -> int:
        return self.base.get(relation, {}).get(tuple(row), 0)

    def stats(self) -> dict[str, int | float]:
        return {
            "materialized_views": len(self.terms) + len(self.base),
            "aggregates": len(self.terms),
            "delta_queries": self.delta_queries,
            "result_groups": len(self.totals),
        } | state_memory(self, sum(len(rows) for rows in self.base.values()))
