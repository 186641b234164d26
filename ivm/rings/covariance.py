"""The continuous covariance ring of degree m (F-IVM Def. 32, Theorem 33, Def. 34), sized per view.

Elements are triples ``(c, s, Q)``: ``c`` a scalar, ``s`` a vector and ``Q`` a
matrix.  With every variable lifted to ``g_{X_j}(x) = (1, x·e_j, x²·e_j e_jᵀ)``,
the payload at the root of a view tree is ``(COUNT, SUM(X_j), SUM(X_i·X_j))``
over the join: the covariance matrix ``MᵀM = [[c, sᵀ], [s, Q]]`` of the design
matrix M (§6.2).

Sizing (§6.2, "the lifting and the ring of each view"): an element stores
``s`` and ``Q`` only over its *support* ``idx``, the sorted indices (into the
ring's m variables) of the variables lifted below it; every other entry is 0.
A view of a view tree lifts exactly the variables of its subtree, so a leaf
view over one relation carries that relation's features (``k`` of them:
``1 + k + k²`` numbers instead of ``1 + m + m²``), and only the root holds
the full m×m matrix.  Siblings of a view tree lift disjoint variable sets,
so their products combine by blocks:

Sum:     ``(c_a+c_b, s_a+s_b, Q_a+Q_b)`` over ``idx_a ∪ idx_b``
Product: ``(c_a c_b, [c_b s_a ; c_a s_b], [[c_b Q_a, s_a s_bᵀ], [s_b s_aᵀ, c_a Q_b]])`` for disjoint supports
(overlapping supports use the general rule on the union).

Both cost O(|idx_a ∪ idx_b|²).  Arrays are numpy arrays: ``dtype=object``
when the ring is ``exact`` (the default), holding Python ints for int inputs and
the exact dyadic rationals of :mod:`ivm.rings.exact` for float inputs (so every
entry is the exact sum and returns exactly to its value after updates that
cancel; :meth:`CovarianceRing.readout` rounds each entry once, correctly, for the
result); ``float64`` when the ring is built with ``exact=False`` (an explicit
choice of binary64 sums: fast, but an entry keeps the rounding errors of every
value that ever passed through it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ivm.rings.base import Ring
from ivm.rings.exact import Dyadic, exact, readout

Support = tuple[int, ...]


def _merge(a: Support, b: Support) -> tuple[Support, list[int], list[int]]:
    """The sorted union of two supports and the positions of ``a``'s and ``b``'s indices in it."""
    union = tuple(sorted(set(a) | set(b)))
    where = {v: i for i, v in enumerate(union)}
    return union, [where[v] for v in a], [where[v] for v in b]


def _array_bytes(a: np.ndarray) -> int:
    """An array's header plus its data (``getsizeof`` counts the data only when the array owns it)."""
    return sys.getsizeof(a) + (a.nbytes if a.base is not None else 0)


def _embed(x: Covariance, positions: list[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``x``'s ``s`` and ``Q`` scattered into a support of size ``n`` (zeros elsewhere)."""
    s = np.zeros(n, dtype=x.s.dtype)
    Q = np.zeros((n, n), dtype=x.Q.dtype)
    if positions:
        s[positions] = x.s
        Q[np.ix_(positions, positions)] = x.Q
    return s, Q


class Covariance:
    """One element ``(c, s, Q)`` of the covariance ring (Def. 32), stored over its support ``idx``.

    ``s[p]`` and ``Q[p, q]`` are the entries of variables ``idx[p]`` and
    ``idx[q]`` of the ring; ``idx=None`` means the full support ``0..len(s)-1``.
    """

    __slots__ = ("Q", "c", "idx", "s")

    def __init__(self, c: Any, s: np.ndarray, Q: np.ndarray, idx: Support | None = None) -> None:
        self.c = c
        self.s = s
        self.Q = Q
        self.idx: Support = tuple(range(len(s))) if idx is None else idx

    def _aligned(self, other: Covariance) -> tuple[Support, Covariance, Covariance]:
        """Both operands over one support (the union); O(size of the union²) when the supports differ."""
        if self.idx == other.idx:
            return self.idx, self, other
        union, pa, pb = _merge(self.idx, other.idx)
        sa, Qa = _embed(self, pa, len(union))
        sb, Qb = _embed(other, pb, len(union))
        return union, Covariance(self.c, sa, Qa, union), Covariance(other.c, sb, Qb, union)

    def __add__(self, other: Covariance) -> Covariance:
        idx, a, b = self._aligned(other)
        return Covariance(a.c + b.c, a.s + b.s, a.Q + b.Q, idx)

    def __sub__(self, other: Covariance) -> Covariance:
        idx, a, b = self._aligned(other)
        return Covariance(a.c - b.c, a.s - b.s, a.Q - b.Q, idx)

    def __neg__(self) -> Covariance:
        return Covariance(-self.c, -self.s, -self.Q, self.idx)

    def __mul__(self, other: Covariance | int | float) -> Covariance:
        if not isinstance(other, Covariance):  # scalar: k·a = a + ... + a
            return Covariance(self.c * other, self.s * other, self.Q * other, self.idx)
        ca, cb = self.c, other.c
        if not other.idx:  # (c_b, 0, 0): a scalar multiple, O(|idx_a|²)
            return Covariance(ca * cb, self.s * cb, self.Q * cb, self.idx)
        if not self.idx:
            return Covariance(ca * cb, other.s * ca, other.Q * ca, other.idx)
        if set(self.idx).isdisjoint(other.idx):  # siblings of a view tree: the block product
            union, pa, pb = _merge(self.idx, other.idx)
            n = len(union)
            dtype = np.result_type(self.s, other.s)
            s = np.zeros(n, dtype=dtype)
            Q = np.zeros((n, n), dtype=dtype)
            s[pa] = self.s * cb
            s[pb] = other.s * ca
            cross = np.outer(self.s, other.s)
            Q[np.ix_(pa, pa)] = self.Q * cb
            Q[np.ix_(pb, pb)] = other.Q * ca
            Q[np.ix_(pa, pb)] = cross
            Q[np.ix_(pb, pa)] = cross.T
            return Covariance(ca * cb, s, Q, union)
        union, a, b = self._aligned(other)
        cross = np.outer(a.s, b.s)
        return Covariance(ca * cb, cb * a.s + ca * b.s, cb * a.Q + ca * b.Q + cross + cross.T, union)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Covariance):
            return NotImplemented
        _, a, b = self._aligned(other)
        return bool(a.c == b.c and np.array_equal(a.s, b.s) and np.array_equal(a.Q, b.Q))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Covariance(c={self.c!r}, s={self.s.tolist()!r}, Q={self.Q.tolist()!r}, idx={self.idx!r})"

    def __getstate__(self) -> tuple[Any, np.ndarray, np.ndarray, Support]:
        return (self.c, self.s, self.Q, self.idx)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and state[0] is None:  # slots pickled before sizing
            state = state[1]
        if isinstance(state, dict):
            self.c, self.s, self.Q = state["c"], state["s"], state["Q"]
            self.idx = state.get("idx", tuple(range(len(self.s))))
            return
        self.c, self.s, self.Q, self.idx = state

    def is_close(self, other: Covariance, rel: float = 1e-9, abs_: float = 1e-9) -> bool:
        """Equality up to float rounding (for float payloads)."""
        _, a, b = self._aligned(other)
        return bool(
            np.isclose(float(a.c), float(b.c), rtol=rel, atol=abs_)
            and np.allclose(a.s.astype(float), b.s.astype(float), rtol=rel, atol=abs_)
            and np.allclose(a.Q.astype(float), b.Q.astype(float), rtol=rel, atol=abs_)
        )

    def nbytes(self) -> int:
        """Bytes held by this payload: the object, its arrays and (exact payloads) their Python numbers."""
        total = sys.getsizeof(self) + _array_bytes(self.s) + _array_bytes(self.Q) + sys.getsizeof(self.c)
        if self.s.dtype == object:
            total += sum(sys.getsizeof(x) for x in self.s) + sum(sys.getsizeof(x) for x in self.Q.ravel())
        return total

    def readout(self) -> Covariance:
        """This element as a user reads it: each exact float entry rounded once (:func:`read_covariance`)."""
        return read_covariance(self)

    def matrix(self) -> np.ndarray:
        """``MᵀM = [[c, sᵀ], [s, Q]]`` over the support, the constant-1 column first (full for the root)."""
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

    def _empty(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(0, dtype=self.dtype), np.zeros((0, 0), dtype=self.dtype)

    @property
    def zero(self) -> Covariance:
        s, Q = self._empty()
        return Covariance(0, s, Q, ())

    @property
    def one(self) -> Covariance:
        s, Q = self._empty()
        return Covariance(1, s, Q, ())

    def from_mult(self, mult: int) -> Covariance:
        """``mult · 1``: the empty support (no variable lifted yet), O(1)."""
        s, Q = self._empty()
        return Covariance(mult, s, Q, ())

    def lifts(self, variable: str) -> bool:
        return variable in self.index

    def lift(self, variable: str, value: Any) -> Covariance:
        """``g_{X_j}(x) = (1, x·e_j, x²·e_j e_jᵀ)`` over the support ``(j,)``: O(1)."""
        j = self.index.get(variable)
        if j is None:
            return self.one
        if self.exact:
            value = exact(value)
        s = np.array([value], dtype=self.dtype)
        return Covariance(1, s, np.array([[value * value]], dtype=self.dtype), (j,))

    def lift_tuple(self, variables: Sequence[str], values: Sequence[Any]) -> Covariance:
        """``Π_j g_{X_j}(x_j) = (1, Σ x_j e_j, Σ x_i x_j e_i e_jᵀ)`` over the lifted variables, O(k²) (Remark 39)."""
        pairs = sorted((self.index[v], val) for v, val in zip(variables, values, strict=True) if v in self.index)
        if self.exact:
            pairs = [(j, exact(val)) for j, val in pairs]
        if not pairs:
            return self.one
        vec = np.array([val for _, val in pairs], dtype=self.dtype)
        return Covariance(1, vec, np.outer(vec, vec), tuple(j for j, _ in pairs))

    def support(self, variables: Sequence[str]) -> Support:
        """The sorted ring indices of those of ``variables`` that this ring lifts (a view's support)."""
        return tuple(sorted(self.index[v] for v in set(variables) if v in self.index))

    def expand(self, element: Covariance) -> Covariance:
        """``element`` over the full support ``0..m-1`` (the root's matrix, for results and introspection)."""
        full = tuple(range(self.m))
        if element.idx == full:
            return element
        s = np.zeros(self.m, dtype=self.dtype)
        Q = np.zeros((self.m, self.m), dtype=self.dtype)
        if element.idx:
            pos = list(element.idx)
            s[pos] = element.s
            Q[np.ix_(pos, pos)] = element.Q
        return Covariance(element.c, s, Q, full)

    def readout(self, element: Covariance) -> Covariance:
        """``element`` as a user reads it: each exact float entry (a Dyadic) rounded once to the nearest
        float; ints stay ints.  Returns ``element`` itself when nothing needs rounding."""
        return read_covariance(element)

    def is_zero(self, element: Covariance) -> bool:
        """Zero test: exact payloads (ints, Dyadics) are zero exactly; float64 payloads (``exact=False``)
        use a tolerance (§9 item 1: a robust zero test)."""
        if element.c != 0:
            return False
        if element.s.dtype == object:
            return not element.s.any() and not element.Q.any()
        return bool(np.allclose(element.s, 0.0, atol=1e-7)) and bool(np.allclose(element.Q, 0.0, atol=1e-7))


_read_cells = np.frompyfunc(readout, 1, 1)


def read_covariance(element: Covariance) -> Covariance:
    """``element`` with every Dyadic entry read out as its correctly rounded float (ints stay ints)."""
    s, Q, c = element.s, element.Q, element.c
    if s.dtype != object or not (
        type(c) is Dyadic or any(type(x) is Dyadic for x in s) or any(type(x) is Dyadic for x in Q.flat)
    ):
        return element
    return Covariance(
        readout(c), _read_cells(s).astype(object), _read_cells(Q).astype(object).reshape(Q.shape), element.idx
    )
