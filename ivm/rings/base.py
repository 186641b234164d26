"""The ring abstraction of F-IVM (§2.1) and the direct product of two rings.

A ring ``(D, +, *, 0, 1)``: ``+`` commutative and associative with identity 0
and additive inverses, ``*`` associative with identity 1 and distributing over
``+``.  Additive inverses make deletes symmetric to inserts (§2.1: "F-IVM
needs additive inverses to handle deletes").  A :class:`Ring` also carries the
lifting functions ``g_X: Dom(X) -> D`` of §2.3, applied exactly once per
variable, at the view that marginalizes it (§9 item 2).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any


class Ring(ABC):
    """A payload ring with its lifting functions (F-IVM §2.1, §2.4).

    Elements support ``a + b``, ``a - b``, ``-a`` and ``a * b``; the ring
    object supplies ``zero``, ``one``, the multiplicity embedding
    :meth:`from_mult` (``m`` ↦ ``m·1``, the payload of a base tuple), the
    lifting :meth:`lift` and the zero test used for zero elimination (§9 item 1).
    """

    name: str = "ring"
    commutative: bool = True
    #: Elements are plain Python numbers (``int``, ``float``, ``Fraction``): ``+`` and ``*`` are the numbers'
    #: own, ``0`` and ``1`` the numbers 0 and 1, ``from_mult(m) == m``, the zero test is ``== 0`` and
    #: ``g_X(x) = x^k`` with ``k = power(X)``.  An engine checks it once, when it builds its plans, and then
    #: computes with the numbers directly instead of calling the ring's methods (§2.1, §2.4).
    numeric: bool = False

    @property
    @abstractmethod
    def zero(self) -> Any:
        """The additive identity."""

    @property
    @abstractmethod
    def one(self) -> Any:
        """The multiplicative identity."""

    def from_mult(self, mult: int) -> Any:
        """The payload ``mult · 1`` of a base tuple with multiplicity ``mult``."""
        return self.one * mult

    def lift(self, variable: str, value: Any) -> Any:
        """``g_variable(value)``; the identity lifting returns 1."""
        return self.one

    def lifts(self, variable: str) -> bool:
        """Is ``g_variable`` other than the constant 1?  (Views skip trivial lifts.)"""
        return False

    def lift_tuple(self, variables: Sequence[str], values: Sequence[Any]) -> Any:
        """``Π_i g_{variables[i]}(values[i])``, the payload of a collapsed chain of private variables (§3)."""
        out = self.one
        for var, val in zip(variables, values, strict=True):
            if self.lifts(var):
                out = out * self.lift(var, val)
        return out

    def is_zero(self, element: Any) -> bool:
        """Is ``element`` the zero of the ring (such keys are deleted from views)?"""
        return bool(element == self.zero)

    def power(self, variable: str) -> int:
        """For a :attr:`numeric` ring: the k of ``g_variable(x) = x^k`` (0: the constant lifting 1)."""
        return 0


class Pair:
    """An element of the direct product ring ``D1 × D2`` (componentwise operations)."""

    __slots__ = ("first", "second")

    def __init__(self, first: Any, second: Any) -> None:
        self.first = first
        self.second = second

    def __add__(self, other: Pair) -> Pair:
        return Pair(self.first + other.first, self.second + other.second)

    def __sub__(self, other: Pair) -> Pair:
        return Pair(self.first - other.first, self.second - other.second)

    def __neg__(self) -> Pair:
        return Pair(-self.first, -self.second)

    def __mul__(self, other: Pair | int) -> Pair:
        if isinstance(other, Pair):
            return Pair(self.first * other.first, self.second * other.second)
        return Pair(self.first * other, self.second * other)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pair) and self.first == other.first and self.second == other.second

    def __hash__(self) -> int:  # pragma: no cover - payloads are not used as keys
        return hash((self.first, self.second))

    def __repr__(self) -> str:
        return f"Pair({self.first!r}, {self.second!r})"

    def __getstate__(self) -> tuple[Any, Any]:
        return (self.first, self.second)

    def __setstate__(self, state: tuple[Any, Any]) -> None:
        self.first, self.second = state


class PairRing(Ring):
    """The direct product ``D1 × D2``, a ring with componentwise ``+`` and ``*``.

    The engine pairs a payload ring with the count ring Z to keep tuple
    multiplicities beside arbitrary payloads: F-IVM Remark 18 and §9 item 1
    ("multiplicities must be kept ... to decide deletions correctly").  A key
    is deleted only when both components are zero.

    >>> from ivm.rings.numeric import NumericRing, SumRing
    >>> r = PairRing(NumericRing(), SumRing({"b"}))
    >>> x = r.lift("b", 5) * r.from_mult(2)
    >>> (x.first, x.second)
    (2, 10)
    """

    def __init__(self, first: Ring, second: Ring) -> None:
        self.first = first
        self.second = second
        self.name = f"{first.name} × {second.name}"
        self.commutative = first.commutative and second.commutative

    @property
    def zero(self) -> Pair:
        return Pair(self.first.zero, self.second.zero)

    @property
    def one(self) -> Pair:
        return Pair(self.first.one, self.second.one)

    def from_mult(self, mult: int) -> Pair:
        return Pair(self.first.from_mult(mult), self.second.from_mult(mult))

    def lift(self, variable: str, value: Any) -> Pair:
        return Pair(self.first.lift(variable, value), self.second.lift(variable, value))

    def lifts(self, variable: str) -> bool:
        return self.first.lifts(variable) or self.second.lifts(variable)

    def lift_tuple(self, variables: Sequence[str], values: Sequence[Any]) -> Pair:
        return Pair(self.first.lift_tuple(variables, values), self.second.lift_tuple(variables, values))

    def is_zero(self, element: Pair) -> bool:
        return self.first.is_zero(element.first) and self.second.is_zero(element.second)
