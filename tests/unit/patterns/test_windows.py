"""Sliding windows: expirations in FIFO order (003 §1.3, §3.3)."""

from __future__ import annotations

import random

import pytest

from ivm.patterns import CountWindow, PatternMonitor, TimeWindow, Windows
from ivm.updates import Update


def test_time_window_expires_in_insertion_order_at_the_right_time() -> None:
    w = TimeWindow(10)
    assert w.admit(Update("R", (1,), 1), 0) == []
    assert w.admit(Update("R", (2,), 1), 3) == []
    assert w.admit(Update("S", (3,), 2), 5) == []
    assert w.admit(Update("R", (4,), 1), 9.5) == []
    assert w.admit(Update("R", (5,), 1), 13) == [Update("R", (1,), -1), Update("R", (2,), -1)]
    assert w.advance(15) == [Update("S", (3,), -2)]
    with pytest.raises(ValueError, match="must not decrease"):
        w.advance(14)


def test_count_window_keeps_the_last_n_inserts() -> None:
    w = CountWindow(2)
    out = []
    for i in range(5):
        out += w.admit(Update("R", (i,), 1), i)
    assert out == [Update("R", (0,), -1), Update("R", (1,), -1), Update("R", (2,), -1)]


def test_explicit_delete_cancels_the_oldest_copy() -> None:
    w = TimeWindow(5)
    w.admit(Update("R", (1,), 1), 0)
    w.admit(Update("R", (1,), 1), 1)
    assert w.admit(Update("R", (1,), -1), 2) == []
    assert w.advance(5) == []  # the first copy was cancelled
    assert w.advance(6) == [Update("R", (1,), -1)]


def test_windows_per_relation_and_patterns() -> None:
    shared = TimeWindow(3)
    ws = Windows({"R": shared, "S": shared, "T": CountWindow(1)})
    assert sorted(ws.patterns()) == ["R+S=fifo", "T=fifo"]
    ws.admit(Update("R", (1,), 1), 0)
    ws.admit(Update("T", (1,), 1), 1)
    out = ws.admit(Update("T", (2,), 1), 4)
    assert out == [Update("R", (1,), -1), Update("T", (1,), -1)]
    assert ws.admit(Update("U", (9,), 1), 5) == []  # no window: passes through


@pytest.mark.parametrize("make", [lambda: TimeWindow(7), lambda: CountWindow(6)])
def test_a_shared_window_stream_is_jointly_fifo(make) -> None:
    rng = random.Random(4)
    w = make()
    monitor = PatternMonitor(["R", "S"])
    live: set = set()
    t = 0.0
    for _ in range(500):
        t += rng.random() * 2
        rel = rng.choice("RS")
        row = (rng.randrange(1000),)
        if (rel, row) in live:
            continue
        for e in w.admit(Update(rel, row, 1), t):
            assert (e.relation, e.row) in live
            live.discard((e.relation, e.row))
            monitor.observe(e.relation, e.row, False)
        live.add((rel, row))
        monitor.observe(rel, row, True)
    assert monitor.joint("R", "S")
    assert monitor.level("R") == "F"
    assert not any(e.kind == "pair" or e.after == "arbitrary" for e in monitor.events)
