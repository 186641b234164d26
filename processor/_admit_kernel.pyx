# cython: language_level=3, boundscheck=False, wraparound=False
"""The input policy's admission loop in C (:meth:`ivm.processor.state.relations.RelationStore.admit`).

A relation's contents are a Z-relation, ``{tuple: multiplicity}`` (IVM^eps §1.1,
F-IVM §2).  Each update ``{row ↦ mult}`` of a batch, in order, is checked against
the multiplicity the contents hold *now* (after the batch's earlier updates, so a
tuple inserted and deleted in one batch is judged as the stream had it) and, if the
policy admits it, added: the multiplicity stored, or the tuple removed at 0.  The
same loop as ``RelationStore.admit_each`` (the Python reference), with C-level dict
calls and 64-bit arithmetic where the values fit (Python's ints otherwise).

Cost: O(1) expected per update, two hash-table probes; no Python frame per update.
"""

from cpython.dict cimport PyDict_DelItem, PyDict_GetItemWithError, PyDict_SetItem
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.ref cimport PyObject
from libc.limits cimport LLONG_MAX, LLONG_MIN


def admit(dict contents, list rows, list mults, list skip, bint reject_negative, bint reject_duplicate,
          bint inserts_refused):
    """Admit ``rows[j] ↦ mults[j]`` into ``contents`` in order, skipping the ascending indices ``skip``.

    Returns ``(kept, refused)``: the indices applied, and ``(index, before)`` for each update the
    policy refused (``before``: the multiplicity its tuple had, for the reason); a refused update
    changes nothing.  An update is refused when its multiplicity is 0, when it would leave a
    negative multiplicity (``reject_negative``), when an insert would leave more than 1
    (``reject_duplicate``, set semantics) or when it inserts into a delete-only relation
    (``inserts_refused``).  Rows must be hashable (TypeError otherwise, as the loop raises).
    """
    cdef Py_ssize_t n = len(rows)
    cdef Py_ssize_t j, s = 0, nskip = len(skip)
    cdef Py_ssize_t next_skip = skip[0] if nskip else -1
    cdef list kept = []
    cdef list refused = []
    cdef object row, mult, before, after
    cdef PyObject* found
    cdef long long m, b, a
    cdef int overflow
    cdef bint small, positive, negative_after, zero_mult, refuse
    if len(mults) != n:
        raise ValueError("rows and multiplicities differ in length")
    for j in range(n):
        if j == next_skip:
            s += 1
            next_skip = skip[s] if s < nskip else -1
            continue
        row = rows[j]
        mult = mults[j]
        found = PyDict_GetItemWithError(contents, row)  # borrowed; NULL if absent (an unhashable row raises)
        if found == NULL:
            before = 0
        else:
            before = <object>found
        small = False
        if type(mult) is int and type(before) is int:
            m = PyLong_AsLongLongAndOverflow(mult, &overflow)
            if not overflow:
                b = PyLong_AsLongLongAndOverflow(before, &overflow)
                if not overflow and not ((m > 0 and b > LLONG_MAX - m) or (m < 0 and b < LLONG_MIN - m)):
                    a = b + m
                    small = True
        if small:
            positive = m > 0
            zero_mult = m == 0
            negative_after = a < 0
            refuse = (zero_mult or (reject_negative and negative_after)
                      or (reject_duplicate and positive and a > 1) or (inserts_refused and positive))
            if refuse:
                refused.append((j, before))
                continue
            if a:
                PyDict_SetItem(contents, row, PyLong_FromLongLong(a))
            else:
                PyDict_DelItem(contents, row)
        else:
            after = before + mult
            positive = mult > 0
            if (not mult or (reject_negative and after < 0) or (reject_duplicate and positive and after > 1)
                    or (inserts_refused and positive)):
                refused.append((j, before))
                continue
            if after:
                contents[row] = after
            else:
                del contents[row]
        kept.append(j)
    return kept, refused
