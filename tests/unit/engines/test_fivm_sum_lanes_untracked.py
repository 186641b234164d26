"""The compiled SUM lanes' untracked keys and payloads, in-place sums and runs of one output key.

``_lanes_kernel.pyx`` (issue 18, branch ``sumcodes``) makes the keys and ``(c, s)`` payloads it
creates untracked by the cyclic collector when their items cannot be in a cycle (as the
collector's first pass would), adds a repeated key's sums into the payload in place when the
dict entries holding it are its only references, and adds a run of delta keys with one output
key to the previous payload without a lookup.  Checked here:

- what stays tracked: keys or payloads holding a container (a ``frozenset``, a ``Fraction``)
  stay tracked, and a cycle through such a payload is still collected;
- a payload someone else holds is never changed in place (store payloads, delta payloads);
- the runs follow Python's dict semantics for equal keys of different objects (ints past the
  small-int cache, ``-0.0`` and ``0.0``, ``1`` and ``1.0`` and ``True``, NaN) with the same
  float bits, against a plain dict loop;
- the engine on streams of long runs (an atom's rows sorted by the group's key, as the TPC-H
  stream's lineitems) against the Python reference lanes, with ints, floats, ints past 2^63,
  snapshots mid-stream, and a full collection between batches.

Under ``CI=true`` a missing extension fails these tests instead of skipping them.
"""

from __future__ import annotations

import gc
import math
import random
import weakref
from fractions import Fraction
from typing import Any

import pytest

import ivm
import ivm.rings.exact as exact_module
from ivm.engines.fivm import FIVM, view_tree
from ivm.rings.exact import exact
from ivm.updates import Row, Update
from tests.seeds import stable_seed
from tests.unit.engines.test_fivm_sum_lanes import brute, expected_result
from tests.unit.engines.test_fivm_sum_lanes_compiled import TPCH, kernel, needs_kernel, same_state


def fresh_int(n: int) -> int:
    """An int equal to ``n`` but, past the small-int cache, not the same object as another such int."""
    return int(str(n))


# ---------------------------------------------------------------- the collector


@needs_kernel
def test_keys_and_number_payloads_are_untracked_and_containers_stay_tracked() -> None:
    assert kernel is not None
    delta = {(fresh_int(1000), 7, 5): 3, (fresh_int(1001), "x", 2**70): -1}
    out = kernel.direct_delta(delta, [], [], (0, 1), ((2, 1),), True)
    assert out == {(1000, 7): (3, 15), (1001, "x"): (-1, -(2**70))}
    for key, payload in out.items():
        assert not gc.is_tracked(key) and not gc.is_tracked(payload)
    assert not gc.is_tracked(out)  # a dict of untracked keys and values stays untracked
    # a lifted float is its exact Dyadic (ivm.rings.exact): the compiled type is not tracked (it holds an int),
    # the Python fallback class is, like a Fraction
    out = kernel.direct_delta({(fresh_int(1002), 7, 2.5): 3}, [], [], (0, 1), ((2, 1),), True)
    ((key, payload),) = out.items()
    assert payload == (3, 7.5) and not gc.is_tracked(key)
    assert gc.is_tracked(payload) is (exact_module.Dyadic is exact_module.PyDyadic)
    # a key holding a container, a payload holding a GC-tracked number: tracked, as the collector wants
    fs = frozenset({1})
    out = kernel.direct_delta({(fs, 2): (1, Fraction(1, 3))}, [], [], (0,), (), False)
    ((key, payload),) = out.items()
    assert key == (fs,) and gc.is_tracked(key)
    assert payload == (1, Fraction(1, 3)) and gc.is_tracked(payload)
    # index_join's output keys and the stored payloads
    index = {(2,): {(fresh_int(700), 2): (1, 4)}}
    out = kernel.index_join({(2,): (1, 3)}, index, 2, (1,), (1,), ((0, 0),), (0,), ())
    ((key, payload),) = out.items()
    assert key == (700,) and not gc.is_tracked(key) and not gc.is_tracked(payload)
    data: dict[Any, Any] = {}
    kernel.add_lanes(data, {(1,): (1, 2)}, [])
    kernel.add_lanes(data, {(1,): (2, 3)}, [])
    assert data == {(1,): (3, 5)} and not gc.is_tracked(data[(1,)]) and not gc.is_tracked(data)


class Cyclic(Fraction):
    """A number that can sit in a reference cycle (it has a ``__dict__``)."""

    def __new__(cls, value: Any) -> Cyclic:
        self = super().__new__(cls, value)
        self.ref = None  # type: ignore[attr-defined]
        return self


@needs_kernel
def test_a_cycle_through_a_payload_is_still_collected() -> None:
    """A payload holding a number that refers back to the payload: garbage once the dict goes."""
    assert kernel is not None
    x = Cyclic(2)
    out = kernel.direct_delta({(1,): (1, x)}, [], [], None, (), False)
    payload = out[(1,)]
    assert gc.is_tracked(payload)
    payload[1].ref = payload  # the cycle payload -> sum -> payload
    alive = weakref.ref(payload[1])
    del out, payload, x
    gc.collect()
    assert alive() is None


@needs_kernel
def test_the_engine_state_is_untracked_and_survives_full_collections() -> None:
    """After a stream of int rows no stored key, payload or view dict is tracked; a ``gc.collect()``
    between batches changes nothing (the compiled lanes agree with the Python reference)."""
    query = ivm.parse(TPCH)
    rng = random.Random(stable_seed("untracked"))
    compiled, python = FIVM(query), FIVM(query, implementation="python")
    assert compiled._lane_kernel
    batch = [Update("C", (c, c % 3), 1) for c in range(5)]
    batch += [Update("O", (o, o % 5, 0), 1) for o in range(20)]
    lines = [(o, line, fresh_int(10**6 + line), rng.randrange(11)) for o in range(20) for line in range(3)]
    batch += [Update("L", row, 1) for row in lines]
    for step in range(4):
        compiled.apply(batch)
        python.apply(batch)
        gc.collect()
        same_state(compiled, python)
        batch = [Update(u.relation, u.row, -1 if step % 2 == 0 else 2) for u in batch[::3]]
    for node in compiled.tree.nodes():
        if node.store is None:
            continue
        assert not gc.is_tracked(node.store.data), node.name
        for key, payload in node.store.data.items():
            assert not gc.is_tracked(key) and not gc.is_tracked(payload), (node.name, key)
        for index in node.store.indexes.values():
            for bucket in index.values():
                assert not gc.is_tracked(bucket)


# ---------------------------------------------------------------- in place only when no one else sees it


@needs_kernel
def test_a_held_store_payload_is_never_changed() -> None:
    """``add_lanes`` writes in place only into a payload held by ``data`` and its index buckets alone."""
    assert kernel is not None
    for nindexes in (0, 1, 2):
        store = view_tree.Store()
        store.add_all_lanes({(1, 2): (fresh_int(1000), 5)}, compiled=True)
        for positions in [(1,), (0, 1)][:nindexes]:
            store.index(positions)
        store.add_all_lanes({(1, 2): (1, 1)}, compiled=True)  # in place (no one holds it)
        assert store.data == {(1, 2): (1001, 6)}
        held = store.data[(1, 2)]
        store.add_all_lanes({(1, 2): (1, 1)}, compiled=True)
        assert held == (1001, 6)  # untouched: a new tuple went in
        assert store.data == {(1, 2): (1002, 7)}
        for positions, index in store.indexes.items():
            bucket = index[tuple((1, 2)[p] for p in positions)]
            assert bucket[(1, 2)] is store.data[(1, 2)]  # data and the buckets share the payload
        store.add_all_lanes({(1, 2): (-1002, -7)}, compiled=True)
        assert store.data == {} and all(not index for index in store.indexes.values())
        assert held == (1001, 6)


@needs_kernel
def test_a_delta_payload_stored_as_is_is_not_changed_while_the_delta_lives() -> None:
    """A new key stores the delta's own ``(c, s)``; adding to it again must not change the delta."""
    assert kernel is not None
    data: dict[Any, Any] = {}
    first = {(1,): (fresh_int(500), 2.5)}
    kernel.add_lanes(data, first, [])
    assert data[(1,)] is first[(1,)]
    kernel.add_lanes(data, {(1,): (1, 0.25)}, [])
    assert first == {(1,): (500, 2.5)} and data == {(1,): (501, 2.75)}


@needs_kernel
def test_a_repeated_output_key_adds_up_in_place() -> None:
    assert kernel is not None
    delta = {(k % 3, fresh_int(1000 + k)): fresh_int(2**70 + k) for k in range(9)}
    out = kernel.direct_delta(delta, [], [], (0,), ((1, 1),), True)
    expected: dict[Any, Any] = {}
    for (g, x), m in delta.items():
        c, s = expected.get((g,), (0, 0))
        expected[(g,)] = (c + m, s + m * x)
    assert out == expected and list(out) == list(expected)


# ---------------------------------------------------------------- runs of one output key


def reference_direct(delta: dict[Row, Any], key_positions: tuple[int, ...], lifts: tuple[tuple[int, int], ...]) -> dict:
    """``direct_delta`` with multiplicities and no sibling, as a plain dict loop (Python's key semantics)."""
    out: dict[Any, Any] = {}
    for key, m in delta.items():
        s = m
        for p, k in lifts:
            x = exact(key[p])  # a lifted float: its exact value (ivm.rings.exact), as the lanes lift it
            s *= x if k == 1 else x**k
        out_key = tuple(key[p] for p in key_positions)
        old = out.get(out_key)
        out[out_key] = (m, s) if old is None else (old[0] + m, old[1] + s)
    return out


NAN = float("nan")
GROUPS = [0, 1, 1.0, True, -0.0, 0.0, "a", "a" * 3, NAN, 2**80, 10**6, 3.5, (1, 2)]


@needs_kernel
def test_runs_follow_the_dicts_key_semantics_bit_for_bit() -> None:
    """Equal keys of different objects and types, NaN, -0.0: the same keys, order and float bits as a dict."""
    assert kernel is not None
    rng = random.Random(stable_seed("runs"))
    for _ in range(300):
        delta: dict[Any, Any] = {}
        for line in range(rng.randrange(1, 30)):
            g = rng.choice(GROUPS)
            if isinstance(g, int) and not isinstance(g, bool):
                g = fresh_int(g)  # an equal int, another object
            elif isinstance(g, str):
                g = "".join(list(g))  # an equal str, another object
            elif isinstance(g, float) and not math.isnan(g):
                g = float(repr(g))  # an equal float, another object
            if rng.random() < 0.6 and delta:  # a run: the previous group again
                g = next(reversed(delta))[0]
            x = rng.choice([0.1, -2.5, 3, 2**65, 1e300, -0.0])
            delta[(g, line, x)] = rng.choice([1, -1, 2, 3, 2**64])
        got = kernel.direct_delta(delta, [], [], (0,), ((2, 1),), True)
        expected = reference_direct(delta, (0,), ((2, 1),))
        assert repr(got) == repr(expected)  # keys (which object of equal ones), order, float bits


@needs_kernel
@pytest.mark.parametrize("values", ["ints", "floats", "big ints"])
def test_the_engine_on_sorted_runs_matches_the_python_lanes(values: str) -> None:
    """Lineitems arrive in runs of one order (the TPC-H stream's shape), orders in runs of one customer;
    batches mix the relations, delete to zero and repeat rows; a snapshot is restored mid-stream."""
    query = ivm.parse(TPCH)
    rng = random.Random(stable_seed("sorted runs", values))
    compiled, python = FIVM(query), FIVM(query, implementation="python")
    assert compiled._lane_kernel and not python._lane_kernel

    def value() -> Any:
        if values == "floats":
            return rng.choice([0.1, 0.25, -1.5, 3.0, 1e-3])
        if values == "big ints":
            return rng.choice([2**63 - 1, 2**64 + 3, -(2**63), 7])
        return rng.randrange(-5, 100)

    base: dict[str, dict[Row, int]] = {r: {} for r in query.relations}
    for step in range(30):
        if step == 15:
            compiled = FIVM.restore(compiled.snapshot())
            assert compiled._lane_kernel
        batch: list[Update] = []
        for _ in range(rng.choice([1, 5, 20])):
            r = rng.random()
            if r < 0.1:
                batch.append(Update("C", (rng.randrange(6), rng.randrange(3)), rng.choice([1, 2, -1])))
            elif r < 0.3:
                cust = fresh_int(1000 + rng.randrange(6))
                for _ in range(rng.randrange(1, 4)):  # a run of one customer's orders
                    batch.append(Update("O", (rng.randrange(30), cust, rng.randrange(2)), rng.choice([1, 1, -1])))
            else:
                okey = fresh_int(rng.randrange(30))
                for line in range(rng.randrange(1, 8)):  # a run of one order's lineitems
                    batch.append(Update("L", (okey, line, value(), value()), rng.choice([1, 1, 2, -1, -2])))
        for relation, present in base.items():  # and some present rows deleted outright
            for row in sorted(present, key=repr)[: rng.randrange(3)]:
                batch.append(Update(relation, row, -present[row]))
        for u in batch:
            m = base[u.relation].get(u.row, 0) + u.mult
            if m:
                base[u.relation][u.row] = m
            else:
                base[u.relation].pop(u.row, None)
        compiled.apply(batch)
        python.apply(batch)
        same_state(compiled, python)
    assert compiled.result() == expected_result(query, brute(query, base))
