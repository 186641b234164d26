"""An immutable conjunctive query with an aggregate.

``Q(free...) :- R1(x...), ..., Rn(x...)`` over Z-relations; the aggregate is
the sum over the bound variables of the product of the atoms' multiplicities
(COUNT), as in F-IVM §2 and the q-hierarchical paper §2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Atom:
    """One relation occurrence ``relation(terms...)``; terms are variable names."""

    relation: str
    terms: tuple[str, ...]

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(self.terms)

    def __str__(self) -> str:
        return f"{self.relation}({', '.join(self.terms)})"


@dataclass(frozen=True)
class Query:
    """A conjunctive query: a head name, free variables and a body of atoms."""

    name: str
    free: tuple[str, ...]
    atoms: tuple[Atom, ...]

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(v for atom in self.atoms for v in atom.terms)

    @property
    def relations(self) -> Mapping[str, int]:
        """Relation name -> arity, in order of first occurrence."""
        return {atom.relation: len(atom.terms) for atom in self.atoms}

    def __str__(self) -> str:
        body = ", ".join(str(a) for a in self.atoms)
        return f"{self.name}({', '.join(self.free)}) :- {body}"
