# cython: language_level=3
"""The compiled exact element's layout and the C entry points other kernels cimport (``_exact_kernel.pyx``)."""

cdef enum:
    NCOMP = 6  # components kept in C; a wider element escapes to m · 2^e


cdef class Dyadic:
    cdef int n  # components in c (non-overlapping, increasing magnitude, none zero); -1: the value is bm · 2^be
    cdef double c[NCOMP]
    cdef object bm
    cdef long long be
    cdef int _cmp(self, other) except -2


cdef object lift_mul(object s, object x)
