# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The dyadic rationals of :mod:`ivm.rings.exact` as a C extension type: exact, with a double fast path.

The values and the API are those of :class:`ivm.rings.exact.PyDyadic` (the reference: every element is an
exact dyadic rational ``m · 2^e``, read out once, correctly rounded); only the representation differs.

Representation (the choice, and why).  An element is a *floating-point expansion* (Shewchuk 1997, "Adaptive
precision floating-point arithmetic and fast robust geometric predicates", §2): up to ``NCOMP`` = 6 doubles
``c_0 .. c_{n-1}``, non-overlapping, increasing in magnitude, no zeros, whose exact sum is the value.  An
element with ``n = 1`` *is* a plain double, and the arithmetic is the double arithmetic plus an exact error
term: a sum by TwoSum (Knuth, TAOCP vol. 2 §4.2.2; Møller 1965: ``s = a + b`` and ``err = (a - (s - (s - a)))
+ (b - (s - a))``, exact), a product by the FMA TwoProduct (``p = a·b``, ``err = fma(a, b, -p)``, exact unless
the product underflows, which is checked).  While every error is 0 (data with few significant bits: counts,
cents of small amounts, halves) an element stays one double and costs what a Python ``float`` costs (one
object from a free list, no Python ``int``).  A non-zero error is kept as a further component (Shewchuk's
Grow-Expansion with zero elimination, the same loop as CPython's ``math.fsum``), so sums of ordinary data
(dollars and cents: 53 significant bits each, at different exponents) stay a few doubles in C.  Only an
element wider than ``NCOMP`` doubles after Shewchuk's Compress, or one whose product underflows or whose sum
overflows the double range, escapes to the reference representation ``m · 2^e`` with a Python ``int`` ``m``
(exactly :class:`PyDyadic`'s arithmetic), and comes back to an expansion as soon as its value fits again
(after a cancellation, say).  A fixed-point window over the whole double range (2,100 bits, 33 words per
cell) was the alternative; it costs 33 word additions per sum and 264 bytes per cell even for a count,
against one double addition and a few compares here, so it was not taken.

Read-out.  ``float(d)`` is the exact value correctly rounded (ties to even): for an expansion the final step
of CPython's ``math.fsum`` (sum the components from the top until a non-zero remainder, then the half-way
correction against the next component), which is correctly rounded for a non-overlapping expansion,
subnormals included; a value beyond the largest double rounds to ``±inf``.  For ``m · 2^e`` it is CPython's
correctly rounded ``int`` conversion and ``int / int``, as in the reference.  So every read-out equals the
reference's bit for bit (``tests/unit/rings/test_exact_fast.py`` checks it against ``fractions.Fraction``).

Zero.  A sum or product that is exactly zero is the zero element ``Dyadic(0, 0)`` (read out as ``0.0``), not
the int ``0``: a float SUM that cancels reads ``0.0``, the type of its input (issue 36).  It compares equal to
``0``, so zero elimination (F-IVM §9 item 1) is unchanged.

Every other operation (hash, ``int()``, ``as_fraction``, ``**``, division of wide elements, mixed arithmetic
with a ``Fraction``) converts to ``m · 2^e`` and computes as the reference does.  The type is not tracked by
the cyclic collector (``no_gc``: it holds doubles and at most one int).
"""

cimport cython
from cpython.float cimport PyFloat_AsDouble, PyFloat_Check, PyFloat_CheckExact
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from libc.math cimport fabs, fma, frexp, isfinite, ldexp


cdef extern from *:
    int __builtin_ctzll(unsigned long long x) nogil

import math
from fractions import Fraction
from numbers import Rational, Real

from ivm.rings.exact import NotFinite, _P, _make


#: 2^-969: a product at least this large has an exactly representable FMA error (no underflow)
cdef double PRODUCT_SAFE = ldexp(1.0, -969)
#: 2^53: the ints below it in magnitude are doubles exactly
cdef long long EXACT_INT = 1LL << 53


cdef inline Dyadic _fresh():
    cdef Dyadic d = Dyadic.__new__(Dyadic)
    d.n = 0
    d.bm = None
    return d


cdef inline Dyadic _of_double(double x):
    """A finite double as an element (0.0 and -0.0: the zero element)."""
    cdef Dyadic d = _fresh()
    if x != 0.0:
        d.n = 1
        d.c[0] = x
    return d


cdef object _big_pair(Dyadic x):
    """``(m, e)`` with ``x = m · 2^e`` (Python ints; ``m`` odd or 0)."""
    cdef int i, ex, tz
    cdef long long nn, e, emin
    cdef double mant
    if x.n < 0:
        return x.bm, x.be
    if x.n == 0:
        return 0, 0
    ms = []
    es = []
    emin = 1 << 40
    for i in range(x.n):
        mant = frexp(x.c[i], &ex)
        nn = <long long>ldexp(mant, 53)
        tz = __builtin_ctzll(<unsigned long long>(nn if nn > 0 else -nn))
        nn >>= tz
        e = ex - 53 + tz
        ms.append(nn)
        es.append(e)
        if e < emin:
            emin = e
    m = 0
    for i in range(x.n):
        m += (<object>ms[i]) << (<long long>es[i] - emin)
    return _normalized(m, emin)


cdef object _normalized(object m, long long e):
    if m == 0:
        return 0, 0
    cdef long long tz = ((m & -m).bit_length()) - 1
    if tz:
        m >>= tz
        e += tz
    return m, e


cdef Dyadic _of_big(object m, long long e):
    """``m · 2^e`` as an element: an expansion when it fits in ``NCOMP`` doubles, else the escape."""
    cdef Dyadic d = _fresh()
    cdef long long k, bits
    cdef int n = 0
    cdef double comp
    cdef double neg
    m, e = _normalized(m, e)
    if m == 0:
        return d
    neg = -1.0 if m < 0 else 1.0
    a = -m if m < 0 else m
    bits = a.bit_length()
    if bits <= 53 * NCOMP:
        k = e
        while a:
            chunk = a & 0x1FFFFFFFFFFFFF
            a >>= 53
            if chunk:
                if k < -1074 or n == NCOMP:
                    n = -1
                    break
                comp = ldexp(<double><long long>chunk, <int>k) if -2000 < k < 2000 else math.inf
                if not isfinite(comp):
                    n = -1
                    break
                d.c[n] = neg * comp
                n += 1
            k += 53
        if n > 0:
            d.n = n
            return d
    d.n = -1
    d.bm = m
    d.be = e
    return d


cdef object _as_element(object other):
    """``other`` as an element, or None for a value of another kind (a Fraction: handled by the caller)."""
    cdef double v
    cdef long long i
    cdef int overflow = 0
    if type(other) is Dyadic:
        return other
    if PyFloat_CheckExact(other) or (not PyLong_CheckExact(other) and PyFloat_Check(other)):
        v = PyFloat_AsDouble(other)
        if not isfinite(v):
            raise NotFinite(f"{other!r} has no exact value to sum (NaN and infinities are refused)")
        return _of_double(v)
    if PyLong_CheckExact(other) or isinstance(other, int):
        i = PyLong_AsLongLongAndOverflow(other, &overflow)
        if overflow == 0 and -EXACT_INT <= i <= EXACT_INT:
            return _of_double(<double>i)
        return _of_big(int(other), 0)
    return None


cdef Dyadic _add_big(Dyadic x, Dyadic y):
    m, e = _big_pair(x)
    n, f = _big_pair(y)
    cdef long long ee = e, ff = f
    if ee <= ff:
        return _of_big(m + (n << (ff - ee)), ee)
    return _of_big((m << (ee - ff)) + n, ff)


cdef inline Dyadic _of_expansion(double* h, int nh):
    """The expansion ``h[:nh]`` (compressed if wider than NCOMP) as a value, or ``None`` if it stays wider."""
    cdef Dyadic out
    cdef int i
    if nh > NCOMP:
        nh = _compress(h, nh)
        if nh > NCOMP:
            return None
    out = _fresh()
    out.n = nh
    for i in range(nh):
        out.c[i] = h[i]
    return out


cdef Dyadic _add(Dyadic x, Dyadic y):
    """``x + y`` exactly."""
    cdef double h[SCRATCH]
    cdef int nh, i
    cdef Dyadic out
    cdef double a, b, s, bv, av, err
    if x.n == 1 and y.n == 1:  # the common case: TwoSum
        a = x.c[0]
        b = y.c[0]
        s = a + b
        bv = s - a
        av = s - bv
        err = (a - av) + (b - bv)
        if isfinite(s):
            out = _fresh()
            if err == 0.0:
                if s != 0.0:
                    out.n = 1
                    out.c[0] = s
            elif fabs(err) < fabs(s):
                out.n = 2
                out.c[0] = err
                out.c[1] = s
            else:  # cannot happen for a correct TwoSum; stay safe
                return _add_big(x, y)
            return out
        return _add_big(x, y)
    if x.n < 0 or y.n < 0:
        return _add_big(x, y)
    if x.n == 0:
        return y
    if y.n == 0:
        return x
    nh = x.n
    for i in range(nh):
        h[i] = x.c[i]
    for i in range(y.n):
        if not _two_sum_grow(h, &nh, y.c[i]):
            return _add_big(x, y)
    out = _of_expansion(h, nh)
    return _add_big(x, y) if out is None else out


cdef Dyadic _neg(Dyadic x):
    cdef Dyadic out = _fresh()
    cdef int i
    if x.n < 0:
        out.n = -1
        out.bm = -x.bm
        out.be = x.be
        return out
    out.n = x.n
    for i in range(x.n):
        out.c[i] = -x.c[i]
    return out


cdef Dyadic _mul_big(Dyadic x, Dyadic y):
    m, e = _big_pair(x)
    n, f = _big_pair(y)
    return _of_big(m * n, <long long>e + <long long>f)


cdef Dyadic _mul(Dyadic x, Dyadic y):
    """``x · y`` exactly: every pair of components by TwoProduct, the partials grown into one expansion."""
    cdef double h[SCRATCH]
    cdef int nh = 0, i, j
    cdef double a, b, p, err
    cdef Dyadic out
    if x.n == 0 or y.n == 0:
        return _fresh()
    if x.n < 0 or y.n < 0:
        return _mul_big(x, y)
    if x.n == 1 and y.n == 1:
        a = x.c[0]
        b = y.c[0]
        p = a * b
        if not (isfinite(p) and fabs(p) >= PRODUCT_SAFE):
            return _mul_big(x, y)
        err = fma(a, b, -p)
        out = _fresh()
        if err == 0.0:
            out.n = 1
            out.c[0] = p
        else:
            out.n = 2
            out.c[0] = err
            out.c[1] = p
        return out
    for i in range(x.n):
        for j in range(y.n):
            a = x.c[i]
            b = y.c[j]
            p = a * b
            if not (isfinite(p) and fabs(p) >= PRODUCT_SAFE):
                return _mul_big(x, y)
            err = fma(a, b, -p)
            if err != 0.0 and not _two_sum_grow(h, &nh, err):
                return _mul_big(x, y)
            if not _two_sum_grow(h, &nh, p):
                return _mul_big(x, y)
            if nh > SCRATCH - 4:
                nh = _compress(h, nh)
    out = _of_expansion(h, nh)
    return _mul_big(x, y) if out is None else out


cdef inline int _sign(Dyadic x) noexcept:
    if x.n > 0:
        return 1 if x.c[x.n - 1] > 0.0 else -1
    if x.n == 0:
        return 0
    return 1 if x.bm > 0 else -1


cdef object _add_obj(Dyadic x, object other):
    """``x + other`` for the number protocol (both operand orders: addition commutes)."""
    if type(other) is Dyadic:
        return _add(x, <Dyadic>other)
    c = _as_element(other)
    if c is None:
        if isinstance(other, Fraction):
            return x.as_fraction() + other
        return NotImplemented
    if (<Dyadic>c).n == 0 and not PyFloat_Check(other):  # the int 0: x itself
        return x
    return _add(x, <Dyadic>c)


cdef object _mul_obj(Dyadic x, object other):
    """``x · other`` for the number protocol (both operand orders: the ring is commutative)."""
    if type(other) is Dyadic:
        return _mul(x, <Dyadic>other)
    c = _as_element(other)
    if c is None:
        if isinstance(other, Fraction):
            return x.as_fraction() * other
        return NotImplemented
    return _mul(x, <Dyadic>c)


@cython.no_gc
@cython.freelist(64)
cdef class Dyadic:
    """``m · 2^e`` exactly (:class:`ivm.rings.exact.PyDyadic`, compiled; the module docstring has the representation;
    the fields are declared in ``_exact_kernel.pxd``)."""

    def __init__(self, m, e=0):
        cdef Dyadic d = _of_big(int(m), e)
        self.n = d.n
        self.bm = d.bm
        self.be = d.be
        for i in range(max(d.n, 0)):
            self.c[i] = d.c[i]

    @property
    def m(self):
        """The odd integer ``m`` of ``m · 2^e`` (0 for zero)."""
        return _big_pair(self)[0]

    @property
    def e(self):
        """The exponent ``e`` of ``m · 2^e`` with ``m`` odd (0 for zero)."""
        return _big_pair(self)[1]

    @property
    def components(self):
        """The expansion's doubles (increasing magnitude), or None when the value is held as ``m · 2^e``."""
        return None if self.n < 0 else tuple(self.c[i] for i in range(self.n))

    def __float__(self):
        if self.n >= 0:
            return _round(self.c, self.n)
        m, e = self.bm, self.be
        try:
            if e >= 0:
                return float(m << e)
            return m / ((<object>1) << -e)
        except OverflowError:
            return math.inf if m > 0 else -math.inf

    def __int__(self):
        m, e = _big_pair(self)
        if e >= 0:
            return m << e
        return -((-m) >> -e) if m < 0 else m >> -e

    def __bool__(self):
        return self.n != 0

    @property
    def numerator(self):
        return self.as_fraction().numerator

    @property
    def denominator(self):
        return self.as_fraction().denominator

    def as_fraction(self):
        m, e = _big_pair(self)
        return Fraction(m << e) if e >= 0 else Fraction(m, (<object>1) << -e)

    def __add__(self, other):
        return _add_obj(self, other)

    def __radd__(self, other):
        return _add_obj(self, other)

    def __sub__(self, other):
        if type(other) is Dyadic:
            return _add(<Dyadic>self, _neg(<Dyadic>other))
        c = _as_element(other)
        if c is None:
            if isinstance(other, Fraction):
                return self.as_fraction() - other
            return NotImplemented
        return _add(<Dyadic>self, _neg(<Dyadic>c))

    def __rsub__(self, other):
        return _add_obj(_neg(<Dyadic>self), other)

    def __neg__(self):
        return _neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _neg(self) if _sign(self) < 0 else self

    def __mul__(self, other):
        return _mul_obj(self, other)

    def __rmul__(self, other):
        return _mul_obj(self, other)

    def __pow__(self, k, mod):
        if mod is not None or type(k) is not int or k < 0:
            return NotImplemented
        if k == 2:
            return _mul(self, self)
        m, e = _big_pair(self)
        return _of_big(m**k, e * k)

    def __truediv__(self, other):
        """The correctly rounded quotient (AVG's ``SUM / COUNT``): one IEEE division when both are one
        double (correctly rounded by IEEE 754), else one ``int / int`` as in the reference."""
        c = _as_element(other)
        if c is None:
            return NotImplemented
        cdef Dyadic x = self, y = <Dyadic>c
        if x.n == 1 and y.n == 1:
            return x.c[0] / y.c[0]
        if y.n == 0:
            raise ZeroDivisionError("division by zero")
        num, e = _big_pair(x)
        den, f = _big_pair(y)
        cdef long long shift = <long long>e - <long long>f
        try:
            if shift >= 0:
                return (num << shift) / den
            return num / (den << -shift)
        except OverflowError:
            return math.inf if (num > 0) == (den > 0) else -math.inf

    def __rtruediv__(self, other):
        c = _as_element(other)
        if c is None:
            return NotImplemented
        return c.__truediv__(self)

    cdef int _cmp(self, other) except -2:
        """The sign of ``self - other`` (-1, 0, 1), or 2 for another kind of value."""
        if type(other) is not Dyadic:
            if PyLong_CheckExact(other) and other == 0:
                return _sign(self)
            if PyFloat_Check(other) and not isfinite(PyFloat_AsDouble(other)):
                if math.isnan(other):
                    return 2
                return -1 if other > 0 else 1
            c = _as_element(other)
            if c is None:
                if isinstance(other, Fraction):
                    d = self.as_fraction() - other
                    return (d > 0) - (d < 0)
                return 2
            other = c
        return _sign(_add(self, _neg(<Dyadic>other)))

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
        if self.n == 1:
            return hash(self.c[0])  # CPython's numeric hash of an equal float
        m, e = _big_pair(self)
        h = (abs(m) % _P) * pow(2, e, _P) % _P
        if m < 0:
            h = -h
        return -2 if h == -1 else h

    def __repr__(self):
        m, e = _big_pair(self)
        return f"Dyadic({m}, {e})"

    def __reduce__(self):
        m, e = _big_pair(self)
        return (_make, (m, e))


cdef object lift_mul(object s, object x):
    """``s · x`` exactly for a float ``x`` (a key value lifted by the SUM lanes, F-IVM §2.4's ``g_X``) and a
    payload ``s`` (an int or an element): no Python call, the product by TwoProduct.  ``NotImplemented``
    when ``x`` is not an exact float (the caller lifts it as :func:`ivm.rings.exact.exact` does)."""
    cdef double v
    if not PyFloat_CheckExact(x):
        return NotImplemented
    v = PyFloat_AsDouble(x)
    if not isfinite(v):
        raise NotFinite(f"{x!r} has no exact value to sum (NaN and infinities are refused)")
    if type(s) is Dyadic:
        return _mul(<Dyadic>s, _of_double(v))
    return _mul_obj(_of_double(v), s)


def exact(value):
    """:func:`ivm.rings.exact.exact` in C (the same results): a float becomes its element, ints, Fractions and
    elements stay as they are, numpy's float32 and float16 are converted exactly; NaN and infinities raise
    :class:`~ivm.rings.exact.NotFinite`."""
    cdef double v
    if PyLong_CheckExact(value) or type(value) is Dyadic:
        return value
    if PyFloat_Check(value):
        v = PyFloat_AsDouble(value)
        if not isfinite(v):
            raise NotFinite(f"{value!r} has no exact value to sum (NaN and infinities are refused)")
        return _of_double(v)
    if isinstance(value, int):
        return value
    if isinstance(value, Real) and not isinstance(value, Rational):
        return exact(float(value))
    return value


def of_float(x):
    """A finite float as its element (``NotFinite`` for a NaN or an infinity; ±0.0: the zero element)."""
    cdef double v = PyFloat_AsDouble(x)
    if not isfinite(v):
        raise NotFinite(f"{x!r} has no exact value to sum (NaN and infinities are refused)")
    return _of_double(v)
