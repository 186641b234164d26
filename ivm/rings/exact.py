"""Exact sums of floats: dyadic rationals ``m · 2^e`` with a Python ``int`` ``m`` (F-IVM §2.1's ring R, done exactly).

Why.  F-IVM needs additive inverses so that a delete undoes an insert (§2.1).  Binary64 addition has
them only approximately: ``(s + 9.2e18) - 9.2e18`` loses every bit of ``s`` below 2^11, for good, so a
float SUM, AVG or covariance entry would not return to its value after an insert and its delete.  This
module makes the float payloads of the numeric and covariance rings an exact ring instead.

The algebra.  Every finite double ``x`` is an integer times a power of two: ``x = n · 2^k`` with
``|n| < 2^53`` and ``-1074 ≤ k ≤ 971`` (``float.as_integer_ratio`` gives ``n / 2^-k`` exactly).  The set
``D = {m · 2^e : m, e ∈ Z}`` of dyadic rationals is a subring of Q that contains every double, and

- ``m·2^e + n·2^f = (m·2^(e-f) + n)·2^f`` for ``e ≥ f`` (a shift and an int addition: exact),
- ``(m·2^e)·(n·2^f) = (m·n)·2^(e+f)`` (exact; a product of two doubles is an integer times 2^-2148),
- ``-(m·2^e) = (-m)·2^e``,

so sums, differences and products of doubles and ints — everything the SUM, AVG and covariance rings
compute (§2.4, Def. 32, Def. 37) — are exact in ``D``, and a sequence of updates whose net effect is
zero brings every payload back to exactly its earlier element.  A float sum or product that is 0 is the
zero element ``Dyadic(0, 0)``: it reads ``0.0`` (the type of the input: a float SUM that cancels reads
``0.0``, not the int ``0``) and equals the rings' zero ``0``, so zero elimination (§9 item 1) is exact.
An element keeps the least exponent that went into it (no normalization: an addition costs one shift
and one ``int`` addition, O(size in words)); ``m`` has at most ``e_max - e_min + 53 + log2(#terms)``
bits, 2,100 bits for sums that mix 1e308 and 5e-324, 53 + log2(#terms) for values of one binade.  Ints
stay Python ints (already exact); an element appears only where a float is lifted (:func:`exact`).
This class is the reference; the compiled type of the same values (``_exact_kernel.pyx``) keeps an
element as up to six doubles (a Shewchuk expansion, one double in the common case) and is what
:data:`Dyadic` is when built.

The read-out.  The value a user reads is a ``float``: the double nearest to the exact element (ties to
even), ``float(m·2^e)``.  CPython's ``float(int)`` and ``int / int`` are correctly rounded (subnormal
results included), so :meth:`Dyadic.__float__` is ``float(m << e)`` for ``e ≥ 0`` and ``m / 2^-e``
otherwise; an exact value beyond the largest double rounds to ``±inf`` (as IEEE round-to-nearest
does), never to an exception.  So after any sequence of updates that cancel, the result read is bit for
bit the result read before, and every result is the correctly rounded exact sum (better than any
summation order in binary64).  Division (AVG's ``SUM / COUNT``) is one correctly rounded ``int / int``.

NaN and infinities have no place in ``D`` (nor in SQL's sums): :func:`exact` refuses them with
:class:`NotFinite`, and :meth:`ivm.view.View.apply` refuses such an update by name (``not_finite``)
before any engine sees it.

>>> x = exact(0.1) + exact(9.2e18)
>>> float(x - exact(9.2e18)) == 0.1
True
>>> exact(0.5) * 3, float(exact(1e308) + 1e308), exact(0.1) + 0.2 == 0.1 + 0.2
(Dyadic(3, -1), inf, False)
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from numbers import Rational, Real
from typing import Any

#: the modulus of CPython's numeric hash (hash(x) for a rational x is x mod P)
_P = sys.hash_info.modulus


class NotFinite(ValueError):
    """A NaN or an infinity where a ring lifts a number: it has no exact value (and no SQL sum)."""


class PyDyadic:
    """``m · 2^e``, exactly: an element of the dyadic rationals (module docstring).

    Arithmetic with ``Dyadic``, ``int``, ``bool`` and finite ``float`` (converted exactly) stays exact
    and returns a ``Dyadic``; with a ``Fraction`` it returns the exact ``Fraction``.  ``float(d)``
    and ``d / k`` are correctly rounded.  Equal values compare and hash equal to the ``int``,
    ``float`` or ``Fraction`` of the same value, whatever their exponents.
    """

    __slots__ = ("e", "m")

    def __init__(self, m: int, e: int = 0) -> None:
        self.m = m
        self.e = e

    # ------------------------------------------------------------ conversion
    @staticmethod
    def of(value: Any) -> PyDyadic:
        """``value`` (a PyDyadic, an int or a finite float) as a PyDyadic, exactly."""
        if type(value) is PyDyadic:
            return value
        if isinstance(value, int):
            return PyDyadic(int(value), 0)
        return _py_of_float(value)

    def __float__(self) -> float:
        m, e = self.m, self.e
        try:
            if e >= 0:
                return float(m << e)
            return m / (1 << -e)  # correctly rounded (CPython's long true division), subnormals included
        except OverflowError:
            return math.inf if m > 0 else -math.inf

    def __int__(self) -> int:
        m, e = self.m, self.e
        if e >= 0:
            return m << e
        return -((-m) >> -e) if m < 0 else m >> -e  # toward zero, as int(float)

    def __bool__(self) -> bool:
        return self.m != 0

    @property
    def numerator(self) -> int:
        return self.as_fraction().numerator

    @property
    def denominator(self) -> int:
        return self.as_fraction().denominator

    def as_fraction(self) -> Fraction:
        """The exact value as a Fraction."""
        return Fraction(self.m << self.e) if self.e >= 0 else Fraction(self.m, 1 << -self.e)

    # ------------------------------------------------------------ arithmetic
    def __add__(self, other: Any) -> Any:
        t = type(other)
        if t is not PyDyadic:
            if t is int or t is bool:
                if not other:
                    return self
                other = PyDyadic(int(other), 0)
            elif isinstance(other, float):
                other = _py_of_float(other)
            elif isinstance(other, Fraction):
                return self.as_fraction() + other
            elif isinstance(other, int):
                other = PyDyadic(int(other), 0)
            else:
                return NotImplemented
        m, e, n, f = self.m, self.e, other.m, other.e
        if e == f:
            m += n
        elif e < f:
            m += n << (f - e)
        else:
            m, e = (m << (e - f)) + n, f
        return PyDyadic(m, e) if m else PyDyadic(0, 0)  # a float sum that cancels is 0.0, not the int 0

    __radd__ = __add__

    def __neg__(self) -> PyDyadic:
        return PyDyadic(-self.m, self.e)

    def __pos__(self) -> PyDyadic:
        return self

    def __abs__(self) -> PyDyadic:
        return PyDyadic(abs(self.m), self.e)

    def __sub__(self, other: Any) -> Any:
        if type(other) is PyDyadic:
            return self + PyDyadic(-other.m, other.e)
        return self + (-other)

    def __rsub__(self, other: Any) -> Any:
        return (-self) + other

    def __mul__(self, other: Any) -> Any:
        t = type(other)
        if t is PyDyadic:
            m = self.m * other.m
            return PyDyadic(m, self.e + other.e) if m else PyDyadic(0, 0)
        if t is int or t is bool:
            return PyDyadic(self.m * other, self.e) if other else PyDyadic(0, 0)
        if isinstance(other, float):
            other = _py_of_float(other)
            return PyDyadic(self.m * other.m, self.e + other.e) if other.m else PyDyadic(0, 0)
        if isinstance(other, Fraction):
            return self.as_fraction() * other
        if isinstance(other, int):
            return PyDyadic(self.m * int(other), self.e) if other else PyDyadic(0, 0)
        return NotImplemented

    __rmul__ = __mul__

    def __pow__(self, k: int) -> PyDyadic:
        if type(k) is not int or k < 0:
            return NotImplemented
        return PyDyadic(self.m**k, self.e * k)

    def __truediv__(self, other: Any) -> float:
        """The correctly rounded quotient (AVG's ``SUM / COUNT``): one ``int / int``."""
        if isinstance(other, float):
            other = _py_of_float(other)
        elif isinstance(other, int):
            other = PyDyadic(int(other), 0)
        elif type(other) is not PyDyadic:
            return NotImplemented
        num, den, shift = self.m, other.m, self.e - other.e
        try:
            if shift >= 0:
                return (num << shift) / den
            return num / (den << -shift)
        except OverflowError:
            return math.inf if (num > 0) == (den > 0) else -math.inf

    def __rtruediv__(self, other: Any) -> float:
        if isinstance(other, int | float):
            return PyDyadic.of(other) / self
        return NotImplemented

    # ------------------------------------------------------------ comparison
    def _cmp(self, other: Any) -> int | None:
        """The sign of ``self - other``, or None for another kind of value."""
        if type(other) is not PyDyadic:
            if isinstance(other, int):
                other = PyDyadic(int(other), 0)
            elif isinstance(other, float):
                if math.isnan(other):
                    return None
                if math.isinf(other):
                    return -1 if other > 0 else 1
                other = _py_of_float(other)
            elif isinstance(other, Fraction):
                d = self.as_fraction() - other
                return (d > 0) - (d < 0)
            else:
                return None
        d = self - other
        if type(d) is int:
            return (d > 0) - (d < 0)
        return (d.m > 0) - (d.m < 0)

    def __eq__(self, other: object) -> bool:
        if type(other) is PyDyadic:
            return self._cmp(other) == 0
        c = self._cmp(other)
        return NotImplemented if c is None else c == 0  # type: ignore[return-value]

    def __lt__(self, other: Any) -> bool:
        c = self._cmp(other)
        return NotImplemented if c is None else c < 0  # type: ignore[return-value]

    def __le__(self, other: Any) -> bool:
        c = self._cmp(other)
        return NotImplemented if c is None else c <= 0  # type: ignore[return-value]

    def __gt__(self, other: Any) -> bool:
        c = self._cmp(other)
        return NotImplemented if c is None else c > 0  # type: ignore[return-value]

    def __ge__(self, other: Any) -> bool:
        c = self._cmp(other)
        return NotImplemented if c is None else c >= 0  # type: ignore[return-value]

    def __hash__(self) -> int:
        """CPython's numeric hash of the value (equal to ``hash`` of an equal int, float or Fraction)."""
        m, e = self.m, self.e
        h = (abs(m) % _P) * pow(2, e, _P) % _P
        if m < 0:
            h = -h
        return -2 if h == -1 else h

    def __repr__(self) -> str:
        return f"Dyadic({self.m}, {self.e})"

    def __reduce__(self) -> tuple[Any, tuple[int, int]]:
        return (_make, (self.m, self.e))


def _py_of_float(x: float) -> PyDyadic:
    try:
        n, d = float(x).as_integer_ratio()
    except (OverflowError, ValueError):
        raise NotFinite(f"{x!r} has no exact value to sum (NaN and infinities are refused)") from None
    return PyDyadic(n, 1 - d.bit_length())  # d = 2^k, k = bit_length - 1 (0.0: PyDyadic(0, 0))


def exact(value: Any) -> Any:
    """``value`` as the rings sum it: a float (any float subclass, numpy's included) becomes its exact
    :class:`Dyadic`; ints, Fractions and Dyadics stay as they are (exact already).  A NaN or an
    infinity raises :class:`NotFinite`.

    >>> exact(3), exact(0.75), exact(5e-324), exact(-0.0), float(exact(0.5) - 0.5)
    (3, Dyadic(3, -2), Dyadic(1, -1074), Dyadic(0, 0), 0.0)
    """
    t = type(value)
    if t is int or t is Dyadic:
        return value
    if t is float or isinstance(value, float):
        return _of_float(value)  # ±0.0: the zero Dyadic (reads 0.0, equals the rings' zero 0)
    if isinstance(value, Real) and not isinstance(value, Rational):  # numpy's float32 and float16: exact in a double
        return _of_float(float(value))
    return value


def readout(value: Any) -> Any:
    """The value a user reads: a Dyadic becomes the nearest float (correctly rounded); other values
    are returned as they are (a Dyadic nested in a payload is read out by its ring's ``readout``)."""
    return float(value) if type(value) is Dyadic else value


def read_result(value: Any) -> Any:
    """An engine's result as a user reads it: a Dyadic becomes its correctly rounded float, a
    ``{group: value}`` dict has its values read out, a ring element with a ``readout()`` method
    (:class:`~ivm.rings.covariance.Covariance`, :class:`~ivm.rings.generalized_covariance.GeneralizedCovariance`)
    is read out by it; anything else (ints, relations, None) is returned as it is."""
    t = type(value)
    if t is Dyadic:
        return float(value)
    if t is dict:
        if not any(type(v) is Dyadic or hasattr(v, "readout") for v in value.values()):
            return value
        return {k: read_result(v) for k, v in value.items()}
    read = getattr(value, "readout", None)
    if read is not None and callable(read):
        return read()
    return value


#: the implementation in use: the compiled type when built, else the Python class (the reference)
Dyadic: Any = PyDyadic
_of_float: Any = _py_of_float


def _make(m: int, e: int) -> Any:
    """A pickled Dyadic, rebuilt as the implementation in use (compiled or Python)."""
    return Dyadic(m, e)


try:  # the same class as a C extension type (``_exact_kernel.pyx``): no Python frame per operation, no GC tracking
    from ivm.rings._exact_kernel import (
        Dyadic,  # type: ignore[no-redef]
        exact,  # type: ignore[no-redef]  # noqa: F401  (the same function, in C)
    )
    from ivm.rings._exact_kernel import of_float as _of_float  # type: ignore[no-redef]
except ImportError:  # no compiler at install time: the Python class above
    pass
