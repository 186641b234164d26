# cython: language_level=3
"""The compiled exact element's layout and the C entry points other kernels cimport (``_exact_kernel.pyx``).

The expansion helpers below are ``cdef inline`` here so that other kernels (``_covar_kernel.pyx``'s exact
cells) compile them in: Shewchuk 1997 §2 (Grow-Expansion with zero elimination, Compress) and CPython's
``math.fsum`` read-out."""

from libc.math cimport isfinite

cdef enum:
    NCOMP = 6  # components kept in C; a wider element escapes to m · 2^e


cdef enum:
    SCRATCH = 2 * NCOMP * NCOMP * 2 + 8  # room for every partial of a product of two full expansions


cdef class Dyadic:
    cdef int n  # components in c (non-overlapping, increasing magnitude, none zero); -1: the value is bm · 2^be
    cdef double c[NCOMP]
    cdef object bm
    cdef long long be
    cdef int _cmp(self, other) except -2


cdef object lift_mul(object s, object x)


cdef inline bint _two_sum_grow(double* h, int* nh, double b) noexcept:
    """``h += b`` in place (Shewchuk's Grow-Expansion with zero elimination, CPython's ``fsum`` loop).

    ``h`` holds ``*nh`` components (room for one more); False when a partial sum overflowed (the caller
    takes the exact path)."""
    cdef int i, k = 0, n = nh[0]
    cdef double q = b, x, y, s, bv, av, err
    for i in range(n):
        x = q
        y = h[i]
        s = x + y
        bv = s - x
        av = s - bv
        err = (x - av) + (y - bv)
        if err != 0.0:
            h[k] = err
            k += 1
        q = s
    if not isfinite(q):
        return False
    if q != 0.0:
        h[k] = q
        k += 1
    nh[0] = k
    return True


cdef inline int _compress(double* g, int n) noexcept:
    """Shewchuk's Compress (§2.8, Fig. 15): the same value in fewest-ish non-overlapping components,
    increasing magnitude; returns the new length.  (Sums here are finite: the input is.)"""
    cdef double q, qn, small, big, bv
    cdef double tmp[SCRATCH]
    cdef int i, bottom, top
    if n <= 1:
        return n
    bottom = n - 1
    q = g[bottom]
    for i in range(n - 2, -1, -1):
        big = q + g[i]
        bv = big - q
        small = g[i] - bv
        qn = big
        if small != 0.0:
            tmp[bottom] = qn
            bottom -= 1
            q = small
        else:
            q = qn
    tmp[bottom] = q
    top = 0
    for i in range(bottom + 1, n):  # Fast-Two-Sum(tmp[i], q): |tmp[i]| >= |q|
        big = tmp[i] + q
        bv = big - tmp[i]
        small = q - bv
        q = big
        if small != 0.0:
            g[top] = small
            top += 1
    if q != 0.0:
        g[top] = q
        top += 1
    return top


cdef inline double _round(const double* p, int n) noexcept:
    """The exact sum of the non-overlapping expansion ``p`` (increasing magnitude), correctly rounded:
    the last step of CPython's ``math.fsum`` (``mathmodule.c``), with its half-way correction."""
    cdef double hi, lo = 0.0, x, y, yr
    if n == 0:
        return 0.0
    n -= 1
    hi = p[n]
    while n > 0:
        x = hi
        n -= 1
        y = p[n]
        hi = x + y
        yr = hi - x
        lo = y - yr
        if lo != 0.0:
            break
    if n > 0 and ((lo < 0.0 and p[n - 1] < 0.0) or (lo > 0.0 and p[n - 1] > 0.0)):
        y = lo * 2.0
        x = hi + y
        yr = x - hi
        if y == yr:
            hi = x
    return hi
