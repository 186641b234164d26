"""Updates to Z-relations: the one input type every engine consumes.

A Z-relation maps tuples to integer multiplicities, non-zero on finitely many
tuples (IVM^eps §1.1, F-IVM §2). A single-tuple update ``δK = {x ↦ m}`` with
``m != 0`` is an insert when ``m > 0`` and a delete when ``m < 0``; engines
treat both the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

Value = Any  # an attribute value: int, str, float, ... (hashable)
Row = tuple[Value, ...]


class Update(NamedTuple):
    """One tuple update ``δrelation = {row ↦ mult}``."""

    relation: str
    row: Row
    mult: int


_PAIR = itemgetter(0, 1)  # (relation, row) of an update


def as_updates(items: Iterable[Update | tuple[str, Row, int]]) -> list[Update]:
    """Normalise ``(relation, row, mult)`` triples into :class:`Update` values.

    >>> as_updates([("R", [1, 2], 1)])
    [Update(relation='R', row=(1, 2), mult=1)]
    """
    out: list[Update] = []
    for relation, row, mult in items:
        if not isinstance(mult, int) or isinstance(mult, bool):
            raise TypeError(f"multiplicity must be an int, got {mult!r}")
        out.append(Update(relation, tuple(row), mult))
    return out


def duplicate_rate(updates: Sequence[Update | tuple[str, Row, int]]) -> float:
    """The fraction of ``updates`` that repeat a ``(relation, row)`` pair seen earlier in the batch.

    ``1 - distinct / len``: what :func:`consolidate` would save.  One pass in C
    (a set of ``(relation, row)`` keys), O(|batch|) expected.

    >>> duplicate_rate([("R", (1,), 1), ("R", (1,), -1), ("R", (2,), 1), ("S", (1,), 1)])
    0.25
    >>> duplicate_rate([])
    0.0
    """
    if not updates:
        return 0.0
    return 1.0 - len(set(map(_PAIR, updates))) / len(updates)


def consolidate(updates: Iterable[Update | tuple[str, Row, int]]) -> list[Update]:
    """The batch as a Z-set: one update per ``(relation, row)`` with the summed multiplicity, zeros dropped.

    Z-relations form a commutative group under ``+`` (IVM^eps §1.1, F-IVM §2,
    DBSP's Z-sets), so applying the consolidated batch leaves the same
    multiplicities as applying the updates one at a time, in any order.  Keeps
    the order of first occurrence; O(|batch|) expected.

    >>> consolidate([("R", (1,), 1), ("S", (2,), 1), ("R", (1,), 2), ("S", (2,), -1)])
    [Update(relation='R', row=(1,), mult=3)]
    """
    total: dict[tuple[str, Row], int] = {}
    get = total.get
    for relation, row, mult in updates:
        key = (relation, row)
        total[key] = get(key, 0) + mult
    return [Update(relation, row, mult) for (relation, row), mult in total.items() if mult]
