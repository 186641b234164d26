"""Static triangle counting with IVM^eps (Appendix A.3): O(|D|^{3/2}) without rebalancing.

At eps = 1/2 with the final degrees known, every tuple is placed in its part
up front (heavy iff its key's degree is ``≥ N^{1/2}``) and the tuples are
inserted one by one with ApplyUpdate; each insert costs worst-case
O(|D|^{1/2}), so the count costs O(|D|^{3/2}), the worst-case optimal time
(the paper matches it with "standard join plans" and tuple-at-a-time deltas).
"""

from __future__ import annotations

from collections.abc import Iterable

from ivm.engines.ivm_eps.triangle import IVMEpsTriangle
from ivm.query.parse import parse

Pair = tuple[object, object]


def static_triangle_count(r: Iterable[Pair], s: Iterable[Pair], t: Iterable[Pair], eps: float = 0.5) -> int:
    """``Σ R(a,b)·S(b,c)·T(c,a)`` for bags of pairs, in O(|D|^{3/2}) at eps = 1/2.

    >>> static_triangle_count([(1, 2), (1, 2)], [(2, 3)], [(3, 1), (4, 1)])
    2
    """
    engine = IVMEpsTriangle(parse("Q() :- R(a,b), S(b,c), T(c,a)"), eps=eps)
    engine.bulk_load([("R", pair, 1) for pair in r] + [("S", pair, 1) for pair in s] + [("T", pair, 1) for pair in t])
    return engine.result()
