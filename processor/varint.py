"""Vectorized decoding of Avro records whose fields are all ``int`` or ``long``.

Avro writes an ``int`` or ``long`` as a zig-zag varint: 7 bits per byte, the
high bit set on every byte but the last, then ``(u >> 1) ^ -(u & 1)``.  A record
of k such fields is k varints back to back, so a micro-batch of records is one
byte string in which varint boundaries are the bytes with the high bit clear.
:func:`decode_varint_records` decodes all of them with a few numpy passes, O(total
bytes) with a small constant, instead of one Python-level Avro reader call per
record (the relation schemas of ``schemas/relations/`` are of this kind).

It decodes only what it can prove well-formed: a record that does not hold
exactly k varints of at most 10 bytes (5 for ``int``), starting at its first
byte and ending at its last, or whose ``int`` field leaves the 32-bit range, is
reported as *unsure* and the caller decodes it with the full Avro reader, which
gives the exact error.  The decoded values of the other records equal the
reader's.

:func:`decode_varint_rows` gives the rows themselves: from the compiled kernel
(``ivm/processor/codecs/_varint_kernel.pyx``, one C pass per record, no intermediate arrays)
when it is built, else from :func:`decode_varint_records`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

try:
    from ivm.processor.codecs import _varint_kernel
except ImportError:  # the extension is optional: numpy decodes then
    _varint_kernel = None  # type: ignore[assignment]

_INT32 = (-(2**31), 2**31 - 1)
IMPLEMENTATIONS = ("auto", "compiled", "numpy")


def kernel_built() -> bool:
    """Whether the compiled decoder (``ivm/processor/codecs/_varint_kernel.pyx``) is importable."""
    return _varint_kernel is not None


def decode_varint_rows(
    values: Sequence[bytes | None],
    widths: Sequence[int],
    mult_field: int,
    attribute_fields: Sequence[int],
    implementation: str = "auto",
) -> tuple[list[tuple[int, ...] | None], list[int], list[int]]:
    """Records of ``len(widths)`` int/long fields as ``(rows, mults, unsure)``: ``rows[i]`` the tuple of
    fields ``attribute_fields`` of record i, ``mults[i]`` its field ``mult_field``, and the ascending
    indices of the records that must go to the full Avro reader (their row ``None``, multiplicity 0).

    ``implementation``: ``"compiled"`` the C kernel (``ImportError`` if not built), ``"numpy"``
    :func:`decode_varint_records`, ``"auto"`` the kernel when built.  The decoded records are the
    same; which records are unsure may differ (a record after a malformed one is unsure for numpy,
    whose varints run across record boundaries), never the result after the full reader.  O(bytes).

    >>> decode_varint_rows([b"\\x02\\x04\\x02", b"\\x02"], [10, 10, 10], 2, [0, 1], "numpy")
    ([(1, 2), None], [1, 0], [1])
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    if implementation == "compiled" and _varint_kernel is None:
        raise ImportError("ivm.processor.codecs._varint_kernel is not built (pip install -e .)")
    if _varint_kernel is not None and implementation != "numpy":
        listed = values if type(values) is list else list(values)
        return _varint_kernel.decode_records(listed, tuple(widths), mult_field, tuple(attribute_fields))
    columns, unsure = decode_varint_records(values, widths)
    rows: list[tuple[int, ...] | None] = list(zip(*(columns[f] for f in attribute_fields), strict=True))
    at = unsure.tolist()
    for i in at:
        rows[i] = None
    return rows, columns[mult_field], at


def decode_packed_rows(
    values: list[bytes | None], widths: Sequence[int], mult_field: int, attribute_fields: Sequence[int]
) -> tuple[list[tuple[int, ...]], list[int], list[int]]:
    """Packed records (Avro arrays of records of int/long fields) as ``(rows, mults, counts)``: every
    record's items in order, ``counts[i]`` the items of record i or -1 when record i must go to the full
    Avro reader (none of its items listed).  The compiled kernel's ``decode_packed``: ``ImportError`` if
    it is not built (:func:`kernel_built`)."""
    if _varint_kernel is None:
        raise ImportError("ivm.processor.codecs._varint_kernel is not built (pip install -e .)")
    return _varint_kernel.decode_packed(values, tuple(widths), mult_field, tuple(attribute_fields))


def decode_varint_records(values: Sequence[bytes | None], widths: Sequence[int]) -> tuple[list[list[int]], np.ndarray]:
    """Decode records of ``len(widths)`` zig-zag varint fields (``widths``: 5 for int, 10 for long).

    Returns ``(columns, unsure)``: one list of Python ints per field, with the
    value of record i at position i (0 where record i is unsure), and the sorted
    indices of the unsure records.

    >>> cols, unsure = decode_varint_records([b"\\x02\\x04\\x02", b"\\x01\\x80\\x01\\x01", b"\\x02"], [10, 10, 10])
    >>> cols, unsure.tolist()
    ([[1, -1, 0], [2, 64, 0], [1, -1, 0]], [2])
    """
    k = len(widths)
    n = len(values)
    if n == 0:
        return [[] for _ in range(k)], np.empty(0, dtype=np.int64)
    missing = [i for i, v in enumerate(values) if v is None] if None in values else []
    if missing:
        values = [b"" if v is None else v for v in values]
    data = np.frombuffer(b"".join(values), dtype=np.uint8)  # type: ignore[arg-type]
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    last = np.maximum(ends - 1, 0)

    term = data < 0x80  # the last byte of a varint
    # seen[i]: varints completed before byte i (so seen[ends] - seen[starts] counts a record's varints)
    seen = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum(term, out=seen[1:])
    ok = (lengths > 0) & (seen[ends] - seen[starts] == k)
    if len(data):
        ok &= term[last]  # the record ends a varint
        ok &= (starts == 0) | term[np.maximum(starts - 1, 0)]  # ... and begins one
    else:
        ok[:] = False

    stops = np.flatnonzero(term)  # byte index of each varint's last byte
    first = np.empty(len(stops), dtype=np.int64)  # byte index of each varint's first byte
    if len(stops):
        first[0] = 0
        first[1:] = stops[:-1] + 1
        size = stops - first + 1
        nbytes = int(stops[-1]) + 1
        position = np.arange(nbytes, dtype=np.int64) - np.repeat(first, size)
        shift = (np.minimum(position, 9) * 7).astype(np.uint64)
        parts = (data[:nbytes] & 0x7F).astype(np.uint64) << shift
        raw = np.add.reduceat(parts, first)  # disjoint bit ranges: the sum is the varint
        signed = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    else:
        size = np.empty(0, dtype=np.int64)
        signed = np.empty(0, dtype=np.int64)

    index = np.flatnonzero(ok)
    base = seen[starts[index]]  # the record's first varint
    columns: list[list[int]] = []
    for f, width in enumerate(widths):
        at = base + f
        too_long = size[at] > width
        if width == 10:  # a 10-byte long carries one bit in its last byte
            too_long |= (size[at] == 10) & (data[stops[at]] > 1)
        column = signed[at]
        if width == 5:
            too_long |= (column < _INT32[0]) | (column > _INT32[1])
        ok[index[too_long]] = False
        full = np.zeros(n, dtype=np.int64)
        full[index] = column
        columns.append(full)
    if missing:
        ok[missing] = False
    unsure = np.flatnonzero(~ok)
    for column in columns:
        column[unsure] = 0
    return [c.tolist() for c in columns], unsure
