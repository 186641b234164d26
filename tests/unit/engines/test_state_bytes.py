"""Every engine reports its state's size in ``stats()`` (issue 38): ``state_bytes`` and ``bytes_per_tuple``.

Before, only F-IVM, qhier, the hybrid and the compiled triangle states reported it; the Python
states of the IVM^eps variants, first-order IVM, the general first-order delta, propagation and the
aggregates engine reported nothing.  Each engine here runs its first sample query on a growing set
of distinct tuples: the figure is present, positive, grows with the state (a constant or a figure
of the query alone would not), and lies in a plausible range per tuple.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

import ivm
from ivm.engines import ENGINES
from ivm.engines.memory import Gauge, deep_bytes

SAMPLE_QUERIES = [
    "Q() :- R(a,b), S(b,c), T(c,a)",
    "Q() :- E(a,b), E(b,c), E(c,a)",
    "Q() :- R(a,b), S(a,c)",
    "Q(a) :- R(a,b), S(a,c)",
    "Q() :- R(a,b), S(b,c), T(c,d)",
    "Q() :- R(a), S(a,b), T(b,c), U(c)",
    "Q() :- R(b,c,d), S(a,c,d), T(a,b,d), U(a,b,c)",
]


def _first_query(name: str) -> ivm.Query:
    for text in SAMPLE_QUERIES:
        query = ivm.parse(text)
        if ENGINES[name].refuses(query) is None:
            return query
    raise AssertionError(f"engine {name} accepts none of the sample queries")


def _cases() -> list[tuple[str, str | None]]:
    cases: list[tuple[str, str | None]] = [(name, None) for name in sorted(ENGINES)]
    # the Python states of the engines whose default state is compiled
    cases += [("first_order", "python"), ("ivm_eps", "python"), ("ivm_eps_auto", "python"), ("qhier", "python")]
    return cases


def _tuples(query: ivm.Query, rng: random.Random, n: int) -> list[ivm.Update]:
    arity = dict(query.relations)
    names = sorted(arity)
    out, seen = [], set()
    while len(out) < n:
        rel = names[len(out) % len(names)]
        domain = {1: 5000, 2: 60}.get(arity[rel], 20)  # room for 3,000 distinct tuples in every relation
        row = tuple(rng.randrange(domain) for _ in range(arity[rel]))
        if (rel, row) not in seen:
            seen.add((rel, row))
            out.append(ivm.Update(rel, row, 1))
    return out


@pytest.mark.parametrize(("name", "implementation"), _cases())
def test_every_engine_reports_its_state_per_tuple(name: str, implementation: str | None) -> None:
    query = _first_query(name)
    kwargs = {} if implementation is None else {"implementation": implementation}
    engine = ENGINES[name](query, **kwargs)
    stream = _tuples(query, random.Random(7), 3000)
    engine.apply(stream[:300])
    small = engine.stats()
    assert "state_bytes" in small and "bytes_per_tuple" in small, sorted(small)
    engine.apply(stream[300:])
    large = engine.stats()
    assert large["state_bytes"] > small["state_bytes"] > 0, (small["state_bytes"], large["state_bytes"])
    # at least the tuple's own 8-byte keys, at most a few kB (views of a tuple's joins included)
    assert 8 <= large["bytes_per_tuple"] <= 20_000, large["bytes_per_tuple"]


def test_deep_bytes_counts_each_object_once() -> None:
    shared = (10**20, "a shared string value")
    one = deep_bytes([{1: shared}])
    both = deep_bytes([{1: shared, 2: shared}])
    assert both - one == sys.getsizeof({1: shared, 2: shared}) - sys.getsizeof({1: shared})  # no second tuple
    arr = np.zeros(1000)
    assert deep_bytes([arr]) >= 8000
    assert deep_bytes([[arr, arr[10:20]]]) < 2 * 8000  # a view counts its base once


def test_deep_bytes_walks_slots_and_attributes() -> None:
    class Slotted:
        __slots__ = ("payload",)

        def __init__(self) -> None:
            self.payload = list(range(1000, 2000))

    class Plain:
        def __init__(self) -> None:
            self.payload = list(range(1000, 2000))

    for obj in (Slotted(), Plain()):
        assert deep_bytes([obj]) > 1000 * sys.getsizeof(1000)


def test_the_gauge_measures_again_only_after_an_eighth() -> None:
    calls: list[int] = []
    gauge = Gauge()

    def measure() -> int:
        calls.append(1)
        return 4000

    assert gauge.read(1000, measure) == {"state_bytes": 4000, "bytes_per_tuple": 4.0}
    gauge.read(1100, measure)  # within max(256, 1000/8)
    assert len(calls) == 1
    gauge.read(1300, measure)
    assert len(calls) == 2
