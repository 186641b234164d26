"""Hierarchical queries (Berkholz et al. §2; F-IVM Def. 21; IVM^eps App. H.4).

A query is hierarchical iff for all variables x, y the atom sets ``atoms(x)``
and ``atoms(y)`` are nested or disjoint.  (This is the Koutris–Suciu reading
over *all* variables; Fink–Olteanu require it for bound variables only.)
"""

from __future__ import annotations

from dataclasses import dataclass

from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.verdict import Verdict


@dataclass(frozen=True)
class HierarchyViolation:
    """Variables ``x`` and ``y`` whose atom sets overlap without nesting."""

    x: str
    y: str
    atoms_x: frozenset[int]
    atoms_y: frozenset[int]


def hierarchical(query: Query) -> Verdict:
    """Is the query hierarchical?  Witness when not: a :class:`HierarchyViolation`.

    >>> hierarchical(parse("Q() :- S(x), E(x,y), T(y)")).reason
    'not hierarchical: atoms(x) = {S(x), E(x, y)} and atoms(y) = {E(x, y), T(y)} overlap without nesting'
    >>> bool(hierarchical(parse("Q(a,b,c) :- R(a,b), S(a,c,e), T(a,c,d)")))
    True
    """
    violation = hierarchy_violation(query)
    if violation is None:
        return Verdict(True, "hierarchical: the atom sets of any two variables are nested or disjoint")
    return Verdict(
        False,
        f"not hierarchical: atoms({violation.x}) = {_names(query, violation.atoms_x)} and "
        f"atoms({violation.y}) = {_names(query, violation.atoms_y)} overlap without nesting",
        violation,
    )


def hierarchy_violation(query: Query) -> HierarchyViolation | None:
    """The first pair (in variable order) violating the hierarchy condition, if any."""
    order = query.variable_order()
    for i, x in enumerate(order):
        ax = query.atoms_of(x)
        for y in order[i + 1 :]:
            ay = query.atoms_of(y)
            if ax & ay and not (ax <= ay or ay <= ax):
                return HierarchyViolation(x, y, ax, ay)
    return None


def _names(query: Query, indices: frozenset[int]) -> str:
    return "{" + ", ".join(str(query.atoms[i]) for i in sorted(indices)) + "}"
