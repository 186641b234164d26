"""Independent oracles: brute-force evaluation of count queries over Z-relations, and the random
streams the engine tests check against them.

Deliberately plain (index nested loops over every atom's tuples), sharing no code
with the engines beyond the query model.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ivm.query.model import Query

ZRelation = dict[tuple, int]
Update = tuple[str, tuple, int]


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


def z_add(table: dict, key: object, m: int) -> int:
    """``table[key] += m`` in a Z-relation (absent keys count as 0, a key reaching 0 is removed);
    returns the new multiplicity."""
    new = table.get(key, 0) + m
    if new:
        table[key] = new
    else:
        table.pop(key, None)
    return new


def count_answers(query: Query, db: dict[str, ZRelation]) -> dict[tuple, int]:
    """{answer over the free variables: Σ of products of multiplicities}, zeros dropped.

    Nested loops over the atoms in query order; each atom's tuples are indexed
    on the variables bound by the atoms before it (an index nested-loop join),
    so a level visits only the tuples that agree with the binding so far.
    """
    out: dict[tuple, int] = defaultdict(int)
    bound: set[str] = set()
    levels: list[tuple[tuple[str, ...], tuple[str, ...], dict[tuple, list[tuple[tuple, int]]]]] = []
    for atom in query.atoms:
        shared = tuple(dict.fromkeys(v for v in atom.terms if v in bound))
        index: dict[tuple, list[tuple[tuple, int]]] = defaultdict(list)
        for row, mult in db.get(atom.relation, {}).items():
            if atom.matches(row):
                at = dict(zip(atom.terms, row, strict=True))
                index[tuple(at[v] for v in shared)].append((row, mult))
        levels.append((atom.terms, shared, index))
        bound |= set(atom.terms)

    def extend(i: int, binding: dict[str, object], weight: int) -> None:
        if i == len(levels):
            out[tuple(binding[v] for v in query.free)] += weight
            return
        terms, shared, index = levels[i]
        for row, mult in index.get(tuple(binding[v] for v in shared), ()):
            new = dict(binding)
            if all(new.setdefault(v, x) == x for v, x in zip(terms, row, strict=True)):
                extend(i + 1, new, weight * mult)

    extend(0, {}, 1)
    return {k: v for k, v in out.items() if v}


def count(query: Query, db: dict[str, ZRelation]) -> int:
    """The scalar count Σ over all variables (free or not)."""
    return sum(count_answers(query.with_free(()), db).values())


class ZDatabase:
    """The test's own copy of a database: one Z-relation per relation of ``query``, updated one
    tuple at a time (a multiplicity may go negative: deletes of absent tuples are kept).

    ``seen_negative`` / ``seen_nonunit`` record whether any multiplicity was ever below 0 / above 1,
    so that a test can assert its stream reached those cases.
    """

    def __init__(self, query: Query) -> None:
        self.rel: dict[str, ZRelation] = {r: {} for r in query.relations}
        self.seen_negative = self.seen_nonunit = False

    def apply(self, relation: str, row: tuple, m: int) -> None:
        new = z_add(self.rel[relation], row, m)
        self.seen_negative |= new < 0
        self.seen_nonunit |= new > 1


def hub_stream(rng: random.Random, query: Query, length: int, domain: int, hub_rate: float) -> Iterator[Update]:
    """Random updates to ``query``'s relations: the hub value 0 takes ``hub_rate`` of the positions,
    the rest is uniform below ``domain``; multiplicities in {-1, 1, 2, 3} (a delete of an absent
    tuple makes one negative), and a fifth of the steps delete a present tuple to zero."""
    present: dict[tuple[str, tuple], int] = {}
    relations = sorted(query.relations)
    for _ in range(length):
        if present and rng.random() < 0.2:
            (relation, row), m = rng.choice(sorted(present.items(), key=repr))
            del present[(relation, row)]
            yield relation, row, -m
            continue
        relation = rng.choice(relations)
        row = tuple(0 if rng.random() < hub_rate else rng.randrange(domain) for _ in range(query.relations[relation]))
        m = rng.choice([1, 1, 2, 3, -1])
        z_add(present, (relation, row), m)
        yield relation, row, m


def replay(
    engine: Any,
    db: ZDatabase,
    query: Query,
    updates: list[Update],
    rng: random.Random,
    check: Callable[[Any], None] | None = None,
    check_every: int = 1,
    after_batch: Callable[[Any], None] | None = None,
) -> None:
    """Apply ``updates`` to ``engine`` and ``db`` in batches of 1-4 (sizes drawn from ``rng``) and
    assert, after every ``check_every``-th batch and the last, the engine's invariants (``check``)
    and its count against :func:`count` over ``db``; ``after_batch`` sees the engine after each batch."""
    pos = batches = 0
    while pos < len(updates):
        batch = updates[pos : pos + rng.randint(1, 4)]
        pos += len(batch)
        engine.apply(batch)
        for update in batch:
            db.apply(*update)
        if after_batch is not None:
            after_batch(engine)
        batches += 1
        if batches % check_every == 0 or pos == len(updates):
            if check is not None:
                check(engine)
            assert engine.result() == count(query, db.rel)


def assert_multiplicities(engine: Any, db: ZDatabase) -> None:
    """Every tuple of ``db`` has its multiplicity in ``engine`` (``engine.multiplicity``)."""
    for relation, table in db.rel.items():
        for row, m in table.items():
            assert engine.multiplicity(relation, row) == m, (relation, row)


def logical_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """``stats()`` without the state's measured bytes (``state_bytes``, ``bytes_per_tuple``): a restored copy
    holds the same state in fresh allocations (dicts sized for their contents, not their history), so
    those two differ while every logical figure must not (an inner engine's, ``name.state_bytes``, too)."""
    return {k: v for k, v in stats.items() if k.rpartition(".")[2] not in ("state_bytes", "bytes_per_tuple")}
