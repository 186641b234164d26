# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""``V += δV`` for a view with number payloads in one C loop (F-IVM §4, the store update of Fig. 7's triggers).

:meth:`ivm.engines.fivm.view_tree.Store.add_numbers` in Python is four C-level passes over the
delta (lookups, sums, a zero test, one ``dict.update``), each with its own per-key overhead;
:func:`add_numbers` is one loop: per key one lookup, one ``+`` (Python's, so exact for ints
and the same for any number) and one write or delete.  O(|δV|) expected.
"""

from cpython.dict cimport PyDict_DelItem, PyDict_GetItemWithError, PyDict_Next, PyDict_SetItem
from cpython.object cimport Py_EQ, PyObject, PyObject_RichCompareBool


cdef object ZERO = 0


def add_numbers(dict data, dict delta):
    """``data[key] += delta[key]`` for every key (absent keys count as 0), keys that reach 0 deleted.

    Returns the new payloads in ``delta``'s order (0 for a deleted key), as
    :meth:`~ivm.engines.fivm.view_tree.Store.add_numbers` computes them.  A key absent from
    ``data`` whose delta is 0 stays absent.

    >>> data = {(1,): 2, (2,): 5}
    >>> add_numbers(data, {(1,): -2, (2,): 1, (3,): 4}), data
    ([0, 6, 4], {(2,): 6, (3,): 4})
    """
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef PyObject* old
    cdef list news = []
    cdef object new
    while PyDict_Next(delta, &pos, &key, &value):
        old = PyDict_GetItemWithError(data, <object>key)
        if old == NULL:
            new = 0 + <object>value
        else:
            new = <object>old + <object>value
        if PyObject_RichCompareBool(new, ZERO, Py_EQ):
            if old != NULL:
                PyDict_DelItem(data, <object>key)
        else:
            PyDict_SetItem(data, <object>key, new)
        news.append(new)
    return news
