"""Sliding windows: expirations generated in FIFO order (Hu & Wang §1.3; 003 §3.3 [PROPOSAL]).

A relation declared with a window keeps only its recent inserts: a
:class:`TimeWindow` of length ``W`` expires an insert made at time ``s`` once
the clock reaches ``s + W``; a :class:`CountWindow` of size ``n`` keeps the
last ``n`` inserts.  Every lifespan then has the same length (in time or in
inserts), so the stream is FIFO (003 §1.3), and one window shared by several
relations makes them *jointly* FIFO (equal windows on the same clock).

The API is pure and O(1) amortized per update: ``window.admit(update,
timestamp)`` returns the expiration deletes due at ``timestamp``, oldest
first, which the caller applies *before* ``update``; an insert is then
remembered, an explicit delete cancels the oldest remembered copies of its
tuple (so they do not expire twice).  :meth:`TimeWindow.advance` expires by a
watermark without an update.

>>> from ivm.updates import Update
>>> w = TimeWindow(10)
>>> w.admit(Update("R", (1,), 1), 0), w.admit(Update("S", (2,), 1), 4)
([], [])
>>> w.admit(Update("R", (3,), 1), 12)
[Update(relation='R', row=(1,), mult=-1)]
>>> w.advance(20), w.patterns()
([Update(relation='S', row=(2,), mult=-1)], ['R+S=fifo'])
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ivm.updates import Row, Update


class _Entry:
    __slots__ = ("mult", "relation", "row", "stamp")

    def __init__(self, relation: str, row: Row, mult: int, stamp: float) -> None:
        self.relation = relation
        self.row = row
        self.mult = mult
        self.stamp = stamp


class _Window:
    """The shared queue: entries in insertion order, per tuple the entries still pending."""

    def __init__(self, relations: Iterable[str] | None) -> None:
        self.relations = None if relations is None else frozenset(relations)
        self._queue: deque[_Entry] = deque()
        self._pending: dict[tuple[str, Row], deque[_Entry]] = {}
        self._seen: set[str] = set()
        self._clock: float = float("-inf")

    def covers(self, relation: str) -> bool:
        return self.relations is None or relation in self.relations

    def __len__(self) -> int:
        """The number of live windowed inserts (entries not expired or cancelled)."""
        return sum(1 for e in self._queue if e.mult)

    def admit(self, update: Update, timestamp: float) -> list[Update]:
        """The expirations due at ``timestamp`` (apply them before ``update``), oldest first."""
        if timestamp < self._clock:
            raise ValueError(f"timestamps must not decrease: {timestamp} after {self._clock}")
        self._clock = timestamp
        out = self._expire(timestamp)
        relation, row, mult = update
        if not self.covers(relation) or not mult:
            return out
        self._seen.add(relation)
        key = (relation, tuple(row))
        if mult > 0:
            entry = _Entry(relation, key[1], mult, timestamp)
            self._queue.append(entry)
            self._pending.setdefault(key, deque()).append(entry)
            self._after_insert()
            out += self._overflow()
        else:
            self._cancel(key, -mult)
        return out

    def advance(self, timestamp: float) -> list[Update]:
        """Expire by a watermark: the expirations due at ``timestamp``, oldest first."""
        if timestamp < self._clock:
            raise ValueError(f"timestamps must not decrease: {timestamp} after {self._clock}")
        self._clock = timestamp
        return self._expire(timestamp)

    def patterns(self) -> list[str]:
        """The update patterns this window guarantees, in ``--pattern`` syntax."""
        names = sorted(self.relations if self.relations is not None else self._seen)
        return ["+".join(names) + "=fifo"] if names else []

    # the policies ----------------------------------------------------------------------------

    def restrict(self, keep: Callable[[str, Row], bool]) -> None:
        """Keep only the entries of the tuples ``keep(relation, row)`` accepts, in their order (a part of the
        window: the executors' placement cuts a whole pipeline's window to one slice's tuples).  A count
        window keeps its live count of the kept entries.  O(entries)."""
        self._queue = deque(e for e in self._queue if e.mult and keep(e.relation, e.row))
        self._pending = {key: pending for key, pending in self._pending.items() if keep(*key)}
        self._on_restrict()

    def _on_restrict(self) -> None:
        """Bookkeeping after :meth:`restrict`."""

    def _due(self, entry: _Entry, now: float) -> bool:
        raise NotImplementedError

    def _after_insert(self) -> None:
        """Bookkeeping after an insert (count windows count live entries)."""

    def _overflow(self) -> list[Update]:
        return []

    def _expire(self, now: float) -> list[Update]:
        out: list[Update] = []
        queue = self._queue
        while queue and (not queue[0].mult or self._due(queue[0], now)):
            entry = queue.popleft()
            if entry.mult:
                out.append(self._retire(entry))
        return out

    def _retire(self, entry: _Entry) -> Update:
        key = (entry.relation, entry.row)
        pending = self._pending[key]
        pending.popleft()
        if not pending:
            del self._pending[key]
        mult, entry.mult = entry.mult, 0
        self._on_retire()
        return Update(entry.relation, entry.row, -mult)

    def _on_retire(self) -> None:
        """Bookkeeping when an entry leaves the window."""

    def _cancel(self, key: tuple[str, Row], amount: int) -> None:
        """An explicit delete: remove ``amount`` copies from the oldest pending entries of the tuple."""
        pending = self._pending.get(key)
        while pending and amount:
            entry = pending[0]
            take = min(amount, entry.mult)
            entry.mult -= take
            amount -= take
            if not entry.mult:
                pending.popleft()
                self._on_retire()
        if pending is not None and not pending:
            del self._pending[key]


class TimeWindow(_Window):
    """Time-based window of ``length``: an insert at ``s`` expires at the first admit with
    timestamp ≥ ``s + length``.  ``relations``: the windowed relations sharing this clock
    (``None``: every relation it sees); they are jointly FIFO.
    """

    def __init__(self, length: float, relations: Iterable[str] | None = None) -> None:
        if length <= 0:
            raise ValueError(f"a window length must be positive, got {length}")
        super().__init__(relations)
        self.length = length

    def _due(self, entry: _Entry, now: float) -> bool:
        return entry.stamp + self.length <= now


class CountWindow(_Window):
    """Count-based window: the last ``size`` inserts of its relations stay; older ones expire,
    oldest first.  (An insert of multiplicity m is one insert.)"""

    def __init__(self, size: int, relations: Iterable[str] | None = None) -> None:
        if size <= 0:
            raise ValueError(f"a window size must be positive, got {size}")
        super().__init__(relations)
        self.size = size
        self._live = 0

    def _due(self, entry: _Entry, now: float) -> bool:
        return False

    def _after_insert(self) -> None:
        self._live += 1

    def _on_restrict(self) -> None:
        self._live = sum(1 for e in self._queue if e.mult)

    def _on_retire(self) -> None:
        self._live -= 1

    def _overflow(self) -> list[Update]:
        out: list[Update] = []
        queue = self._queue
        while self._live > self.size:
            entry = queue.popleft()
            if entry.mult:
                out.append(self._retire(entry))
        while queue and not queue[0].mult:  # drop cancelled heads
            queue.popleft()
        return out


class Windows:
    """Several windows by relation; relations without a window pass through unchanged.

    ``admit(update, timestamp)`` returns the expirations of *all* windows due at
    ``timestamp`` (each window's in FIFO order) to apply before ``update``.

    >>> ws = Windows({"R": TimeWindow(5), "S": CountWindow(1)})
    >>> ws.admit(Update("R", (1,), 1), 0), ws.admit(Update("S", (1,), 1), 1)
    ([], [])
    >>> ws.admit(Update("S", (2,), 1), 6)
    [Update(relation='R', row=(1,), mult=-1), Update(relation='S', row=(1,), mult=-1)]
    """

    def __init__(self, windows: Mapping[str, TimeWindow | CountWindow]) -> None:
        self._by_relation: dict[str, _Window] = {}
        self._windows: list[_Window] = []
        for relation, window in windows.items():
            if window.relations is not None and relation not in window.relations:
                raise ValueError(f"window for {relation} is declared for {sorted(window.relations)}")
            if window.relations is None:
                window.relations = frozenset(r for r, w in windows.items() if w is window)
            self._by_relation[relation] = window
            if all(w is not window for w in self._windows):
                self._windows.append(window)

    def admit(self, update: Update, timestamp: float) -> list[Update]:
        out: list[Update] = []
        own = self._by_relation.get(update.relation)
        for window in self._windows:
            if window is own:
                out += window.admit(update, timestamp)
            else:
                out += window.advance(timestamp)
        return out

    def advance(self, timestamp: float) -> list[Update]:
        """Expire by a watermark: every window's expirations due at ``timestamp`` (an update's own
        admission may add a count window's overflow later)."""
        out: list[Update] = []
        for window in self._windows:
            out += window.advance(timestamp)
        return out

    def restrict(self, keep: Callable[[str, Row], bool]) -> None:
        """Keep only the entries of the tuples ``keep(relation, row)`` accepts (:meth:`TimeWindow.restrict`)."""
        for window in self._windows:
            window.restrict(keep)

    def patterns(self) -> list[str]:
        """``R=fifo`` / ``R+S=fifo`` for every window (DESIGN §3 pattern syntax)."""
        return [p for w in self._windows for p in w.patterns()]

    def stats(self) -> dict[str, Any]:
        return {
            f"window_live.{r}": sum(1 for e in w._queue if e.mult and e.relation == r)
            for r, w in self._by_relation.items()
        }
