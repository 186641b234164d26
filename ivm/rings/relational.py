"""The relational data ring F[Z] (F-IVM Def. 36, §6.4): listing and factorized results.

Elements are relations over Z: a schema (tuple of variable names) and a map
from tuples over it to non-zero multiplicities.  ``+`` is union ``⊎``, ``*``
is natural join ``⊗``, ``0 = {}`` and ``1 = {() → 1}``.  As the paper notes,
F[Z] is a ring only when tuples carry their own schemas; here the empty
relation has no schema (it is the zero of every schema) and a union of two
non-empty relations needs the same variable set (always true inside a view
tree, §2.4).

Costs: union O(|a| + |b|); join O(|a| + |b| + |a ⊗ b|) with a hash index on
the shared variables.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from ivm.rings.base import Ring


class Relation:
    """A relation over Z: ``schema`` and ``data: {tuple: multiplicity}`` without zeros."""

    __slots__ = ("data", "schema")

    def __init__(self, schema: Sequence[str] = (), data: Mapping[tuple[Any, ...], Any] | None = None) -> None:
        self.schema = tuple(schema)
        self.data = {k: v for k, v in (data or {}).items() if v != 0}

    @classmethod
    def _raw(cls, schema: tuple[str, ...], data: dict[tuple[Any, ...], Any]) -> Relation:
        out = cls.__new__(cls)
        out.schema = schema
        out.data = data
        return out

    def reorder(self, schema: Sequence[str]) -> Relation:
        """The same relation with its columns in the order ``schema`` (a permutation)."""
        schema = tuple(schema)
        if schema == self.schema:
            return self
        if set(schema) != set(self.schema):
            raise ValueError(f"cannot reorder {self.schema} as {schema}")
        pos = [self.schema.index(v) for v in schema]
        return Relation._raw(schema, {tuple(k[p] for p in pos): v for k, v in self.data.items()})

    def __add__(self, other: Relation) -> Relation:
        if not other.data:
            return self
        if not self.data:
            return other
        other = other.reorder(self.schema)
        data = dict(self.data)
        for k, v in other.data.items():
            new = data.get(k, 0) + v
            if new:
                data[k] = new
            else:
                data.pop(k, None)
        return Relation._raw(self.schema, data)

    def __neg__(self) -> Relation:
        return Relation._raw(self.schema, {k: -v for k, v in self.data.items()})

    def __sub__(self, other: Relation) -> Relation:
        return self + (-other)

    def __mul__(self, other: Relation | int) -> Relation:
        if not isinstance(other, Relation):  # scalar multiple
            if other == 0:
                return Relation()
            return Relation._raw(self.schema, {k: v * other for k, v in self.data.items()})
        if not self.data or not other.data:
            return Relation()
        shared = [v for v in other.schema if v in self.schema]
        extra = [i for i, v in enumerate(other.schema) if v not in self.schema]
        schema = self.schema + tuple(other.schema[i] for i in extra)
        data: dict[tuple[Any, ...], Any] = {}
        if not shared:  # Cartesian product
            for k1, v1 in self.data.items():
                for k2, v2 in other.data.items():
                    data[k1 + tuple(k2[i] for i in extra)] = v1 * v2
            return Relation._raw(schema, data)
        mine = [self.schema.index(v) for v in shared]
        theirs = [other.schema.index(v) for v in shared]
        index: dict[tuple[Any, ...], list[tuple[tuple[Any, ...], Any]]] = {}
        for k2, v2 in other.data.items():
            index.setdefault(tuple(k2[i] for i in theirs), []).append((tuple(k2[i] for i in extra), v2))
        for k1, v1 in self.data.items():
            for rest, v2 in index.get(tuple(k1[i] for i in mine), ()):
                key = k1 + rest
                new = data.get(key, 0) + v1 * v2
                if new:
                    data[key] = new
                else:
                    data.pop(key, None)
        return Relation._raw(schema, data)

    __rmul__ = __mul__

    def marginalize_to(self, keep: Collection[str]) -> Relation:
        """``⊕_{schema ∖ keep}``: sum the multiplicities over the other variables (§6.4, factorized payloads)."""
        schema = tuple(v for v in self.schema if v in keep)
        if schema == self.schema:
            return self
        pos = [self.schema.index(v) for v in schema]
        data: dict[tuple[Any, ...], Any] = {}
        for k, v in self.data.items():
            key = tuple(k[p] for p in pos)
            data[key] = data.get(key, 0) + v
        return Relation(schema, data)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Relation):
            return NotImplemented
        if not self.data or not other.data:
            return not self.data and not other.data
        if set(self.schema) != set(other.schema):
            return False
        return self.data == other.reorder(self.schema).data

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.data)

    def items(self) -> Iterable[tuple[tuple[Any, ...], Any]]:
        return self.data.items()

    def __repr__(self) -> str:
        return f"Relation({self.schema!r}, {self.data!r})"


class RelationalRing(Ring):
    """F[Z] with the lifting of §6.4: free ``X`` ↦ ``{x → 1}``, bound ``X`` ↦ ``{() → 1}``.

    ``factorized=True`` asks view trees to keep at the view of X only the X
    column of its payload (``⊕_{𝒯∖{X}} P``, §6.4); the ring itself is the same.

    >>> r = RelationalRing({"A", "C"})
    >>> (r.lift("A", 1) * r.lift("C", 2) * r.lift("E", 9) * r.from_mult(2)).data
    {(1, 2): 2}
    """

    def __init__(self, free: Collection[str], factorized: bool = False) -> None:
        self.free = frozenset(free)
        self.factorized = factorized
        self.name = "F[Z] (" + ("factorized" if factorized else "listing") + ")"

    @property
    def zero(self) -> Relation:
        return Relation()

    @property
    def one(self) -> Relation:
        return Relation._raw((), {(): 1})

    def from_mult(self, mult: int) -> Relation:
        return Relation((), {(): mult})

    def lifts(self, variable: str) -> bool:
        return variable in self.free

    def lift(self, variable: str, value: Any) -> Relation:
        if variable in self.free:
            return Relation._raw((variable,), {(value,): 1})
        return self.one

    def is_zero(self, element: Relation) -> bool:
        return not element.data
