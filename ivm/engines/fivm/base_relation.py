"""F-IVM's base relations kept compact: a :class:`RowTable` per relation, or a ``dict`` (F-IVM §2, §4).

The engine keeps each relation's multiplicities (a Z-relation, §2) for the input policy's lookups
(:meth:`~ivm.engines.fivm.engine.FIVM.multiplicity`), re-evaluation from the base relations and
snapshots.  With the compiled extension (``_row_table.pyx``) a relation is a :class:`RowTable`:
values in int64 cells, ``8 · (arity + 1)`` bytes per tuple plus its hash slot, instead of a
``dict`` of Python tuples (about 400 bytes for a tuple of 11 numbers).  It answers lookups as the
``dict`` would under Python equality, and a row it cannot store (a value of another kind than its
column's, a string, NaN, an int beyond int64, a multiplicity beyond 2^31 in one update) moves that
relation to a ``dict`` for good (:func:`to_dict`).

Snapshots hold a :class:`PackedRelation` (plain arrays, no extension type), so they load with or
without the extension; older snapshots hold dicts, which :func:`compact` turns into tables.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from ivm.updates import Row, apply_to_base

try:  # the compiled base relation (``_row_table.pyx``), present when pip install compiled it
    from ivm.engines.fivm._row_table import MAX_MULTIPLICITY as _MAX_UPDATE
    from ivm.engines.fivm._row_table import RowTable
    from ivm.engines.fivm._row_table import column_cells as _column_cells
    from ivm.engines.fivm._row_table import table_kinds as _table_kinds
except ImportError:  # no compiler at install time: dicts of tuples
    RowTable = _column_cells = _table_kinds = None  # type: ignore[assignment,misc]

Relation = Any  # a dict[Row, int] or a RowTable

_KINDS = {0: "int", 1: "float"}


@dataclass
class PackedRelation:
    """A :class:`RowTable`'s contents for a snapshot: column kinds (bytes, -1 unknown, 0 int, 1 float),
    ``cells (n, arity)`` int64 (a float column holds the double's bits) and ``mults (n,)``, in order."""

    arity: int
    kinds: bytes
    cells: np.ndarray
    mults: np.ndarray

    def to_dict(self) -> dict[Row, int]:
        """The ``dict`` the table stands for (no extension needed)."""
        kinds = np.frombuffer(self.kinds, dtype=np.int8)
        columns: list[list[Any]] = []
        for j in range(self.arity):
            column = self.cells[:, j]
            columns.append(column.view(np.float64).tolist() if kinds[j] == 1 else column.tolist())
        rows = list(zip(*columns, strict=True)) if self.arity else [() for _ in range(len(self.mults))]
        return dict(zip(rows, self.mults.tolist(), strict=True))

    def restore(self) -> Relation:
        """A :class:`RowTable` again when the extension is built, else the ``dict``."""
        if RowTable is None:
            return self.to_dict()
        table = RowTable(self.arity)
        kinds = np.frombuffer(self.kinds, dtype=np.int8)
        table.apply_cells(np.ascontiguousarray(self.cells, dtype=np.int64), np.asarray(self.mults, np.int64), kinds)
        return table


def pack(relation: Relation) -> Relation:
    """A relation as a snapshot holds it: a table as a :class:`PackedRelation`, a dict as itself."""
    if RowTable is not None and isinstance(relation, RowTable):
        return PackedRelation(relation.ncols, *relation.export())
    return relation


def unpack(relation: Relation) -> Relation:
    return relation.restore() if isinstance(relation, PackedRelation) else relation


def compact(relation: dict[Row, int], arity: int) -> Relation:
    """A dict as a :class:`RowTable` when the extension is built and every row and multiplicity fits."""
    if RowTable is None:
        return relation
    table = RowTable(arity)
    parsed = table.parse(list(relation.items()))
    if parsed is None:
        return relation
    table.apply_cells(*parsed)
    return table


def is_table(relation: Relation) -> bool:
    return RowTable is not None and isinstance(relation, RowTable)


def to_dict(relation: Relation) -> dict[Row, int]:
    return relation.to_dict() if is_table(relation) else relation


def nbytes(relation: Relation, sample: int = 32) -> int:
    """Bytes held by a relation: a table's arrays exactly; a dict's table plus its tuples and numbers,
    measured on a sample of up to ``sample`` tuples (O(1))."""
    if is_table(relation):
        return relation.nbytes  # type: ignore[no-any-return]
    n = len(relation)
    if not n:
        return sys.getsizeof(relation)
    picked = [row for row, _ in zip(relation, range(sample), strict=False)]
    per_row = sum(sys.getsizeof(r) + sum(map(sys.getsizeof, r)) + sys.getsizeof(relation[r]) for r in picked)
    return int(sys.getsizeof(relation) + n * per_row / len(picked))


def multiplicities(relation: Relation, rows: Any) -> list[int]:
    """The multiplicity of each row (0 if absent): one C-level pass over a dict, one call on a table."""
    if is_table(relation):
        return relation.get_many(rows)  # type: ignore[no-any-return]
    return list(map(relation.get, rows, repeat(0, len(rows))))


def apply_delta(relation: Relation, delta: dict[Row, int]) -> tuple[list[int], np.ndarray, bool] | None:
    """``R += δR`` on a table (``δR``: distinct rows): the old multiplicities in ``δR``'s order, the
    rows touched and whether some multiplicity reached 2^62 (then the caller moves ``R`` to a dict);
    ``None`` when some row or multiplicity cannot be stored (nothing changed; the caller moves ``R`` to a
    dict and applies ``δR`` there).  O(|δR| · arity) expected.

    The rows are :meth:`RowTable.apply_cells`'s row numbers of the entries with a non-zero
    multiplicity, in ``δR``'s order; they stay readable until the table's next :meth:`RowTable.compact`.
    """
    items = list(delta.items()) if 0 not in delta.values() else [(r, m) for r, m in delta.items() if m]
    parsed = relation.parse(items)
    if parsed is None:
        return None
    rows, _, olds, big = relation.apply_cells(*parsed)
    olds_list = olds.tolist()
    if len(items) != len(delta):  # entries with multiplicity 0 change nothing: their multiplicity as is
        it = iter(olds_list)
        olds_list = [next(it) if m else relation.get(r) for r, m in delta.items()]
    return olds_list, rows, bool(big)


def apply_dict(relation: dict[Row, int], delta: dict[Row, int]) -> list[int]:
    """``R += δR`` on a dict (:func:`~ivm.updates.apply_to_base`): the old multiplicities."""
    return apply_to_base(relation, delta)


def column_cells(
    relation: Relation, columns: Any, multiplicities: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A batch given as columns (:meth:`ivm.engines.base.Engine.apply_columns`) as ``(cells, mults,
    kinds)`` for :meth:`RowTable.apply_cells`, or ``None`` where the rows it stands for
    (:func:`ivm.updates.from_columns`) would not all be stored by :func:`~._row_table.parse_batch`:
    the caller then makes the rows.

    Taken when ``relation`` is a table, there is one 1-D column per attribute, all of one length,
    each of an integer dtype whose values fit int64 (a Python ``int`` each) or of a floating dtype
    without NaN (a ``float`` each; float16 and float32 widen exactly), matching the kind the table
    already gives that column, and the multiplicities are one int or an integer array, each of at
    most 2^31 in size.  Multiplicities 0 are left out, as :func:`~._row_table.parse_batch` does.
    O(n · arity): one C pass over the columns' buffers (:func:`~._row_table.column_cells`), no
    Python object per row.
    """
    if not is_table(relation) or len(columns) != relation.ncols or not columns:
        return None
    arrays = [c if type(c) is np.ndarray else np.asarray(c) for c in columns]
    n = len(arrays[0])
    if isinstance(multiplicities, int) and not isinstance(multiplicities, bool):
        if abs(multiplicities) > _MAX_UPDATE:
            return None
        mults = np.full(n, multiplicities, dtype=np.int64)
    else:
        mults = np.asarray(multiplicities)
        if mults.ndim != 1 or len(mults) != n or mults.dtype.kind not in "iu":
            return None
        if n and (int(mults.max()) > _MAX_UPDATE or int(mults.min()) < -_MAX_UPDATE):
            return None
        mults = mults.astype(np.int64, copy=False)
    try:
        done = _column_cells(arrays, _table_kinds(relation), n)  # (one C pass over the buffers)
    except (TypeError, ValueError, BufferError):  # no buffer (an object array is one; a list is not)
        return None
    if done is None:
        return None
    cells, kinds = done
    if n and (multiplicities == 0 if type(multiplicities) is int else not mults.all()):
        keep = mults != 0
        cells, mults = cells[keep], mults[keep]
    return cells, np.ascontiguousarray(mults), kinds
