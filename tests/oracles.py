"""Independent oracles: brute-force evaluation of count queries over Z-relations.

Deliberately naive (nested loops over every atom's tuples), sharing no code
with the engines beyond the query model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ivm.query.model import Query

ZRelation = dict[tuple, int]


def apply_stream(
    updates: Iterable[tuple[str, tuple, int]], reject_negative: bool = True
) -> tuple[dict[str, ZRelation], list[int]]:
    """Fold a stream into Z-relations; with ``reject_negative`` skip updates that
    would make a multiplicity negative (the default input policy) and report
    their positions."""
    db: dict[str, ZRelation] = defaultdict(dict)
    rejected = []
    for i, (relation, row, mult) in enumerate(updates):
        row = tuple(row)
        new = db[relation].get(row, 0) + mult
        if reject_negative and new < 0:
            rejected.append(i)
            continue
        if new:
            db[relation][row] = new
        else:
            db[relation].pop(row, None)
    return db, rejected


def count_answers(query: Query, db: dict[str, ZRelation]) -> dict[tuple, int]:
    """{answer over the free variables: Σ of products of multiplicities}, zeros dropped."""
    out: dict[tuple, int] = defaultdict(int)

    def extend(i: int, binding: dict[str, object], weight: int) -> None:
        if i == len(query.atoms):
            out[tuple(binding[v] for v in query.free)] += weight
            return
        atom = query.atoms[i]
        for row, mult in db.get(atom.relation, {}).items():
            if not atom.matches(row):
                continue
            new = dict(binding)
            if all(new.setdefault(v, x) == x for v, x in zip(atom.terms, row, strict=True)):
                extend(i + 1, new, weight * mult)

    extend(0, {}, 1)
    return {k: v for k, v in out.items() if v}


def count(query: Query, db: dict[str, ZRelation]) -> int:
    """The scalar count Σ over all variables (free or not)."""
    return sum(count_answers(query.with_free(()), db).values())
