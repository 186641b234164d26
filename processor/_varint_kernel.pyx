# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Avro records of ``int``/``long`` fields decoded straight into row tuples: one C pass per record.

The compiled counterpart of :func:`ivm.processor.codecs.varint.decode_varint_records` (the numpy
decoder, which stays as the fallback when this extension is not built).  Each record
is read as ``len(widths)`` zig-zag varints (Avro's ``int`` and ``long``, 7 bits per
byte, the high bit on every byte but the last); the row is the tuple of the
attribute fields, the multiplicity the ``mult`` field.  A record is decoded only
when it is provably well-formed: exactly ``len(widths)`` varints filling the
message, none longer than its width (5 bytes for ``int``, 10 for ``long``, whose
10th byte carries one bit), every ``int`` within 32 bits.  Any other record is
*unsure* and the caller reads it with the full Avro reader, which decodes it or
gives the exact error, so the results always equal the reader's.

Cost: O(bytes) with one Python int per field and one tuple per record; no
intermediate arrays (the numpy decoder makes about ten passes over the bytes and
then builds the tuples from lists).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromLongLong
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int64_t, uint64_t


cdef inline Py_ssize_t _varint(const unsigned char* data, Py_ssize_t at, Py_ssize_t end, int width,
                               int64_t* out) noexcept nogil:
    """Read one zig-zag varint at ``data[at]``: the position after it, or -1 if it is not a varint of
    at most ``width`` bytes ending before ``end`` (an ``int``'s value must also fit 32 bits)."""
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef int size = 0
    cdef unsigned char byte
    cdef int64_t value
    while True:
        if at >= end or size >= width:
            return -1
        byte = data[at]
        at += 1
        size += 1
        if size == 10 and byte > 1:
            return -1  # a long's 10th byte carries bit 63 only
        raw |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            break
        shift += 7
    value = <int64_t>(raw >> 1) ^ -(<int64_t>(raw & 1))
    if width == 5 and (value < -2147483648 or value > 2147483647):
        return -1
    out[0] = value
    return at


cdef int _layout(tuple widths, tuple attribute_fields, int* width, Py_ssize_t* take) except -1:
    """Copy a relation's field widths and its attributes' field positions into C arrays of 64."""
    cdef Py_ssize_t f
    if len(widths) > 64 or len(widths) < 1:
        raise ValueError(f"between 1 and 64 fields, got {len(widths)}")
    for f in range(len(widths)):
        width[f] = widths[f]
    for f in range(len(attribute_fields)):
        take[f] = attribute_fields[f]
    return 0


cdef inline tuple _row(const int64_t* fields, const Py_ssize_t* take, Py_ssize_t arity):
    """The tuple of a record's attribute values (``fields`` at the positions ``take``)."""
    cdef tuple row = PyTuple_New(arity)
    cdef object item
    cdef Py_ssize_t f
    for f in range(arity):
        item = PyLong_FromLongLong(fields[take[f]])
        Py_INCREF(item)
        PyTuple_SET_ITEM(row, f, item)
    return row


def decode_records(list values, tuple widths, Py_ssize_t mult_field, tuple attribute_fields):
    """Decode ``values`` (Avro records of ``len(widths)`` int/long fields) into ``(rows, mults, unsure)``.

    ``rows[i]`` is the tuple of fields ``attribute_fields`` (schema positions) of record i and
    ``mults[i]`` its field ``mult_field``; for an unsure record (see the module docstring) the
    row is ``None``, the multiplicity 0 and i is listed in ``unsure`` (ascending).  O(total bytes).
    """
    cdef Py_ssize_t n = len(values)
    cdef Py_ssize_t k = len(widths)
    cdef Py_ssize_t arity = len(attribute_fields)
    cdef Py_ssize_t i, f, at, end
    cdef const unsigned char* data
    cdef int64_t fields[64]
    cdef int width[64]
    cdef Py_ssize_t take[64]
    cdef object value, row, item
    cdef list rows = PyList_New(n)
    cdef list mults = PyList_New(n)
    cdef list unsure = []
    _layout(widths, attribute_fields, width, take)
    for i in range(n):
        value = values[i]
        at = -1
        if type(value) is bytes:
            data = <const unsigned char*>PyBytes_AS_STRING(value)
            end = PyBytes_GET_SIZE(value)
            at = 0 if end > 0 else -1
            for f in range(k):
                if at < 0:
                    break
                at = _varint(data, at, end, width[f], &fields[f])
            if at != end:
                at = -1
        if at < 0:
            Py_INCREF(None)
            PyList_SET_ITEM(rows, i, None)
            item = 0
            Py_INCREF(item)
            PyList_SET_ITEM(mults, i, item)
            unsure.append(i)
            continue
        row = _row(fields, take, arity)
        Py_INCREF(row)
        PyList_SET_ITEM(rows, i, row)
        item = PyLong_FromLongLong(fields[mult_field])
        Py_INCREF(item)
        PyList_SET_ITEM(mults, i, item)
    return rows, mults, unsure


def decode_packed(list values, tuple widths, Py_ssize_t mult_field, tuple attribute_fields):
    """Decode packed records (each an Avro array of records of ``len(widths)`` int/long fields) into
    ``(rows, mults, counts)``: the rows and multiplicities of every record's items, value after value
    in array order, and ``counts[i]`` the number of items of value i, or -1 if value i is *unsure*
    (nothing of it is in ``rows``; the caller reads it with the full Avro reader).

    An Avro array is a series of blocks, each a ``long`` count (negative: followed by the block's
    byte size, which is skipped) and that many items, ended by a count of 0.  A value is decoded only
    when every varint is well-formed as in :func:`decode_records`, the blocks end with the 0 count at
    the value's last byte, and there is at least one item; an empty array, a value that is not bytes,
    anything else is unsure.  O(total bytes).
    """
    cdef Py_ssize_t n = len(values)
    cdef Py_ssize_t k = len(widths)
    cdef Py_ssize_t arity = len(attribute_fields)
    cdef Py_ssize_t i, f, at, end, before, items
    cdef int64_t count, size, b
    cdef const unsigned char* data
    cdef int64_t fields[64]
    cdef int width[64]
    cdef Py_ssize_t take[64]
    cdef object value, row, item
    cdef list rows = []
    cdef list mults = []
    cdef list counts = PyList_New(n)
    _layout(widths, attribute_fields, width, take)
    for i in range(n):
        value = values[i]
        before = len(rows)
        items = 0
        at = -1
        if type(value) is bytes:
            data = <const unsigned char*>PyBytes_AS_STRING(value)
            end = PyBytes_GET_SIZE(value)
            at = 0 if end > 0 else -1
            while at >= 0:
                at = _varint(data, at, end, 10, &count)
                if at < 0:
                    break
                if count == 0:
                    break
                if count < 0:
                    count = -count
                    at = _varint(data, at, end, 10, &size)  # the block's byte size: not needed
                    if at < 0 or size < 0:
                        at = -1
                        break
                for b in range(count):
                    for f in range(k):
                        at = _varint(data, at, end, width[f], &fields[f])
                        if at < 0:
                            break
                    if at < 0:
                        break
                    rows.append(_row(fields, take, arity))
                    mults.append(PyLong_FromLongLong(fields[mult_field]))
                    items += 1
            if at != end or items == 0:
                at = -1
        if at < 0:
            del rows[before:]
            del mults[before:]
            item = -1
        else:
            item = items
        Py_INCREF(item)
        PyList_SET_ITEM(counts, i, item)
    return rows, mults, counts
