"""Python's cyclic garbage collector kept off the pipeline's state.

A full (generation-2) collection walks every container object the collector tracks; the pipeline's
state (the relations' contents, the engines' indexes: millions of dicts, sets and tuples) is almost all
of them and lives as long as the process.  Left alone, every full collection walks the whole state: a
pause that grows with it (about 0.25 s at 4·10^5 tuples of q-hierarchical state, seconds at 10^7, issue
18), taken in the middle of some batch.

``gc.freeze()`` moves every tracked object to the permanent generation, which no collection walks.
The processor freezes at the points where the state has settled into long-lived objects:

- after recovery (the snapshot loaded and the replay applied), once, after a full collection;
- before every snapshot's fork, so that the parent's collections do not touch (and copy-on-write)
  the pages the child is writing out, and the state built since the last snapshot joins the frozen
  part.

Between two snapshots the collector walks only what the batches since created.  A frozen object that
later becomes cyclic garbage is not reclaimed; the state's objects are freed by reference counting
when a tuple or key goes (they are not cyclic), so what this can keep is bounded by the cycles the
engines drop between freezes, which they do not do on the hot path.

:class:`CollectorWatch` counts and times collections per generation (``gc.callbacks``), for the
metrics and the tests.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def freeze_state(collect: bool = False) -> int:
    """Freeze every object the collector tracks now (after a full collection if ``collect``); returns
    how many objects are frozen in all."""
    if collect:
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@dataclass
class CollectorWatch:
    """Collections seen since :meth:`start`: per generation, their count and total pause in seconds,
    and the largest number of objects a generation-2 collection had to walk."""

    on_collection: Callable[[int, float], None] | None = None  # (generation, seconds) after each one
    collections: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0, 2: 0})
    seconds: dict[int, float] = field(default_factory=lambda: {0: 0.0, 1: 0.0, 2: 0.0})
    walked_by_full: int = 0
    count_walked: bool = False  # measuring what a full collection walks costs a walk itself: tests only
    _started: float = 0.0

    def start(self) -> CollectorWatch:
        gc.callbacks.append(self._on_gc)
        return self

    def stop(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        generation = info["generation"]
        if phase == "start":
            self._started = time.perf_counter()
            if generation == 2 and self.count_walked:
                walked = sum(len(gc.get_objects(generation=g)) for g in range(3))
                self.walked_by_full = max(self.walked_by_full, walked)
            return
        seconds = time.perf_counter() - self._started
        self.collections[generation] += 1
        self.seconds[generation] += seconds
        if self.on_collection is not None:
            self.on_collection(generation, seconds)
