"""Update patterns per relation and per pair (Hu & Wang §1.3–§1.4).

A pattern σ maps sets of relations to I (insertion-only), F (FIFO) or A
(arbitrary).  MixDetect only reads σ({e}) and σ({e, e'}) (003 §1.4 [derived]),
so :class:`UpdatePatterns` stores a level per relation and the groups of
relations declared jointly FIFO.  A pair is I when both relations are I, F when
some declared group holds both, and A otherwise: two relations that are each
FIFO need not be jointly FIFO, and "e insertion-only plus e' FIFO" is not
joint FIFO either.  Relations not named are arbitrary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Level = Literal["I", "F", "A"]

_LEVELS: dict[str, Level] = {
    "i": "I",
    "insert-only": "I",
    "insertion-only": "I",
    "insert_only": "I",
    "append-only": "I",
    "f": "F",
    "fifo": "F",
    "sliding-window": "F",
    "window": "F",
    "a": "A",
    "arbitrary": "A",
}
LEVEL_WORDS: dict[str, str] = {"I": "insert-only", "F": "fifo", "A": "arbitrary"}


@dataclass(frozen=True)
class UpdatePatterns:
    """Per-relation levels and jointly-FIFO groups.

    >>> p = parse_patterns(["R=insert-only", "S+T=fifo"])
    >>> p.level("R"), p.level("S"), p.level("U"), p.pair("S", "T"), p.pair("R", "S")
    ('I', 'F', 'A', 'F', 'A')
    """

    levels: Mapping[str, Level] = field(default_factory=dict)
    joint_fifo: frozenset[frozenset[str]] = frozenset()

    def level(self, relation: str) -> Level:
        return self.levels.get(relation, "A")

    def pair(self, r1: str, r2: str) -> Level:
        """σ({r1, r2})."""
        if self.level(r1) == "I" and self.level(r2) == "I":
            return "I"
        if r1 == r2:
            return self.level(r1)
        if any(r1 in group and r2 in group for group in self.joint_fifo):
            return "F"
        return "A"

    def describe(self, relations: Iterable[str]) -> dict[str, str]:
        """Relation -> its level in words, plus each declared joint group."""
        out = {r: LEVEL_WORDS[self.level(r)] for r in relations}
        for group in sorted(self.joint_fifo, key=sorted):
            out["+".join(sorted(group))] = "fifo (joint)"
        return out


def parse_patterns(items: Iterable[str] | Mapping[str, str] | UpdatePatterns | None) -> UpdatePatterns:
    """Read ``R=insert-only``, ``R=fifo``, ``R=arbitrary`` and ``R+S=fifo`` declarations.

    >>> parse_patterns({"R": "fifo"}).level("R")
    'F'
    >>> parse_patterns(["R=sometimes"])
    Traceback (most recent call last):
    ...
    ValueError: unknown update pattern 'sometimes' for R: use insert-only, fifo or arbitrary
    """
    if isinstance(items, UpdatePatterns):
        return items
    if items is None:
        return UpdatePatterns()
    pairs = list(items.items()) if isinstance(items, Mapping) else [_split(item) for item in items]
    levels: dict[str, Level] = {}
    groups: set[frozenset[str]] = set()
    for names, word in pairs:
        level = _LEVELS.get(word.strip().lower())
        if level is None:
            raise ValueError(f"unknown update pattern {word!r} for {names}: use insert-only, fifo or arbitrary")
        relations = [n.strip() for n in names.split("+") if n.strip()]
        if not relations:
            raise ValueError(f"no relation named in pattern {names}={word}")
        for r in relations:
            levels[r] = level
        if len(relations) > 1 and level == "F":
            groups.add(frozenset(relations))
    return UpdatePatterns(levels, frozenset(groups))


def _split(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ValueError(f"an update pattern reads R=insert-only, R=fifo, R=arbitrary or R+S=fifo; got {item!r}")
    names, word = item.split("=", 1)
    return names, word
