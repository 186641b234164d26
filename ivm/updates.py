"""Updates to Z-relations: the one input type every engine consumes.

A Z-relation maps tuples to integer multiplicities, non-zero on finitely many
tuples (IVM^eps §1.1, F-IVM §2). A single-tuple update ``δK = {x ↦ m}`` with
``m != 0`` is an insert when ``m > 0`` and a delete when ``m < 0``; engines
treat both the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import add, itemgetter
from typing import Any, NamedTuple

Value = Any  # an attribute value: int, str, float, ... (hashable)
Row = tuple[Value, ...]


class Update(NamedTuple):
    """One tuple update ``δrelation = {row ↦ mult}``."""

    relation: str
    row: Row
    mult: int


_PAIR = itemgetter(0, 1)  # (relation, row) of an update
#: the relation, the row and the multiplicity of an update (``map`` them over a batch: C-level passes)
relation_of, row_of, mult_of = itemgetter(0), itemgetter(1), itemgetter(2)


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


def by_relation(updates: Sequence[Update]) -> dict[str, dict[Row, int]]:
    """The batch as one Z-set per relation: each tuple's multiplicities summed, tuples summing to 0 dropped.

    A batch of one relation whose updates share one multiplicity (a chunk of inserts, say) is
    counted by :class:`collections.Counter` in C; any other batch by a Python loop.  O(|batch|).

    >>> by_relation([("R", (1,), 1), ("S", (2,), 1), ("R", (1,), 2), ("S", (2,), -1)])
    {'R': {(1,): 3}}
    """
    if isinstance(updates, list | tuple) and len(updates) == 1:
        ((relation, row, mult),) = updates
        return {relation: {row: mult}} if mult else {}
    if isinstance(updates, list | tuple) and updates:
        relations = set(map(relation_of, updates))
        mults = set(map(mult_of, updates))
        if len(relations) == 1 and len(mults) == 1:
            (m,) = mults
            if not m:
                return {}
            counts = dict(Counter(map(row_of, updates)))  # a copy keeps the stored hashes
            if m != 1:
                for row in counts:
                    counts[row] *= m
            return {relations.pop(): counts}
    out: dict[str, dict[Row, int]] = {}
    for relation, row, mult in updates:
        delta = out.get(relation)
        if delta is None:
            delta = out[relation] = {}
        delta[row] = delta.get(row, 0) + mult
    for relation, delta in out.items():
        if 0 in delta.values():
            out[relation] = {row: m for row, m in delta.items() if m}
    return {relation: delta for relation, delta in out.items() if delta}


def apply_to_base(base: dict[Row, int], delta: dict[Row, int]) -> list[int]:
    """``R += δR`` on a relation's multiplicities (zeros deleted); returns the old multiplicities (δR's order).

    Three C-level passes (lookups, sums, one ``dict.update``) plus a loop over the tuples that
    drop to 0.  O(|δR|).
    """
    olds = list(map(base.get, delta, repeat(0, len(delta))))
    news = list(map(add, olds, delta.values()))
    base.update(zip(delta, news, strict=True))
    if 0 in news:
        for row, new in zip(delta, news, strict=True):
            if not new:
                del base[row]
    return olds


def distinct_delta(
    updates: Sequence[Update], relations: set[str] | None = None, mults: set[int] | None = None
) -> dict[str, dict[Row, int]] | None:
    """:func:`by_relation` of a batch of one relation's distinct rows under one int multiplicity, else ``None``.

    The common shape of a chunk of inserts or deletes: the Z-set (IVM^eps §1.1) is ``{row: m}``, built by one
    ``dict.fromkeys`` pass (one hash per row) instead of counting.  ``relations`` and ``mults``
    are the batch's sets of relations and multiplicities when the caller has them.  O(|batch|).

    >>> distinct_delta([("R", (1,), -1), ("R", (2,), -1)]), distinct_delta([("R", (1,), 1), ("R", (1,), 1)])
    ({'R': {(1,): -1, (2,): -1}}, None)
    """
    if not isinstance(updates, list | tuple) or len(updates) < 2:
        return None
    relations = set(map(relation_of, updates)) if relations is None else relations
    if len(relations) != 1:
        return None
    mults = set(map(mult_of, updates)) if mults is None else mults
    if len(mults) != 1:
        return None
    (m,) = mults
    if type(m) is not int or not m:
        return None
    delta = dict.fromkeys(map(row_of, updates), m)
    if len(delta) < len(updates):  # a row twice: its multiplicities add up (by_relation)
        return None
    (relation,) = relations
    return {relation: delta}
