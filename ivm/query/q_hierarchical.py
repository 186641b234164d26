"""q-hierarchical queries (Berkholz, Keppeler, Schweikardt, PODS'17, Def. 3.1).

A conjunctive query is *q-hierarchical* iff for all variables x, y:

- (i) ``atoms(x) ⊆ atoms(y)`` or ``atoms(y) ⊆ atoms(x)`` or ``atoms(x) ∩ atoms(y) = ∅``
  (the query is hierarchical), and
- (ii) if ``atoms(x) ⊊ atoms(y)`` and x is free, then y is free.

These are exactly the queries with O(1) updates, O(1) counting and
constant-delay enumeration under single-tuple updates (Thm 3.2); for
self-join-free queries every other query needs n^(1-ε) update or delay time
unless the OMv conjecture fails (Thm 3.3).  Every violation contains an S-E-T
pattern (i) or an E-T pattern (ii); :func:`q_hierarchical` returns that pattern
as its witness.  Cost O(|vars|² · |atoms|).

Constants (fresh variables private to one atom) and anonymous variables are
bound variables of a single atom: they never cause a violation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.verdict import Verdict


@dataclass(frozen=True)
class QHierarchyViolation:
    """The witness that a query is not q-hierarchical (002 §2).

    ``condition`` is ``"i"`` when ``atoms(x)`` and ``atoms(y)`` overlap without
    nesting (the S-E-T obstruction: ``atoms`` holds one atom with x but not y,
    one with both, one with y but not x), or ``"ii"`` when x is free, y is
    bound and ``atoms(x) ⊊ atoms(y)`` (the E-T obstruction: ``atoms`` holds one
    atom with both and one with y but not x).  Atom sets are atom indices.
    """

    condition: Literal["i", "ii"]
    x: str
    y: str
    atoms_x: frozenset[int]
    atoms_y: frozenset[int]
    atoms: tuple[int, ...]


def q_hierarchical(query: Query) -> Verdict:
    """Is ``query`` q-hierarchical (Def. 3.1)?  When not, the witness pair.

    The verdict's ``witness`` is a :class:`QHierarchyViolation` (``None`` when
    the query is q-hierarchical).

    >>> print(q_hierarchical(parse("Q(x,y) :- S(x), E(x,y), T(y)")).reason)  # doctest: +ELLIPSIS
    not q-hierarchical, condition (i): atoms(x) = {S(x), E(x, y)} and atoms(y) = {E(x, y), T(y)} overlap ...
    >>> v = q_hierarchical(parse("Q(x) :- E(x,y), T(y)"))
    >>> v.witness.condition, v.witness.x, v.witness.y
    ('ii', 'x', 'y')
    >>> v.reason
    'not q-hierarchical, condition (ii): x is free, y is bound and atoms(x) = {E(x, y)} ⊊ atoms(y) = {E(x, y), T(y)}'
    >>> [bool(q_hierarchical(parse(q))) for q in
    ...  ["Q(y) :- E(x,y), T(y)", "Q(x,y) :- E(x,y), T(y)", "Q() :- E(x,y), T(y)"]]
    [True, True, True]
    >>> bool(q_hierarchical(parse("Q(x,y,z) :- R(x,y,w), S(x,y), T(x,z), U(x,u)")))
    True
    """
    violation = q_hierarchy_violation(query)
    if violation is None:
        return Verdict(
            True,
            "q-hierarchical: atom sets are nested or disjoint, and a free variable's "
            "atom set is strictly inside only those of free variables",
        )
    x, y = violation.x, violation.y
    ax, ay = _names(query, violation.atoms_x), _names(query, violation.atoms_y)
    if violation.condition == "i":
        reason = f"condition (i): atoms({x}) = {ax} and atoms({y}) = {ay} overlap without nesting"
    else:
        reason = f"condition (ii): {x} is free, {y} is bound and atoms({x}) = {ax} ⊊ atoms({y}) = {ay}"
    return Verdict(False, "not q-hierarchical, " + reason, violation)


def q_hierarchy_violation(query: Query) -> QHierarchyViolation | None:
    """The first violating pair in variable order (free variables first), if any.

    >>> q_hierarchy_violation(parse("Q(x,z) :- E(x,y), E(y,z)"))
    QHierarchyViolation(condition='ii', x='x', y='y', atoms_x=frozenset({0}), atoms_y=frozenset({0, 1}), atoms=(0, 1))
    >>> q_hierarchy_violation(parse("Q() :- R(x,y), S(y,z), T(z,w)")).condition
    'i'
    """
    order = query.variable_order()
    free = set(query.free)
    atoms_of = {v: query.atoms_of(v) for v in order}
    for i, x in enumerate(order):
        ax = atoms_of[x]
        for y in order[i + 1 :]:
            ay = atoms_of[y]
            if ax & ay and not (ax <= ay or ay <= ax):
                witness = (min(ax - ay), min(ax & ay), min(ay - ax))
                return QHierarchyViolation("i", x, y, ax, ay, witness)
            for a, b, sa, sb in ((x, y, ax, ay), (y, x, ay, ax)):
                if sa < sb and a in free and b not in free:
                    return QHierarchyViolation("ii", a, b, sa, sb, (min(sa), min(sb - sa)))
    return None


def _names(query: Query, indices: frozenset[int]) -> str:
    return "{" + ", ".join(str(query.atoms[i]) for i in sorted(indices)) + "}"
