"""The measuring parts of ``bench/compare.py`` (issue 10's comparison): what is timed and what is streamed.

The benchmark's numbers are only as honest as these two pieces: DuckDB's
commits are sampled evenly over a phase (never just the cheap first ones) and
the ``triangle/hubs`` stream keeps set semantics with the stated share of
hub-hub updates.  No timing is asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import compare


class Recorder:
    """A re-evaluating system that records which batches were written and after which it was read."""

    def __init__(self) -> None:
        self.written: list[list[Any]] = []
        self.reads: list[int] = []

    def write(self, batch: list[Any]) -> None:
        self.written.append(batch)

    def read(self) -> int:
        self.reads.append(len(self.written) - 1)
        return sum(len(b) for b in self.written)


@pytest.mark.parametrize(("n_batches", "samples"), [(100, 10), (101, 10), (7, 25), (1, 3), (26, 25)])
def test_sampled_phase_writes_everything_and_times_evenly_spread_commits(n_batches: int, samples: int) -> None:
    stream = [("R", (i, i), 1) for i in range(10 * n_batches - 3)]
    system = Recorder()
    done, seconds, times, result = compare.sampled_phase(system, stream, 10, samples)
    chunks = compare.batches(stream, 10)
    assert system.written == chunks  # every batch applied, in order
    every = -(-len(chunks) // samples)
    expected = sorted({*range(0, len(chunks), every), len(chunks) - 1})
    assert system.reads == expected  # evenly spread, the last included
    assert len(system.reads) <= samples + 1
    assert len(times) == len(expected) and seconds == pytest.approx(sum(times))
    assert done == sum(len(chunks[i]) for i in expected)
    assert result == len(stream)  # the read after the last batch saw the whole phase
    compare.CPU.clear()


def test_duckdb_sampled_result_equals_the_full_recount() -> None:
    load = compare.adversarial_load(3_000, seed=3)
    stream, _ = compare.hub_churn_stream(load, 1_500, 0.05, seed=3)
    db = compare.DuckDB("triangle/hubs")
    compare.sampled_phase(db, load, 100, 4)
    *_, result = compare.sampled_phase(db, stream, 100, 4)
    state: set = set()
    for r, row, m in load + stream:
        (state.add if m > 0 else state.remove)((r, row))
    rel = {x: {row for r, row in state if r == x} for x in "RST"}
    brute = sum(1 for a, b in rel["R"] for (b2, c) in rel["S"] if b2 == b and (c, a) in rel["T"])
    assert result == brute
    compare.CPU.clear()


@pytest.mark.parametrize("share", [0.0, 0.01, 0.2])
def test_hub_churn_stream_keeps_set_semantics_and_its_hub_share(share: float) -> None:
    load = compare.adversarial_load(4_000, seed=5)
    assert len(load) == 4_000 and len({(r, row) for r, row, _ in load}) == 4_000
    stream, stats = compare.hub_churn_stream(load, 5_000, share, seed=5)
    assert len(stream) == 5_000
    present = {(r, row) for r, row, _ in load}
    hub_hub = 0
    for r, row, m in stream:
        assert m in (1, -1)
        if m > 0:
            assert (r, row) not in present, "an insert of a present tuple"
            present.add((r, row))
        else:
            assert (r, row) in present, "a delete of an absent tuple"
            present.remove((r, row))
        hub_hub += set(row) == {0, 1}
    assert hub_hub == stats["hub_hub_updates"]
    if share == 0:
        assert hub_hub == 0
    else:  # binomial(5000, share): within 5 standard deviations
        sd = (5_000 * share * (1 - share)) ** 0.5
        assert abs(hub_hub - 5_000 * share) <= 5 * sd
