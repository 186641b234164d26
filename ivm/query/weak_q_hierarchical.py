"""Weak-q-hierarchical queries and TRIM (Hu & Wang §3.1, Alg. 1, Def. 3.4).

``V•`` is the set of *unique* attributes (in exactly one atom).  Relation e is
*reducible* with anchor ``e' != e`` (Def. 3.1) if

- (i) ``e − V• ⊆ e'`` and ``e ∩ V•`` holds no output attribute, or
- (ii) ``e − V• ⊆ e' ∩ y``.

TRIM fixes ``U := V•`` of the *original* query once (recomputing it inside
TRIM misclassifies queries, e.g. the full 5-path; 003 §1.6) and removes
relations that have an anchor among the remaining ones until none can be
removed; the rest is the skeleton ``E•``.  A query is weak-q-hierarchical iff it
is free-connex and ``Q[E•]`` is q-hierarchical; then it is maintainable in O(1)
amortized time under FIFO updates (Lemma 3.8), and otherwise needs
Ω(√|D|^(1−ε)) (Thm 3.12).  Atoms are read as distinct relations (the paper
assumes no self-joins).

Equivalently (Lemma 3.7), the query has a free-connex join tree of height ≤ 2,
counting EXTENDER leaves (003 §3.3) as covering their outputs; without them
the only-if direction fails for ``Q_cx`` (003 §1.6).

Lemma 3.11 as printed is too narrow [derived]: its hook core asks for
``x2 ∈ e1 ∩ e2 − e3``, yet ``Q(c) :- R0(a,b), R1(a,b), R2(a,c)`` is not
weak-q-hierarchical (``b`` is not unique, so TRIM drops only one twin and the
skeleton {R1, R2} has the q-core ``c ∈ y``, ``a ∈ ȳ``), has no height-≤2 tree,
and has no hook or path core of the printed form.  The proof of Lemma A.1
takes ``e3`` as a child of ``e2`` holding ``x3`` but never shows ``x2 ∉ e3``.
The corrected hook core drops that condition: ``x1 ∈ y``; ``x2, x3 ∈ ȳ``;
``x1, x2 ∈ e1``; ``x2, x3 ∈ e2``; ``x3 ∈ e3 ≠ e2``; no atom holds both ``x1``
and ``x3``.  Thm 3.9's OMv reduction still applies: ``e3`` holds ``(x2, x3)``
pairs inserted before the vector arrives and expiring just after its query,
``e2`` the vector's pairs inserted late, so their join lives only for one
round while every lifespan has the same length (a FIFO stream).  With this
hook core, "not weak-q-hierarchical iff a hook or path core" holds on every
free-connex query with ≤ 5 atoms over 4 variables (exhaustive check) and on
random ones with up to 7 atoms, and TRIM agrees with a brute-force search for
height-≤2 trees (``tests/unit/query/test_brute_force.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from ivm.query.free_connex import free_connex
from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.q_hierarchical import q_hierarchical
from ivm.query.verdict import Verdict


def unique_attributes(query: Query, atoms: Iterable[int] | None = None) -> frozenset[str]:
    """``V•``: the attributes that occur in exactly one of the atoms (all atoms by default)."""
    indices = range(len(query.atoms)) if atoms is None else list(atoms)
    count: dict[str, int] = {}
    for i in indices:
        for v in query.atoms[i].variables:
            count[v] = count.get(v, 0) + 1
    return frozenset(v for v, c in count.items() if c == 1)


def anchor_rule(query: Query, e: int, anchor: int, unique: Collection[str]) -> str | None:
    """Which rule of Def. 3.1 makes ``anchor`` an anchor of ``e`` (``"i"``, ``"ii"``), or ``None``."""
    if e == anchor:
        return None
    free = set(query.free)
    own = query.atoms[e].variables
    other = query.atoms[anchor].variables
    core = own - set(unique)
    if core <= other and not (own & set(unique) & free):
        return "i"
    if core <= other & free:
        return "ii"
    return None


@dataclass(frozen=True)
class Trim:
    """TRIM's result: the skeleton ``E•`` and, per removed atom, the anchor it was removed by."""

    skeleton: tuple[int, ...]
    anchors: dict[int, int]
    unique: frozenset[str]

    def skeleton_anchor(self, e: int) -> int:
        """An anchor of ``e`` in the skeleton (anchoring is transitive, Lemma 3.2)."""
        while e in self.anchors:
            e = self.anchors[e]
        return e


def trim(query: Query, atoms: Iterable[int] | None = None) -> Trim:
    """TRIM (Alg. 1) on the atoms at ``atoms`` (all by default), ``V•`` fixed up front.

    Q_hook = π_x1 R1(x1,x2) ⋈ R2(x2,x3) ⋈ R3(x3) has the skeleton {R1, R2}:

    >>> trim(parse("Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)")).skeleton
    (0, 1)
    """
    remaining = sorted(range(len(query.atoms)) if atoms is None else set(atoms))
    unique = unique_attributes(query, remaining)
    anchors: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for e in remaining:
            anchor = next((a for a in remaining if anchor_rule(query, e, a, unique)), None)
            if anchor is not None:
                anchors[e] = anchor
                remaining.remove(e)
                changed = True
                break
    return Trim(tuple(remaining), anchors, unique)


@dataclass(frozen=True)
class WeakQWitness:
    """Why a free-connex query is not weak-q-hierarchical: its skeleton and the violation there."""

    skeleton: tuple[int, ...]
    violation: object


def weak_q_hierarchical(query: Query) -> Verdict:
    """Is the query weak-q-hierarchical (Def. 3.4)?  Witness: the skeleton, or why not.

    >>> v = weak_q_hierarchical(parse("Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)"))
    >>> v.reason.split(", condition")[0]
    'not weak-q-hierarchical: the TRIM skeleton {R1(x1, x2), R2(x2, x3)} is not q-hierarchical'
    >>> v.witness.skeleton, v.witness.violation.condition, v.witness.violation.x, v.witness.violation.y
    ((0, 1), 'ii', 'x1', 'x2')
    >>> bool(weak_q_hierarchical(parse("Q() :- R1(x1,x2), R2(x2), R3(x1)")))
    True

    Twin atoms do not cancel out (corrected Lemma 3.11, see the module docstring):

    >>> weak_q_hierarchical(parse("Q(c) :- R0(a,b), R1(a,b), R2(a,c)")).reason.split(", condition")[0]
    'not weak-q-hierarchical: the TRIM skeleton {R1(a, b), R2(a, c)} is not q-hierarchical'
    """
    fc = free_connex(query)
    if not fc:
        return Verdict(False, f"not weak-q-hierarchical: {fc.reason}", fc.witness)
    result = trim(query)
    skeleton = query.induced(result.skeleton)
    names = "{" + ", ".join(str(a) for a in skeleton.atoms) + "}"
    qh = q_hierarchical(skeleton)
    if qh:
        return Verdict(True, f"weak-q-hierarchical: the TRIM skeleton {names} is q-hierarchical", result)
    reason = qh.reason.removeprefix("not q-hierarchical, ")
    return Verdict(
        False,
        f"not weak-q-hierarchical: the TRIM skeleton {names} is not q-hierarchical, {reason}",
        WeakQWitness(result.skeleton, _lift(qh.witness, result.skeleton)),
    )


def _lift(violation: object, skeleton: tuple[int, ...]) -> object:
    """Re-index a violation on ``Q[E•]`` to atom indices of the original query."""
    try:
        from dataclasses import replace

        return replace(
            violation,  # type: ignore[type-var]
            atoms_x=frozenset(skeleton[i] for i in violation.atoms_x),  # type: ignore[attr-defined]
            atoms_y=frozenset(skeleton[i] for i in violation.atoms_y),  # type: ignore[attr-defined]
            atoms=tuple(skeleton[i] for i in violation.atoms),  # type: ignore[attr-defined]
        )
    except (AttributeError, TypeError):  # pragma: no cover - a witness of another shape
        return violation
