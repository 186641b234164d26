# cython: language_level=3, boundscheck=False, wraparound=False
"""The dyadic rationals of :mod:`ivm.rings.exact` as a C extension type (the same values, the same API).

:class:`Dyadic` here is :class:`ivm.rings.exact.PyDyadic` without the interpreter: ``m`` a Python int,
``e`` a C integer, every operation one or two ``PyNumber`` calls on ``m`` and no Python frame, and
the type is not tracked by the cyclic collector (``no_gc``: it holds one int, which cannot be in a
cycle), so a view of exact float sums adds no work to the collector's passes.  :mod:`ivm.rings.exact`
uses it when built and falls back to the Python class otherwise; the module docstring there has the
algebra and the guarantees.
"""

cimport cython
from cpython.float cimport PyFloat_AsDouble, PyFloat_Check
from cpython.long cimport PyLong_CheckExact, PyLong_FromLongLong
from libc.math cimport frexp, isfinite, ldexp


cdef extern from *:
    int __builtin_ctzll(unsigned long long x) nogil

import math
from fractions import Fraction

from ivm.rings.exact import NotFinite, _P, _make


cdef inline object _zero_or(object m, long long e):
    if m == 0:
        return 0
    cdef Dyadic d = Dyadic.__new__(Dyadic)
    d.m = m
    d.e = e
    return d


cdef inline Dyadic _new(object m, long long e):
    cdef Dyadic d = Dyadic.__new__(Dyadic)
    d.m = m
    d.e = e
    return d


cdef Dyadic _of_float(object x):
    """``x = n · 2^k`` with ``n`` odd (or 0), as ``float.as_integer_ratio`` gives it, in C: ``frexp`` splits
    the double into a mantissa in [0.5, 1) and an exponent (subnormals included), the mantissa times 2^53
    is an integer below 2^53 (exact), and its trailing zero bits move into the exponent."""
    cdef double d = PyFloat_AsDouble(x)
    cdef int ex
    cdef long long n
    cdef int tz
    if not isfinite(d):
        raise NotFinite(f"{x!r} has no exact value to sum (NaN and infinities are refused)")
    if d == 0.0:
        return _new(0, 0)
    n = <long long>ldexp(frexp(d, &ex), 53)
    tz = __builtin_ctzll(<unsigned long long>(n if n > 0 else -n))
    return _new(PyLong_FromLongLong(n >> tz), ex - 53 + tz)


cdef object _coerce(object other):
    """``other`` as a Dyadic, or None for a value of another kind (Fraction: handled by the caller)."""
    if type(other) is Dyadic:
        return other
    if PyLong_CheckExact(other) or isinstance(other, int):
        return _new(int(other), 0)
    if PyFloat_Check(other):
        return _of_float(other)
    return None


@cython.no_gc
@cython.final
cdef class Dyadic:
    """``m · 2^e`` exactly (:class:`ivm.rings.exact.PyDyadic`, compiled)."""

    cdef readonly object m
    cdef readonly long long e

    def __init__(self, m, e=0):
        self.m = m
        self.e = e

    def __float__(self):
        cdef object m = self.m
        cdef long long e = self.e
        try:
            if e >= 0:
                return float(m << e)
            return m / ((<object>1) << -e)
        except OverflowError:
            return math.inf if m > 0 else -math.inf

    def __int__(self):
        cdef object m = self.m
        cdef long long e = self.e
        if e >= 0:
            return m << e
        return -((-m) >> -e) if m < 0 else m >> -e

    def __bool__(self):
        return self.m != 0

    @property
    def numerator(self):
        return self.as_fraction().numerator

    @property
    def denominator(self):
        return self.as_fraction().denominator

    def as_fraction(self):
        return Fraction(self.m << self.e) if self.e >= 0 else Fraction(self.m, (<object>1) << -self.e)

    def __add__(self, other):
        cdef Dyadic x = self, y
        if type(other) is Dyadic:
            y = <Dyadic>other
        elif PyLong_CheckExact(other):
            if other == 0:
                return x
            y = _new(other, 0)
        elif isinstance(other, Fraction):
            return x.as_fraction() + other
        else:
            c = _coerce(other)
            if c is None:
                return NotImplemented
            y = <Dyadic>c
        cdef long long e = x.e, f = y.e
        if e == f:
            return _zero_or(x.m + y.m, e)
        if e < f:
            return _zero_or(x.m + (y.m << (f - e)), e)
        return _zero_or((x.m << (e - f)) + y.m, f)

    def __radd__(self, other):
        return self.__add__(other)

    def __sub__(self, other):
        if type(other) is Dyadic:
            return self.__add__(_new(-(<Dyadic>other).m, (<Dyadic>other).e))
        return self.__add__(-other)

    def __rsub__(self, other):
        return _new(-self.m, self.e).__add__(other)

    def __neg__(self):
        return _new(-self.m, self.e)

    def __pos__(self):
        return self

    def __abs__(self):
        return _new(abs(self.m), self.e)

    def __mul__(self, other):
        cdef Dyadic x = self, y
        if type(other) is Dyadic:
            y = <Dyadic>other
            return _zero_or(x.m * y.m, x.e + y.e)
        if PyLong_CheckExact(other):
            return _zero_or(x.m * other, x.e)
        if isinstance(other, Fraction):
            return x.as_fraction() * other
        c = _coerce(other)
        if c is None:
            return NotImplemented
        y = <Dyadic>c
        return _zero_or(x.m * y.m, x.e + y.e)

    def __rmul__(self, other):
        return self.__mul__(other)

    def __pow__(self, k, mod):
        if mod is not None or type(k) is not int or k < 0:
            return NotImplemented
        return _new(self.m ** k, self.e * k)

    def __truediv__(self, other):
        cdef Dyadic x = self, y
        c = _coerce(other)
        if c is None:
            return NotImplemented
        y = <Dyadic>c
        num, den = x.m, y.m
        cdef long long shift = x.e - y.e
        try:
            if shift >= 0:
                return (num << shift) / den
            return num / (den << -shift)
        except OverflowError:
            return math.inf if (num > 0) == (den > 0) else -math.inf

    def __rtruediv__(self, other):
        c = _coerce(other)
        if c is None:
            return NotImplemented
        return c.__truediv__(self)

    cdef int _cmp(self, other) except -2:
        """The sign of ``self - other`` (-1, 0, 1), or 2 for another kind of value."""
        if type(other) is not Dyadic:
            if PyFloat_Check(other):
                if math.isnan(other):
                    return 2
                if math.isinf(other):
                    return -1 if other > 0 else 1
            elif isinstance(other, Fraction):
                d = self.as_fraction() - other
                return (d > 0) - (d < 0)
            c = _coerce(other)
            if c is None:
                return 2
            other = c
        d = self - other
        if type(d) is int:
            return (d > 0) - (d < 0)
        m = (<Dyadic>d).m
        return (m > 0) - (m < 0)

    def __richcmp__(self, other, int op):
        cdef int c = (<Dyadic>self)._cmp(other)
        if c == 2:
            return NotImplemented
        if op == 2:
            return c == 0
        if op == 3:
            return c != 0
        if op == 0:
            return c < 0
        if op == 1:
            return c <= 0
        if op == 4:
            return c > 0
        return c >= 0

    def __hash__(self):
        m, e = self.m, self.e
        h = (abs(m) % _P) * pow(2, e, _P) % _P
        if m < 0:
            h = -h
        return -2 if h == -1 else h

    def __repr__(self):
        return f"Dyadic({self.m}, {self.e})"

    def __reduce__(self):
        return (_make, (self.m, self.e))


def of_float(x):
    """A finite float as its Dyadic (``NotFinite`` for a NaN or an infinity)."""
    return _of_float(x)
