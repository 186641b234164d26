"""Heavy/light partitions of a binary Z-relation (IVM^eps §3, Definition 6).

A relation ``K(x, y)`` is split on its first variable ``X`` into a heavy part
``K_h`` and a light part ``K_l`` with threshold ``θ = N^eps``:

- union: every tuple lives in exactly one part;
- domain partition: all tuples sharing an ``X``-value live in the same part;
- loose: heavy keys have degree ``≥ θ/2``, light keys degree ``< 3θ/2``;
- strict (after preprocessing and every major rebalancing): heavy ``≥ θ``,
  light ``< θ``.

Each part is a hash map stored twice, as a forward index ``x -> {y: m}`` and a
backward index ``y -> {x: m}`` (IVM^eps §1.1 computation model: every variable
of every relation is indexed; the digest's §8 item 8).  Only non-zero entries
are stored, so a key's degree is ``len(fwd[x])`` in O(1) and
``x in fwd`` is the membership test ``x ∈ π_X K``.

The thresholds are kept as precomputed integer cutoffs, computed in one place
(:meth:`HeavyLightPartition.set_threshold`), so that float rounding of
``N^eps`` cannot make two checks disagree (digest §7.3 note).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

Index = dict[object, dict[object, int]]


def index_add(fwd: Index, bwd: Index, x: object, y: object, m: int) -> int:
    """Add ``m`` to the entry ``(x, y)`` of a doubly indexed map; O(1).

    Returns the change in the number of distinct tuples (+1, 0 or -1): only
    ``0 <-> non-zero`` transitions change sizes and degrees (digest §8 item 1).
    Zero entries are removed physically from both indexes (§8 item 2).

    >>> f, b = {}, {}
    >>> index_add(f, b, 1, 2, 3), index_add(f, b, 1, 2, -3), f, b
    (1, -1, {}, {})
    """
    row = fwd.get(x)
    if row is None:
        fwd[x] = {y: m}
        col = bwd.get(y)
        if col is None:
            bwd[y] = {x: m}
        else:
            col[x] = m
        return 1
    old = row.get(y, 0)
    new = old + m
    if new:
        row[y] = new
        col = bwd.get(y)
        if col is None:
            bwd[y] = {x: new}
        else:
            col[x] = new
        return 0 if old else 1
    del row[y]
    if not row:
        del fwd[x]
    col = bwd[y]
    del col[x]
    if not col:
        del bwd[y]
    return -1


def cutoffs(n: int, eps: float) -> tuple[int, int, int]:
    """Integer degree cutoffs ``(strict, up, down)`` for ``θ = n^eps``.

    A key is strictly heavy iff ``degree ≥ strict`` (``≥ θ``); a light key must
    move to heavy iff ``degree ≥ up`` (``≥ 3θ/2``); a heavy key must move to
    light iff ``degree < down`` (``< θ/2``).  The digest's §7.2 trace: ``N = 81``,
    ``eps = 1/2`` moves light->heavy at degree 14 and heavy->light at degree 4.

    >>> cutoffs(81, 0.5)
    (9, 14, 5)
    >>> cutoffs(7, 0.0), cutoffs(7, 1.0)
    ((1, 2, 1), (7, 11, 4))
    """
    theta = float(n) ** eps
    # A tiny tolerance so that e.g. 1000^(1/3) = 9.9999... reads as 10.
    strict = math.ceil(theta - 1e-9)
    up = math.ceil(1.5 * theta - 1e-9)
    down = math.ceil(0.5 * theta - 1e-9)
    return max(strict, 1), max(up, 1), max(down, 1 if eps > 0 else 0)


def entry_add(table: dict[Any, int], key: Any, m: int) -> int:
    """``table[key] += m`` dropping zeros; the change in distinct entries (+1, 0, -1); O(1).

    >>> t = {}
    >>> entry_add(t, "a", 2), entry_add(t, "a", -2), t
    (1, -1, {})
    """
    old = table.get(key, 0)
    new = old + m
    if new:
        table[key] = new
        return 0 if old else 1
    if old:
        del table[key]
        return -1
    return 0


def resized(size: int, n: int) -> int | None:
    """OnUpdate's size invariant ``⌊N/4⌋ ≤ |D| < N`` (Definition 7) after a single-tuple update.

    The new threshold base when it broke (``2N`` when ``|D|`` reached ``N``,
    ``⌊N/2⌋ - 1`` when it fell below ``⌊N/4⌋``: a major rebalancing follows,
    Figure 4), ``None`` while it holds.  Every IVM^eps engine keeps it this way.

    >>> resized(8, 8), resized(1, 8), resized(5, 8)
    (16, 3, None)
    """
    if size == n:
        return 2 * n
    if size < n // 4:
        return n // 2 - 1
    return None


class HeavyLightPartition:
    """One binary relation partitioned on its first variable (Definition 6).

    ``hf``/``hb`` are the forward/backward indexes of the heavy part, ``lf``/``lb``
    those of the light part; ``hsize``/``lsize`` count distinct tuples.
    ``eps`` is this relation's own exponent (per-relation eps, §3 / Appendix A.2).
    ``nonunit`` counts the stored multiplicities other than 1 (both parts): while
    it is 0 (set semantics) ``Σ_z K(β,z)·K'(z,α)`` is the size of a key intersection.
    """

    __slots__ = ("down", "eps", "hb", "hf", "hsize", "lb", "lf", "lsize", "nonunit", "strict", "up")

    def __init__(self, eps: float) -> None:
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"eps must lie in [0, 1], got {eps}")
        self.eps = eps
        self.hf: Index = {}
        self.hb: Index = {}
        self.lf: Index = {}
        self.lb: Index = {}
        self.hsize = 0
        self.lsize = 0
        self.nonunit = 0
        self.strict, self.up, self.down = cutoffs(1, eps)

    def __setstate__(self, state: tuple[None, dict[str, object]]) -> None:
        """Restore a pickled partition; one pickled before ``nonunit`` existed gets it counted."""
        for name, value in state[1].items():
            setattr(self, name, value)
        if "nonunit" not in state[1]:
            self.nonunit = sum(1 for fwd in (self.hf, self.lf) for row in fwd.values() for m in row.values() if m != 1)

    def set_threshold(self, n: int) -> None:
        """Recompute the cutoffs for threshold base ``n`` (only major rebalancing changes it)."""
        self.strict, self.up, self.down = cutoffs(n, self.eps)

    @property
    def size(self) -> int:
        return self.hsize + self.lsize

    def routes_heavy(self, x: object) -> bool:
        """OnUpdate's routing test (Figure 4): ``x ∈ π_X K_h or eps = 0``."""
        return x in self.hf or self.eps == 0.0

    def add(self, heavy: bool, x: object, y: object, m: int) -> int:
        """``K_r(x, y) += m`` on part ``r`` in O(1) (:func:`index_add`); returns the change in
        distinct tuples and keeps ``nonunit``."""
        fwd, bwd = (self.hf, self.hb) if heavy else (self.lf, self.lb)
        row = fwd.get(x)
        old = row.get(y, 0) if row is not None else 0
        new = old + m
        delta = index_add(fwd, bwd, x, y, m)
        if old != 1 and old:
            self.nonunit -= 1
        if new != 1 and new:
            self.nonunit += 1
        if heavy:
            self.hsize += delta
        else:
            self.lsize += delta
        return delta

    def crossed(self, x: object, heavy: bool) -> bool:
        """Did key ``x`` cross its part's cutoff (Figure 4's test for minor rebalancing)?

        A heavy key with fewer than ``θ/2`` tuples, a light one with at least ``3θ/2``.
        """
        if heavy:
            row = self.hf.get(x)
            return row is not None and len(row) < self.down
        row = self.lf.get(x)
        return row is not None and len(row) >= self.up

    def get(self, x: object, y: object) -> int:
        """``K(x, y)`` over both parts; O(1)."""
        row = self.hf.get(x) or self.lf.get(x)
        return row.get(y, 0) if row else 0

    def items(self) -> Iterator[tuple[object, object, int]]:
        """All tuples ``(x, y, m)`` of both parts."""
        for fwd in (self.hf, self.lf):
            for x, row in fwd.items():
                for y, m in row.items():
                    yield x, y, m

    def strict_partition(self, n: int) -> None:
        """Repartition strictly with ``θ = n^eps`` in O(|K|) (Definition 6, strict)."""
        self.set_threshold(n)
        merged: Index = {**self.lf, **self.hf}  # keys are disjoint (domain partition)
        self.hf, self.hb, self.lf, self.lb = {}, {}, {}, {}
        self.hsize = self.lsize = 0
        for x, row in merged.items():
            heavy = len(row) >= self.strict
            fwd, bwd = (self.hf, self.hb) if heavy else (self.lf, self.lb)
            fwd[x] = row
            for y, m in row.items():
                col = bwd.get(y)
                if col is None:
                    bwd[y] = {x: m}
                else:
                    col[x] = m
            if heavy:
                self.hsize += len(row)
            else:
                self.lsize += len(row)


KeySets = dict[object, set[object]]


class AllLightPartition:
    """The partition at ``eps = 1`` (Appendix A.1, first-order IVM): every key light, no heavy part.

    The light part is stored as key sets, ``lf[x] = {y : K(x,y) ≠ 0}`` and
    ``lb[y] = {x : K(x,y) ≠ 0}``, and the multiplicities other than 1 aside, in
    ``other[(x, y)]``.  Under set semantics (every multiplicity 1, the common
    case) ``other`` is empty and the first-order delta ``Σ_z K(β,z)·K'(z,α)``
    is ``|lf[β] ∩ lb'[α]|``: one set intersection in C that iterates the
    smaller set, O(min(deg)).  With non-unit multiplicities each common ``z``
    is weighted from ``other``, in the same O(min(deg)).  The read-only
    interface of :class:`HeavyLightPartition` (``hf``/``hb`` empty, ``hsize = 0``,
    :meth:`get`, :meth:`items`) is kept, so code that only reads a partition
    reads this one too.

    >>> p = AllLightPartition()
    >>> p.add(1, 2, 1), p.add(1, 3, 2), p.add(1, 3, -1), p.lf, p.other, p.get(1, 3)
    (1, 1, 0, {1: {2, 3}}, {}, 1)
    """

    __slots__ = ("eps", "hb", "hf", "hsize", "lb", "lf", "lsize", "other")

    def __init__(self) -> None:
        self.eps = 1.0
        self.hf: Index = {}
        self.hb: Index = {}
        self.lf: KeySets = {}
        self.lb: KeySets = {}
        self.other: dict[tuple[object, object], int] = {}
        self.hsize = 0
        self.lsize = 0

    @property
    def size(self) -> int:
        return self.lsize

    def add(self, x: object, y: object, m: int) -> int:
        """``K(x, y) += m`` in O(1); returns the change in distinct tuples (+1, 0 or -1)."""
        if not m:
            return 0
        row = self.lf.get(x)
        if row is None or y not in row:
            if row is None:
                self.lf[x] = {y}
            else:
                row.add(y)
            self.lb.setdefault(y, set()).add(x)
            if m != 1:
                self.other[(x, y)] = m
            self.lsize += 1
            return 1
        old = self.other.get((x, y), 1)
        new = old + m
        if new == 1:
            del self.other[(x, y)]
        elif new:
            self.other[(x, y)] = new
        else:
            self.other.pop((x, y), None)
            row.remove(y)
            if not row:
                del self.lf[x]
            col = self.lb[y]
            col.remove(x)
            if not col:
                del self.lb[y]
            self.lsize -= 1
            return -1
        return 0

    def get(self, x: object, y: object) -> int:
        """``K(x, y)``; O(1)."""
        row = self.lf.get(x)
        if row is None or y not in row:
            return 0
        return self.other.get((x, y), 1) if self.other else 1

    def items(self) -> Iterator[tuple[object, object, int]]:
        """All tuples ``(x, y, m)``."""
        other = self.other
        for x, row in self.lf.items():
            for y in row:
                yield x, y, other.get((x, y), 1)

    def to_heavy_light(self) -> HeavyLightPartition:
        """The same relation as a :class:`HeavyLightPartition` at eps = 1 (all light); O(|K|)."""
        part = HeavyLightPartition(1.0)
        other = self.other
        if other:
            part.lf = {x: {y: other.get((x, y), 1) for y in row} for x, row in self.lf.items()}
            part.lb = {y: {x: other.get((x, y), 1) for x in col} for y, col in self.lb.items()}
        else:
            part.lf = {x: dict.fromkeys(row, 1) for x, row in self.lf.items()}
            part.lb = {y: dict.fromkeys(col, 1) for y, col in self.lb.items()}
        part.lsize = self.lsize
        part.nonunit = len(other)
        return part

    @classmethod
    def from_heavy_light(cls, part: HeavyLightPartition) -> AllLightPartition:
        """``part`` (both of its parts) as one all-light key-set partition; O(|K|)."""
        out = cls()
        for fwd in (part.hf, part.lf):
            for x, row in fwd.items():
                out.lf[x] = set(row)
                for y, m in row.items():
                    out.lb.setdefault(y, set()).add(x)
                    if m != 1:
                        out.other[(x, y)] = m
        out.lsize = part.hsize + part.lsize
        return out
