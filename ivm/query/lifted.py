"""The attributes an aggregate lifts into its ring: their values must be numbers (F-IVM §2.4).

``SUM(v1 * ... * vk)`` lifts each ``vi`` with ``g_v(x) = x`` into the sum ring, ``COVAR(v1, ...,
vk)`` lifts each ``vi`` into the covariance ring (the count, ``x`` and ``x·xᵀ``) and ``AVG(v)`` lifts
``v`` into its sum; an update whose value at such a position is not a number (a string, ``None``)
has no payload in the ring.  :func:`lifted_positions` names the positions, per relation, so the
input side (:meth:`ivm.view.View.apply`, the processor's planner against the relations' schemas)
refuses such values before any engine sees them.  COUNT, MIN, MAX and COUNT(DISTINCT) lift nothing
(MIN and MAX compare values of any one type).

>>> from ivm.query import parse
>>> lifted_positions(parse("Q(k, SUM(p * q)) :- R(k, p), S(k, q, z)"))["S"]
(Lifted(position=1, variable='q', aggregate='SUM(p * q)'),)
>>> lifted_positions(parse("Q() :- R(a, b), S(b, c)"))
{}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Number
from typing import Any

from ivm.query.model import Query

#: the aggregate kinds whose variables are lifted into a numeric ring
LIFTING_KINDS = frozenset({"sum", "avg", "covariance"})
#: the aggregate kinds that compare the values of their variable (so the values must be of one kind)
ORDERING_KINDS = frozenset({"min", "max"})


@dataclass(frozen=True)
class Lifted:
    """Position ``position`` of a relation binds ``variable``, which ``aggregate`` lifts."""

    position: int
    variable: str
    aggregate: str


def lifted_positions(query: Query, only: frozenset[str] | None = None) -> dict[str, tuple[Lifted, ...]]:
    """Per relation, the positions whose values some aggregate of ``query`` lifts (each once, in
    position order), of the variables in ``only`` if given (an engine's
    :attr:`~ivm.engines.base.Engine.lifted_variables`); relations without any are left out.
    O(|atoms| · arity)."""
    found = aggregated_positions(query, LIFTING_KINDS)
    if only is None:
        return found
    kept = {r: tuple(x for x in xs if x.variable in only) for r, xs in found.items()}
    return {r: xs for r, xs in kept.items() if xs}


def ordered_positions(query: Query) -> dict[str, tuple[Lifted, ...]]:
    """:func:`lifted_positions` for MIN and MAX: the positions whose values are compared."""
    return aggregated_positions(query, ORDERING_KINDS)


def aggregated_positions(query: Query, kinds: frozenset[str]) -> dict[str, tuple[Lifted, ...]]:
    """Per relation, the positions bound to a variable of an aggregate of one of ``kinds``."""
    lifts: dict[str, str] = {}
    for aggregate in query.aggregates:
        if aggregate.kind in kinds:
            for variable in aggregate.variables:
                lifts.setdefault(variable, str(aggregate))
    out: dict[str, dict[int, Lifted]] = {}
    for atom in query.atoms:
        fixed = dict(atom.constants)
        for position, term in enumerate(atom.terms):
            if term in lifts and position not in fixed:
                out.setdefault(atom.relation, {}).setdefault(position, Lifted(position, term, lifts[term]))
    return {relation: tuple(found[p] for p in sorted(found)) for relation, found in out.items()}


def is_number(value: Any) -> bool:
    """Whether a ring can lift ``value``: an int, float, Fraction, Decimal, bool or numpy number (not a
    complex, a string, ``None`` or a container)."""
    return isinstance(value, Number) and not isinstance(value, complex)


def is_finite(value: Any) -> bool:
    """Whether a number the rings lift has an exact value: not a NaN or an infinity (a float, a numpy
    float or a Decimal); ints and Fractions always have one.  SQL's SUM and AVG have no NaN, and the
    exact sums of :mod:`ivm.rings.exact` none either, so such a value is refused (``not_finite``)."""
    if type(value) is int:
        return True
    try:
        return math.isfinite(value)
    except (TypeError, ValueError, OverflowError):
        return isinstance(value, Number) and not isinstance(value, complex)


def order_family(value: Any) -> Any:
    """The kind of values ``value`` compares with under ``<``: ``"number"`` for numbers (bools,
    Fractions and Decimals too; not complex), ``"str"``, ``"bytes"``, else its type (dates with
    dates, datetimes with datetimes); ``None`` for a value that has no order (``None``, a complex)."""
    if is_number(value):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, bytes):
        return "bytes"
    if value is None or isinstance(value, complex):
        return None
    return type(value)
