# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The SUM ring's ``(count, sum)`` lanes in C loops (F-IVM §2.1, §2.4, Fig. 7; :mod:`.lanes` in Python).

The delta rule ``δV = ⊕_X (δV_j ⊗ ⊗_{i≠j} V_i)`` through a direct plan (every sibling found by
primary key) and through one sibling's secondary index, and ``V += δV`` with the secondary
indexes kept, over the same dict stores and ``(c, s)`` tuples as the Python functions of
:mod:`ivm.engines.fivm.lanes` and :class:`~ivm.engines.fivm.view_tree.Store`.  Only the
interpreter is taken out: every ``+``, ``*`` and ``**`` is Python's (``PyNumber_*``), in the
same order, so ints of any size stay exact and a lifted float, made its exact dyadic rational
(:func:`ivm.rings.exact.exact`) exactly as :mod:`.lanes` does, gives the same exact sums; the zero test is
Python's ``==`` against 0 per lane (the tuple comparison ``p == (0, 0)``), with a shortcut for
exact ints.  Same costs as the Python rules (Theorem 13): O(|δV_j| · #siblings) for a direct
plan, O(|δV_j| · fan-out) for an index join, O(|δV| · #indexes) for the store update.

Keys must be tuples and payloads 2-tuples (the engine makes no other); anything else raises
``TypeError`` instead of reading past a tuple.

Three things keep CPython's per-key work down without changing a value, a key or an order:

- the keys and payloads made here, and the rows a base relation takes, are untracked by the
  cyclic collector when their items cannot be in a cycle (:func:`untrack`, CPython's own test):
  the collector would untrack them on its first pass anyway, but until then every young
  collection walks them and they count towards the full collections that walk the whole heap
  (about 100 ms each on the TPC-H stream, a third of a pass).  Dicts of untracked keys and
  values stay untracked, so the views are never walked;
- a payload held only by the dict entries the kernel knows of (the output delta; a view's data
  and its index buckets) takes a sum in place (:func:`sole`, the reference-count test of
  CPython's ``zip``): one lookup and no new tuple for a repeated key;
- a run of delta keys with one output key (an atom's rows arriving by group, as the TPC-H
  lineitems by order) adds to the previous output payload without a tuple or a lookup
  (:func:`same_projection`).
"""

from cpython.dict cimport PyDict_Next
from cpython.float cimport PyFloat_CheckExact
from cpython.long cimport PyLong_CheckExact
from cpython.object cimport Py_EQ, PyObject, PyObject_RichCompareBool
from libc.stdlib cimport free, malloc

from ivm.rings._exact_kernel cimport lift_mul
from ivm.rings.exact import Dyadic, exact
from ivm.rings.exact import _of_float as of_float

#: the compiled accumulator is the one in use (:data:`ivm.rings.exact.Dyadic`), so its C entry point gives the
#: same elements as :func:`ivm.rings.exact.exact`
cdef bint COMPILED_EXACT = Dyadic.__module__ == "ivm.rings._exact_kernel"


cdef extern from "Python.h":
    bint PyTuple_CheckExact(object o)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    PyObject* PyTuple_GET_ITEM(object o, Py_ssize_t i)
    object PyTuple_New(Py_ssize_t n)
    void PyTuple_SET_ITEM(object t, Py_ssize_t i, object o)
    void Py_INCREF(PyObject* o)
    PyObject* PyDict_GetItemWithError(object d, object key) except? NULL
    PyObject* PyDict_SetDefault(object d, object key, object default) except NULL
    int PyDict_SetItem(object d, object key, object value) except -1
    int PyDict_DelItem(object d, object key) except -1
    Py_ssize_t PyDict_GET_SIZE(object d)
    object PyNumber_Add(object a, object b)
    object PyNumber_Multiply(object a, object b)
    object PyNumber_Power(object a, object b, object c)


cdef object ZERO = 0


cdef inline bint is_zero(object x) except -1:
    """``x == 0`` (Python's equality).  The cached small int 0, which CPython's int arithmetic returns
    for a zero result, is recognised by identity; anything else is compared with ``==`` (the int
    layout is not read: it differs between CPython versions)."""
    if <PyObject*>x == <PyObject*>ZERO:
        return True
    return PyObject_RichCompareBool(x, ZERO, Py_EQ)


cdef extern from "Python.h":
    bint PyObject_IS_GC(object o)
    int PyObject_GC_IsTracked(object o)
    void PyObject_GC_UnTrack(void* o)


cdef inline bint untracked(PyObject* o):
    """Can ``o`` never take part in a reference cycle?  CPython's own test (``_PyObject_GC_MAY_BE_TRACKED``
    negated): not a container, or a tuple the collector does not track (tuples are immutable, so an
    untracked one stays acyclic; a dict or list could become a container of cycles later)."""
    if not PyObject_IS_GC(<object>o):
        return True
    return PyTuple_CheckExact(<object>o) and not PyObject_GC_IsTracked(<object>o)


cdef inline object untrack(object t):
    """Stop the cyclic collector tracking the exact tuple ``t`` when its items cannot be in a cycle.

    The collector does the same to such tuples on its first pass over them (``untrack_tuples`` in
    ``gcmodule.c``); doing it when the key or payload is made keeps the views' keys and ``(c, s)``
    payloads, and so the dicts holding only them, out of every collection: CPython's dicts stay
    untracked while their keys and values are (``MAINTAIN_TRACKING``), so a full collection no longer
    walks the views.  O(len(t)); it changes no value, hash or equality.
    """
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(t)
    for i in range(n):
        if not untracked(PyTuple_GET_ITEM(t, i)):
            return t
    PyObject_GC_UnTrack(<PyObject*>t)
    return t


cdef inline object pair(object c, object s):
    """The payload ``(c, s)``, untracked by the collector when both lanes are numbers (:func:`untrack`)."""
    cdef object out = PyTuple_New(2)
    Py_INCREF(<PyObject*>c)
    PyTuple_SET_ITEM(out, 0, c)
    Py_INCREF(<PyObject*>s)
    PyTuple_SET_ITEM(out, 1, s)
    if not PyObject_IS_GC(c) and not PyObject_IS_GC(s):
        PyObject_GC_UnTrack(<PyObject*>out)
    return out


cdef inline object lane(object payload, Py_ssize_t i):
    """Lane ``i`` of a ``(c, s)`` payload (checked: a 2-tuple)."""
    if not PyTuple_CheckExact(payload) or PyTuple_GET_SIZE(payload) != 2:
        raise TypeError(f"a lane payload is a (count, sum) tuple, not {payload!r}")
    return <object>PyTuple_GET_ITEM(payload, i)


cdef inline object project(object key, tuple positions):
    """``tuple(key[p] for p in positions)`` (positions checked against the key's length)."""
    cdef Py_ssize_t i, p, n = len(positions), size = PyTuple_GET_SIZE(key)
    cdef object out = PyTuple_New(n)
    cdef PyObject* item
    for i in range(n):
        p = <Py_ssize_t>positions[i]
        if p < 0 or p >= size:
            raise TypeError(f"key {key!r} has no position {p}")
        item = PyTuple_GET_ITEM(key, p)
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, i, <object>item)
    return untrack(out)


cdef inline object check_key(object key):
    if not PyTuple_CheckExact(key):
        raise TypeError(f"a view key is a tuple, not {key!r}")
    return key


cdef inline object lifted(object s, tuple lifts, object key, PyObject** slots):
    """``s · Π x^k`` over ``lifts`` = ((position, k), ...): positions in ``key``, or slots if ``key`` is None."""
    cdef Py_ssize_t i, n = len(lifts), p
    cdef tuple pk
    cdef object x, k, y
    for i in range(n):
        pk = <tuple>lifts[i]
        p = <Py_ssize_t>pk[0]
        k = pk[1]
        if key is None:
            x = <object>slots[p]
        else:
            if p < 0 or p >= PyTuple_GET_SIZE(key):
                raise TypeError(f"key {key!r} has no position {p}")
            x = <object>PyTuple_GET_ITEM(key, p)
        if not PyLong_CheckExact(x):  # a float is lifted as its exact dyadic rational (ivm.rings.exact)
            if k == 1 and COMPILED_EXACT:
                y = lift_mul(s, x)  # a double: one TwoProduct in C (ivm/rings/_exact_kernel.pyx)
                if y is not NotImplemented:
                    s = y
                    continue
            x = of_float(x) if PyFloat_CheckExact(x) and x else exact(x)
        if k == 1:
            s = PyNumber_Multiply(s, x)
        else:
            s = PyNumber_Multiply(s, PyNumber_Power(x, k, None))
    return s


cdef extern from "Python.h":
    Py_ssize_t refcount "Py_REFCNT" (PyObject* o)
    void Py_DECREF(PyObject* o)


cdef inline bint sole(PyObject* payload, Py_ssize_t holders, object c, object s):
    """May the 2-tuple ``payload`` take the lanes ``(c, s)`` in place?  Yes when its only references are
    the ``holders`` dict entries the caller knows of (so no one else can see it change) and ``c`` and
    ``s`` are not containers (an untracked tuple stays acyclic).  CPython's ``zip`` and dict-items
    iterators reuse their result tuple on the same test (reference count 1)."""
    return refcount(payload) == holders and not PyObject_IS_GC(c) and not PyObject_IS_GC(s)


cdef inline void set_lanes(PyObject* payload, object c, object s):
    """Overwrite the lanes of the exact 2-tuple ``payload`` (the caller checked :func:`sole`)."""
    cdef PyObject* c0 = PyTuple_GET_ITEM(<object>payload, 0)
    cdef PyObject* s0 = PyTuple_GET_ITEM(<object>payload, 1)
    Py_INCREF(<PyObject*>c)
    PyTuple_SET_ITEM(<object>payload, 0, c)
    Py_INCREF(<PyObject*>s)
    PyTuple_SET_ITEM(<object>payload, 1, s)
    Py_DECREF(c0)
    Py_DECREF(s0)


cdef inline PyObject* add_to(dict out, object key, PyObject* found, object c, object s) except NULL:
    """``out[key] = found + (c, s)`` for the payload ``found`` of ``key`` in ``out``; returns the payload
    now there (borrowed).  ``found``, made here and held by ``out`` alone, takes the sums in place:
    no lookup and no new tuple (:func:`sole`)."""
    cdef object nc = PyNumber_Add(lane(<object>found, 0), c)
    cdef object ns = PyNumber_Add(<object>PyTuple_GET_ITEM(<object>found, 1), s)
    cdef object new
    if sole(found, 1, nc, ns):
        set_lanes(found, nc, ns)
        return found
    new = pair(nc, ns)
    PyDict_SetItem(out, key, new)
    return <PyObject*>new  # (out holds it)


cdef inline PyObject* accumulate(dict out, object key, object c, object s) except NULL:
    """``out[key] += (c, s)`` (a new key takes ``(c, s)``; sums of 0 are kept, as in :mod:`.lanes`);
    returns the payload now under ``key`` (borrowed from ``out``).  A repeated key costs one lookup."""
    cdef PyObject* found = PyDict_GetItemWithError(out, key)
    cdef object new
    if found == NULL:
        new = pair(c, s)
        PyDict_SetItem(out, key, new)
        return <PyObject*>new  # (out holds it)
    return add_to(out, key, found, c, s)


cdef extern from "Python.h":
    bint PyLong_CheckExact(object o)
    bint PyFloat_CheckExact(object o)
    bint PyUnicode_CheckExact(object o)


cdef inline bint same_projection(object key, tuple positions, object last) except -1:
    """Is ``π_positions key`` the dict key ``last`` (a tuple of that projection)?  Item by item: the
    same object, or equal exact ints, floats or strs (whose ``==`` implies equal hashes, so the dict
    would take them as one key).  A ``False`` for equal keys of other types only costs a lookup."""
    cdef Py_ssize_t i, p, n = len(positions)
    cdef PyObject* a
    cdef PyObject* b
    for i in range(n):
        p = <Py_ssize_t>positions[i]
        if p < 0 or p >= PyTuple_GET_SIZE(key):
            raise TypeError(f"key {key!r} has no position {p}")
        a = PyTuple_GET_ITEM(key, p)
        b = PyTuple_GET_ITEM(last, i)
        if a == b:
            continue
        if not (
            (PyLong_CheckExact(<object>a) and PyLong_CheckExact(<object>b))
            or (PyFloat_CheckExact(<object>a) and PyFloat_CheckExact(<object>b))
            or (PyUnicode_CheckExact(<object>a) and PyUnicode_CheckExact(<object>b))
        ):
            return False
        if not PyObject_RichCompareBool(<object>a, <object>b, Py_EQ):
            return False
    return True


def from_mults(dict delta):
    """``{row: (m, m)}``: the lane payload ``m · 1`` of each base tuple (§2.4).  O(|δ|).

    >>> from_mults({(1, 2): 3, (4, 5): -1})
    {(1, 2): (3, 3), (4, 5): (-1, -1)}
    """
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef dict out = {}
    while PyDict_Next(delta, &pos, &k, &v):
        PyDict_SetItem(out, <object>k, pair(<object>v, <object>v))
    return out


def nonzero(dict delta):
    """``delta`` without its zero payloads ``(0, 0)`` (``delta`` itself when it has none).  O(|δ|).

    >>> d = {(1,): (0, 0), (2,): (0, 1.5), (3,): (0.0, 0)}
    >>> nonzero(d)
    {(2,): (0, 1.5)}
    >>> nonzero({(2,): (1, 0)}) is not None
    True
    """
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef dict out
    cdef bint any_zero = False
    while PyDict_Next(delta, &pos, &k, &v):
        if is_zero(lane(<object>v, 0)) and is_zero(lane(<object>v, 1)):
            any_zero = True
            break
    if not any_zero:
        return delta
    out = {}
    pos = 0
    while PyDict_Next(delta, &pos, &k, &v):
        if not (is_zero(lane(<object>v, 0)) and is_zero(lane(<object>v, 1))):
            PyDict_SetItem(out, <object>k, <object>v)
    return out


def direct_delta(dict delta, list datas, list positions, key_positions, tuple lifts, bint mults=False):
    """:func:`.lanes.direct_delta` in one C loop: one primary-key lookup per sibling and delta key.

    ``datas[i]`` is sibling i's store, probed by ``π_{positions[i]} key``; the output key is
    ``π_{key_positions} key`` (``None``: the key itself); ``lifts`` are ``(position, k)`` in the
    child key.  A key some sibling lacks contributes nothing.  ``mults``: ``delta`` holds a base
    relation's multiplicities m, each standing for the payload ``(m, m)`` (§2.4), so an atom's
    leaf needs no dict of its own.  O(|δ| · #siblings) expected.

    >>> direct_delta({(1, 2): (1, 3)}, [{(2,): (2, 5)}], [(1,)], (0,), ((1, 1),))
    {(1,): (2, 30)}
    >>> direct_delta({(1, 2): 3, (1, 4): -1}, [], [], (0,), ((1, 1),), True)
    {(1,): (2, 2)}
    """
    cdef Py_ssize_t pos = 0, i, n = len(datas)
    cdef PyObject* k
    cdef PyObject* v
    cdef PyObject* found
    cdef dict out = {}
    cdef object key, c, s, f
    cdef bint missing
    cdef tuple key_pos = None if key_positions is None else <tuple>key_positions
    cdef object last_key = None  # the previous output key and its payload in out (borrowed)
    cdef PyObject* last_payload = NULL
    if len(positions) != n:
        raise ValueError("one position tuple per sibling")
    while PyDict_Next(delta, &pos, &k, &v):
        key = check_key(<object>k)
        if mults:
            c = s = <object>v
        else:
            c = lane(<object>v, 0)
            s = lane(<object>v, 1)
        missing = False
        for i in range(n):
            found = PyDict_GetItemWithError(<dict>datas[i], project(key, <tuple>positions[i]))
            if found == NULL:
                missing = True
                break
            f = <object>found
            c = PyNumber_Multiply(c, lane(f, 0))
            s = PyNumber_Multiply(s, lane(f, 1))
        if missing:
            continue
        if lifts:
            s = lifted(s, lifts, key, NULL)
        if key_pos is None:
            accumulate(out, key, c, s)
        elif last_payload != NULL and same_projection(key, key_pos, last_key):
            # a run of delta keys with one output key (an atom's rows sorted by the group): no tuple,
            # no hash; the sums are added in the same order as through the lookup
            last_payload = add_to(out, last_key, last_payload, c, s)
        else:
            last_key = project(key, key_pos)
            last_payload = accumulate(out, last_key, c, s)
    return out


def index_join(
    dict delta,
    dict index,
    Py_ssize_t width,
    tuple child_slots,
    tuple bound_slots,
    tuple fill,
    tuple key_slots,
    tuple lifts,
):
    """:func:`.lanes._one_index_join` in one C loop: the sibling's index entry per delta key, scanned.

    The join's variables live in ``width`` slots: the child key fills ``child_slots``, the
    index is probed by the ``bound_slots``, each sibling key fills ``fill`` = ((position, slot),
    ...), the output key is the ``key_slots``, ``lifts`` are ``(slot, k)``.  O(|δ| · fan-out).

    >>> index = {(2,): {(7, 2): (1, 4), (8, 2): (2, 5)}}
    >>> index_join({(2,): (1, 3)}, index, 2, (1,), (1,), ((0, 0),), (0,), ())
    {(7,): (1, 12), (8,): (2, 15)}
    """
    cdef Py_ssize_t pos = 0, bpos, i, j, p, slot, nchild = len(child_slots), nbound = len(bound_slots)
    cdef Py_ssize_t nfill = len(fill), nkey = len(key_slots)
    cdef PyObject* k
    cdef PyObject* v
    cdef PyObject* sk
    cdef PyObject* sv
    cdef PyObject* found
    cdef PyObject* item
    cdef PyObject** slots
    cdef dict out = {}
    cdef object key, c, s, jc, js, probe, sibling_key, out_key
    cdef tuple pk
    for i in range(nchild):
        if not 0 <= <Py_ssize_t>child_slots[i] < width:
            raise ValueError("a child slot out of range")
    for i in range(nbound):
        if not 0 <= <Py_ssize_t>bound_slots[i] < width:
            raise ValueError("a bound slot out of range")
    for i in range(nfill):
        if not 0 <= <Py_ssize_t>(<tuple>fill[i])[1] < width:
            raise ValueError("a fill slot out of range")
    for i in range(nkey):
        if not 0 <= <Py_ssize_t>key_slots[i] < width:
            raise ValueError("a key slot out of range")
    for i in range(len(lifts)):
        if not 0 <= <Py_ssize_t>(<tuple>lifts[i])[0] < width:
            raise ValueError("a lift slot out of range")
    cdef bint probe_is_key = nbound == nchild and bound_slots == child_slots
    slots = <PyObject**> malloc(max(width, 1) * sizeof(PyObject*))
    if slots == NULL:
        raise MemoryError()
    # the slots borrow from the delta's and the index's keys, which live (unchanged) through the loop
    try:
        for i in range(width):
            slots[i] = <PyObject*>None
        while PyDict_Next(delta, &pos, &k, &v):
            key = check_key(<object>k)
            if PyTuple_GET_SIZE(key) != nchild:
                raise TypeError(f"key {key!r} has not {nchild} values")
            c = lane(<object>v, 0)
            s = lane(<object>v, 1)
            for i in range(nchild):
                slots[<Py_ssize_t>child_slots[i]] = PyTuple_GET_ITEM(key, i)
            if probe_is_key:  # the index is on the whole child key, in its order: the key is the probe
                probe = key
            else:
                probe = PyTuple_New(nbound)
                for i in range(nbound):
                    item = slots[<Py_ssize_t>bound_slots[i]]
                    Py_INCREF(item)
                    PyTuple_SET_ITEM(probe, i, <object>item)
            found = PyDict_GetItemWithError(index, probe)
            if found == NULL:
                continue
            bpos = 0
            while PyDict_Next(<dict>found, &bpos, &sk, &sv):
                sibling_key = check_key(<object>sk)
                for j in range(nfill):
                    pk = <tuple>fill[j]
                    p = <Py_ssize_t>pk[0]
                    if p < 0 or p >= PyTuple_GET_SIZE(sibling_key):
                        raise TypeError(f"key {sibling_key!r} has no position {p}")
                    slots[<Py_ssize_t>pk[1]] = PyTuple_GET_ITEM(sibling_key, p)
                jc = PyNumber_Multiply(c, lane(<object>sv, 0))
                js = PyNumber_Multiply(s, lane(<object>sv, 1))
                if lifts:
                    js = lifted(js, lifts, None, slots)
                out_key = PyTuple_New(nkey)
                for j in range(nkey):
                    item = slots[<Py_ssize_t>key_slots[j]]
                    Py_INCREF(item)
                    PyTuple_SET_ITEM(out_key, j, <object>item)
                accumulate(out, untrack(out_key), jc, js)
        return out
    finally:
        free(slots)


cdef inline void unindex(list indexes, object key) except *:
    """Take ``key`` out of every ``(positions, index)`` (its bucket goes when it empties)."""
    cdef tuple entry
    cdef dict idx, bucket
    cdef object sub
    for entry in indexes:
        idx = <dict>entry[1]
        sub = project(key, <tuple>entry[0])
        bucket = <dict>idx[sub]
        PyDict_DelItem(bucket, key)
        if PyDict_GET_SIZE(bucket) == 0:
            PyDict_DelItem(idx, sub)


def add_lanes(dict data, dict delta, list indexes):
    """``V += δV`` for lane payloads: :meth:`~.view_tree.Store.add_lanes` per key, in one C loop.

    ``data`` is the primary index, ``indexes`` the secondary ones as ``(positions, {π key: {key:
    payload}})``.  A key whose payload becomes ``(0, 0)`` leaves the view and its indexes (§9
    item 1); a key absent with a zero delta stays absent.  O(|δV| · (1 + #indexes)) expected.

    >>> data = {(1, 2): (1, 5)}
    >>> index = {(2,): {(1, 2): (1, 5)}}
    >>> add_lanes(data, {(1, 2): (-1, -5), (3, 2): (2, 4)}, [((1,), index)])
    >>> data, index
    ({(3, 2): (2, 4)}, {(2,): {(3, 2): (2, 4)}})
    """
    cdef Py_ssize_t pos = 0, size
    cdef PyObject* k
    cdef PyObject* v
    cdef PyObject* old
    cdef PyObject* found
    cdef object key, c, s, new, sub, nc, ns
    cdef tuple entry
    cdef dict idx, bucket
    cdef Py_ssize_t nholders = 1 + len(indexes)  # a stored payload is in data and in one bucket per index
    for entry in indexes:
        if not isinstance(entry[1], dict):
            raise TypeError("an index is a dict")
    while PyDict_Next(delta, &pos, &k, &v):
        key = check_key(<object>k)
        c = lane(<object>v, 0)
        s = lane(<object>v, 1)
        size = PyDict_GET_SIZE(data)
        old = PyDict_SetDefault(data, key, <object>v)  # a new key takes the delta's own (c, s): one hash
        if PyDict_GET_SIZE(data) != size:
            if is_zero(c) and is_zero(s):  # (0, 0) for an absent key: it stays absent
                PyDict_DelItem(data, key)
                continue
            new = <object>v
        else:
            nc = PyNumber_Add(lane(<object>old, 0), c)
            ns = PyNumber_Add(<object>PyTuple_GET_ITEM(<object>old, 1), s)
            if is_zero(nc) and is_zero(ns):
                PyDict_DelItem(data, key)
                unindex(indexes, key)
                continue
            if sole(old, nholders, nc, ns):  # held by data and its index buckets only: they all see it
                set_lanes(old, nc, ns)
                continue
            new = pair(nc, ns)
            PyDict_SetItem(data, key, new)
        for entry in indexes:
            idx = <dict>entry[1]
            sub = project(key, <tuple>entry[0])
            size = PyDict_GET_SIZE(idx)
            bucket = {}
            found = PyDict_SetDefault(idx, sub, bucket)
            if PyDict_GET_SIZE(idx) == size:
                bucket = <dict>found
            PyDict_SetItem(bucket, key, new)


cdef extern from "Python.h":
    bint PyTuple_Check(object o)


def by_relation(updates):
    """:func:`ivm.updates.by_relation` in one C loop: ``{relation: {row: Σ mult}}``, zero sums dropped.

    Relations and rows in first-occurrence order, the sums by Python's ``+``.  ``None`` when
    ``updates`` is not a list or tuple of ``(relation, row, mult)`` tuples (the caller then takes
    the Python function).  O(|batch|) expected.

    >>> by_relation([("R", (1,), 1), ("S", (2,), 1), ("R", (1,), 2), ("S", (2,), -1)])
    {'R': {(1,): 3}}
    """
    cdef Py_ssize_t i, n, size
    cdef object u, relation, row, mult, last_relation = None
    cdef dict out = {}, delta = None
    cdef PyObject* found
    cdef bint zeros = False
    if not isinstance(updates, (list, tuple)):
        return None
    n = len(updates)
    for i in range(n):
        u = updates[i]
        if not PyTuple_Check(u) or PyTuple_GET_SIZE(u) != 3:
            return None
        relation = <object>PyTuple_GET_ITEM(u, 0)
        row = <object>PyTuple_GET_ITEM(u, 1)
        mult = <object>PyTuple_GET_ITEM(u, 2)
        if delta is None or relation is not last_relation:
            found = PyDict_GetItemWithError(out, relation)
            if found == NULL:
                delta = {}
                PyDict_SetItem(out, relation, delta)
            else:
                delta = <dict>found
            last_relation = relation
        size = PyDict_GET_SIZE(delta)
        found = PyDict_SetDefault(delta, row, mult)
        if PyDict_GET_SIZE(delta) == size:  # the row repeats: add
            PyDict_SetItem(delta, row, PyNumber_Add(<object>found, mult))
            zeros = True
        elif is_zero(mult):
            zeros = True
    if zeros:
        for relation in list(out):
            delta = <dict>out[relation]
            delta = {row: mult for row, mult in delta.items() if not is_zero(mult)}
            if delta:
                out[relation] = delta
            else:
                del out[relation]
    return out


def apply_base(dict base, dict delta):
    """:func:`ivm.updates.apply_to_base` in one C loop: ``R += δR`` (rows reaching 0 deleted).

    Returns the old multiplicities in ``δR``'s order (0 for an absent row).  O(|δR|) expected.

    >>> base = {(1,): 2, (2,): 1}
    >>> apply_base(base, {(1,): -2, (3,): 4}), base
    ([2, 0], {(2,): 1, (3,): 4})
    """
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef PyObject* old
    cdef list olds = []
    cdef object new
    cdef Py_ssize_t size
    while PyDict_Next(delta, &pos, &k, &v):
        new = PyNumber_Add(ZERO, <object>v)
        if not is_zero(new):  # an absent row takes 0 + m with one hash
            size = PyDict_GET_SIZE(base)
            old = PyDict_SetDefault(base, <object>k, new)
            if PyDict_GET_SIZE(base) != size:
                if PyTuple_CheckExact(<object>k):  # a new row: out of the collector's walks (untrack)
                    untrack(<object>k)
                olds.append(ZERO)
                continue
        else:
            old = PyDict_GetItemWithError(base, <object>k)
        if old == NULL:
            olds.append(ZERO)
        else:
            olds.append(<object>old)
            new = PyNumber_Add(<object>old, <object>v)
        if is_zero(new):
            if old != NULL:
                PyDict_DelItem(base, <object>k)
        else:
            PyDict_SetItem(base, <object>k, new)
    return olds
