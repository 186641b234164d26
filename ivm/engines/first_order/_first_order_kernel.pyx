# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled first-order IVM loop for the triangle count (IVM^eps App. A.1, §1.1).

The same loop as :func:`ivm.engines.first_order.engine.apply_first_order_python` (the
reference), over the SAME Python state: the dicts of sets and the ``other``
dicts of :class:`~ivm.engines.ivm_eps.partition.AllLightPartition`, read and
written in place through the CPython dict/set API (no second copy of the state,
so snapshots and pickles are unchanged).  Per update
``δK_i = {(x, y) ↦ m}`` the count changes by ``m · Σ_z K_j(y,z)·K_k(z,x)``,
counted by iterating the smaller of ``lf_j[y]`` and ``lb_k[x]`` and probing the
other, **O(min(deg_j(y), deg_k(x)))** per update, no set allocated; then
``K_i`` changes in O(1).  Stops, returns and writes back exactly as the
reference does.
"""

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem, PyDict_DelItem, PyDict_Size
from cpython.set cimport PySet_Add, PySet_Contains, PySet_Discard, PySet_GET_SIZE
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.ref cimport PyObject
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdint cimport int64_t

from ivm.engines.first_order._work_rule cimport work_step

import sys

cdef extern from "Python.h":
    bint PyLong_CheckExact(object o)
    bint PyTuple_Check(object o)
    bint PySet_CheckExact(object o)
    bint PyDict_CheckExact(object o)


cdef extern from *:
    """
    /* |small ∩ big| over the hash tables of two sets, with the hashes the sets
       cache (no rehash, no iterator): CPython 3.11-3.13 set_lookkey's probe
       sequence (LINEAR_PROBES 9, PERTURB_SHIFT 5).  A key that is neither
       identical nor an exact int or str of the same hash goes to PySet_Contains
       (a user __eq__ could mutate the set).  Other versions: PySet_Contains. */
    #if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_LIMITED_API) \
        && !defined(PYPY_VERSION) && !defined(Py_GIL_DISABLED)
    #define IVM_RAW_SETS 1
    static int ivm_set_has(PySetObject *so, PyObject *key, Py_hash_t hash) {
        size_t perturb = (size_t)hash;
        size_t mask = (size_t)so->mask;
        size_t i = (size_t)hash & mask;
        while (1) {
            setentry *entry = &so->table[i];
            int probes = (i + 9 <= mask) ? 9 : 0;
            do {
                if (entry->hash == 0 && entry->key == NULL)
                    return 0;
                if (entry->hash == hash) {
                    PyObject *other = entry->key;
                    if (other == key)
                        return 1;
                    if ((PyLong_CheckExact(other) && PyLong_CheckExact(key))
                        || (PyUnicode_CheckExact(other) && PyUnicode_CheckExact(key))) {
                        int cmp = PyObject_RichCompareBool(other, key, Py_EQ);
                        if (cmp) return cmp;  /* 1, or -1 on error */
                    } else {
                        return PySet_Contains((PyObject *)so, key);
                    }
                }
                entry++;
            } while (probes--);
            perturb >>= 5;
            i = (i * 5 + 1 + perturb) & mask;
        }
    }
    static Py_ssize_t ivm_intersection_size(PyObject *small, PyObject *big) {
        PySetObject *s = (PySetObject *)small;
        Py_ssize_t n = 0, j;
        for (j = 0; j <= s->mask; j++) {
            setentry *e = &s->table[j];
            if (e->key == NULL || e->hash == -1)
                continue;  /* empty or dummy */
            int has = ivm_set_has((PySetObject *)big, e->key, e->hash);
            if (has < 0) return -1;
            n += has;
        }
        return n;
    }
    #else
    #define IVM_RAW_SETS 0
    static Py_ssize_t ivm_intersection_size(PyObject *small, PyObject *big) {
        PyObject *it = PyObject_GetIter(small), *z;
        Py_ssize_t n = 0;
        if (it == NULL) return -1;
        while ((z = PyIter_Next(it)) != NULL) {
            int has = PySet_Contains(big, z);
            Py_DECREF(z);
            if (has < 0) { Py_DECREF(it); return -1; }
            n += has;
        }
        Py_DECREF(it);
        return PyErr_Occurred() ? -1 : n;
    }
    #endif
    """
    Py_ssize_t ivm_intersection_size(set small, set big) except -1
    int IVM_RAW_SETS

#: whether the intersections probe the set tables directly (CPython 3.11-3.13) or use PySet_Contains
RAW_SETS = bool(IVM_RAW_SETS)


cdef inline Py_ssize_t _intersection_size(set small, set big) except -1:
    """``|small ∩ big|`` iterating ``small`` (the caller passes the smaller set)."""
    return ivm_intersection_size(small, big)


cdef object _weighted(set out, set into, dict out_o, dict into_o, object y, object x):
    """``Σ_{z ∈ out ∩ into} out_o.get((y,z), 1) · into_o.get((z,x), 1)`` iterating the smaller set."""
    cdef set small, big
    cdef PyObject *a
    cdef PyObject *b
    delta = 0
    if PySet_GET_SIZE(out) <= PySet_GET_SIZE(into):
        small, big = out, into
    else:
        small, big = into, out
    for z in small:
        if PySet_Contains(big, z):
            a = PyDict_GetItem(out_o, (y, z)) if out_o else NULL
            b = PyDict_GetItem(into_o, (z, x)) if into_o else NULL
            if a is NULL and b is NULL:
                delta += 1
            elif a is NULL:
                delta += <object>b
            elif b is NULL:
                delta += <object>a
            else:
                delta += (<object>a) * (<object>b)
    return delta


cdef inline object _canonical(dict intern, object v):
    """The one object of int value ``v`` that the slots store (``v`` itself the first time)."""
    cdef PyObject *q
    if not PyLong_CheckExact(v):
        return v
    q = PyDict_GetItem(intern, v)
    if q is NULL:
        PyDict_SetItem(intern, v, v)
        return v
    return <object> q


def apply_first_order(
    slots,
    dict plan,
    updates,
    Py_ssize_t start,
    count,
    Py_ssize_t lo=-1,
    Py_ssize_t hi=sys.maxsize,
    Py_ssize_t hot=sys.maxsize,
    dict intern=None,
    list work=None,
):
    """First-order IVM (IVM^eps App. A.1) of ``updates[start:]``; see the Python reference.

    O(min(deg_j(y), deg_k(x))) per update.  Returns ``(index of the next update,
    count, non-zero updates applied, (slot, key, degree) or None)``.  ``work``:
    the counter ``[E, r, W]`` of the work rule, updated in place exactly as the
    reference does (``E := max(0, E + w - r)`` per update, stop once ``E ≥ |D|`` and
    ``E > 0``; see :func:`ivm.engines.first_order.engine.work_exceeded`).
    """
    cdef Py_ssize_t nslots = len(slots)
    cdef Py_ssize_t *sizes = <Py_ssize_t *> PyMem_Malloc(max(nslots, 1) * sizeof(Py_ssize_t))
    cdef Py_ssize_t size = 0, applied = 0, stop, nxt, k, e, nentries, i, n, degree
    cdef bint halt = False, flipped, weighted
    cdef bint track = work is not None
    cdef int64_t excess = 0, rate = 0, spent = 0, w = 0
    cdef long long lo_n, li_n
    cdef object hit = None
    cdef object update, relation, row, m, x, y, old, new, key
    cdef list entries
    cdef tuple entry
    cdef dict f, b, o, out_f, into_b, out_o, into_o
    cdef set r, c, out, into
    cdef PyObject *p
    if sizes is NULL:
        raise MemoryError()
    if track:
        excess, rate, spent = work[0], work[1], work[2]
    try:
        for e in range(nslots):
            sizes[e] = slots[e].lsize
            size += sizes[e]
        stop = len(updates)
        nxt = stop
        for k in range(start, stop):
            update = updates[k]
            if PyTuple_Check(update) and PyTuple_GET_SIZE(update) == 3:
                relation = <object> PyTuple_GET_ITEM(update, 0)
                row = <object> PyTuple_GET_ITEM(update, 1)
                m = <object> PyTuple_GET_ITEM(update, 2)
            else:
                relation, row, m = update
            if not m:
                continue  # m = 0 is a no-op (digest §8 item 3)
            p = PyDict_GetItem(plan, relation)
            if p is NULL:
                raise KeyError(relation)
            entries = <list> p
            nentries = len(entries)
            w = 0
            for e in range(nentries):
                entry = <tuple> entries[e]
                i = entry[0]
                flipped = entry[1]
                f = <dict> entry[2]
                b = <dict> entry[3]
                o = <dict> entry[4]
                out_f = <dict> entry[5]
                into_b = <dict> entry[6]
                out_o = <dict> entry[7]
                into_o = <dict> entry[8]
                if PyTuple_Check(row) and PyTuple_GET_SIZE(row) == 2:
                    if flipped:
                        y = <object> PyTuple_GET_ITEM(row, 0)
                        x = <object> PyTuple_GET_ITEM(row, 1)
                    else:
                        x = <object> PyTuple_GET_ITEM(row, 0)
                        y = <object> PyTuple_GET_ITEM(row, 1)
                elif flipped:
                    y, x = row
                else:
                    x, y = row
                # δQ = m · Σ_z K_j(y, z) · K_k(z, x)
                p = PyDict_GetItem(out_f, y)
                if p is not NULL:
                    out = <set> p
                    p = PyDict_GetItem(into_b, x)
                    if p is not NULL:
                        into = <set> p
                        if track:
                            lo_n = PySet_GET_SIZE(out)
                            li_n = PySet_GET_SIZE(into)
                            w += lo_n if lo_n < li_n else li_n
                        if PyDict_Size(out_o) or PyDict_Size(into_o):
                            count += m * _weighted(out, into, out_o, into_o, y, x)
                        else:
                            if PySet_GET_SIZE(out) <= PySet_GET_SIZE(into):
                                n = _intersection_size(out, into)
                            else:
                                n = _intersection_size(into, out)
                            if n:
                                count += m * n
                # K_i(x, y) += m
                p = PyDict_GetItem(f, x)
                if p is not NULL and PySet_Contains(<set> p, y):
                    r = <set> p
                    key = None
                    old = 1
                    if PyDict_Size(o):
                        key = (x, y)
                        p = PyDict_GetItem(o, key)
                        if p is not NULL:
                            old = <object> p
                    new = old + m
                    if not new:
                        PySet_Discard(r, y)
                        if not PySet_GET_SIZE(r):
                            PyDict_DelItem(f, x)
                        p = PyDict_GetItem(b, y)
                        if p is NULL:
                            raise KeyError(y)
                        c = <set> p
                        PySet_Discard(c, x)
                        if not PySet_GET_SIZE(c):
                            PyDict_DelItem(b, y)
                        if old != 1:
                            PyDict_DelItem(o, key)
                        sizes[i] -= 1
                        size -= 1
                        if size < lo:
                            halt = True
                    elif new == 1:  # then old != 1 came from o and key is set
                        PyDict_DelItem(o, key)
                    else:
                        PyDict_SetItem(o, (x, y) if key is None else key, new)
                else:  # a new tuple
                    if intern is not None:  # one object per int value: the probes' hits compare identical
                        x = _canonical(intern, x)
                        y = _canonical(intern, y)
                    if p is NULL:
                        r = {y}
                        PyDict_SetItem(f, x, r)
                    else:
                        r = <set> p
                        PySet_Add(r, y)
                    p = PyDict_GetItem(b, y)
                    if p is NULL:
                        PyDict_SetItem(b, y, {x})
                    else:
                        PySet_Add(<set> p, x)
                    if m != 1:
                        PyDict_SetItem(o, (x, y), m)
                    sizes[i] += 1
                    size += 1
                    if size >= hi:
                        halt = True
                    degree = PySet_GET_SIZE(r)
                    if degree >= hot:
                        hit = (i, x, degree)
                        halt = True
            applied += 1
            if track and work_step(&excess, &spent, w, rate, size):
                halt = True
            if halt:
                nxt = k + 1
                break
        for e in range(nslots):
            slots[e].lsize = sizes[e]
        if track:
            work[0] = excess
            work[2] = spent
    finally:
        PyMem_Free(sizes)
    return (nxt if stop > start else start), count, applied, hit
