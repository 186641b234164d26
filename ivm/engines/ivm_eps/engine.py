"""The ``ivm_eps`` engine entry point: one name, three triangle engines behind it.

``ivm.maintain(query, engine="ivm_eps", eps=...)`` builds an :class:`IVMEps`,
which becomes the engine that fits the query's shape:

- the triangle count ``Q() = Σ R(a,b)·S(b,c)·T(c,a)`` over three atoms
  (IVM^eps §3, Theorem 3): :class:`~ivm.engines.ivm_eps.triangle.IVMEpsTriangle`;
- the self-join ``Q() = Σ E(a,b)·E(b,c)·E(c,a)`` over one edge relation
  (Appendix B, with the corrected line 13 of Figure 5):
  :class:`~ivm.engines.ivm_eps.self_join.IVMEpsSelfJoin`;
- triangle listing ``Q(a,b,c)`` with constant-delay enumeration (Appendix E,
  Theorem 21): :class:`~ivm.engines.ivm_eps.listing.IVMEpsListing`.

All of them take ``eps`` in ``[0, 1]`` (default 1/2), either one number or a
mapping from relation name to its own exponent (per-relation eps; ``{"R": 0,
"S": 0, "T": 1}`` is factorized IVM, Appendix A.2; ``eps`` in ``{0, 1}`` is
classical first-order IVM, Appendix A.1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ivm.engines.base import Engine
from ivm.engines.ivm_eps.variants import variant
from ivm.query.model import Query
from ivm.query.triangle import TriangleShape, triangle_shape

EpsSpec = float | Mapping[str, float]


def count_shape(query: Query) -> TriangleShape | str:
    """The triangle shape of ``query``'s body (free variables ignored), or why it has none.

    >>> from ivm.query.parse import parse
    >>> count_shape(parse("Q(a,b,c) :- R(a,b), S(b,c), T(c,a)")).variables
    ('a', 'b', 'c')
    """
    if getattr(query, "has_selections", False):
        return "IVM^eps maintains the plain triangle: atoms with constants are not supported"
    aggregate = getattr(query, "aggregate", None)
    if aggregate is not None and getattr(aggregate, "kind", "count") != "count":
        return f"IVM^eps maintains COUNT, not {aggregate}"
    return triangle_shape(dataclasses.replace(query, free=()))


def is_direct_self_join(shape: TriangleShape) -> bool:
    """One relation in all three atoms, all read the same way round (Appendix B)."""
    first = shape.edges[0]
    return all(e.relation == first.relation and e.flipped == first.flipped for e in shape.edges)


def eps_for(eps: EpsSpec, relation: str) -> float:
    """The exponent of ``relation`` (a per-relation mapping defaults to 1/2)."""
    value = eps.get(relation, 0.5) if isinstance(eps, Mapping) else eps
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"eps must lie in [0, 1], got {value} for {relation}")
    return value


class IVMEps(Engine):
    """IVM^eps (Kara et al., ICDT'19): O(N^max(eps,1-eps)) amortized updates for triangles.

    Constructing ``IVMEps(query, eps=...)`` returns the specialised engine for
    the query's shape (see the module docstring); all share this name and the
    refusal test below.
    """

    name = "ivm_eps"

    def __new__(cls, query: Query | None = None, *args: Any, **kwargs: Any) -> IVMEps:
        if cls is IVMEps and query is not None:
            shape = count_shape(query)
            if query.free:
                cls = variant("listing")
            elif isinstance(shape, TriangleShape) and is_direct_self_join(shape):
                cls = variant("self_join")
            else:
                cls = variant("count")
        return super().__new__(cls)

    def __init__(self, query: Query, eps: EpsSpec = 0.5, implementation: str = "auto") -> None:
        """``implementation``: ``"python"`` (the reference), ``"compiled"`` or ``"auto"`` (the compiled
        partitions and views when they were built; the listing keeps Python ones)."""
        super().__init__(query)

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        shape = count_shape(query)
        if isinstance(shape, str):
            return shape
        if query.free and set(query.free) != set(shape.variables):
            return (
                "IVM^eps lists full triangles Q(a,b,c) (Theorem 21) or counts them Q(); "
                f"this query projects onto ({', '.join(query.free)})"
            )
        if len(set(query.free)) != len(query.free):
            return "repeated free variables"
        return None
