"""Update patterns per relation and per pair (Hu & Wang §1.3–§1.4).

A pattern σ maps sets of relations to I (insertion-only), F (FIFO) or A
(arbitrary).  MixDetect only reads σ({e}) and σ({e, e'}) (003 §1.4 [derived]),
so :class:`UpdatePatterns` stores a level per relation and the groups of
relations declared jointly FIFO.  A pair is I when both relations are I, F when
some declared group holds both, and A otherwise: two relations that are each
FIFO need not be jointly FIFO, and "e insertion-only plus e' FIFO" is not
joint FIFO either.  Relations not named are arbitrary.

Deletion-only (Hu & Wang §1.3 and App. C): every tuple is inserted in the
prefix (the initial database, at negative timestamps) and afterwards only
deleted.  App. C: for a free-connex CQ whose relations are *all*
deletion-only, the engine of [25] is O(1) amortized per update with O(1)
delay, the mirror image of insertion-only (build in linear time, then the
counters only decrease); for a non-free-connex CQ no index is O(1) amortized
even then (Thm C.3, via BMM, Triangle and HyperClique; Thm C.1 for Q7, C.2
for the triangle).  The paper gives nothing for deletion-only mixed with other
patterns, so MixDetect and the pairs read a deletion-only relation as
arbitrary (its deletes come in any order), which is sound.  The runtime holds
a deletion-only relation to its declaration: an insert after the prefix is
refused by the input policy (:class:`ivm.policy.Policy`), with the state
unchanged.
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
# deletion-only: a level of its own in the declarations, read as "A" by MixDetect (see above)
_DELETION_ONLY_WORDS = frozenset({"d", "delete-only", "deletion-only", "delete_only", "deletion_only"})
LEVEL_WORDS: dict[str, str] = {"I": "insert-only", "F": "fifo", "A": "arbitrary"}
DELETE_ONLY = "delete-only"
PATTERN_WORDS = "insert-only, fifo, delete-only or arbitrary"


@dataclass(frozen=True)
class UpdatePatterns:
    """Per-relation levels and jointly-FIFO groups.

    >>> p = parse_patterns(["R=insert-only", "S+T=fifo"])
    >>> p.level("R"), p.level("S"), p.level("U"), p.pair("S", "T"), p.pair("R", "S")
    ('I', 'F', 'A', 'F', 'A')
    >>> d = parse_patterns(["R=delete-only"])
    >>> d.level("R"), d.deletes_only("R"), d.describe(["R", "S"])
    ('A', True, {'R': 'delete-only', 'S': 'arbitrary'})
    """

    levels: Mapping[str, Level] = field(default_factory=dict)
    joint_fifo: frozenset[frozenset[str]] = frozenset()
    deletion_only: frozenset[str] = frozenset()  # declared deletion-only after the prefix (App. C)

    def deletes_only(self, relation: str) -> bool:
        """Is ``relation`` declared deletion-only (inserts only in the initial database)?"""
        return relation in self.deletion_only

    def all_deletion_only(self, relations: Iterable[str]) -> bool:
        """Are all of ``relations`` deletion-only (the case App. C gives O(1) amortized for)?"""
        names = list(relations)
        return bool(names) and all(r in self.deletion_only for r in names)

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
        out = {r: DELETE_ONLY if r in self.deletion_only else LEVEL_WORDS[self.level(r)] for r in relations}
        for group in sorted(self.joint_fifo, key=sorted):
            out["+".join(sorted(group))] = "fifo (joint)"
        return out


def parse_patterns(items: Iterable[str] | Mapping[str, str] | UpdatePatterns | None) -> UpdatePatterns:
    """Read ``R=insert-only``, ``R=fifo``, ``R=delete-only``, ``R=arbitrary`` and ``R+S=fifo`` declarations.

    >>> parse_patterns({"R": "fifo"}).level("R")
    'F'
    >>> sorted(parse_patterns(["R+S=delete-only"]).deletion_only)
    ['R', 'S']
    >>> parse_patterns(["R=sometimes"])
    Traceback (most recent call last):
    ...
    ValueError: unknown update pattern 'sometimes' for R: use insert-only, fifo, delete-only or arbitrary
    """
    if isinstance(items, UpdatePatterns):
        return items
    if items is None:
        return UpdatePatterns()
    pairs = list(items.items()) if isinstance(items, Mapping) else [_split(item) for item in items]
    levels: dict[str, Level] = {}
    groups: set[frozenset[str]] = set()
    deleting: set[str] = set()
    for names, word in pairs:
        key = word.strip().lower()
        level = "A" if key in _DELETION_ONLY_WORDS else _LEVELS.get(key)
        if level is None:
            raise ValueError(f"unknown update pattern {word!r} for {names}: use {PATTERN_WORDS}")
        relations = [n.strip() for n in names.split("+") if n.strip()]
        if not relations:
            raise ValueError(f"no relation named in pattern {names}={word}")
        for r in relations:
            levels[r] = level
            if key in _DELETION_ONLY_WORDS:
                deleting.add(r)
            else:  # a later declaration of the same relation wins
                deleting.discard(r)
        if len(relations) > 1 and level == "F":
            groups.add(frozenset(relations))
    return UpdatePatterns(levels, frozenset(groups), frozenset(deleting))


def _split(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ValueError(
            f"an update pattern reads R=insert-only, R=fifo, R=delete-only, R=arbitrary or R+S=fifo; got {item!r}"
        )
    names, word = item.split("=", 1)
    return names, word
