"""Keys of every type on the compiled paths (issue 38): :mod:`ivm.engines.keys` and the engines that use it.

- :class:`~ivm.engines.keys.KeyDictionary`: ints are their own codes, values equal to an int under
  Python equality (``3.0``, ``True``, ``Decimal(3)``, ``-0.0``) that int's code, every other value one
  interned id in the reserved range (``1.5`` and ``Decimal("1.5")`` one id; ints of the reserved range
  and beyond int64 interned too, never mistaken for an id), NaN refused by name, pickles;
- F-IVM (``implementation="compiled"``) against the Python reference on random insert/delete streams
  whose join keys are floats, strings, bytes, bools, timestamps, dates, nullable strings, ints beyond
  int64, ints of the reserved range, and a variable whose relations hold ints in one and equal floats
  in another: after every batch the result, ``enumerate()``, ``drain_delta()`` and every view, a
  snapshot restored mid-stream; a spy asserts the kernel ran and the views stayed in int mode (the
  compiled path, not the fallback); NaN keys refused by name;
- composite join keys (a view keyed by two variables): not on the compiled path (it keys views by at most
  one variable), the numpy path's results equal the reference.
"""

from __future__ import annotations

import math
import pickle
import random
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

import ivm
from ivm.engines.fivm import FIVM
from ivm.engines.keys import ABSENT, HIGH, LOW, KeyDictionary
from tests.seeds import stable_seed
from tests.unit.engines.test_fivm_columnar import check
from tests.unit.engines.test_fivm_compiled import (
    CI,
    GROUP_BY,
    STAR,
    KernelSpy,
    drained,
    needs_kernel,
    same_drain,
    updates,
)


# ---------------------------------------------------------------------------------- the dictionary
def test_ints_are_their_own_codes_and_equal_values_share_them() -> None:
    d = KeyDictionary()
    assert [d.code(v) for v in (0, 7, -5, 2**63 - 1, HIGH)] == [0, 7, -5, 2**63 - 1, HIGH]
    assert d.code(3.0) == d.code(Decimal(3)) == d.code(np.int32(3)) == 3
    assert d.code(True) == 1 and d.code(False) == 0
    assert d.code(-0.0) == d.code(0.0) == 0
    assert len(d) == 0  # nothing interned


def test_other_values_are_interned_once_each_under_python_equality() -> None:
    d = KeyDictionary()
    values = [1.5, "a", b"a", None, date(2024, 1, 2), datetime(2024, 1, 2, tzinfo=UTC), 2**70, HIGH - 1, LOW, -1e300]
    codes = [d.code(v) for v in values]
    assert len(set(codes)) == len(values) and all(LOW < c < HIGH for c in codes)
    assert [d.code(v) for v in values] == codes  # stable
    assert d.code(Decimal("1.5")) == codes[0] and d.code(2.0**70) == codes[6]  # equal values, one id
    assert d.values(codes) == values and [d.value(c) for c in codes] == values
    assert d.find("b") == ABSENT and d.find([1]) == ABSENT and len(d) == len(values)
    assert d.find("a") == codes[1] and d.find(3.0) == 3
    restored = pickle.loads(pickle.dumps(d))
    assert restored.values(codes) == values and restored.code("z") == d.code("z")


@pytest.mark.parametrize("nan", [float("nan"), np.float64("nan"), Decimal("NaN")])
def test_nan_is_refused_by_name(nan: Any) -> None:
    with pytest.raises(ValueError, match="NaN"):
        KeyDictionary().code(nan)
    with pytest.raises(ValueError, match="NaN"):
        KeyDictionary().float_codes(np.array([1.0, math.nan]))


def test_float_codes_equal_code_one_at_a_time() -> None:
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.integers(-5, 5, 50).astype(float), rng.uniform(-3, 3, 50), [-0.0, 2.0**70, -(2.0**63)]])
    d, e = KeyDictionary(), KeyDictionary()
    got = d.float_codes(x)
    assert got.tolist() == [e.code(v) for v in x.tolist()]
    assert d.values(got.tolist()) == x.tolist()


def test_codes_of_ints_in_the_reserved_range_are_interned() -> None:
    d = KeyDictionary()
    got = d.codes([1, 2, LOW + 5])
    assert got[:2].tolist() == [1, 2] and got[2] != LOW + 5 and d.value(int(got[2])) == LOW + 5


# ---------------------------------------------------------------------------------- F-IVM, per key type
BASE = datetime(2024, 3, 1, 12, tzinfo=UTC)
KEY_TYPES: dict[str, Callable[[int, int], Any]] = {  # (key, relation index) → the key value
    "float": lambda k, i: k + 0.25 if k % 3 else (-0.0 if i % 2 else 0.0),  # -0.0 and 0.0 one key
    "string": lambda k, i: f"customer-{k:04d}",
    "bytes": lambda k, i: bytes([k, 255 - k]),
    "bool": lambda k, i: k % 2 == 1,
    "timestamp": lambda k, i: BASE + timedelta(seconds=k),
    "date": lambda k, i: date(2024, 1, 1) + timedelta(days=k),
    "nullable": lambda k, i: None if k % 4 == 0 else f"s{k}",
    "bigint": lambda k, i: 2**70 + k,
    "reserved_int": lambda k, i: LOW + 3 * k,
    "int_and_float": lambda k, i: k if i % 2 else float(k),  # one variable, ints in one relation, floats in another
}


def keyed(stream: list[ivm.Update], rels: list[str], to_key: Callable[[int, int], Any]) -> list[ivm.Update]:
    return [ivm.Update(u.relation, (to_key(u.row[0], rels.index(u.relation)), *u.row[1:]), u.mult) for u in stream]


def int_mode(engine: FIVM) -> bool:
    return all(n.store.codes is not None for n in engine.tree.nodes() if n.store is not None)


@needs_kernel
@pytest.mark.parametrize("kind", sorted(KEY_TYPES))
@pytest.mark.parametrize("text", [STAR, GROUP_BY])
@pytest.mark.parametrize("seed", range(2))
def test_fivm_compiled_keys_of_every_type_equal_the_reference(
    kind: str, text: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = KernelSpy(monkeypatch)
    rng = random.Random(3800 + seed)
    query = ivm.parse(text)
    rels = sorted(query.relations)
    stream = keyed(updates(query, rng, 600, domain=12), rels, KEY_TYPES[kind])
    fast = FIVM(query, implementation="compiled", exact=False)
    ref = FIVM(query, implementation="python", exact=False)
    start, restored = 0, False
    while start < len(stream):
        batch = stream[start : start + rng.choice((1, 3, 20, 90))]
        start += len(batch)
        fast.apply(batch)
        ref.apply(batch)
        where = f"{kind} {query} after {start}"
        check(fast, ref, True, where)
        assert same_drain(drained(fast), drained(ref)), where
        assert int_mode(fast), f"{where}: a view left int mode (the compiled path's keys)"
        if not restored and start > len(stream) // 2:
            fast, restored = FIVM.restore(fast.snapshot()), True
            assert int_mode(fast) and fast._keydict is fast.tree.roots[0].store.keydict  # one dictionary
    assert spy.runs > 0, "the compiled path never ran"
    if kind not in ("bool", "int_and_float"):
        assert len(fast._keydict) > 0  # the keys went through the dictionary


@needs_kernel
@pytest.mark.parametrize("kind", ["string", "float"])
def test_fivm_rebuilt_views_keep_the_dictionary(kind: str) -> None:
    """Updates to a relation that is not updatable rebuild every view (new stores): they code keys through
    the same dictionary, so the kernel's later deltas and the translated results stay right."""
    query = ivm.parse(STAR)
    fast = FIVM(query, implementation="compiled", exact=False, updatable=["A", "B"])
    ref = FIVM(query, implementation="python", exact=False, updatable=["A", "B"])
    rng = random.Random(stable_seed("rebuild", kind))
    stream = keyed(updates(query, rng, 400, domain=9), sorted(query.relations), KEY_TYPES[kind])
    for start in range(0, len(stream), 40):
        batch = stream[start : start + 40]
        fast.apply(batch)
        ref.apply(batch)
        check(fast, ref, True, f"{kind} after {start}")
        assert int_mode(fast)
    assert fast.stats()["rebuilds"] > 0 and len(fast._keydict) > 0
    assert all(n.store.keydict is fast._keydict for n in fast.tree.nodes() if n.store is not None)


@needs_kernel
def test_fivm_float_keys_from_columns_take_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Float key columns read from the compact base relation (``apply_columns``: no Python row) are coded
    in arrays and run the kernel; the same stream as rows through the Python reference agrees."""
    spy = KernelSpy(monkeypatch)
    query = ivm.parse(STAR)
    fast = FIVM(query, implementation="compiled", exact=False)
    ref = FIVM(query, implementation="python", exact=False)
    rng = np.random.default_rng(4)
    width = dict(query.relations)
    for step in range(30):
        for rel in sorted(width):
            keys = rng.integers(0, 40, 25) / 8 - 2.0  # integral and not, -0.0 never arises here, 0.0 does
            columns = [keys, *(rng.uniform(-1, 1, 25).round(3) for _ in range(width[rel] - 1))]
            mults = rng.choice([1, 1, 2, -1], 25) if step > 3 else np.ones(25, dtype=np.int64)
            fast.apply_columns(rel, columns, mults)
            rows = list(zip(*(c.tolist() for c in columns), strict=True))
            ref.apply([ivm.Update(rel, row, int(m)) for row, m in zip(rows, mults.tolist(), strict=True)])
    check(fast, ref, True, "float key columns")
    assert spy.runs > 0 and int_mode(fast) and len(fast._keydict) > 0


@needs_kernel
def test_fivm_nan_key_is_refused_by_name_before_any_change() -> None:
    query = ivm.parse(STAR)
    fast = FIVM(query, implementation="compiled", exact=False)
    ref = FIVM(query, implementation="python", exact=False)
    first = [ivm.Update("A", (1.5, 1.0, 2.0), 1), ivm.Update("B", (1.5, 1.0), 1), ivm.Update("C", (1.5, 1, 2, 3), 1)]
    fast.apply(first)
    ref.apply(first)
    for bad in (
        lambda: fast.apply([ivm.Update("B", (2.5, 1.0), 1), ivm.Update("A", (math.nan, 1.0, 2.0), 1)]),
        lambda: fast.apply_columns("B", [np.array([2.5, math.nan]), np.array([1.0, 1.0])]),
    ):
        with pytest.raises(ValueError, match="NaN"):
            bad()
        check(fast, ref, True, "after a refused NaN key")
        assert fast.multiplicity("B", (2.5, 1.0)) == 0


@needs_kernel
@pytest.mark.parametrize("seed", range(2))
def test_fivm_composite_keys_equal_the_reference(seed: int) -> None:
    """A join on two variables (views keyed by two): not a compiled path (at most one key variable), the
    numpy path over dict-keyed views; its results equal the reference for string and float key parts."""
    query = ivm.parse("Q(COVAR(a, b)) :- R(k1, k2, a), S(k1, k2, b)")
    fast = FIVM(query, implementation="compiled", exact=False)
    ref = FIVM(query, implementation="python", exact=False)
    rng = random.Random(900 + seed)
    for _ in range(40):
        batch = []
        for _ in range(15):
            row = (f"c{rng.randrange(4)}", rng.randrange(3) / 2, rng.random())
            batch.append(ivm.Update(rng.choice("RS"), row, rng.choice([1, -1])))
        fast.apply(batch)
        ref.apply(batch)
        check(fast, ref, True, "composite")


# ------------------------------------------------------------------- the triangle and q-hierarchical engines
GRAPH_KEYS: dict[str, Callable[[int], Any]] = {  # vertex number → vertex value
    "int": lambda v: v,
    "float": lambda v: v / 4 - 0.0 if v else -0.0,
    "string": lambda v: f"user-{v}",
    "bytes": lambda v: b"u%d" % v,
    "timestamp": lambda v: BASE + timedelta(minutes=v),
    "date": lambda v: date(2020, 1, 1) + timedelta(days=v),
    "nullable": lambda v: None if v == 0 else f"n{v}",
    "bigint": lambda v: 2**70 + v,
    "int_and_float": lambda v: float(v) if v % 2 else v,
}


def graph_stream(rng: random.Random, relations: str, to_key: Callable[[int], Any], n: int = 500) -> list[ivm.Update]:
    """Inserts of random edges over 14 vertices (a hub among them), then deletes of half the live ones."""
    live: dict[tuple[str, tuple[Any, ...]], int] = {}
    out = []
    for step in range(n):
        if live and (step > n * 2 // 3 or rng.random() < 0.2):
            (rel, row), m = rng.choice(sorted(live.items(), key=repr))
            mult = -m if rng.random() < 0.7 else -1
        else:
            rel = rng.choice(relations)
            a = 0 if rng.random() < 0.3 else rng.randrange(14)
            row = (to_key(a), to_key(rng.randrange(14)))
            mult = rng.choice([1, 1, 2])
        live[(rel, row)] = live.get((rel, row), 0) + mult
        if not live[(rel, row)]:
            del live[(rel, row)]
        out.append(ivm.Update(rel, row, mult))
    return out


@pytest.mark.parametrize("kind", sorted(GRAPH_KEYS))
@pytest.mark.parametrize("eps", [0.0, 0.5])
def test_triangle_compiled_keys_of_every_type_equal_the_reference(kind: str, eps: float) -> None:
    """IVM^eps's triangle in the compiled state (dense ids for any value) against the Python partitions,
    with a snapshot restored mid-stream; the state stays compiled (no fallback to Python partitions)."""
    from ivm.engines.ivm_eps import IVMEpsTriangle
    from ivm.engines.ivm_eps.compact import CompactPart, TriangleFirstOrder

    if TriangleFirstOrder is None:
        pytest.skip("the triangle kernel is not built") if not CI else pytest.fail("the triangle kernel is not built")
    query = ivm.parse("Q() :- R(a,b), S(b,c), T(c,a)")
    rng = random.Random(stable_seed(kind, eps))
    stream = graph_stream(rng, "RST", GRAPH_KEYS[kind])
    fast = IVMEpsTriangle(query, eps=eps, implementation="compiled")
    ref = IVMEpsTriangle(query, eps=eps, implementation="python")
    for start in range(0, len(stream), 25):
        batch = stream[start : start + 25]
        fast.apply(batch)
        ref.apply(batch)
        assert fast.result() == ref.result(), f"{kind} after {start}"
        if start == 250:
            fast = type(fast).restore(fast.snapshot())
    assert all(isinstance(p, CompactPart) for p in fast.parts), "the state left the compiled partitions"
    for u in stream[:60]:
        assert fast.multiplicity(u.relation, u.row) == ref.multiplicity(u.relation, u.row)


@pytest.mark.parametrize("kind", sorted(GRAPH_KEYS))
def test_qhier_compact_keys_of_every_type_equal_the_reference(kind: str) -> None:
    """The q-hierarchical engine's compact state (values interned to codes) against the Python reference,
    with a snapshot restored mid-stream; no fallback (``choice()["implementation"]`` stays ``compact``)."""
    from ivm.engines.qhier.engine import QHierEngine

    query = ivm.parse("Q(a, b) :- R(a, b), S(a, c), T(a)")
    try:
        fast = QHierEngine(query, implementation="compact")
    except ImportError:
        pytest.skip("the q-hierarchical kernel is not built") if not CI else pytest.fail("not built")
    ref = QHierEngine(query, implementation="python")
    rng = random.Random(stable_seed(kind, "qhier"))
    stream = [
        ivm.Update(u.relation, u.row[:1] if u.relation == "T" else u.row, u.mult)
        for u in graph_stream(rng, "RST", GRAPH_KEYS[kind], 400)
    ]
    for start in range(0, len(stream), 20):
        batch = stream[start : start + 20]
        fast.apply(batch)
        ref.apply(batch)
        assert dict(fast.enumerate()) == dict(ref.enumerate()), f"{kind} after {start}"
        assert dict(fast.drain_delta()) == dict(ref.drain_delta()), f"{kind} after {start}"
        if start == 200:
            fast = QHierEngine.restore(fast.snapshot())
    assert fast.choice()["implementation"] == "compact"


@needs_kernel
@pytest.mark.parametrize("kind", ["float", "int_and_float", "bool"])
def test_fivm_a_lifted_key_equals_the_reference(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The join key also lifted by the covariance (F-IVM's Housing: ``postcode`` in COVAR, a float in its
    normalised tables).  The code of an interned key (a non-integral float) is not its value, so such a path
    carries each view key's value beside its code (``Level.out_val``) and runs the kernel; equal to the
    reference."""
    spy = KernelSpy(monkeypatch)
    query = ivm.parse("Q(COVAR(k, a, b)) :- R(k, a), S(k, b)")
    fast = FIVM(query, implementation="compiled", exact=False)
    ref = FIVM(query, implementation="python", exact=False)
    rng = random.Random(stable_seed("lifted", kind))
    stream = keyed(updates(query, rng, 500, domain=10), sorted(query.relations), KEY_TYPES[kind])
    for start in range(0, len(stream), 50):
        batch = stream[start : start + 50]
        fast.apply(batch)
        ref.apply(batch)
        check(fast, ref, True, f"{kind} after {start}")
        assert int_mode(fast)
    assert spy.runs > 0
    paths = [p for p in fast._paths.values() if p is not None]
    assert paths and not any(p.lifts_codes for p in paths)  # (the values are carried, not read off codes)
