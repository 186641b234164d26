"""The homomorphic core of a conjunctive query (Berkholz et al. §2, §6, §7).

A homomorphism ``h: vars(φ) -> vars(φ')`` is the identity on free variables
(and on constants) and maps every atom to an atom.  The core is a minimal
subquery with a homomorphism from φ into it; it is unique up to isomorphism and
``φ(D) = core(φ)(D)`` (Chandra–Merlin).  Computing it is NP-hard in |φ| but
independent of the data: dedupe atoms; while some homomorphism ``φ -> φ∖{α}``
exists (found by backtracking), replace φ by its image.

Which core to use (002 §2): the core of the Boolean closure decides
non-emptiness, the core with the free variables fixed decides counting and
enumeration.  Self-join-free queries are their own cores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ivm.query.model import Atom, Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.verdict import Verdict

Term = tuple[str, object]  # ("var", name) or ("const", value)


@dataclass(frozen=True)
class Core:
    """The core subquery and a homomorphism from the query onto it."""

    query: Query
    mapping: dict[str, str]


def core(query: Query) -> Core:
    """The core of ``query`` with its free variables fixed.

    >>> str(core(parse("Q() :- E(x,x), E(x,y), E(y,y)")).query)
    'Q() :- E(x, x)'
    >>> str(core(parse("Q(x, y) :- E(x,x), E(x,y), E(y,y)")).query)
    'Q(x, y) :- E(x, x), E(x, y), E(y, y)'
    >>> str(core(parse("Q(x, y) :- E(x,y), E(x,z), E(x,x)")).query)
    'Q(x, y) :- E(x, y), E(x, x)'
    """
    fixed = set(query.free) | set(query.aggregate.variables)
    keep = _dedupe(query.atoms)
    mapping = {v: v for v in query.variables}
    shrunk = True
    while shrunk:
        shrunk = False
        for drop in reversed(keep):
            targets = [i for i in keep if i != drop]
            h = find_homomorphism(query, keep, targets, fixed)
            if h is not None:
                image = {_image_index(query, i, h, targets) for i in keep}
                keep = sorted(image)
                mapping = {v: h.get(w, w) for v, w in mapping.items()}
                shrunk = True
                break
    return Core(query.induced(keep), mapping)


def is_core(query: Query) -> Verdict:
    """Is ``query`` its own core?  Witness when not: the :class:`Core`.

    >>> is_core(parse("Q() :- E(x,x), E(x,y), E(y,y)")).reason
    'not a core: Q() :- E(x, x), E(x, y), E(y, y) folds onto Q() :- E(x, x) via y -> x'
    """
    result = core(query)
    if len(result.query.atoms) == len(query.atoms):
        return Verdict(True, "the query is its own core", result)
    moved = ", ".join(f"{v} -> {w}" for v, w in sorted(result.mapping.items()) if v != w)
    return Verdict(False, f"not a core: {query} folds onto {result.query} via {moved}", result)


def find_homomorphism(
    query: Query, sources: Sequence[int], targets: Sequence[int], fixed: set[str]
) -> dict[str, str] | None:
    """A variable map sending every source atom onto some target atom, fixing ``fixed``."""
    terms = [_terms(a) for a in query.atoms]
    order = sorted(sources, key=lambda i: -len(set(query.atoms[i].terms)))

    def extend(k: int, h: dict[str, str]) -> dict[str, str] | None:
        if k == len(order):
            return h
        src = query.atoms[order[k]]
        for t in targets:
            dst = query.atoms[t]
            if dst.relation != src.relation or dst.arity != src.arity:
                continue
            new = _unify(terms[order[k]], terms[t], h, fixed)
            if new is not None:
                found = extend(k + 1, new)
                if found is not None:
                    return found
        return None

    return extend(0, {})


def _unify(src: tuple[Term, ...], dst: tuple[Term, ...], h: dict[str, str], fixed: set[str]) -> dict | None:
    h = dict(h)
    for (skind, s), (dkind, d) in zip(src, dst, strict=True):
        if skind == "const":
            if dkind != "const" or d != s:
                return None
            continue
        if dkind == "const":
            return None
        assert isinstance(s, str) and isinstance(d, str)
        if s in fixed and d != s:
            return None
        if h.setdefault(s, d) != d:
            return None
    return h


def _terms(atom: Atom) -> tuple[Term, ...]:
    fixed = dict(atom.constants)
    return tuple(("const", fixed[p]) if p in fixed else ("var", t) for p, t in enumerate(atom.terms))


def _dedupe(atoms: Sequence[Atom]) -> list[int]:
    seen: dict[tuple, int] = {}
    for i, atom in enumerate(atoms):
        seen.setdefault((atom.relation, _terms(atom)), i)
    return sorted(seen.values())


def _image_index(query: Query, i: int, h: dict[str, str], targets: Sequence[int]) -> int:
    """The target atom that atom ``i`` maps onto under ``h``."""
    src = _terms(query.atoms[i])
    image = tuple(("var", h[t]) if kind == "var" else (kind, t) for kind, t in src)  # type: ignore[index]
    for t in targets:
        if query.atoms[t].relation == query.atoms[i].relation and _terms(query.atoms[t]) == image:
            return t
    raise AssertionError("a homomorphism maps every atom onto a target atom")
