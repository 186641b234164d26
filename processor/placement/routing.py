"""Which slices hold a relation tuple when the state lives on Spark's executors.

A pipeline placed on executors (``[processor] placement = "executors"``) splits
its state into ``P`` *slices*, ``P`` the largest shard count of its queries:
slice ``s`` holds shard ``s`` of every query with more than ``s`` shards
(:class:`ivm.shards.ShardSlice`), and the contents of the relation tuples those
shards hold, against which the input policy is checked.  A tuple goes to the
slices its queries' HyperCube routing sends it to (``ivm.shards``), the union
over the queries reading its relation; a tuple of a relation no query reads goes
to one slice by its hash, so every tuple the pipeline accepted is kept somewhere.

Every slice holding a tuple sees all of its updates, in order (the tuple is the
record key, so its updates share a Kafka partition), and decides each one under
the input policy exactly as the driver's relation contents would: the same
decision in every slice.  The first slice of the tuple (the smallest index) is
its *primary*: it alone reports the tuple's dead letters.  A record that cannot
be decoded, of a topic no relation reads, or a control command, goes to slice 0.

Cost: O(atoms of the relation · slices the tuple goes to) per update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ivm
from ivm.processor.config import PipelineConfig
from ivm.query.model import Query
from ivm.shards import HyperCube, stable_hash, stable_hashes
from ivm.updates import Row

#: the salt of the hash that places a tuple of a relation no query reads
_UNREAD_SALT = 0x5EED


def query_shards(config: PipelineConfig, name: str) -> int:
    """The shard count of configured query ``name``: its own, else the pipeline's."""
    for q in config.queries:
        if q.name == name:
            return q.shards or config.shards
    raise KeyError(name)


def slice_count(config: PipelineConfig) -> int:
    """``P``: the number of slices, the largest shard count of the pipeline's queries (at least its own)."""
    return max([config.shards, *(q.shards or config.shards for q in config.queries)])


class Placement:
    """The slices of each relation tuple (module docstring): the routing of the whole pipeline.

    >>> from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
    >>> config = PipelineConfig(relations=(RelationConfig("E"), RelationConfig("U")),
    ...                         queries=(QueryConfig("tri", "Q() :- E(a,b), E(b,c), E(c,a)"),), shards=8)
    >>> placement = Placement(config, {"E": ["src", "dst"], "U": ["x"]})
    >>> placement.slices, len(placement.slices_of("E", (1, 2))) > 1, len(placement.slices_of("U", (7,)))
    (8, True, 1)
    """

    def __init__(self, config: PipelineConfig, schema_of: Mapping[str, Sequence[str]]) -> None:
        self.slices = slice_count(config)
        # per relation: (router, terms) of every atom over it, in every query reading it
        self._atoms: dict[str, list[tuple[HyperCube | None, tuple[str, ...]]]] = {r.name: [] for r in config.relations}
        self.queries: dict[str, Query] = {}
        for q in config.queries:
            query = ivm.parse(q.query, schema_of)
            self.queries[q.name] = query
            shards = q.shards or config.shards
            router = HyperCube(query, shards) if shards > 1 else None
            for atom in query.atoms:
                self._atoms.setdefault(atom.relation, []).append((router, atom.terms))

    def slices_of_many(self, relation: str, rows: Sequence[Row]) -> list[list[int]]:
        """:meth:`slices_of` for every row, the hashes computed with numpy (``HyperCube.bases``)."""
        atoms = self._atoms.get(relation)
        if not atoms:
            return [[int(h % self.slices)] for h in stable_hashes(rows, _UNREAD_SALT)]
        parts: list[list[int]] = []
        for router, terms in atoms:
            if router is None:
                parts.append([0] * len(rows))
                continue
            fixed, spread = router.plan(tuple(terms))
            bases = router.bases(fixed, rows).tolist()
            if len(spread) == 1 and len(atoms) == 1:
                return [[base + spread[0]] for base in bases]
            parts += [[base + offset for base in bases] for offset in spread]
        return [sorted(set(column)) for column in zip(*parts, strict=True)]

    def slices_of(self, relation: str, row: Row) -> list[int]:
        """The slices holding ``row`` of ``relation``, smallest (the primary) first."""
        atoms = self._atoms.get(relation)
        if not atoms:
            return [stable_hash(row, _UNREAD_SALT) % self.slices]
        out: set[int] = set()
        for router, terms in atoms:
            if router is None:
                out.add(0)
            else:
                out.update(router.route(terms, row))
        return sorted(out)
