"""The 3R classes of count queries over three relations (IVM^eps App. H, Def. 33–35).

A 3R query is ``Q() = Σ R(a_R, a_RT, a_RS, a_RST) · S(a_S, a_RS, a_ST, a_RST) ·
T(a_T, a_ST, a_RT, a_RST)``.  The pair-join tuple ``A_RS`` holds the variables in
R and S but not T; ``3R^i`` is the class with exactly ``i`` nonempty pair-join
tuples.  Table 1 (Theorem 37): 3R³ and 3R² take O(|D|^max(ε,1-ε)) amortized
updates (optimal at ε = 1/2 under OMv, Prop. 38); 3R⁰ ∪ 3R¹, exactly the
hierarchical 3R queries (Prop. 41), take non-amortized O(1) updates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.verdict import Verdict


@dataclass(frozen=True)
class ThreeRelationClass:
    """``i`` and the pair-join variables, keyed by atom-index pairs ``(0,1), (1,2), (0,2)``."""

    i: int
    pair_join: dict[tuple[int, int], frozenset[str]]


def three_relation_class(query: Query) -> Verdict:
    """The 3R class of a count query with three atoms; witness a :class:`ThreeRelationClass`.

    Example 36 of the paper:

    >>> three_relation_class(parse("Q() :- R(a,b,c,d), S(e,c,f,d), T(g,f,b,d)")).witness.i
    3
    >>> three_relation_class(parse("Q() :- R(rt,rs), S(s,rs), T(t,rt)")).witness.i
    2
    >>> three_relation_class(parse("Q() :- R(r), S(s,st), T(t,st)")).reason
    '3R^1: one nonempty pair-join tuple (hierarchical, O(1) updates)'
    >>> three_relation_class(parse("Q() :- R(r,x), S(s,x), T(t,x)")).witness.i
    0

    Three occurrences of one relation are not three relations (an update of E
    changes every atom at once):

    >>> three_relation_class(parse("Q() :- E(x,x), E(x,y), E(y,y)")).reason
    'a 3R query joins three distinct relations, this one has self-joins'
    """
    if len(query.atoms) != 3:
        return Verdict(False, f"a 3R query has three atoms, this one has {len(query.atoms)}")
    if not query.self_join_free:
        return Verdict(False, "a 3R query joins three distinct relations, this one has self-joins")
    if query.free:
        return Verdict(False, f"a 3R query is a count without free variables, this one has {query.free}")
    sets = [a.variables for a in query.atoms]
    pairs = {}
    for x, y in ((0, 1), (1, 2), (0, 2)):
        (z,) = {0, 1, 2} - {x, y}
        pairs[(x, y)] = (sets[x] & sets[y]) - sets[z]
    i = sum(1 for v in pairs.values() if v)
    words = {
        0: "no pair-join tuple (hierarchical, O(1) updates)",
        1: "one nonempty pair-join tuple (hierarchical, O(1) updates)",
        2: "two nonempty pair-join tuples (acyclic path, O(N^max(eps,1-eps)) amortized updates)",
        3: "three nonempty pair-join tuples (cyclic, O(N^max(eps,1-eps)) amortized updates)",
    }
    return Verdict(True, f"3R^{i}: {words[i]}", ThreeRelationClass(i, pairs))


def as_distinct_relations(query: Query) -> Query:
    """The query with its three atoms renamed ``R``, ``S``, ``T`` (self-joins read as copies).

    >>> str(as_distinct_relations(parse("Q() :- E(a,b), E(b,c), F(c)")))
    'Q() :- R(a, b), S(b, c), T(c)'
    """
    atoms = tuple(dataclasses.replace(a, relation=name) for a, name in zip(query.atoms, "RST", strict=False))
    return dataclasses.replace(query, atoms=atoms)
