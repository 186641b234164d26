"""Updates to Z-relations: the one input type every engine consumes.

A Z-relation maps tuples to integer multiplicities, non-zero on finitely many
tuples (IVM^eps §1.1, F-IVM §2). A single-tuple update ``δK = {x ↦ m}`` with
``m != 0`` is an insert when ``m > 0`` and a delete when ``m < 0``; engines
treat both the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

Value = Any  # an attribute value: int, str, float, ... (hashable)
Row = tuple[Value, ...]


class Update(NamedTuple):
    """One tuple update ``δrelation = {row ↦ mult}``."""

    relation: str
    row: Row
    mult: int


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
