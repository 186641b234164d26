"""The numeric rings Z, Q, R (F-IVM §2.1, §2.4, §6.1): COUNT and SUM of products.

Elements are plain Python numbers: ``int`` (exact, unbounded) when the inputs
are integers, ``fractions.Fraction`` for Fractions, and for floats the exact
dyadic rationals of :mod:`ivm.rings.exact` (a lifted float becomes its exact
:class:`~ivm.rings.exact.Dyadic`, so sums and products never round and a delete
undoes its insert exactly; the result is read out correctly rounded).  Each ring
operation is O(1) for machine-size numbers.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ivm.rings.base import Ring
from ivm.rings.exact import exact


class NumericRing(Ring):
    """Z (or Q, R) with the constant lifting ``g_X = 1``: the COUNT ring (§2.4).

    >>> r = NumericRing()
    >>> r.from_mult(-3), r.lift("a", 7), r.is_zero(0)
    (-3, 1, True)
    """

    name = "Z"
    numeric = True

    @property
    def zero(self) -> int:
        return 0

    @property
    def one(self) -> int:
        return 1

    def from_mult(self, mult: int) -> int:
        return mult

    def lift_tuple(self, variables: Any, values: Any) -> int:
        return 1

    def is_zero(self, element: Any) -> bool:
        return element == 0  # a number: no property lookup on the hot path of every view update


class SumRing(NumericRing):
    """Z/R with ``g_X(x) = x^k`` for a variable occurring k times in ``SUM(c * X * ...)`` (§2.4, §6.1).

    A float ``x`` is lifted as its exact :class:`~ivm.rings.exact.Dyadic` (``exact(x)^k``).

    The coefficient is not a lifting: the engine multiplies it into the result.

    >>> r = SumRing({"b": 2, "c": 1})
    >>> r.lift("b", 3), r.lift("c", 4), r.lift("a", 9), r.lift_tuple(("a", "b", "c"), (9, 3, 4))
    (9, 4, 1, 36)
    >>> r.power("b"), r.power("a")
    (2, 0)
    """

    name = "Z/R (sum)"

    def __init__(self, powers: Mapping[str, int] | Collection[str]) -> None:
        self.powers = dict(powers) if isinstance(powers, Mapping) else dict.fromkeys(powers, 1)

    def power(self, variable: str) -> int:
        return self.powers.get(variable, 0)

    def lift(self, variable: str, value: Any) -> Any:
        k = self.powers.get(variable, 0)
        x = exact(value)
        return x if k == 1 else x**k

    def lifts(self, variable: str) -> bool:
        return variable in self.powers

    def lift_tuple(self, variables: Any, values: Any) -> Any:
        out: Any = 1
        powers = self.powers
        for var, val in zip(variables, values, strict=True):
            k = powers.get(var)
            if k:
                x = exact(val)
                out = out * (x if k == 1 else x**k)
        return out
