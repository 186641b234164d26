"""The compact first-order state (``_triangle_kernel.pyx``) against the Python reference loop.

First-order IVM (IVM^eps §1.1, App. A.1) costs O(min(deg)) per update in the
compact C tables as in the Python dicts of sets; here both must agree exactly:
the count, every relation, the sizes, the stops (lo/hi/hot) after each batch,
on random insert/delete streams with multiplicities other than 1, deletes of
absent tuples, inserts and deletes of one tuple in one batch, self-joins,
hubs, batches of 1 to 1000, snapshots in the middle of a stream, the fallback
to Python slots for multiplicities the C state does not store, and the
renumbering of ids.  Without the built extension the compiled tests are
skipped (except under ``CI=true``) and the Python fallbacks are tested.
"""

from __future__ import annotations

import os
import pickle
import random
import sys
from typing import Any

import pytest

from ivm.engines.first_order import engine as first_order
from ivm.engines.first_order.engine import (
    CompactSlot,
    FirstOrderIVM,
    TriangleFirstOrder,
    apply_first_order_python,
    compact_slots,
    first_order_plan,
    uses_compact,
)
from ivm.engines.ivm_eps import check_invariants
from ivm.engines.ivm_eps.adaptive import IVMEpsAdaptive
from ivm.engines.ivm_eps.invariants import brute_force_triangles
from ivm.engines.ivm_eps.partition import AllLightPartition
from ivm.query import parse

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BUILT = TriangleFirstOrder is not None
needs_state = pytest.mark.skipif(not BUILT and not CI, reason="the compact state is not built (pip install -e .)")

TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"
SELF_JOIN = "Q() :- E(a,b), E(b,c), E(c,a)"
QUERIES = [TRIANGLE, "Q() :- R(a,b), S(c,b), T(c,a)", "Q() :- E(a,b), E(b,c), F(c,a)", SELF_JOIN]
Stream = list[tuple[str, tuple, int]]


def mixed_stream(rng: random.Random, relations: list[str], n: int, domain: int = 25, hub: float = 0.0) -> Stream:
    """Inserts, deletes of live and of absent tuples, multiplicities -3..3 and 0, and with
    probability ``hub`` a tuple at the hub value 0; one tuple often inserted and deleted close by."""
    live: dict[tuple[str, tuple], int] = {}
    out: Stream = []
    for _ in range(n):
        r = rng.random()
        if live and r < 0.3:  # delete (part of) a live tuple
            key = rng.choice(list(live))
            m = -live[key] if rng.random() < 0.7 else -1
        elif out and r < 0.4:  # the same tuple again, opposite sign: cancels inside a batch
            rel, row, m = out[-1 - rng.randrange(min(len(out), 5))]
            key, m = (rel, row), -m if m else 1
        else:
            if rng.random() < hub:
                v = rng.randrange(domain)
                row = (0, v) if rng.random() < 0.5 else (v, 0)
            else:
                row = (rng.randrange(domain), rng.randrange(domain))
            key = (rng.choice(relations), row)
            m = rng.choice([1, 1, 1, 1, 2, 3, -1, -2, -3, 0])  # -m on an absent tuple: a negative one
        live[key] = live.get(key, 0) + m
        if not live[key]:
            del live[key]
        out.append((key[0], key[1], m))
    return out


def slots_state(slots: Any) -> list[tuple]:
    """Each slot's tuples with multiplicities, sizes and key counts."""
    out = []
    for p in slots:
        assert isinstance(p, AllLightPartition)
        rel = {(x, y): m for x, y, m in p.items()}
        assert rel == {(x, y): p.get(x, y) for x, y in rel}
        out.append((rel, p.lsize, len(p.lf), len(p.lb), dict(p.other)))
    return out


def brute_count(engine: FirstOrderIVM) -> int:
    slots = [{(x, y): m for x, y, m in p.items()} for p in engine._slots]
    return sum(brute_force_triangles(slots).values())


def test_uses_compact_names() -> None:
    assert uses_compact("python") is False
    assert uses_compact("auto") is BUILT
    with pytest.raises(ValueError, match="implementation"):
        uses_compact("fast")


@needs_state
@pytest.mark.parametrize("text", QUERIES)
@pytest.mark.parametrize("batch", [1, 7, 100, 1000])
def test_first_order_engine_matches_python(text: str, batch: int) -> None:
    """FirstOrderIVM compiled vs python: count, every slot, multiplicity() and stats after each batch."""
    query = parse(text)
    for seed in range(3):
        rng = random.Random(100 * batch + seed)
        stream = mixed_stream(rng, sorted(query.relations), 2500, hub=0.3 if seed == 2 else 0.0)
        compiled = FirstOrderIVM(query, implementation="compiled")
        python = FirstOrderIVM(query, implementation="python")
        assert isinstance(compiled._slots[0], CompactSlot)
        for i in range(0, len(stream), batch):
            compiled.apply(stream[i : i + batch])
            python.apply(stream[i : i + batch])
            assert compiled.result() == python.result(), i
            if i % (10 * batch) == 0:
                assert slots_state(compiled._slots) == slots_state(python._slots)
        assert compiled.result() == brute_count(python)
        assert slots_state(compiled._slots) == slots_state(python._slots)
        assert without_memory(compiled.stats()) == without_memory(python.stats())
        for rel, row, _ in stream[:200]:
            assert compiled.multiplicity(rel, row) == python.multiplicity(rel, row)


@needs_state
@pytest.mark.parametrize("text", [TRIANGLE, SELF_JOIN])
def test_batch_equals_one_by_one(text: str) -> None:
    """apply(batch) = the updates one at a time, for one batch that mixes everything."""
    query = parse(text)
    rng = random.Random(4)
    stream = mixed_stream(rng, sorted(query.relations), 3000, domain=15, hub=0.2)
    whole, single = (FirstOrderIVM(query, implementation="compiled") for _ in range(2))
    whole.apply(stream)
    for u in stream:
        single.apply([u])
    assert whole.result() == single.result()
    assert slots_state(whole._slots) == slots_state(single._slots)


@needs_state
@pytest.mark.parametrize("text", QUERIES)
def test_kernel_stops_match_the_reference(text: str) -> None:
    """The size and degree stops (lo, hi, hot) return the same (next, count, applied, hit)."""
    query = parse(text)
    relations = sorted(query.relations)
    occurrences = FirstOrderIVM(query, implementation="python")._occurrences
    rng = random.Random(3)
    for _ in range(120):
        stream = mixed_stream(rng, relations, 300, domain=12, hub=0.3)
        keysets = [AllLightPartition() for _ in range(3)]
        plan = first_order_plan(keysets, occurrences)
        compact = compact_slots(occurrences)
        assert compact is not None
        state = compact[0].state
        apply_first_order_python(keysets, plan, stream[:150], 0, 0)
        state.apply(stream[:150], 0, 0)
        start, count = rng.randrange(150, 300), rng.randrange(-5, 5)
        size = state.total()
        lo = rng.choice([-1, size - rng.randrange(1, 5)])
        hi = rng.choice([sys.maxsize, size + rng.randrange(1, 5)])
        hot = rng.choice([sys.maxsize, rng.randrange(2, 8)])
        want = apply_first_order_python(keysets, plan, stream, start, count, lo, hi, hot)
        got = state.apply(stream, start, count, lo, hi, hot)
        assert got == (*want, False)
        assert slots_state(compact) == slots_state(keysets)
    assert state.apply([], 0, 5) == (0, 5, 0, None, False)


@needs_state
def test_snapshot_round_trip_mid_stream() -> None:
    """pickle (snapshot/restore) in the middle of a stream, then both copies go on identically."""
    for text in (TRIANGLE, SELF_JOIN):
        query = parse(text)
        rng = random.Random(8)
        stream = mixed_stream(rng, sorted(query.relations), 3000, hub=0.2)
        engine = FirstOrderIVM(query, implementation="compiled")
        python = FirstOrderIVM(query, implementation="python")
        engine.apply(stream[:1500])
        python.apply(stream[:1500])
        restored = FirstOrderIVM.restore(engine.snapshot())
        assert isinstance(restored, FirstOrderIVM)
        assert restored.result() == engine.result()
        assert slots_state(restored._slots) == slots_state(engine._slots)
        for i in range(1500, 3000, 100):
            for e in (engine, restored, python):
                e.apply(stream[i : i + 100])
            assert restored.result() == engine.result() == python.result()
        assert slots_state(restored._slots) == slots_state(python._slots)
        adaptive = IVMEpsAdaptive(query if text == TRIANGLE else parse(TRIANGLE), implementation="compiled")
        if text == TRIANGLE:
            adaptive.apply(stream[:1500])
            back = IVMEpsAdaptive.restore(adaptive.snapshot())
            assert isinstance(back.parts[0], CompactSlot)
            assert back.parts[0].state is back.parts[2].state
            back.apply(stream[1500:])
            adaptive.apply(stream[1500:])
            assert back.result() == adaptive.result() == python.result()
            assert slots_state(back.parts) == slots_state(adaptive.parts)


@needs_state
@pytest.mark.parametrize("big", [2**40, -(2**40), 2**28 + 1, 3.0])
def test_multiplicities_beyond_the_state_fall_back(big: Any) -> None:
    """A multiplicity the C state does not store: the slots move to key sets, nothing is lost."""
    query = parse(TRIANGLE)
    rng = random.Random(6)
    stream = mixed_stream(rng, ["R", "S", "T"], 1500, domain=10)
    stream[700:700] = [("R", (1, 2), big), ("S", (2, 3), 5), ("T", (3, 1), 2), ("R", (1, 2), 1)]
    for batch in (1, 100, 5000):
        compiled = FirstOrderIVM(query, implementation="compiled")
        python = FirstOrderIVM(query, implementation="python")
        adaptive = IVMEpsAdaptive(query, implementation="compiled", skew=100.0)
        reference = IVMEpsAdaptive(query, implementation="python", skew=100.0)
        for i in range(0, len(stream), batch):
            for e in (compiled, python, adaptive, reference):
                e.apply(stream[i : i + batch])
            assert compiled.result() == python.result() == adaptive.result() == reference.result()
        assert not isinstance(compiled._slots[0], CompactSlot)
        assert not isinstance(adaptive.parts[0], CompactSlot)
        assert slots_state(compiled._slots) == slots_state(python._slots)
        assert slots_state(adaptive.parts) == slots_state(reference.parts)


@needs_state
@pytest.mark.parametrize(("promote", "cost"), [("degree", 4096), ("work", 1)])
def test_adaptive_invariants_with_compact_slots(promote: str, cost: int) -> None:
    """The §7.3 checker reads compact slots like key sets, across promotions and demotions."""
    query = parse(TRIANGLE)
    rng = random.Random(12)
    kw = {"skew": 1.0, "dwell": 0.05, "promote": promote, "cost": cost}
    engine = IVMEpsAdaptive(query, implementation="compiled", **kw)
    engine.min_check = 8
    python = IVMEpsAdaptive(query, implementation="python", **kw)
    python.min_check = 8
    stream = mixed_stream(rng, ["R", "S", "T"], 1200, domain=20, hub=0.6)
    stream += [(r, row, -m) for r, row, m in reversed(stream)]
    seen_compact = False
    for i in range(0, len(stream), 40):
        engine.apply(stream[i : i + 40])
        python.apply(stream[i : i + 40])
        check_invariants(engine)
        assert engine.result() == python.result()
        assert without_memory(engine.stats()) == without_memory(python.stats())
        seen_compact |= isinstance(engine.parts[0], CompactSlot) and engine.size > 0
    assert engine.promotions > 0 and engine.demotions > 0
    assert seen_compact and isinstance(engine.parts[0], CompactSlot)


@needs_state
def test_ids_are_renumbered_and_stay_bounded() -> None:
    """Streams of ever new values: the numbered values stay within 4|D| + 4096, the state exact."""
    query = parse(TRIANGLE)
    engine = FirstOrderIVM(query, implementation="compiled")
    python = FirstOrderIVM(query, implementation="python")
    base = [(r, (k % 7, (k + 1) % 7), 1) for k in range(7) for r in "RST"]
    engine.apply(base)
    python.apply(base)
    state = engine._slots[0].state
    for k in range(12000):
        batch = [("R", (10**6 + k, 3), 1), ("S", (3, 10**6 + k), 1), ("T", (10**6 + k, 10**6 + k), 1)]
        batch += [(r, row, -1) for r, row, _ in batch]
        engine.apply(batch)
        python.apply(batch)
        assert state.nvalues() <= 4 * state.total() + 4096 + 6
    assert engine.result() == python.result() == brute_count(python)
    assert slots_state(engine._slots) == slots_state(python._slots)
    assert pickle.loads(pickle.dumps(state)).nvalues() <= 2 * state.total()


def test_without_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    """No compact state built: ``auto`` keeps Python key sets, ``compiled`` refuses, results exact."""
    monkeypatch.setattr(first_order, "TriangleFirstOrder", None)
    with pytest.raises(ImportError, match="_triangle_kernel"):
        FirstOrderIVM(parse(TRIANGLE), implementation="compiled")
    engine = IVMEpsAdaptive(parse(TRIANGLE))
    assert not isinstance(engine.parts[0], CompactSlot)
    fo = FirstOrderIVM(parse(TRIANGLE), implementation="auto")
    stream = mixed_stream(random.Random(1), ["R", "S", "T"], 800)
    engine.apply(stream)
    fo.apply(stream)
    assert engine.result() == fo.result() == brute_count(fo)


@needs_state
@pytest.mark.parametrize("batch", [1, 300])
def test_hub_degrees_cross_every_layout(batch: int) -> None:
    """A hub's key set grows through the array, table and bitset layouts (degree 0 -> 600) and
    shrinks back, with other keys around; multiplicities, deletes and re-inserts on the way."""
    query = parse(TRIANGLE)
    rng = random.Random(21)
    stream: Stream = []
    for v in range(1, 601):  # the hub 0 in all three relations, both sides
        stream += [("R", (0, v), 1), ("S", (v, v % 50 + 1), 1), ("T", (v % 50 + 1, 0), 1 + (v % 7 == 0))]
        if v % 3 == 0:
            stream.append(("S", (v, 0), 1))
            stream.append(("T", (0, v), 1))
    stream += mixed_stream(rng, ["R", "S", "T"], 1500, domain=120, hub=0.5)
    rng.shuffle(stream)
    stream += [(r, row, -m) for r, row, m in stream if rng.random() < 0.8]  # most of it deleted again
    stream += [("R", (0, v), 2) for v in range(1, 200)]
    compiled = FirstOrderIVM(query, implementation="compiled")
    python = FirstOrderIVM(query, implementation="python")
    peak = 0
    for i in range(0, len(stream), batch):
        compiled.apply(stream[i : i + batch])
        python.apply(stream[i : i + batch])
        assert compiled.result() == python.result(), i
        peak = max(peak, compiled._slots[0].max_degree())
    assert peak >= 500
    assert slots_state(compiled._slots) == slots_state(python._slots)
    assert compiled.result() == brute_count(python)


@needs_state
def test_graph_stream_inserts_then_deletes() -> None:
    """A facebook-like stream (each edge as 6 tuples, then half of the edges deleted) on a dense
    random graph: degrees large enough for bitsets everywhere; count = 6 x triangles."""
    rng = random.Random(5)
    n = 150
    edges = sorted({(min(u, v), max(u, v)) for u, v in ((rng.randrange(n), rng.randrange(n)) for _ in range(4000))})
    edges = [e for e in edges if e[0] != e[1]]
    rng.shuffle(edges)

    def six(u: int, v: int, m: int) -> Stream:
        return [(r, row, m) for r in "RST" for row in ((u, v), (v, u))]

    inserts = [t for u, v in edges for t in six(u, v, 1)]
    deletes = [t for u, v in edges[: len(edges) // 2] for t in six(u, v, -1)]
    adj: dict[int, set[int]] = {}
    for u, v in edges:
        adj.setdefault(u, set()).add(v)
        adj.setdefault(v, set()).add(u)
    triangles = sum(len(adj[u] & adj[v]) for u, v in edges) // 3
    for batch in (1, 1000):
        engine = IVMEpsAdaptive(parse(TRIANGLE), implementation="compiled")
        python = FirstOrderIVM(parse(TRIANGLE), implementation="python")
        for i in range(0, len(inserts), batch):
            engine.apply(inserts[i : i + batch])
        python.apply(inserts)
        assert engine.result() == python.result() == 6 * triangles
        for i in range(0, len(deletes), batch):
            engine.apply(deletes[i : i + batch])
        python.apply(deletes)
        assert engine.result() == python.result()
        assert slots_state(engine.parts) == slots_state(python._slots)


@needs_state
def test_equal_values_of_other_types_share_a_key() -> None:
    """1.0, True and numpy integers equal to an int are one key, whichever arrives first (as in a set)."""
    np = pytest.importorskip("numpy")
    query = parse(TRIANGLE)
    rng = random.Random(9)
    kinds = [int, float, np.int64, lambda v: bool(v) if v in (0, 1) else v, lambda v: v + 2**64 - 2**64]
    for batch in (1, 50):
        stream = []
        for _ in range(1500):
            x, y = rng.randrange(6), rng.randrange(6)
            row = (rng.choice(kinds)(x), rng.choice(kinds)(y))
            stream.append((rng.choice("RST"), row, rng.choice([1, 1, 2, -1])))
        compiled = FirstOrderIVM(query, implementation="compiled")
        python = FirstOrderIVM(query, implementation="python")
        for i in range(0, len(stream), batch):
            compiled.apply(stream[i : i + batch])
            python.apply(stream[i : i + batch])
            assert compiled.result() == python.result()
        assert slots_state(compiled._slots) == slots_state(python._slots)
        for x in range(6):
            for y in range(6):
                assert compiled.multiplicity("R", (x, float(y))) == python.multiplicity("R", (x, y))


@needs_state
def test_state_holds_no_python_object_per_tuple() -> None:
    """The collector has nothing per stored tuple to walk: tracked objects grow with the values only."""
    import gc

    query = parse(TRIANGLE)
    engine = IVMEpsAdaptive(query, implementation="compiled", skew=100.0)
    rng = random.Random(13)
    stream = [(rng.choice("RST"), (rng.randrange(300), rng.randrange(300)), 1) for _ in range(20000)]
    gc.collect()
    before = len(gc.get_objects())
    for i in range(0, len(stream), 1000):
        engine.apply(stream[i : i + 1000])
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert isinstance(engine.parts[0], CompactSlot) and engine.size > 15000
    assert grown < 100, grown  # the ids dict and the values list are one object each


def without_memory(stats: dict) -> dict:
    """``stats()`` without the byte counts (the compact state and the Python slots measure different things)."""
    assert "bytes_per_tuple" not in stats or stats["bytes_per_tuple"] > 0 or not stats["state_tuples"]
    return {k: v for k, v in stats.items() if k not in ("state_bytes", "bytes_per_tuple")}


def test_the_compact_state_reports_its_bytes_per_tuple() -> None:
    import ivm

    view = ivm.maintain("Q() :- R(a,b), S(b,c), T(c,a)")
    rng = random.Random(9)
    edges = {(rng.randrange(300), rng.randrange(300)) for _ in range(6000)}
    view.apply([(r, e, 1) for r in "RST" for e in edges])
    stats = view.stats()
    assert stats["state_tuples"] == 3 * len(edges)
    assert stats["bytes_per_tuple"] == round(stats["state_bytes"] / stats["state_tuples"], 1)
    # dense keys (300 values, ~20 per key): ids and headers amortize; 4-12 bytes per tuple and direction
    assert 8 <= stats["bytes_per_tuple"] <= 100


def sparse_hub_stream(rng: random.Random, n: int, values: int) -> Stream:
    """A large sparse two-hub stream (most keys of degree 1 or 2, held in the row header; the hubs 0 and 1
    dense): inserts at new and old values, deletes of live tuples to zero and in part, multiplicities
    -2..3, so that keys go 0 -> 1 -> 2 -> 1 -> 0 ids and back many times."""
    live: dict[tuple[str, tuple], int] = {}
    keys: list[tuple[str, tuple]] = []
    out: Stream = []
    for _ in range(n):
        r = rng.random()
        if keys and r < 0.3:
            key = keys[rng.randrange(len(keys))]
            m = -live.get(key, 1) if rng.random() < 0.8 else -1
        else:
            if r < 0.55:
                v = 2 + rng.randrange(values)
                row = (rng.randrange(2), v) if rng.random() < 0.5 else (v, rng.randrange(2))
            else:
                row = (2 + rng.randrange(values), 2 + rng.randrange(values))
            key = (rng.choice("RST"), row)
            m = rng.choice([1, 1, 1, 1, 1, 2, 3, -2])
            keys.append(key)
        live[key] = live.get(key, 0) + m
        if not live[key]:
            del live[key]
        out.append((key[0], key[1], m))
    return out


@needs_state
@pytest.mark.parametrize("batch", [1, 1000])
def test_large_sparse_hub_stream_matches_python(batch: int) -> None:
    """A stream over 30,000 values (the id-indexed row headers and the int map grow past 256 kB onto
    2 MB-aligned mappings, moving several times; keys of degree 1 keep their id in the header, whose
    pointer must follow each move) against the Python reference: count after every batch, every slot,
    a snapshot in the middle, and brute force at the end."""
    query = parse(TRIANGLE)
    rng = random.Random(31 + batch)
    stream = sparse_hub_stream(rng, 60000, 30000)
    compiled = FirstOrderIVM(query, implementation="compiled")
    python = FirstOrderIVM(query, implementation="python")
    restored = None
    for i in range(0, len(stream), batch):
        compiled.apply(stream[i : i + batch])
        python.apply(stream[i : i + batch])
        if restored is not None:
            restored.apply(stream[i : i + batch])
        if i % 5000 == 0:
            assert compiled.result() == python.result(), i
        if restored is None and i >= len(stream) // 2:
            restored = FirstOrderIVM.restore(compiled.snapshot())
    assert compiled._slots[0].state.nvalues() > 20000
    assert compiled.result() == python.result() == restored.result() == brute_count(python)
    assert slots_state(compiled._slots) == slots_state(python._slots) == slots_state(restored._slots)
    for rel, row, _ in stream[-300:]:
        assert compiled.multiplicity(rel, row) == python.multiplicity(rel, row)


@needs_state
def test_a_new_int_is_new_only_while_every_value_is_an_int() -> None:
    """The int map answers alone for a new int only while every value numbered is an exact int in it:
    after 1.5 or 10**30 (kept in the dict only) an int equal to a value of another type still finds its
    key (2.0 then 2, True then 1), and an int first seen as an int is found as 3.0 or numpy's 3."""
    np = pytest.importorskip("numpy")
    query = parse(TRIANGLE)
    ints = [(r, (x, (x * 7 + 1) % 40), 1) for x in range(40) for r in "RST"]  # ints only: the fast miss
    tail = [
        ("R", (2.0, 5.5), 1),  # 2 was numbered as an int: the float finds it; 5.5 is uncovered
        ("S", (5.5, 10**30), 1),
        ("T", (10**30, 2), 1),  # a triangle 2 -> 5.5 -> 10**30 -> 2 through the int 2
        ("R", (True, 99.0), 1),
        ("S", (99, np.int64(3)), 1),  # 99.0 first, then the int 99: one key
        ("T", (3.0, 1), 2),  # closes 1 -> 99 -> 3 -> 1 with the int 1 = True
        ("R", (123456789.0, 77), 1),
        ("S", (77, 4), 1),
        ("T", (4, 123456789), 1),  # the float first, then the int: one key
    ]
    for batch in (1, 100):
        compiled = FirstOrderIVM(query, implementation="compiled")
        python = FirstOrderIVM(query, implementation="python")
        for stream in (ints, tail):
            for i in range(0, len(stream), batch):
                compiled.apply(stream[i : i + batch])
                python.apply(stream[i : i + batch])
                assert compiled.result() == python.result()
        assert compiled.result() == brute_count(python)
        assert slots_state(compiled._slots) == slots_state(python._slots)
        assert compiled.multiplicity("T", (123456789, 4.0)) == 0
        assert compiled.multiplicity("T", (4.0, 123456789)) == 1
