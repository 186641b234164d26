"""The generalized covariance ring: the covariance structure over F[R] (F-IVM Def. 37, Remark 39).

Continuous variables contribute scalars; a categorical variable ``X_j``
contributes relations keyed by its values, so that without one-hot encoding

- a continuous×continuous entry ``Q_ij`` is ``SUM(X_i·X_j)``;
- a categorical×continuous entry is ``SUM(X_j) GROUP BY X_i``;
- a categorical×categorical entry is ``SUM(1) GROUP BY X_i, X_j``;
- ``s_j`` of a categorical ``X_j`` is ``SUM(1) GROUP BY X_j``.

Storage follows Remark 39: only the non-zero entries of ``s`` and of the upper
triangle of ``Q`` are stored (sparse maps), each entry a map from the tuple of
its categorical values (``()`` for a continuous entry) to a number: an ``int``
for int inputs, the exact :class:`~ivm.rings.exact.Dyadic` of a float input (sums
never round, a delete undoes its insert exactly; :meth:`GeneralizedCovarianceRing.readout`
rounds each number once, correctly, for the result).  ``c`` is
always over the empty schema, stored as a plain number.  Products cost
O(Σ sizes of the joined entries); sums O(size of the operands).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from ivm.rings.base import Ring
from ivm.rings.exact import Dyadic, exact, readout

Entry = dict[tuple[Any, ...], Any]


def _add_into(target: Entry, other: Entry, factor: Any = 1) -> None:
    for k, v in other.items():
        new = target.get(k, 0) + v * factor
        if new:
            target[k] = new
        else:
            target.pop(k, None)


def _scaled(entry: Entry, factor: Any) -> Entry:
    return {k: v * factor for k, v in entry.items()} if factor != 1 else dict(entry)


class GeneralizedCovariance:
    """An element ``(c, s, Q)``: ``c`` a number, ``s: {j: Entry}``, ``Q: {(i, j): Entry}`` with ``i ≤ j``.

    Entry keys: ``()`` for continuous entries; ``(x,)`` for one categorical
    variable; ``(x_i, x_j)`` when both ``i < j`` are categorical.  The
    categorical mask comes from the ring (``cat``).
    """

    __slots__ = ("Q", "c", "cat", "s")

    def __init__(self, c: Any, s: dict[int, Entry], Q: dict[tuple[int, int], Entry], cat: frozenset[int]) -> None:
        self.c = c
        self.s = s
        self.Q = Q
        self.cat = cat

    def __add__(self, other: GeneralizedCovariance) -> GeneralizedCovariance:
        s = {j: dict(e) for j, e in self.s.items()}
        for j, e in other.s.items():
            _add_into(s.setdefault(j, {}), e)
        Q = {ij: dict(e) for ij, e in self.Q.items()}
        for ij, e in other.Q.items():
            _add_into(Q.setdefault(ij, {}), e)
        return GeneralizedCovariance(
            self.c + other.c,
            {j: e for j, e in s.items() if e},
            {ij: e for ij, e in Q.items() if e},
            self.cat,
        )

    def __neg__(self) -> GeneralizedCovariance:
        return self * -1

    def __sub__(self, other: GeneralizedCovariance) -> GeneralizedCovariance:
        return self + (-other)

    def _cross(self, si: Entry, sj: Entry, i: int, j: int) -> Entry:
        """``s_i ⊗ s_j`` (natural join of the two entries) as an entry of ``Q_ij``, ``i ≤ j``."""
        out: Entry = {}
        if i == j:  # same variable: join on it
            for k, v in si.items():
                w = sj.get(k)
                if w is not None:
                    out[k] = out.get(k, 0) + v * w
            return out
        for ki, vi in si.items():
            for kj, vj in sj.items():
                key = ki + kj
                out[key] = out.get(key, 0) + vi * vj
        return out

    def __mul__(self, other: GeneralizedCovariance | int) -> GeneralizedCovariance:
        if not isinstance(other, GeneralizedCovariance):
            if other == 0:
                return GeneralizedCovariance(0, {}, {}, self.cat)
            return GeneralizedCovariance(
                self.c * other,
                {j: _scaled(e, other) for j, e in self.s.items()},
                {ij: _scaled(e, other) for ij, e in self.Q.items()},
                self.cat,
            )
        ca, cb = self.c, other.c
        s: dict[int, Entry] = {}
        for j, e in self.s.items():
            if cb:
                _add_into(s.setdefault(j, {}), e, cb)
        for j, e in other.s.items():
            if ca:
                _add_into(s.setdefault(j, {}), e, ca)
        Q: dict[tuple[int, int], Entry] = {}
        for ij, e in self.Q.items():
            if cb:
                _add_into(Q.setdefault(ij, {}), e, cb)
        for ij, e in other.Q.items():
            if ca:
                _add_into(Q.setdefault(ij, {}), e, ca)
        for i, ei in self.s.items():
            for j, ej in other.s.items():
                if i <= j:
                    _add_into(Q.setdefault((i, j), {}), self._cross(ei, ej, i, j))
                if j <= i:
                    _add_into(Q.setdefault((j, i), {}), self._cross(ej, ei, j, i))
        return GeneralizedCovariance(
            ca * cb, {j: e for j, e in s.items() if e}, {ij: e for ij, e in Q.items() if e}, self.cat
        )

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GeneralizedCovariance):
            return NotImplemented
        return self.c == other.c and self.s == other.s and self.Q == other.Q

    __hash__ = None  # type: ignore[assignment]

    def readout(self) -> GeneralizedCovariance:
        """This element with every Dyadic number read out as its correctly rounded float (ints stay ints)."""

        def read(entry: Entry) -> Entry:
            return {k: float(v) if type(v) is Dyadic else v for k, v in entry.items()}

        return GeneralizedCovariance(
            readout(self.c),
            {j: read(e) for j, e in self.s.items()},
            {ij: read(e) for ij, e in self.Q.items()},
            self.cat,
        )

    def entry(self, i: int, j: int) -> Entry:
        """``Q_ij`` (symmetric: keys are ordered as ``(min, max)``)."""
        return self.Q.get((min(i, j), max(i, j)), {})

    def __repr__(self) -> str:
        return f"GeneralizedCovariance(c={self.c!r}, s={self.s!r}, Q={self.Q!r})"


class GeneralizedCovarianceRing(Ring):
    """The generalized covariance ring over ``variables``, ``categorical`` ones kept as group-by keys (Def. 37).

    Liftings (§2.4): continuous ``X_j``: ``s_j = {() → x}``, ``Q_jj = {() → x²}``;
    categorical: ``s_j = {x → 1}``, ``Q_jj = {x → 1}``; ``c = 1``.  Example 38 (T7):

    >>> r = GeneralizedCovarianceRing(("C", "D", "E"), categorical={"C"})
    >>> v = (r.lift("D", 2) + r.lift("D", 3)) * r.lift("E", 4) * r.lift("C", "c2")
    >>> v.s[0], v.entry(0, 0), v.entry(0, 1), v.entry(0, 2), v.entry(1, 1)
    ({('c2',): 2}, {('c2',): 2}, {('c2',): 5}, {('c2',): 8}, {(): 13})
    """

    def __init__(self, variables: Sequence[str], categorical: Collection[str] = ()) -> None:
        self.variables = tuple(variables)
        self.index = {v: i for i, v in enumerate(self.variables)}
        self.cat = frozenset(self.index[v] for v in categorical)
        self.name = f"generalized covariance ring of degree {len(self.variables)} ({len(self.cat)} categorical)"

    @property
    def zero(self) -> GeneralizedCovariance:
        return GeneralizedCovariance(0, {}, {}, self.cat)

    @property
    def one(self) -> GeneralizedCovariance:
        return GeneralizedCovariance(1, {}, {}, self.cat)

    def from_mult(self, mult: int) -> GeneralizedCovariance:
        return GeneralizedCovariance(mult, {}, {}, self.cat)

    def lifts(self, variable: str) -> bool:
        return variable in self.index

    def lift(self, variable: str, value: Any) -> GeneralizedCovariance:
        j = self.index.get(variable)
        if j is None:
            return self.one
        if j in self.cat:
            return GeneralizedCovariance(1, {j: {(value,): 1}}, {(j, j): {(value,): 1}}, self.cat)
        if value == 0:
            return self.one
        x = exact(value)
        return GeneralizedCovariance(1, {j: {(): x}}, {(j, j): {(): x * x}}, self.cat)

    def readout(self, element: GeneralizedCovariance) -> GeneralizedCovariance:
        """``element`` with every exact float (Dyadic) number rounded once to the nearest float."""
        return element.readout()

    def is_zero(self, element: GeneralizedCovariance) -> bool:
        return element.c == 0 and not element.s and not element.Q
