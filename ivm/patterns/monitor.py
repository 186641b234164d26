"""Run-time update-pattern monitors (003 §4 [PROPOSAL]; classes of Hu & Wang §1.3).

A :class:`PatternMonitor` watches the *effective* updates of a query's
relations (an insert of an absent tuple, a delete that removes the last copy;
no-ops are never violations, 003 §7.1) and keeps, per relation, the level
insert-only (I) → FIFO (F) → arbitrary (A), and per monitored pair whether the
merged stream is jointly FIFO.  Levels only go down, so a stream of m
relations sees at most O(m + m²) downgrades.

Every violation is decided at the violating update itself, before it is
applied (003 §1.3 [derived]): an effective delete must remove the oldest live
tuple of the relation (FIFO) or of the merged pair (joint FIFO).  Live tuples
sit in one insertion-ordered queue per relation with O(1) handles
(:class:`collections.OrderedDict`: O(1) front, O(1) erase), stamped with one
global sequence number, so :meth:`PatternMonitor.observe` costs O(1 + number of
monitored pairs of the relation) = O(1) in data complexity.

Patterns are *declared* (then verified: a violation is an event with
``declared=True``) or *inferred* optimistically (relations start at I, pairs
jointly FIFO, and the monitor downgrades them).  Deletion-only relations
(Hu & Wang App. C) are declared; their pattern ends at the first insert after
:meth:`PatternMonitor.end_prefix` (the initial database is the insert-only
prefix, 003 §1.2).

>>> m = PatternMonitor(["R", "S"])
>>> m.observe("R", (1,), True), m.observe("S", (2,), True), m.observe("R", (3,), True)
([], [], [])
>>> for event in m.observe("R", (3,), False):
...     print(event)
R: insert-only -> arbitrary (deleted (3,), not the oldest live tuple (1,))
R+S: fifo (joint) -> arbitrary (deleted R(3,) while R(1,) is older)
>>> m.patterns().level("R"), m.patterns().level("S"), m.patterns().pair("R", "S")
('A', 'I', 'A')
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from ivm.query.patterns import LEVEL_WORDS, Level, UpdatePatterns, parse_patterns

LOG = logging.getLogger("ivm.patterns")

_RANK = {"I": 0, "F": 1, "A": 2}


@dataclass(frozen=True)
class PatternEvent:
    """One downgrade: ``relations`` (one relation, or a pair for joint FIFO) went
    from ``before`` to ``after`` at update number ``seq``.  ``declared`` says
    whether a declared pattern was violated (rather than an inferred one
    corrected)."""

    seq: int
    relations: tuple[str, ...]
    before: str
    after: str
    declared: bool
    reason: str

    @property
    def kind(self) -> str:
        """``relation``, ``pair`` or ``deletion_only``."""
        if self.before == "deletion-only":
            return "deletion_only"
        return "pair" if len(self.relations) > 1 else "relation"

    def __str__(self) -> str:
        return f"{'+'.join(self.relations)}: {self.before} -> {self.after} ({self.reason})"


class PatternMonitor:
    """Per-relation and per-pair pattern monitors, O(1) per update (003 §4).

    Parameters
    ----------
    relations:
        The query's relations.
    declared:
        Declared patterns (``["R=insert-only", "R+S=fifo"]``, a mapping or an
        :class:`UpdatePatterns`).  They are verified.
    infer:
        Infer the patterns of relations (and pairs) not declared, optimistically:
        start at insert-only and jointly FIFO and downgrade on violations.  When
        ``False``, what is not declared is arbitrary (DESIGN §3).
    pairs:
        The pairs to monitor for joint FIFO (default: all pairs of relations,
        O(m) per update).  Declared joint groups are always monitored.
    deletion_only:
        Relations declared deletion-only after the prefix (App. C).
    on_event:
        Called with every :class:`PatternEvent` (events are also logged at
        WARNING on the ``ivm.patterns`` logger and counted).
    """

    def __init__(
        self,
        relations: Iterable[str],
        declared: UpdatePatterns | Iterable[str] | None = None,
        infer: bool = True,
        pairs: Iterable[tuple[str, str]] | None = None,
        deletion_only: Iterable[str] = (),
        on_event: Callable[[PatternEvent], None] | None = None,
    ) -> None:
        self.relations = tuple(dict.fromkeys(relations))
        sigma = parse_patterns(declared)  # type: ignore[arg-type]
        self.declared = sigma
        self.infer = infer
        self.on_event = on_event
        named = set(sigma.levels)
        self._declared_level = {r: r in named for r in self.relations}
        self._level: dict[str, Level] = {
            r: (sigma.level(r) if r in named else ("I" if infer else "A")) for r in self.relations
        }
        self._queue: dict[str, OrderedDict[Any, int]] = {r: OrderedDict() for r in self.relations}
        candidates = set(combinations(self.relations, 2)) if pairs is None else {tuple(p) for p in pairs}
        self._joint: dict[frozenset[str], bool] = {}
        self._joint_declared: dict[frozenset[str], bool] = {}
        for a, b in combinations(self.relations, 2):
            key = frozenset((a, b))
            declared_joint = any(a in g and b in g for g in sigma.joint_fifo)
            inferred = infer and ((a, b) in candidates or (b, a) in candidates)
            undeclared_pair = not (a in named and b in named)
            if (declared_joint or (inferred and undeclared_pair)) and "A" not in (self._level[a], self._level[b]):
                self._joint[key] = True
                self._joint_declared[key] = declared_joint
        self._partners: dict[str, list[tuple[str, frozenset[str]]]] = {r: [] for r in self.relations}
        for key in self._joint:
            a, b = sorted(key)
            self._partners[a].append((b, key))
            self._partners[b].append((a, key))
        self._deletion_only = {r: False for r in self.relations}
        self._deletion_only_declared = set(deletion_only) | set(sigma.deletion_only)
        self._deletion_only_broken: set[str] = set()  # inserted into after the prefix
        self._seq = 0
        self._sealed = False
        self.events: list[PatternEvent] = []
        self.counts = {"relation": 0, "pair": 0, "deletion_only": 0, "declared": 0}
        self.updates = 0

    # -- the per-update check ------------------------------------------------------------------

    def end_prefix(self) -> None:
        """The initial database is loaded: deletion-only relations may only delete from now on."""
        self._sealed = True
        for r in self._deletion_only_declared:
            if r in self._deletion_only:
                self._deletion_only[r] = True

    def observe(self, relation: str, row: Any, inserted: bool) -> list[PatternEvent]:
        """Check one *effective* update (``inserted``: the tuple became present;
        otherwise its last copy was deleted) before it is applied, then record it.
        Returns the downgrades it causes (usually none).  O(1 + pairs of ``relation``).
        """
        self._seq += 1
        self.updates += 1
        queue = self._queue[relation]
        events: list[PatternEvent] = []
        if inserted:
            if self._deletion_only[relation]:
                self._deletion_only[relation] = False
                self._deletion_only_broken.add(relation)
                events.append(
                    self._event((relation,), "deletion-only", "arbitrary", True, f"inserted {row!r} after the prefix")
                )
            queue[row] = self._seq  # a re-insert is a new logical tuple at the back
            return self._emit(events)
        stamp = queue.get(row)
        if stamp is None:  # not seen by the monitor (e.g. restored state): treat as a queue-order break
            stamp = self._seq
        front_row = next(iter(queue)) if queue else row
        is_front = front_row == row
        level = self._level[relation]
        if level == "I":
            after: Level = "F" if is_front else "A"
            self._level[relation] = after
            why = "first delete" if is_front else f"deleted {row!r}, not the oldest live tuple {front_row!r}"
            # I -> F is the expected course of a FIFO stream; only a declared I is violated by it.
            events.append(
                self._event((relation,), LEVEL_WORDS["I"], LEVEL_WORDS[after], self._declared_level[relation], why)
            )
        elif level == "F" and not is_front:
            self._level[relation] = "A"
            events.append(
                self._event(
                    (relation,),
                    LEVEL_WORDS["F"],
                    LEVEL_WORDS["A"],
                    self._declared_level[relation],
                    f"deleted {row!r}, not the oldest live tuple {front_row!r}",
                )
            )
        for partner, key in self._partners[relation]:
            if not self._joint[key]:
                continue
            other = self._queue[partner]
            reason = ""
            if not is_front or self._level[relation] == "A":
                reason = f"deleted {relation}{row!r} while {relation}{front_row!r} is older"
            elif other:
                other_row, other_stamp = next(iter(other.items()))
                if other_stamp < stamp:
                    reason = f"deleted {relation}{row!r} while {partner}{other_row!r} is older"
            if reason:
                self._joint[key] = False
                events.append(
                    self._event(tuple(sorted(key)), "fifo (joint)", "arbitrary", self._joint_declared[key], reason)
                )
        queue.pop(row, None)
        return self._emit(events)

    # -- reading the current patterns -------------------------------------------------------

    def level(self, relation: str) -> Level:
        return self._level[relation]

    def joint(self, r1: str, r2: str) -> bool:
        """Is the merged stream of ``r1`` and ``r2`` still jointly FIFO (as far as monitored)?"""
        return self._joint.get(frozenset((r1, r2)), False)

    def deletion_only(self, relation: str) -> bool:
        return self._deletion_only[relation]

    def patterns(self) -> UpdatePatterns:
        """The current σ: levels per relation and the pairs still jointly FIFO."""
        groups = frozenset(key for key, ok in self._joint.items() if ok and all(self._level[r] != "A" for r in key))
        broken = getattr(self, "_deletion_only_broken", set())
        deleting = frozenset(r for r in getattr(self, "_deletion_only_declared", ()) if r not in broken)
        return UpdatePatterns(dict(self._level), groups, deleting & set(self.relations))

    def stats(self) -> dict[str, int | float]:
        """Counters (flat numbers): violations by kind, levels (0 = I, 1 = F, 2 = A), pairs still joint."""
        out: dict[str, int | float] = {
            "pattern_events": len(self.events),
            "pattern_violations_declared": self.counts["declared"],
            "pattern_downgrades_relation": self.counts["relation"],
            "pattern_downgrades_pair": self.counts["pair"],
            "pattern_downgrades_deletion_only": self.counts["deletion_only"],
            "pattern_joint_pairs": sum(self._joint.values()),
        }
        for r in self.relations:
            out[f"pattern_level.{r}"] = _RANK[self._level[r]]
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["on_event"] = None  # callbacks are the caller's, not state
        return state

    # -- events -------------------------------------------------------------------------------

    def _event(self, relations: tuple[str, ...], before: str, after: str, declared: bool, reason: str) -> PatternEvent:
        return PatternEvent(self._seq, relations, before, after, declared, reason)

    def _emit(self, events: list[PatternEvent]) -> list[PatternEvent]:
        for e in events:
            self.events.append(e)
            self.counts[e.kind] += 1
            if e.declared:
                self.counts["declared"] += 1
            LOG.warning("update pattern %s: %s", "violated" if e.declared else "downgraded", e)
            if self.on_event is not None:
                self.on_event(e)
        return events
