"""Loomis-Whitney count queries of degree n ≥ 3 (IVM^eps App. F, Thm 25).

``Q() = Σ R_1(A_2..A_n)·…·R_n(A_1..A_{n−1})``: n variables and n atoms, each
atom over all variables but one, each variable missing from exactly one atom.
The triangle count is the degree 3.  IVM^eps maintains the count with
O(N^max(ε,1−ε)) amortized updates, O(1) answer time and O(N^{1+min(ε,1−ε)})
space; optimal at ε = 1/2 unless OMv fails (Prop. 26).
"""

from __future__ import annotations

from dataclasses import dataclass

from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.verdict import Verdict


@dataclass(frozen=True)
class LoomisWhitney:
    """The degree and, per atom, the variable it misses."""

    degree: int
    missing: tuple[str, ...]


def loomis_whitney(query: Query) -> Verdict:
    """Is ``query`` a Loomis-Whitney count?  Witness a :class:`LoomisWhitney`.

    >>> loomis_whitney(parse("Q() :- R1(b,c,d), R2(a,c,d), R3(a,b,d), R4(a,b,c)")).witness
    LoomisWhitney(degree=4, missing=('a', 'b', 'c', 'd'))
    >>> loomis_whitney(parse("Q() :- R(a,b), S(b,c), T(c,a)")).witness.degree
    3
    >>> loomis_whitney(parse("Q() :- R(a,b,c), S(b,c,d), T(a,c), U(a,b,d)")).reason
    'atom 2 (T) does not hold all variables but one (it misses b, d)'
    """
    n = len(query.atoms)
    if n < 3:
        return Verdict(False, f"a Loomis-Whitney query has at least three atoms, this one has {n}")
    if query.free:
        return Verdict(False, f"a Loomis-Whitney count has no free variables, this one has {', '.join(query.free)}")
    variables = sorted({v for atom in query.atoms for v in atom.variables})
    if len(variables) != n:
        return Verdict(False, f"a Loomis-Whitney query of degree {n} has {n} variables, this one has {len(variables)}")
    missing = []
    for i, atom in enumerate(query.atoms):
        if len(atom.terms) != len(atom.variables):
            return Verdict(False, f"atom {i} ({atom.relation}) repeats a variable or holds a constant")
        absent = [v for v in variables if v not in atom.variables]
        if len(absent) != 1:
            return Verdict(
                False, f"atom {i} ({atom.relation}) does not hold all variables but one (it misses {', '.join(absent)})"
            )
        missing.append(absent[0])
    if len(set(missing)) != n:
        return Verdict(False, "two atoms miss the same variable")
    return Verdict(
        True,
        f"Loomis-Whitney count of degree {n}: each atom misses one variable (IVM^ε App. F)",
        LoomisWhitney(n, tuple(missing)),
    )
