"""The ring of p×p matrices (F-IVM §2.1, §6.5): non-commutative, used for matrix chains.

Elements are numpy arrays; ``+`` is matrix addition and ``*`` matrix product
(``@``), O(p³) per product (O(p²) for a rank-1 factor, see
:mod:`ivm.apps.matrix_chain`).  Operand order is kept everywhere (§2.3: "when
the ring is non-commutative, keep operand order").  ``dtype=object`` gives
exact integer arithmetic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ivm.rings.base import Ring
from ivm.rings.exact import exact as _exact
from ivm.rings.exact import readout as _readout

#: entry-wise :func:`ivm.rings.exact.exact` and read-out over object arrays
_lift = np.frompyfunc(_exact, 1, 1)
_read = np.frompyfunc(_readout, 1, 1)


def lift(values: Any, exact: bool = True) -> np.ndarray:
    """``values`` as an array of the ring's entries: exact (object dtype, floats as exact dyadic
    rationals; a NaN or an infinity raises :class:`~ivm.rings.exact.NotFinite`) or float64."""
    if not exact:
        return np.asarray(values, dtype=np.float64)
    array = np.asarray(values, dtype=object)
    return _lift(array).astype(object) if array.size else array


def readout(array: np.ndarray) -> np.ndarray:
    """The entries a user reads: exact float entries correctly rounded to floats, ints as they are."""
    if array.dtype != object or not array.size:
        return array
    return _read(array).astype(object)


class MatrixRing(Ring):
    """``(R^{p×p}, +, ·, 0, I)`` with elements as numpy arrays (wrapped by :class:`Matrix` for ``*``).

    >>> r = MatrixRing(2)
    >>> a = r.element([[1, 2], [3, 4]]); b = r.element([[0, 1], [1, 0]])
    >>> (a * b).array.tolist(), (b * a).array.tolist()
    ([[2, 1], [4, 3]], [[3, 4], [1, 2]])
    """

    commutative = False

    def __init__(self, p: int, exact: bool = True) -> None:
        self.p = p
        self.dtype: Any = object if exact else np.float64
        self.name = f"{p}x{p} matrices"

    def element(self, values: Any) -> Matrix:
        return Matrix(lift(values, self.dtype is object))

    @property
    def zero(self) -> Matrix:
        return self.element(np.zeros((self.p, self.p), dtype=int))

    @property
    def one(self) -> Matrix:
        return self.element(np.eye(self.p, dtype=int))

    def is_zero(self, element: Matrix) -> bool:
        return not element.array.any()


class Matrix:
    """A matrix value with ``+``, ``-`` and ``*`` meaning the matrix product."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __add__(self, other: Matrix) -> Matrix:
        return Matrix(self.array + other.array)

    def __sub__(self, other: Matrix) -> Matrix:
        return Matrix(self.array - other.array)

    def __neg__(self) -> Matrix:
        return Matrix(-self.array)

    def __mul__(self, other: Matrix | int) -> Matrix:
        if isinstance(other, Matrix):
            return Matrix(self.array @ other.array)
        return Matrix(self.array * other)

    def __rmul__(self, other: int) -> Matrix:
        return Matrix(other * self.array)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Matrix) and bool(np.array_equal(self.array, other.array))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Matrix({self.array.tolist()!r})"
