"""Load tuples from files into relation topics as Avro updates (``ivm produce``)."""

from __future__ import annotations

import csv
import random
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ivm.updates import Row, Update
from processor.codec import RelationCodec
from processor.sink import KafkaSink


def read_edges(path: str | Path) -> Iterator[tuple[int, int]]:
    """Pairs ``u v`` of an edge-list file; ``#`` and ``%`` lines are comments."""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line[0] in "#%":
                continue
            parts = line.split()
            if len(parts) < 2:
                raise ValueError(f"{path}:{n}: expected 'u v', got {line!r}")
            yield int(parts[0]), int(parts[1])


def read_csv(path: str | Path, attributes: Sequence[str], types: Sequence[type]) -> Iterator[Row]:
    """Rows of a CSV file with a header naming (at least) ``attributes``."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = set(attributes) - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: the header lacks columns {sorted(missing)}")
        for record in reader:
            yield tuple(t(record[a]) for a, t in zip(attributes, types, strict=True))


def sample(rows: Iterable[Row], fraction: float, seed: int) -> list[Row]:
    """A seeded random subset of ``rows``, each kept with probability ``fraction``."""
    rng = random.Random(seed)
    return [row for row in rows if rng.random() < fraction]


def edge_updates(
    edges: Iterable[tuple[int, int]], relations: Sequence[str], mult: int, both_directions: bool
) -> Iterator[Update]:
    """Each edge as an update of every relation, in one or both directions."""
    for u, v in edges:
        for relation in relations:
            yield Update(relation, (u, v), mult)
            if both_directions:
                yield Update(relation, (v, u), mult)


class UpdateProducer:
    """Produce updates to their relation topics, keyed by tuple (an idempotent producer)."""

    def __init__(self, bootstrap: str, codecs: dict[str, RelationCodec], topics: dict[str, str] | None = None) -> None:
        self.codecs = codecs
        self.topics = topics or {name: name for name in codecs}
        self.sent = 0
        self._sink = KafkaSink(bootstrap, flush_timeout=120, **{"linger.ms": 20})

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self._sink.send(topic, key, value)
        self.sent += 1

    def send(self, update: Update) -> None:
        try:
            codec = self.codecs[update.relation]
        except KeyError:
            raise ValueError(f"no schema for relation {update.relation!r}; known: {sorted(self.codecs)}") from None
        key, value = codec.encode(update.row, update.mult)
        self.send_raw(self.topics[update.relation], key, value)

    def send_all(self, updates: Iterable[Update]) -> int:
        before = self.sent
        for update in updates:
            self.send(update)
        return self.sent - before

    def flush(self) -> None:
        """Wait until every update is delivered; raises on any delivery failure."""
        self._sink.commit()
