"""The compiled helpers of F-IVM's batch paths and the C-level passes around them (issue 24).

- :class:`Int64Index` (a view's primary index for one-int keys) against a dict, pickled;
- :func:`columnar.int_codes`: only plain ints in int64 get codes (``True``, ``1.0`` and numpy
  ints compare equal to ints in a dict, so they must not);
- :func:`scan_sum` and the numpy rule :func:`_sum_by_int` against a brute-force sum, with the
  overflow and type refusals that send a batch to the Python rule;
- count and covariance queries under random insert/delete batches: the result and every view
  equal with the kernels on and off, and the counts equal a brute-force join;
- :meth:`View.apply`'s batch path against its per-update loop: the same outcome (applied,
  rejected with reasons) and the same state.
"""

from __future__ import annotations

import itertools
import os
import pickle
import random
from collections import Counter
from typing import Any

import numpy as np
import pytest

import ivm
from ivm.engines.fivm import FIVM, columnar
from ivm.engines.fivm import engine as fivm_engine
from ivm.policy import Policy
from ivm.query import parse
from ivm.view import View

Int64Index = columnar.Int64Index
scan_sum = fivm_engine.scan_sum
# the kernels are built by ``pip install -e .``; under CI a missing one fails the tests instead of skipping them
pytestmark = pytest.mark.skipif(
    (Int64Index is None or scan_sum is None) and not os.environ.get("CI"), reason="compiled kernels not built"
)


def test_int64_index_matches_a_dict_under_random_sets_and_deletes() -> None:
    rng = random.Random(7)
    index, ref = Int64Index(), {}
    universe = [-(2**63), 2**63 - 1, *range(-40, 400), *(rng.randrange(-(2**62), 2**62) for _ in range(50))]
    for step in range(1500):
        keys = np.array(sorted(set(rng.sample(universe, rng.randrange(1, 60)))), dtype=np.int64)
        if rng.random() < 0.55:
            rows = np.array([rng.randrange(10**6) for _ in keys], dtype=np.int64)
            index.set_many(keys, rows)
            ref.update(zip(keys.tolist(), rows.tolist(), strict=True))
        else:
            index.delete_many(keys)
            for k in keys.tolist():
                ref.pop(k, None)
        probe = np.array(universe, dtype=np.int64)
        assert index.get_many(probe).tolist() == [ref.get(k, -1) for k in universe], step
        assert len(index) == len(ref)
    restored = pickle.loads(pickle.dumps(index))
    assert restored.get_many(probe).tolist() == index.get_many(probe).tolist()
    ks, rs = index.items()
    assert dict(zip(ks.tolist(), rs.tolist(), strict=True)) == ref
    with pytest.raises(ValueError, match="non-negative"):
        index.set_many(np.array([1], dtype=np.int64), np.array([-1], dtype=np.int64))


def test_int64_index_direct_and_hashed_layouts_match_a_dict_across_their_switches() -> None:
    """A dense range of keys is addressed directly; a negative or far key moves the index to a hash
    table, which moves back when it doubles with its keys dense again; every step equals a dict."""
    rng = random.Random(11)
    index, ref = Int64Index(), {}
    seen = {"direct": 0, "hashed": 0, "back": 0}
    was_direct = True

    def check(step: int, grown_only: bool) -> None:
        probe = np.array([*range(-5, 3000), 2**40, 2**62, -(2**63)], dtype=np.int64)
        assert index.get_many(probe).tolist() == [ref.get(k, -1) for k in probe.tolist()], step
        assert len(index) == len(ref)
        ks, rs = index.items()
        assert dict(zip(ks.tolist(), rs.tolist(), strict=True)) == ref
        if grown_only and index.direct:  # (no key deleted yet) never more bytes than a hash table's
            assert index.nbytes <= max(16 * 16, 64 * len(ref)), step

    for step in range(600):
        phase = step // 150  # dense inserts; then outliers; then dense again (the range filled); deletes
        if phase == 0 or phase == 2:
            keys = [rng.randrange(0, 200 * (phase + 1) + 2 * step) for _ in range(rng.randrange(1, 40))]
        elif phase == 1:
            keys = [rng.choice([-7, 2**40, 5000 + step, rng.randrange(0, 400)])]
        else:
            keys = rng.sample(sorted(ref), min(len(ref), rng.randrange(1, 30))) if ref else [1]
        keys = sorted(set(keys))
        arr = np.array(keys, dtype=np.int64)
        if phase == 3 and rng.random() < 0.7:
            index.delete_many(arr)
            for k in keys:
                ref.pop(k, None)
        else:
            rows = np.array([rng.randrange(10**6) for _ in keys], dtype=np.int64)
            index.set_many(arr, rows)
            ref.update(zip(keys, rows.tolist(), strict=True))
        if index.direct:
            seen["direct"] += 1
            seen["back"] += not was_direct
        else:
            seen["hashed"] += 1
        was_direct = index.direct
        check(step, phase < 3)
    assert seen["direct"] and seen["hashed"] and seen["back"], seen
    restored = pickle.loads(pickle.dumps(index))
    assert dict(zip(*(a.tolist() for a in restored.items()), strict=True)) == ref
    # keys 0..n-1 in order stay direct all the way; a hash table of dense keys turns direct when it doubles
    dense = Int64Index()
    dense.set_many(np.arange(5000, dtype=np.int64), np.arange(5000, dtype=np.int64))
    assert dense.direct and dense.nbytes == 8 * 8192
    late = Int64Index()
    late.set_many(np.array([-1], dtype=np.int64), np.array([0], dtype=np.int64))
    late.delete_many(np.array([-1], dtype=np.int64))
    assert not late.direct  # (a negative key was put: the table remembers it until it is rebuilt)
    fresh = Int64Index()
    fresh.set_many(np.array([3000], dtype=np.int64), np.array([0], dtype=np.int64))
    assert not fresh.direct  # one key far from 0: hashed
    fresh.set_many(np.arange(2000, dtype=np.int64), np.arange(1, 2001, dtype=np.int64))
    assert fresh.direct  # the range filled in: direct again at a doubling
    assert fresh.get(3000) == 0 and fresh.get(1999) == 2000 and fresh.get(2500) == -1


def test_int_codes_only_for_plain_ints_in_range() -> None:
    assert columnar.int_codes([(3,), (-5,), (2**63 - 1,)]).tolist() == [3, -5, 2**63 - 1]
    for odd in ([(1,), (True,)], [(1,), (1.0,)], [(np.int64(1),)], [(2**63,)], [("a",)], [(1, 2)], []):
        assert columnar.int_codes(odd) is None, odd


def test_a_store_keeps_its_int_index_at_a_key_of_another_kind_and_stays_right() -> None:
    query = parse("Q(COVAR(x, y)) :- R(k, x), S(k, y)")
    engine = FIVM(query, exact=True)
    rng = random.Random(3)
    rows = [("R", (rng.randrange(30), rng.randrange(5)), 1) for _ in range(200)]
    rows += [("S", (rng.randrange(30), rng.randrange(5)), 1) for _ in range(200)]
    engine.apply(rows)
    stores = [n.store for n in engine.tree.nodes() if n.store is not None and n.keys == ("k",)]
    assert stores and all(s.codes is not None for s in stores)
    # a string key and True (== 1 for the dict) arrive: the string is interned, True is 1 (issue 38: the
    # engine's KeyDictionary), the int index stays
    more = [("R", ("a", 1), 1), ("S", ("a", 2), 1), ("R", (True, 3), 1), ("S", (1, 4), -1)]
    engine.apply(more)
    assert all(s.codes is not None for s in stores) and len(engine._keydict) == 1
    ref = FIVM(query, implementation="python", exact=True)
    ref.apply(rows + more)
    assert np.array_equal(engine.result().matrix(), ref.result().matrix())


def test_a_snapshot_restores_without_the_compiled_index(monkeypatch: pytest.MonkeyPatch) -> None:
    query = parse("Q(COVAR(x, y)) :- R(k, x), S(k, y)")
    engine = FIVM(query, exact=True)
    engine.apply([("R", (k, k % 3), 1) for k in range(50)] + [("S", (k, k % 4), 1) for k in range(0, 50, 2)])
    blob = pickle.dumps(engine)
    monkeypatch.setattr(columnar, "Int64Index", None)
    restored = pickle.loads(blob)
    assert all(n.store.codes is None for n in restored.tree.nodes() if n.store is not None)
    restored.apply([("R", (k, 1), -1) for k in range(0, 50, 4)])
    monkeypatch.undo()
    engine.apply([("R", (k, 1), -1) for k in range(0, 50, 4)])
    assert np.array_equal(engine.result().matrix(), restored.result().matrix())


def brute_scan(buckets: list[dict], multipliers: list[int], position: int) -> dict:
    out: Counter = Counter()
    for bucket, m in zip(buckets, multipliers, strict=True):
        for key, payload in bucket.items():
            out[(key[position],)] += payload * m
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize("seed", range(6))
def test_scan_sum_and_the_numpy_rule_equal_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    spread = [10, 10**6, 2**62][seed % 3]
    buckets = [
        {(rng.randrange(-spread, spread), c): rng.choice([-3, -2, -1, 1, 2, 3]) for _ in range(rng.randrange(0, 30))}
        for c in range(rng.randrange(1, 60))
    ]
    multipliers = [rng.choice([-2, -1, 1, 3]) for _ in buckets]
    want = brute_scan(buckets, multipliers, 0)
    rows = sum(map(len, buckets))
    assert scan_sum(buckets, multipliers, 0, rows) == want
    keys = [k[0] for b in buckets for k in b]
    payloads = [p for b in buckets for p in b.values()]
    got = fivm_engine._sum_by_int(keys, payloads, dict(enumerate(multipliers)), list(map(len, buckets)))
    assert {k: v for k, v in got.items() if v} == want


def test_scan_sum_refuses_what_int64_cannot_hold_exactly() -> None:
    assert scan_sum([{(1, 0): 2**40}], [2**40], 0, 1) is None  # the product overflows
    assert scan_sum([{(1, 0): 2**62}, {(1, 1): 2**62}], [1, 1], 0, 2) is None  # the sum overflows
    assert scan_sum([{(1, 0): 2**70}], [1], 0, 1) is None
    assert scan_sum([{(1.0, 0): 1}], [1], 0, 1) is None
    assert scan_sum([{(True, 0): 1}], [1], 0, 1) is None
    assert scan_sum([{(1, 0): 1}], [True], 0, 1) is None
    assert scan_sum([{(1, 0): 1.5}], [1], 0, 1) is None
    assert scan_sum([{(1, 0): 2}, {(1, 1): -2}], [1, 1], 0, 2) == {}
    big = 2**61
    assert fivm_engine._sum_by_int([1, 1], [big, big], {0: 1}, [2]) is None


def brute_paths(rels: dict[str, Counter], names: list[str]) -> int:
    """Σ over a1..ak+1 of Π R_i(a_i, a_{i+1}): walks through the relations in order."""
    walk: Counter = Counter()
    for (_a, b), m in rels[names[0]].items():
        walk[b] += m
    for name in names[1:]:
        nxt: Counter = Counter()
        for (a, b), m in rels[name].items():
            if walk[a]:
                nxt[b] += walk[a] * m
        walk = nxt
    return sum(walk.values())


@pytest.mark.parametrize("names", [["R1", "R2", "R3"], ["R1", "R2", "R3", "R4"]])
@pytest.mark.parametrize("seed", range(3))
def test_path_counts_equal_brute_force_and_the_python_rules(
    names: list[str], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    atoms = ", ".join(f"{n}(v{i}, v{i + 1})" for i, n in enumerate(names))
    query = f"Q() :- {atoms}"
    fast = ivm.maintain(query, engine="fivm", policy=Policy(negative="allow"))
    slow = ivm.maintain(query, engine="fivm", policy=Policy(negative="allow"))
    rels: dict[str, Counter] = {n: Counter() for n in names}
    hubs = [0, 1]
    for step in range(40):
        batch = []
        for _ in range(rng.choice([1, 5, 80, 300])):
            name = rng.choice(names)
            a = rng.choice(hubs) if rng.random() < 0.3 else rng.randrange(40)
            b = rng.choice(hubs) if rng.random() < 0.3 else rng.randrange(40)
            if step == 25 and rng.random() < 0.1:
                a = "s"  # a string key: the int paths step aside
            batch.append((name, (a, b), rng.choice([-3, -1, 1, 1, 2])))
        fast.apply(batch)
        with monkeypatch.context() as m:
            m.setattr(fivm_engine, "scan_sum", None)
            m.setattr(fivm_engine, "_sum_by_int", lambda *a: None)
            m.setattr(View, "_apply_batch", lambda self, items: None)
            slow.apply(batch)
        for name, row, mult in batch:
            rels[name][row] += mult
        assert fast.result() == slow.result() == brute_paths(rels, names), step
    assert fast.engine.views() == slow.engine.views()


def outcome_tuple(outcome: Any) -> tuple:
    return outcome.applied, [(r.index, r.update, r.kind, r.reason) for r in outcome.rejected]


@pytest.mark.parametrize("policy", [Policy(), Policy(duplicate="reject"), Policy(negative="allow")])
@pytest.mark.parametrize("engine", ["fivm", "auto"])
def test_view_batch_path_equals_the_loop(policy: Policy, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    query = "Q() :- R(a, b), S(b, c), T(c, a)"
    fast = ivm.maintain(query, engine=engine, policy=policy)
    loop = ivm.maintain(query, engine=engine, policy=policy)
    taken = Counter()
    for step in range(60):
        n = rng.choice([1, 3, 50, 200])
        batch: list[Any] = []
        for _ in range(n):
            rel = rng.choice("RST")
            row = (rng.randrange(12), rng.randrange(12))
            batch.append((rel, row, rng.choice([1, 1, -1, 2, -2])))
        if step % 7 == 3:
            batch.append(batch[0])  # a tuple twice: the loop's case
        if step % 11 == 5:
            batch.append(("R", (1, 2, 3), 1))  # a wrong arity: the loop says which
        if step % 13 == 6:
            batch.append(ivm.Update("S", (4, 4), -1))
        got = fast.apply(batch)
        taken[got is not None] += 1
        with monkeypatch.context() as m:
            m.setattr(View, "_apply_batch", lambda self, items: None)
            want = loop.apply(batch)
        assert outcome_tuple(got) == outcome_tuple(want), step
        assert fast.result() == loop.result()
        for rel, a, b in itertools.product("RST", range(12), range(12)):
            assert fast.engine.multiplicity(rel, (a, b)) == loop.engine.multiplicity(rel, (a, b))


def test_explain_reports_memory_per_view_sized_to_its_support() -> None:
    view = ivm.maintain("Q(COVAR(x, y, z)) :- R(k, x, y), S(k, z)", engine="fivm", options={"exact": False})
    view.apply([("R", (k, 1.0, 2.0), 1) for k in range(40)] + [("S", (k, 3.0), 1) for k in range(0, 40, 2)])
    memory = view.explain()["memory"]
    assert memory == {
        name: {"keys": k, "bytes": b, "bytes_per_payload": round(p, 1), "support": s}
        for name, (k, b, p, s) in view.engine.view_memory().items()
    }
    supports = {entry["support"]: entry for entry in memory.values()}
    # float payloads: (1 + k + k(k+1)/2) · 8 bytes for a support of k variables (Q symmetric: its upper
    # triangle; the root has all three)
    assert {s: e["bytes_per_payload"] for s, e in supports.items()} == {1: 24.0, 2: 48.0, 3: 80.0}
    assert [supports[s]["keys"] for s in (1, 2, 3)] == [20, 40, 1]  # V_S(k), V_R(k), the root


@pytest.mark.skipif(columnar.Arena is None and not os.environ.get("CI"), reason="compiled kernels not built")
def test_arenas_grown_in_small_steps_keep_their_bytes_and_zero_the_new_ones() -> None:
    """``_mem.pxd``'s growth: in place, or moved to a fresh 2 MB boundary (MREMAP_FIXED) when a neighbour
    mapping is in the way; across calloc, 4 kB and 2 MB mappings, the old bytes kept, the new ones zero."""
    rng = np.random.default_rng(3)
    arenas = [columnar.Arena(4096) for _ in range(3)]
    sizes = [4096] * 3
    fills = [np.zeros(0, dtype=np.uint8) for _ in range(3)]
    blockers = []
    step = 0
    while min(sizes) < 6 << 20:  # every kind of block crossed: calloc'ed, 4 kB pages, 2 MB units
        i = step % 3
        step += 1
        new = int(sizes[i] * rng.uniform(1.05, 1.6)) + int(rng.integers(1, 5000))
        assert arenas[i].resize(new)
        blockers.append(columnar.Arena(int(rng.integers(1, 3 << 20))))  # a mapping after it: the next growth may move
        got = np.frombuffer(arenas[i], dtype=np.uint8)
        assert len(got) == new
        assert np.array_equal(got[: len(fills[i])], fills[i]), step
        assert not got[len(fills[i]) :].any(), step
        got[:] = rng.integers(0, 256, new, dtype=np.uint8)  # written everywhere, as a store writes its rows
        fills[i] = got.copy()
        sizes[i] = new
        del got
    for arena, fill in zip(arenas, fills, strict=True):
        assert np.array_equal(np.frombuffer(arena, dtype=np.uint8), fill)
