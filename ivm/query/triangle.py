"""Triangle shape: is a query the count ``Σ R(a,b)·S(b,c)·T(c,a)`` up to renaming?

IVM^eps §1.1 studies Query (1), the triangle count over three binary relations,
and §5.1 its self-join variant over one edge relation.  A query has triangle
shape when it has no free variables and three binary atoms over three variables
whose variable pairs form a 3-cycle.  Atoms may be written in either direction
(``T(a, c)`` instead of ``T(c, a)``) and may name the same relation (self-joins).
"""

from __future__ import annotations

from dataclasses import dataclass

from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)


@dataclass(frozen=True)
class CycleEdge:
    """Atom ``atom`` read as the directed cycle edge (u_i, u_i+1); ``flipped``
    when the atom lists the two variables the other way round."""

    atom: int
    relation: str
    flipped: bool


@dataclass(frozen=True)
class TriangleShape:
    """The three atoms in cycle order ``(u0,u1), (u1,u2), (u2,u0)``."""

    variables: tuple[str, str, str]
    edges: tuple[CycleEdge, CycleEdge, CycleEdge]


def triangle_shape(query: Query) -> TriangleShape | str:
    """Return the query's :class:`TriangleShape`, or the reason it has none.

    >>> triangle_shape(parse("Q() :- R(a,b), S(b,c), T(c,a)")).variables
    ('a', 'b', 'c')
    >>> [e.flipped for e in triangle_shape(parse("Q() :- E(a,b), E(c,b), E(c,a)")).edges]
    [False, True, False]
    >>> triangle_shape(parse("Q(a) :- R(a,b), S(b,c), T(c,a)"))
    'a triangle count has no free variables, this query has (a)'
    """
    if query.free:
        return f"a triangle count has no free variables, this query has ({', '.join(query.free)})"
    if len(query.atoms) != 3:
        return f"a triangle has three atoms, this query has {len(query.atoms)}"
    for atom in query.atoms:
        if len(atom.terms) != 2 or atom.terms[0] == atom.terms[1]:
            return f"atom {atom} is not a binary atom over two distinct variables"
    if len(query.variables) != 3:
        return f"a triangle has three variables, this query has {len(query.variables)}"
    pairs = [frozenset(atom.terms) for atom in query.atoms]
    if len(set(pairs)) != 3:
        return "two atoms join the same pair of variables: not a 3-cycle"
    u0, u1 = query.atoms[0].terms
    (u2,) = query.variables - {u0, u1}
    order = (u0, u1, u2)
    edges = []
    for i in range(3):
        want = (order[i], order[(i + 1) % 3])
        index = pairs.index(frozenset(want))
        atom = query.atoms[index]
        edges.append(CycleEdge(index, atom.relation, atom.terms != want))
    return TriangleShape(order, (edges[0], edges[1], edges[2]))


if __name__ == "__main__":  # pragma: no cover
    import doctest

    doctest.testmod()
