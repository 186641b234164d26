"""The 4-path count shape ``Q() = Σ R(a)·S(a,b)·T(b,c)·U(c)`` (IVM^eps App. G, Thm 27).

Four atoms joined as a path on three variables: two *ends* (the unary R and U)
and two *middles* (the binary S and T), read on the join variables (variables in
at least two atoms); variables private to one atom are aggregated away and do
not change the shape.  IVM^eps maintains the count with O(N^max(ε,1−ε))
amortized updates and O(1) answer time; at ε = 1/2 that is optimal unless OMv
fails (Prop. 28).  The query is acyclic but not hierarchical (a and c are not
nested), so F-IVM needs O(N) per update.
"""

from __future__ import annotations

from dataclasses import dataclass

from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.verdict import Verdict


@dataclass(frozen=True)
class FourPath:
    """Atom indices of the roles R, S, T, U and the join variables a, b, c."""

    atoms: tuple[int, int, int, int]
    variables: tuple[str, str, str]


def four_path(query: Query) -> Verdict:
    """Is ``query`` a 4-path count?  Witness a :class:`FourPath`.

    >>> four_path(parse("Q() :- R(a), S(a,b), T(b,c), U(c)")).witness
    FourPath(atoms=(0, 1, 2, 3), variables=('a', 'b', 'c'))
    >>> four_path(parse("Q() :- T(y,z), U(z,w), S(x,y), R(x)")).witness
    FourPath(atoms=(1, 0, 2, 3), variables=('z', 'y', 'x'))
    >>> four_path(parse("Q() :- R(a,b), S(b,c), T(c,d)")).reason
    'a 4-path count has four atoms, this one has 3'
    """
    if len(query.atoms) != 4:
        return Verdict(False, f"a 4-path count has four atoms, this one has {len(query.atoms)}")
    if query.free:
        return Verdict(False, f"a 4-path count has no free variables, this one has {', '.join(query.free)}")
    occurs: dict[str, int] = {}
    for atom in query.atoms:
        for v in atom.variables:
            occurs[v] = occurs.get(v, 0) + 1
    joins = [frozenset(v for v in atom.variables if occurs[v] > 1) for atom in query.atoms]
    ends = [i for i, j in enumerate(joins) if len(j) == 1]
    middles = [i for i, j in enumerate(joins) if len(j) == 2]
    if len(ends) != 2 or len(middles) != 2 or any(occurs[v] != 2 for j in joins for v in j):
        return Verdict(False, "the join variables do not form a path R(a), S(a,b), T(b,c), U(c)")
    r, u = ends
    (a,) = joins[r]
    (c,) = joins[u]
    s = next((i for i in middles if a in joins[i]), None)
    t = next((i for i in middles if i != s), None)
    if s is None or t is None or c not in joins[t] or a == c:
        return Verdict(False, "the join variables do not form a path R(a), S(a,b), T(b,c), U(c)")
    (b,) = joins[s] - {a}
    if joins[t] != frozenset({b, c}):
        return Verdict(False, "the join variables do not form a path R(a), S(a,b), T(b,c), U(c)")
    return Verdict(
        True,
        "4-path count: R(a), S(a,b), T(b,c), U(c) on the join variables (IVM^ε App. G)",
        FourPath((r, s, t, u), (a, b, c)),
    )
