"""Classical first-order IVM for the triangle count.

IVM^eps §1.1 (baselines): store R, S, T and Q; a single-tuple update
``δR = {(a,b) ↦ m}`` changes the count by ``m · Σ_c S(b,c)·T(c,a)``, computed
by intersecting the two C-lists of ``b`` and ``a``.  Iterating the smaller of
the two lists, an update costs O(min(deg_S(b), deg_T(a))) ⊆ O(|D|) time;
space is O(|D|).  It is IVM^eps at eps ∈ {0, 1} (Theorem 3 special case).

The three atoms of the query are kept as three *slots* in cycle order
``(u0,u1), (u1,u2), (u2,u0)``, each indexed in both directions.  A relation
that occurs in several atoms (the self-join ``E(a,b),E(b,c),E(c,a)``) feeds
each of its slots in turn; by the telescoping delta rule
``Q(E1',E2',E3') - Q(E1,E2,E3) = δ1 + δ2 + δ3`` with δi evaluated on the
slots already updated, this is exact.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ivm.engines.base import Engine
from ivm.query.model import Query
from ivm.query.triangle import TriangleShape, triangle_shape
from ivm.updates import Row, Update

Adjacency = dict[object, dict[object, int]]


class _Slot:
    """One directed edge relation of the cycle with forward and backward indexes."""

    __slots__ = ("bwd", "fwd", "size")

    def __init__(self) -> None:
        self.fwd: Adjacency = {}
        self.bwd: Adjacency = {}
        self.size = 0  # distinct tuples with non-zero multiplicity

    def add(self, x: object, y: object, m: int) -> None:
        row = self.fwd.setdefault(x, {})
        old = row.get(y, 0)
        new = old + m
        if new:
            row[y] = new
            self.bwd.setdefault(y, {})[x] = new
            self.size += old == 0
        else:
            del row[y]
            if not row:
                del self.fwd[x]
            col = self.bwd[y]
            del col[x]
            if not col:
                del self.bwd[y]
            self.size -= 1

    def get(self, x: object, y: object) -> int:
        row = self.fwd.get(x)
        return row.get(y, 0) if row else 0


def _intersect(out: dict[object, int] | None, into: dict[object, int] | None) -> int:
    """Σ_z out[z]·into[z], iterating the smaller map."""
    if not out or not into:
        return 0
    if len(out) > len(into):
        out, into = into, out
    total = 0
    for z, m in out.items():
        n = into.get(z)
        if n:
            total += m * n
    return total


class FirstOrderIVM(Engine):
    """First-order delta queries for the triangle count (IVM^eps §1.1)."""

    name = "first_order"

    def __init__(self, query: Query) -> None:
        super().__init__(query)
        shape = triangle_shape(query)
        assert isinstance(shape, TriangleShape)
        self.shape = shape
        self._slots = (_Slot(), _Slot(), _Slot())
        # relation -> [(slot index, flipped)] in cycle order
        self._occurrences: dict[str, list[tuple[int, bool]]] = {}
        for i, edge in enumerate(shape.edges):
            self._occurrences.setdefault(edge.relation, []).append((i, edge.flipped))
        self._count = 0
        self._updates = 0

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        shape = triangle_shape(query)
        return shape if isinstance(shape, str) else None

    def apply(self, updates: Sequence[Update]) -> None:
        slots = self._slots
        for relation, row, m in updates:
            for i, flipped in self._occurrences[relation]:
                x, y = (row[1], row[0]) if flipped else (row[0], row[1])
                nxt, prv = slots[(i + 1) % 3], slots[(i + 2) % 3]
                # δQ = m · Σ_z next(y, z) · prev(z, x)
                self._count += m * _intersect(nxt.fwd.get(y), prv.bwd.get(x))
                slots[i].add(x, y, m)
            self._updates += 1

    def result(self) -> int:
        return self._count

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        if self._count:
            yield (), self._count

    def multiplicity(self, relation: str, row: Row) -> int:
        i, flipped = self._occurrences[relation][0]
        x, y = (row[1], row[0]) if flipped else (row[0], row[1])
        return self._slots[i].get(x, y)

    def stats(self) -> dict[str, int | float]:
        return {
            "result": self._count,
            "updates_applied": self._updates,
            "state_tuples": sum(s.size for s in self._slots),
        }
