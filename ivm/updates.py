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


def from_columns(relation: str, columns: Sequence[Any], multiplicities: Any = 1) -> list[tuple[str, Row, int]]:
    """A batch given as columns, as the ``(relation, row, mult)`` triples it stands for, in row order.

    ``columns``: one sequence per attribute of ``relation`` (numpy arrays, pyarrow arrays, lists),
    all of one length n; row ``i`` is ``(columns[0][i], columns[1][i], ...)`` with numpy scalars
    made Python values (``ndarray.tolist()``: an integer column gives ``int``, a floating one
    ``float``).  ``multiplicities``: one ``int`` for every row, or a sequence of n ints.  This is
    what :meth:`ivm.engines.base.Engine.apply_columns` means; an engine's fast path must leave the
    same state.  O(n · arity).

    >>> import numpy as np
    >>> from_columns("R", [np.array([1, 2]), np.array([0.5, 1.5])], np.array([1, -1]))
    [('R', (1, 0.5), 1), ('R', (2, 1.5), -1)]
    """
    lists = [_as_list(column) for column in columns]
    scalar = isinstance(multiplicities, int) and not isinstance(multiplicities, bool)
    n = len(lists[0]) if lists else (0 if scalar else len(multiplicities))  # a nullary relation: n from the mults
    if any(len(values) != n for values in lists):
        raise ValueError(f"columns of {relation!r} differ in length: {[len(values) for values in lists]}")
    if scalar:
        mults: list[Any] = [multiplicities] * n
    else:
        mults = _as_list(multiplicities)
        if len(mults) != n:
            raise ValueError(f"{len(mults)} multiplicities for {n} rows of {relation!r}")
        bad = next((m for m in mults if type(m) is not int), None)
        if bad is not None:
            raise TypeError(f"multiplicity must be an int, got {bad!r}")
    rows = list(zip(*lists, strict=True)) if lists else [()] * n
    return [(relation, row, m) for row, m in zip(rows, mults, strict=True)]


def _as_list(values: Any) -> list[Any]:
    """``values`` as a list of Python values (numpy and pyarrow arrays through ``tolist``)."""
    if isinstance(values, list):
        return values
    tolist = getattr(values, "tolist", None)
    if tolist is not None and getattr(values, "ndim", 1) == 1:
        out = tolist()
        if isinstance(out, list):
            return out
    if getattr(values, "ndim", 1) != 1:
        raise ValueError(f"a column must be one-dimensional, got shape {getattr(values, 'shape', None)}")
    return list(values)


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
