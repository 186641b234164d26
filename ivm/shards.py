"""Partition-aware state: a query's state split into self-contained shards (DESIGN §5).

Routing is HyperCube (the "shares" algorithm of Afrati–Ullman and Beame–
Koutris–Suciu): each variable ``x`` gets a share ``p_x`` with ``Π p_x = p``
shards, and a shard is a coordinate vector ``(c_x)``.  A tuple of an atom goes
to every shard whose coordinates agree with the hashes of the atom's variables,
``c_x = h_x(value) mod p_x``, and is replicated along the other dimensions.
Every tuple of the full join then meets in exactly one shard, the one at its
own coordinates, so

- counts, SUMs and every ring-valued aggregate are the sums of the shards';
- an answer's multiplicity is the sum of its multiplicities in the shards.

Shares: a query with a variable common to all atoms (every hierarchical query
has one per connected component) puts all ``p`` on it: each tuple goes to one
shard, no replication.  Otherwise the prime factors of ``p`` are spread over
the join variables as evenly as possible: the triangle on 8 shards gets shares
(2, 2, 2), and each tuple goes to 2 of them (``p^(1/3)``).

A relation occurring in several atoms (a self-join) is kept as one relation per
atom inside the shards (``E#0``, ``E#1``, ...): each copy routed by its own
atom's variables.  Applying an update to the copies in atom order is exact (the
telescoping delta rule), and no join tuple is found in two shards.
"""

from __future__ import annotations

import operator
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from functools import reduce
from typing import Any

import numpy as np

from ivm.query.model import Query
from ivm.rings.exact import read_result
from ivm.updates import Row, Update
from ivm.view import Outcome, View

_MIX = 0x9E3779B97F4A7C15
_MANY = 64  # from this many updates a batch is routed with array operations
_MASK = (1 << 64) - 1


def stable_hash(value: object, salt: int = 0) -> int:
    """A hash that is the same in every process (Python's ``hash`` of str is not).

    >>> stable_hash(42) == stable_hash(42) and stable_hash("a") == stable_hash("a")
    True
    """
    if isinstance(value, bool) or not isinstance(value, int):
        value = zlib.crc32(repr(value).encode())
    x = (value + salt * _MIX) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def stable_hashes(values: Sequence[object], salt: int = 0) -> np.ndarray:
    """:func:`stable_hash` of every value as a ``uint64`` array: the same numbers, computed with numpy
    when every value is an int of 64 bits (O(n) array work), one by one otherwise.

    >>> [int(h) for h in stable_hashes([42, -7], 3)] == [stable_hash(42, 3), stable_hash(-7, 3)]
    True
    """
    if all(type(v) is int for v in values):
        try:
            signed = np.array(values, dtype=np.int64)
        except OverflowError:
            pass
        else:
            x = signed.view(np.uint64) + np.uint64((salt * _MIX) & _MASK)  # wraps mod 2^64, as & _MASK does
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return x ^ (x >> np.uint64(31))
    return np.array([stable_hash(v, salt) for v in values], dtype=np.uint64)


def _prime_factors(n: int) -> list[int]:
    factors, d = [], 2
    while d * d <= n:
        while n % d == 0:
            factors.append(d)
            n //= d
        d += 1
    if n > 1:
        factors.append(n)
    return sorted(factors, reverse=True)


def shares(query: Query, shards: int) -> dict[str, int]:
    """The HyperCube share of each variable, their product ``shards``.

    >>> from ivm.query import parse
    >>> sorted(shares(parse("Q() :- R(a,b), S(b,c), T(c,a)"), 8).items())
    [('a', 2), ('b', 2), ('c', 2)]
    >>> shares(parse("Q(a) :- R(a,b), S(a,c)"), 8)
    {'a': 8}
    """
    if shards < 1:
        raise ValueError(f"the number of shards must be at least 1, got {shards}")
    common = set.intersection(*(set(a.terms) for a in query.atoms))
    if common:
        return {min(common): shards}
    join_vars = sorted(v for v in query.variables if len(query.atoms_of(v)) > 1) or sorted(query.variables)
    out = dict.fromkeys(join_vars, 1)
    for factor in _prime_factors(shards):
        smallest = min(join_vars, key=lambda v: (out[v], join_vars.index(v)))
        out[smallest] *= factor
    return out


class HyperCube:
    """Routes atom tuples to shards by the HyperCube shares of the query's variables."""

    def __init__(self, query: Query, shards: int) -> None:
        self.shards = shards
        self.shares = shares(query, shards)
        self.dims = sorted(self.shares)
        self._stride: dict[str, int] = {}
        self._plans: dict[tuple[str, ...], tuple[tuple[tuple[int, int, int, int], ...], tuple[int, ...]]] = {}
        stride = 1
        for v in self.dims:
            self._stride[v] = stride
            stride *= self.shares[v]

    def route(self, terms: Sequence[str], row: Row) -> list[int]:
        """The shards that must hold ``row`` of an atom with these ``terms``: O(shards it goes to)."""
        fixed, spread = self.plan(tuple(terms))
        base = 0
        for position, salt, share, stride in fixed:
            base += (stable_hash(row[position], salt) % share) * stride
        return [base + offset for offset in spread]

    def bases(self, fixed: Sequence[tuple[int, int, int, int]], rows: Sequence[Row]) -> np.ndarray:
        """The shard of each row along the dimensions ``fixed`` fixes (:meth:`plan`), as an array: add
        a spread offset to get each shard it goes to.  O(rows) array work per fixed dimension."""
        out = np.zeros(len(rows), dtype=np.int64)
        for position, salt, share, stride in fixed:
            hashes = stable_hashes([row[position] for row in rows], salt)
            out += (hashes % np.uint64(share)).astype(np.int64) * stride
        return out

    def plan(self, terms: tuple[str, ...]) -> tuple[tuple[tuple[int, int, int, int], ...], tuple[int, ...]]:
        """How to route an atom with ``terms``: ``(position, salt, share, stride)`` of each of its
        variables with a share (the hash of ``row[position]`` fixes that coordinate), and the
        offsets of the shards along the dimensions it does not fix (where it is replicated)."""
        cached = self._plans.get(terms)
        if cached is not None:
            return cached
        last = {var: position for position, var in enumerate(terms)}
        fixed = tuple((last[v], i, self.shares[v], self._stride[v]) for i, v in enumerate(self.dims) if v in last)
        spread = [0]
        for v in self.dims:
            if v not in last:
                spread = [t + c * self._stride[v] for t in spread for c in range(self.shares[v])]
        self._plans[terms] = (fixed, tuple(spread))
        return self._plans[terms]


def per_atom_relations(query: Query) -> tuple[Query, dict[str, list[int]]]:
    """The query with one relation per atom for self-joined relations, and for each
    original relation the atoms it feeds."""
    atoms_of: dict[str, list[int]] = defaultdict(list)
    for i, atom in enumerate(query.atoms):
        atoms_of[atom.relation].append(i)
    renamed = []
    for i, atom in enumerate(query.atoms):
        if len(atoms_of[atom.relation]) > 1:
            atom = replace(atom, relation=f"{atom.relation}#{atoms_of[atom.relation].index(i)}")
        renamed.append(atom)
    return replace(query, atoms=tuple(renamed)), dict(atoms_of)


class ShardedView(View):
    """A view whose state is split into ``len(shards)`` self-contained :class:`View` shards.

    Same interface as :class:`View` and the same validation; the input policy
    is checked once per update, on the first shard that holds its tuple, so a
    rejection is reported once however many shards the tuple is replicated to.
    """

    def __init__(self, query: Query, shards: list[View], router: HyperCube) -> None:
        # shard 0's engine stands for all shards where a name or type is asked for
        super().__init__(query, shards[0].engine, shards[0].policy, patterns=shards[0]._patterns)
        self.shards = shards
        self.router = router
        self.shard_query, self._atoms_of = per_atom_relations(query)
        self._routed: dict[tuple[str, Row], list[tuple[int, Update]]] = {}
        # per original relation: (per-atom relation, HyperCube plan) of each atom it feeds
        self._plans = {
            relation: [(self.shard_query.atoms[i].relation, *router.plan(query.atoms[i].terms)) for i in atoms]
            for relation, atoms in self._atoms_of.items()
        }

    def apply(self, updates: Iterable[Update | tuple[str, Row, int]]) -> Outcome:
        try:
            return super().apply(updates)
        finally:
            self._routed.clear()

    def _targets(self, update: Update) -> list[tuple[int, Update]]:
        """(shard, update of a per-atom relation) pairs for one original update, kept for the batch:
        an update validated against the state (``_current``) is routed once."""
        key = (update.relation, update.row)
        out = self._routed.get(key)
        if out is None or out[0][1].mult != update.mult:
            out = self._routed[key] = self._route(update)
        return out

    def _route(self, update: Update) -> list[tuple[int, Update]]:
        """HyperCube routing of one update: O(1) per shard it goes to."""
        out = []
        row = update.row
        for relation, fixed, spread in self._plans[update.relation]:
            base = 0
            for position, salt, share, stride in fixed:
                base += (stable_hash(row[position], salt) % share) * stride
            routed = update if relation == update.relation else tuple.__new__(Update, (relation, row, update.mult))
            if len(spread) == 1:
                out.append((base + spread[0], routed))
            else:
                out += [(base + offset, routed) for offset in spread]
        return out

    def _current(self, update: Update) -> int:
        shard, routed = self._targets(update)[0]
        return self.shards[shard].engine.multiplicity(routed.relation, routed.row)

    def _route_many(self, updates: list[Update], keep: int | None = None) -> list[list[Update]]:
        """Every update routed (as :meth:`_route`), per shard, each shard's in the batch's order; with
        ``keep`` only that shard's list is filled.  The hashes are computed per relation with numpy
        (:func:`stable_hashes`): O(updates · shards each goes to) with a small constant."""
        per_shard: list[list[Update]] = [[] for _ in range(self.router.shards)]
        by_relation: dict[str, list[int]] = defaultdict(list)
        for i, update in enumerate(updates):
            by_relation[update.relation].append(i)
        targets: list[list[tuple[int, str]]] = [[] for _ in updates]
        for relation, members in by_relation.items():
            rows = [updates[i].row for i in members]
            for copy, fixed, spread in self._plans[relation]:
                bases = self.router.bases(fixed, rows).tolist()
                for i, base in zip(members, bases, strict=True):
                    targets[i] += [(base + offset, copy) for offset in spread]
        new = tuple.__new__
        for update, where in zip(updates, targets, strict=True):
            for shard, copy in where:
                if keep is None or shard == keep:
                    routed = update if copy == update.relation else new(Update, (copy, update.row, update.mult))
                    per_shard[shard].append(routed)
        return per_shard

    def _apply_valid(self, valid: list[Update]) -> None:
        if len(valid) >= _MANY and not self._routed:  # a big batch not validated against the state
            for shard, batch in enumerate(self._route_many(valid)):
                if batch:
                    self.shards[shard].engine.apply(batch)
            return
        per_shard: list[list[Update]] = [[] for _ in self.shards]
        routed = self._routed
        for update in valid:
            targets = routed.get((update.relation, update.row)) if routed else None
            if targets is None or targets[0][1].mult != update.mult:
                targets = self._route(update)  # not validated against the state: routed here only
            for shard, u in targets:
                per_shard[shard].append(u)
        for shard, batch in enumerate(per_shard):
            if batch:
                self.shards[shard].engine.apply(batch)

    def multiplicity(self, relation: str, row: Row) -> int:
        return self._current(Update(relation, tuple(row), 1))

    def result(self) -> Any:
        """The shards' results added up: exact sums (:meth:`exact_result`) rounded once at the end."""
        return read_result(self.exact_result())

    def exact_result(self) -> Any:
        results = [s.exact_result() for s in self.shards]
        if all(isinstance(r, dict) for r in results):
            merged: dict[Any, Any] = defaultdict(int)
            for r in results:
                for k, v in r.items():
                    merged[k] = merged[k] + v
            return dict(merged)  # a group of some shard has rows (shards drop emptied groups themselves)
        return reduce(operator.add, results)

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        merged: dict[Row, int] = defaultdict(int)
        for shard in self.shards:
            for answer, mult in shard.enumerate():
                merged[answer] += mult
        return ((a, m) for a, m in merged.items() if m)

    def drain_delta(self) -> list[tuple[Row, int]]:
        merged: dict[Row, int] = defaultdict(int)
        for shard in self.shards:
            drain = getattr(shard.engine, "drain_delta", None)
            if drain is None:
                return []
            for answer, mult in drain():
                merged[answer] += mult
        return [(a, m) for a, m in merged.items() if m]

    def stats(self) -> dict[str, int | float]:
        total: dict[str, int | float] = defaultdict(int)
        for shard in self.shards:
            for key, value in shard.stats().items():
                total[key] += value
        total["shards"] = len(self.shards)
        return dict(total)

    def shard_stats(self) -> list[dict[str, int | float]]:
        return [s.stats() for s in self.shards]

    def explain(self) -> dict[str, Any]:
        out = dict(self.shards[0].explain())
        out["shards"] = {"count": len(self.shards), "shares": self.router.shares}
        return out


class ShardSlice(ShardedView):
    """Shard ``index`` of a :class:`ShardedView` held alone: what one executor keeps of a query.

    It routes every update exactly as the whole sharded view does and applies
    the ones routed to shard ``index``, dropping the others: the shards of a
    query can then live in different processes (``ivm.processor.placement``), each
    given the updates routed to it, or all of them.  Its result is that shard's
    share; the shards' results add up to the query's (module docstring).
    Cost: the routing of the whole view, O(shards an update goes to), and the
    engine's work on the updates routed here.
    """

    def __init__(self, query: Query, shard: View, router: HyperCube, index: int) -> None:
        if not 0 <= index < router.shards:
            raise ValueError(f"shard {index} of a view with {router.shards} shards")
        super().__init__(query, [shard], router)
        self.index = index

    @classmethod
    def of(cls, sharded: ShardedView, index: int) -> ShardSlice:
        """Shard ``index`` of ``sharded`` (the others are dropped)."""
        return cls(sharded.query, sharded.shards[index], sharded.router, index)

    def _current(self, update: Update) -> int:
        for shard, routed in self._targets(update):
            if shard == self.index:
                return self.shards[0].engine.multiplicity(routed.relation, routed.row)
        return 0

    def _apply_valid(self, valid: list[Update]) -> None:
        index = self.index
        if len(valid) >= _MANY:
            mine = self._route_many(valid, keep=index)[index]
        else:
            mine = [routed for update in valid for shard, routed in self._route(update) if shard == index]
        if mine:
            self.shards[0].engine.apply(mine)

    def explain(self) -> dict[str, Any]:
        out = super().explain()
        out["shards"]["index"] = self.index
        return out
