"""The continuous covariance ring of degree m (F-IVM Def. 32, Theorem 33, Def. 34).

Elements are triples ``(c, s, Q)``: ``c`` a scalar, ``s`` an m-vector and
``Q`` an m×m matrix.  With every variable lifted to
``g_{X_j}(x) = (1, x·e_j, x²·e_j e_jᵀ)``, the payload at the root of a view
tree is ``(COUNT, SUM(X_j), SUM(X_i·X_j))`` over the join: the covariance
matrix ``MᵀM = [[c, sᵀ], [s, Q]]`` of the design matrix M (§6.2).

Sum:     ``(c_a+c_b, s_a+s_b, Q_a+Q_b)``
Product: ``(c_a c_b, c_b s_a + c_a s_b, c_b Q_a + c_a Q_b + s_a s_bᵀ + s_b s_aᵀ)``

Both cost O(m²).  Arrays are numpy arrays: ``dtype=object`` holding Python
ints (exact, unbounded) when the ring is ``exact`` and inputs are integers,
``float64`` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ivm.rings.base import Ring


class Covariance:
    """One element ``(c, s, Q)`` of the covariance ring (Def. 32)."""

    __slots__ = ("Q", "c", "s")

    def __init__(self, c: Any, s: np.ndarray, Q: np.ndarray) -> None:
        self.c = c
        self.s = s
        self.Q = Q

    def __add__(self, other: Covariance) -> Covariance:
        return Covariance(self.c + other.c, self.s + other.s, self.Q + other.Q)

    def __sub__(self, other: Covariance) -> Covariance:
        return Covariance(self.c - other.c, self.s - other.s, self.Q - other.Q)

    def __neg__(self) -> Covariance:
        return Covariance(-self.c, -self.s, -self.Q)

    def __mul__(self, other: Covariance | int | float) -> Covariance:
        if not isinstance(other, Covariance):  # scalar: k·a = a + ... + a
            return Covariance(self.c * other, self.s * other, self.Q * other)
        ca, cb = self.c, other.c
        cross = np.outer(self.s, other.s)
        return Covariance(
            ca * cb,
            cb * self.s + ca * other.s,
            cb * self.Q + ca * other.Q + cross + cross.T,
        )

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Covariance):
            return NotImplemented
        return bool(self.c == other.c and np.array_equal(self.s, other.s) and np.array_equal(self.Q, other.Q))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Covariance(c={self.c!r}, s={self.s.tolist()!r}, Q={self.Q.tolist()!r})"

    def is_close(self, other: Covariance, rel: float = 1e-9, abs_: float = 1e-9) -> bool:
        """Equality up to float rounding (for float payloads)."""
        return bool(
            np.isclose(float(self.c), float(other.c), rtol=rel, atol=abs_)
            and np.allclose(self.s.astype(float), other.s.astype(float), rtol=rel, atol=abs_)
            and np.allclose(self.Q.astype(float), other.Q.astype(float), rtol=rel, atol=abs_)
        )

    def matrix(self) -> np.ndarray:
        """``MᵀM = [[c, sᵀ], [s, Q]]``, the (m+1)×(m+1) covariance matrix with the constant-1 column first."""
        m = len(self.s)
        out = np.empty((m + 1, m + 1), dtype=self.Q.dtype if self.Q.dtype == object else float)
        out[0, 0] = self.c
        out[0, 1:] = self.s
        out[1:, 0] = self.s
        out[1:, 1:] = self.Q
        return out


class CovarianceRing(Ring):
    """The covariance ring of degree ``m = len(variables)`` over Z/R (Def. 32, Theorem 33: commutative).

    Variables outside ``variables`` lift to 1.  Example 35 / T5 of the digest:

    >>> r = CovarianceRing(("C", "D", "E"))
    >>> vt = r.lift("D", 2) + r.lift("D", 3)          # V_T^{@D}[c2]
    >>> vst = vt * r.lift("E", 4) * r.lift("C", 2)    # V_T[c2] * V_S[a2,c2] * g_C(c2)
    >>> vst.c, vst.s.tolist(), vst.Q[0].tolist(), vst.Q[1][1:].tolist(), vst.Q[2][2]
    (2, [4, 5, 8], [8, 10, 16], [13, 20], 32)
    """

    def __init__(self, variables: Sequence[str], exact: bool = True) -> None:
        self.variables = tuple(variables)
        self.index = {v: i for i, v in enumerate(self.variables)}
        self.m = len(self.variables)
        self.exact = exact
        self.dtype: Any = object if exact else np.float64
        self.name = f"covariance ring of degree {self.m}"

    def _zeros(self) -> tuple[np.ndarray, np.ndarray]:
        s = np.zeros(self.m, dtype=self.dtype)
        Q = np.zeros((self.m, self.m), dtype=self.dtype)
        if self.exact:  # object zeros are Python ints: exact arithmetic
            s[:] = 0
            Q[:] = 0
        return s, Q

    @property
    def zero(self) -> Covariance:
        s, Q = self._zeros()
        return Covariance(0, s, Q)

    @property
    def one(self) -> Covariance:
        s, Q = self._zeros()
        return Covariance(1, s, Q)

    def from_mult(self, mult: int) -> Covariance:
        s, Q = self._zeros()
        return Covariance(mult, s, Q)

    def lifts(self, variable: str) -> bool:
        return variable in self.index

    def lift(self, variable: str, value: Any) -> Covariance:
        """``g_{X_j}(x) = (1, x·e_j, x²·e_j e_jᵀ)``; O(m²) to allocate."""
        s, Q = self._zeros()
        j = self.index.get(variable)
        if j is not None:
            s[j] = value
            Q[j, j] = value * value
        return Covariance(1, s, Q)

    def lift_tuple(self, variables: Sequence[str], values: Sequence[Any]) -> Covariance:
        """``Π_j g_{X_j}(x_j) = (1, Σ x_j e_j, Σ x_i x_j e_i e_jᵀ)`` in one O(m²) step (Remark 39)."""
        s, Q = self._zeros()
        pos = [self.index[v] for v in variables if v in self.index]
        if pos:
            vals = [val for v, val in zip(variables, values, strict=True) if v in self.index]
            vec = np.array(vals, dtype=self.dtype)
            s[pos] = vec
            Q[np.ix_(pos, pos)] = np.outer(vec, vec)
        return Covariance(1, s, Q)

    def is_zero(self, element: Covariance) -> bool:
        """Zero test; float payloads use a tolerance (§9 item 1: a robust zero test)."""
        if element.c != 0:
            return False
        if self.exact and element.s.dtype == object:
            return not element.s.any() and not element.Q.any()
        return bool(np.allclose(element.s.astype(float), 0.0, atol=1e-7)) and bool(
            np.allclose(element.Q.astype(float), 0.0, atol=1e-7)
        )
