"""The cyclic collector off the pipeline's state (ivm/processor/state/collector.py, issue 18).

A pipeline holding a state of some 10^5 objects applies small batches while every collection is
watched.  With the state frozen as the processor freezes it (after recovery, before each snapshot),
no full collection on the hot path walks the state: the largest number of objects a generation-2
collection had to consider stays a small fraction of the state.  Without the freeze, the same run's
full collection walks all of it; that control keeps the test able to fail.  Counts, not times: how
long the pauses are is the benchmarks' business.
"""

from __future__ import annotations

import gc
import random
import tomllib
from pathlib import Path

import pytest

from ivm.processor.config import parse_config
from ivm.processor.pipeline import Pipeline
from ivm.processor.state.collector import CollectorWatch, freeze_state
from tests.unit.test_pipeline import MemorySink, _record

ROOT = Path(__file__).resolve().parents[2]
EDGES = 30_000


def _pipeline_with_state() -> tuple[Pipeline, int]:
    """A triangle pipeline over ``EDGES`` random edges per relation; the number of objects it added.

    The engine is ``first_order`` (the Python reference: a dict of sets per relation), whose state
    is Python objects the collector tracks; the compact engines that ``auto`` picks keep theirs in
    arrays the collector never sees, which would leave this test nothing to watch.
    """
    gc.collect()
    before = len(gc.get_objects())
    rng = random.Random(4)
    raw = tomllib.loads((ROOT / "config" / "demo.toml").read_text())
    raw["queries"][0]["engine"] = "first_order"
    pipeline = Pipeline(parse_config(raw, ROOT / "config"), MemorySink())
    offsets = dict.fromkeys("RST", 0)
    batch = []
    for _ in range(EDGES):
        for rel in "RST":
            batch.append(_record(rel, offsets[rel], (rng.randrange(10**6), rng.randrange(10**6)), 1))
            offsets[rel] += 1
    pipeline.process(batch, 0)
    del batch
    gc.collect()
    return pipeline, len(gc.get_objects()) - before


def _hot_path(pipeline: Pipeline) -> CollectorWatch:
    """200 small batches, then a full collection, with every collection watched."""
    rng = random.Random(5)
    watch = CollectorWatch(count_walked=True).start()
    try:
        for batch_id in range(1, 201):
            rel = "RST"[batch_id % 3]
            rows = [(rng.randrange(10**6), rng.randrange(10**6)) for _ in range(5)]
            pipeline.process([_record(rel, 10**6 + 5 * batch_id + i, row, 1) for i, row in enumerate(rows)], batch_id)
        gc.collect()  # a full collection on the hot path, whenever the thresholds would have called it
    finally:
        watch.stop()
    return watch


@pytest.fixture(autouse=True)
def _unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_no_full_collection_walks_the_frozen_state() -> None:
    pipeline, state_objects = _pipeline_with_state()
    assert state_objects > 100_000, "the state is large enough to see"
    frozen = freeze_state(collect=True)
    assert frozen >= state_objects
    watch = _hot_path(pipeline)
    assert watch.collections[2] >= 1
    assert watch.walked_by_full < state_objects / 10, (
        f"a full collection walked {watch.walked_by_full:,} objects; the state has {state_objects:,}"
    )


def test_without_the_freeze_a_full_collection_walks_the_whole_state() -> None:
    pipeline, state_objects = _pipeline_with_state()
    watch = _hot_path(pipeline)
    assert watch.collections[2] >= 1
    assert watch.walked_by_full >= state_objects


def test_the_watch_reports_each_collection() -> None:
    seen: list[tuple[int, float]] = []
    watch = CollectorWatch(lambda generation, seconds: seen.append((generation, seconds))).start()
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        watch.stop()
    assert [g for g, _ in seen][-2:] == [0, 2]
    assert all(s >= 0 for _, s in seen)
    assert watch.collections[2] >= 1 and watch.seconds[2] >= 0
