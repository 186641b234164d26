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


class HeavyLightPartition:
    """One binary relation partitioned on its first variable (Definition 6).

    ``hf``/``hb`` are the forward/backward indexes of the heavy part, ``lf``/``lb``
    those of the light part; ``hsize``/``lsize`` count distinct tuples.
    ``eps`` is this relation's own exponent (per-relation eps, §3 / Appendix A.2).
    """

    __slots__ = ("down", "eps", "hb", "hf", "hsize", "lb", "lf", "lsize", "strict", "up")

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
        self.strict, self.up, self.down = cutoffs(1, eps)

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
        """``K_r(x, y) += m`` on part ``r``; returns the change in distinct tuples."""
        if heavy:
            delta = index_add(self.hf, self.hb, x, y, m)
            self.hsize += delta
        else:
            delta = index_add(self.lf, self.lb, x, y, m)
            self.lsize += delta
        return delta

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
