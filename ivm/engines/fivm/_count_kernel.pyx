# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The index-join delta of a count view in one C loop (F-IVM Fig. 7, one sibling through an index).

``δV(y) = Σ_i Σ_{key ∈ bucket_i} bucket_i[key] · m_i`` grouped by ``y = key[position]``: the
buckets are the sibling's index entries met by the delta keys, ``m_i`` the delta payloads.  The
Python rule reads every bucket row through ``map``/``chain`` and sums in numpy; this reads the
dicts with ``PyDict_Next`` and sums into an open-addressing table of int64 sums, so a row costs a
few nanoseconds.  Exact: every product and sum is checked for int64 overflow, and any key,
payload or multiplier that is not a plain ``int`` (or overflows) makes it answer ``None`` (the
caller then takes the Python rule, exact over Python ints).
"""

from cpython.dict cimport PyDict_Next
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset


cdef extern from "Python.h":
    bint PyLong_CheckExact(object o)
    bint PyTuple_CheckExact(object o)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    PyObject* PyTuple_GET_ITEM(object o, Py_ssize_t i)


cdef extern from *:
    bint mul_overflow "__builtin_mul_overflow"(long long a, long long b, long long* out) nogil
    bint add_overflow "__builtin_add_overflow"(long long a, long long b, long long* out) nogil


cdef inline uint64_t mix(uint64_t x) noexcept nogil:
    x ^= x >> 30
    x *= <uint64_t>0xbf58476d1ce4e5b9
    x ^= x >> 27
    x *= <uint64_t>0x94d049bb133111eb
    x ^= x >> 31
    return x


cdef inline bint as_int64(PyObject* obj, long long* out):
    """``obj`` as int64 if it is a plain ``int`` in range."""
    cdef int overflow = 0
    if not PyLong_CheckExact(<object>obj):
        return False
    out[0] = PyLong_AsLongLongAndOverflow(<object>obj, &overflow)
    return overflow == 0


cdef int64_t KEY_HIGH = -(2**62)  # ivm.engines.keys.HIGH: codes below it are interned ids
cdef int64_t KEY_LOW = -(2**63)  # ivm.engines.keys.LOW


cdef extern from "Python.h":
    PyObject* PyDict_GetItemWithError(object d, object key) except? NULL


cdef inline int key_code(PyObject* obj, object keydict, dict ids, long long* out) except -1:
    """``obj``'s int64 code: a plain int in int64 is itself without ``keydict``, in ``[HIGH, 2**63)``
    with one; any other value is interned by ``keydict`` (:class:`~ivm.engines.keys.KeyDictionary`).
    0 when it has none (no dictionary, or NaN)."""
    cdef int overflow = 0
    cdef long long x
    cdef PyObject* found
    if PyLong_CheckExact(<object>obj):
        x = PyLong_AsLongLongAndOverflow(<object>obj, &overflow)
        if overflow == 0 and (keydict is None or x >= KEY_HIGH):
            out[0] = x
            return 1
    if keydict is None:
        return 0
    found = PyDict_GetItemWithError(ids, <object>obj)  # interned already (``ids``: keydict's): no call
    if found != NULL:
        out[0] = PyLong_AsLongLongAndOverflow(<object>found, &overflow)
        return 1
    try:
        out[0] = keydict.code(<object>obj)
    except ValueError:  # NaN: the caller's Python rule (the reference) decides
        return 0
    return 1


def scan_sum(list buckets, list multipliers, Py_ssize_t position, Py_ssize_t rows, keydict=None):
    """``{(key[position],): Σ bucket[key] · multipliers[i]}`` over every bucket ``i``, zero sums
    left out; ``rows`` is the number of bucket entries (the table's size).  ``None`` when a
    multiplier or payload is not a plain int in int64, a product or sum overflows, or a key value
    has no code: without ``keydict`` only int64 ints have one; with a
    :class:`~ivm.engines.keys.KeyDictionary` every value but NaN (summed by code, answered as the
    value: issue 38).  O(rows) expected.

    >>> sorted(scan_sum([{(1, 7): 2, (2, 7): 1}, {(1, 8): 3}], [5, -1], 0, 3).items())
    [((1,), 7), ((2,), 5)]
    """
    cdef Py_ssize_t size = 16, i, pos, n = len(buckets)
    cdef uint64_t mask, slot
    cdef int64_t* keys
    cdef long long* sums
    cdef char* used
    cdef PyObject* k
    cdef PyObject* v
    cdef long long m, key, value, product
    cdef dict bucket
    cdef object tuple_key
    cdef bint ok = True
    cdef list interned = None if keydict is None else keydict._values
    cdef dict ids = None if keydict is None else keydict._ids
    if len(multipliers) != n:
        raise ValueError("one multiplier per bucket")
    while size < 2 * rows + 2:
        size *= 2
    mask = size - 1
    keys = <int64_t*> malloc(size * sizeof(int64_t))
    sums = <long long*> malloc(size * sizeof(long long))
    used = <char*> malloc(size)
    if keys == NULL or sums == NULL or used == NULL:
        free(keys); free(sums); free(used)
        raise MemoryError()
    memset(used, 0, size)
    try:
        for i in range(n):
            bucket = buckets[i]
            if not as_int64(<PyObject*>multipliers[i], &m):
                ok = False
                break
            pos = 0
            while PyDict_Next(bucket, &pos, &k, &v):
                tuple_key = <object>k
                if not PyTuple_CheckExact(tuple_key) or PyTuple_GET_SIZE(tuple_key) <= position:
                    ok = False
                    break
                if not key_code(PyTuple_GET_ITEM(tuple_key, position), keydict, ids, &key) or not as_int64(v, &value):
                    ok = False
                    break
                if mul_overflow(value, m, &product):
                    ok = False
                    break
                slot = mix(<uint64_t>key) & mask
                while used[slot] and keys[slot] != key:
                    slot = (slot + 1) & mask
                if not used[slot]:
                    used[slot] = 1
                    keys[slot] = key
                    sums[slot] = product
                elif add_overflow(sums[slot], product, &sums[slot]):
                    ok = False
                    break
            if not ok:
                break
        if not ok:
            return None
        out = {}
        for i in range(size):
            if used[i] and sums[i] != 0:
                if interned is None or keys[i] >= KEY_HIGH:
                    out[(keys[i],)] = sums[i]
                else:
                    out[(interned[<Py_ssize_t>(<uint64_t>keys[i] - <uint64_t>KEY_LOW)],)] = sums[i]
        return out
    finally:
        free(keys)
        free(sums)
        free(used)


cdef extern from "Python.h":
    PyObject* PyDict_SetDefault(object d, object key, object default) except NULL
    Py_ssize_t PyDict_GET_SIZE(object d)


def sum_by_key(list keys, list values):
    """``{key: Σ value}`` over pairs ``(keys[i], values[i])`` (first-occurrence order, sums of 0 kept).

    One C loop: one hash per distinct key (``PyDict_SetDefault``) and one more per repeat, the
    sums by Python's ``+`` (exact for any payload with ``+``).  O(n) expected.

    >>> sum_by_key([(1,), (2,), (1,)], [5, 1, -5])
    {(1,): 0, (2,): 1}
    """
    cdef Py_ssize_t i, n = len(keys), size
    cdef dict out = {}
    cdef PyObject* found
    if len(values) != n:
        raise ValueError("one value per key")
    for i in range(n):
        key = keys[i]
        value = values[i]
        size = PyDict_GET_SIZE(out)
        found = PyDict_SetDefault(out, key, value)
        if PyDict_GET_SIZE(out) == size:  # the key was there: add
            out[key] = <object>found + value
    return out


cdef extern from "Python.h":
    object PyTuple_New(Py_ssize_t n)
    void PyTuple_SET_ITEM(object t, Py_ssize_t i, object o)
    void Py_INCREF(PyObject* o)


cdef inline object project(object key, tuple positions):
    """``tuple(key[p] for p in positions)`` (``key`` itself when ``positions`` is ``None``)."""
    cdef Py_ssize_t i, n = len(positions)
    cdef object out = PyTuple_New(n)
    cdef PyObject* item
    for i in range(n):
        item = PyTuple_GET_ITEM(key, <Py_ssize_t>positions[i])
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, i, <object>item)
    return out


def direct_count(dict delta, list datas, list positions, key_positions, bint scalar):
    """The count delta of a direct plan (F-IVM Fig. 7, every sibling found by primary key) in one C loop.

    For each ``(key, m)`` of ``delta``: ``m · Π_i datas[i].get(π_i key, 0)`` with ``π_i`` the
    projection on ``positions[i]`` (``None``: the key itself), summed per output key ``π key``
    (``key_positions``; ``None``: the key itself), or into one total under ``()`` when
    ``scalar``.  The products and sums are Python's (exact), in ``delta``'s order, as the
    C-level passes of ``FIVM._direct_delta`` compute them, zero products included.  ``None``
    when a key is not a tuple long enough for a position.  O(|δ| · #siblings) expected.

    >>> direct_count({(1, 2): 3, (1, 5): 1}, [{(2,): 10}], [(1,)], (0,), False)
    {(1,): 30}
    >>> direct_count({(1,): 3, (2,): 1}, [{(1,): 4, (2,): 5}], [None], None, True)
    {(): 17}
    """
    cdef Py_ssize_t pos = 0, i, s = len(datas), size, need = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef PyObject* found
    cdef dict out = {}
    cdef object key, p, probe, total = 0
    cdef tuple where
    if len(positions) != s:
        raise ValueError("one position tuple per sibling")
    for i in range(s):
        if positions[i] is not None:
            need = max(need, max(positions[i], default=-1) + 1)
    if key_positions is not None:
        need = max(need, max(key_positions, default=-1) + 1)
    while PyDict_Next(delta, &pos, &k, &v):
        key = <object>k
        if not PyTuple_CheckExact(key) or PyTuple_GET_SIZE(key) < need:
            return None
        p = <object>v
        for i in range(s):
            where = positions[i]
            probe = key if where is None else project(key, where)
            found = PyDict_GetItemWithError(datas[i], probe)
            p = p * (0 if found == NULL else <object>found)
        if scalar:
            total = total + p
            continue
        if key_positions is not None:
            key = project(key, key_positions)
        size = PyDict_GET_SIZE(out)
        found = PyDict_SetDefault(out, key, p)
        if PyDict_GET_SIZE(out) == size:  # the output key repeats: add
            out[key] = <object>found + p
    if scalar:
        return {(): total}
    return out
