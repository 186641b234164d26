"""Keys of every type on F-IVM's count-ring kernels (issue 38): ``_bucket_index`` and ``_count_kernel.scan_sum``.

Before, both took int64 ints only: a float, string, bytes, date ... key made the compiled index drop
itself (and ``scan_sum`` refuse), so the line-3 count fell back to the dict indices.  Now they code
key values through a :class:`~ivm.engines.keys.KeyDictionary` and answer values.  Checked here:

- :class:`BucketIndex` with a dictionary against a plain dict under random writes, deletes and scans
  over a universe mixing ints, equal floats (``-0.0``/``0.0``, ``3.0``), non-integral floats,
  strings, bytes, ``None``, big ints and ints of the reserved range; NaN refused;
- ``scan_sum`` with a dictionary equals the Python sum over mixed keys;
- F-IVM's line-3 and 4-path counts with every key type of ``test_keys.KEY_TYPES`` against F-IVM
  without any kernel (the Python reference) and a brute-force count, on random insert/delete
  streams with a snapshot restored mid-stream; the compiled indices stay (none dropped) and hold
  interned codes;
- the hybrid (``engine="auto"``) on string keys equals the reference.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

import ivm
from ivm.engines.fivm import FIVM
from ivm.engines.fivm import engine as fivm_engine
from ivm.engines.keys import LOW, KeyDictionary
from ivm.kernels import under_ci
from ivm.query import parse
from tests.unit.engines.test_fivm_line3_bucket_index import (
    LINE3,
    PATH4,
    BucketIndex,
    brute_count,
    compiled_indices,
    dict_indices_only,
    random_stream,
)
from tests.unit.engines.test_keys import KEY_TYPES

pytestmark = pytest.mark.skipif(  # under CI every kernel is built: a missing one fails, never skips
    (BucketIndex is None or fivm_engine.scan_sum is None) and not under_ci(),
    reason="compiled kernels not built (CI builds them)",
)

MIXED: list[Any] = [
    *range(-3, 12),
    -0.0,
    3.0,
    True,
    0.5,
    -7.25,
    "a",
    "b",
    b"a",
    None,
    2**70,
    LOW + 5,
    -(2**62),
    2**63 - 1,
]


@pytest.mark.parametrize("bound", [0, 1])
def test_bucket_index_with_a_dictionary_matches_a_dict_on_keys_of_any_type(bound: int) -> None:
    rng = random.Random(380 + bound)
    index, ref = BucketIndex(bound, KeyDictionary()), {}
    for step in range(300):
        keys = [(rng.choice(MIXED), rng.choice(MIXED)) for _ in range(rng.randrange(1, 25))]
        payloads = [rng.choice([0, 0, 1, -1, 7, 2**40]) for _ in keys]
        assert index.update(keys, payloads), step
        for key, p in zip(keys, payloads, strict=True):
            if p:
                ref[key] = p  # (a dict merges 3 and 3.0, 0 and -0.0, 1 and True: so must the codes)
            else:
                ref.pop(key, None)
        assert len(index) == len(ref), step
        delta = {(rng.choice(MIXED),): rng.choice([1, -2, 3]) for _ in range(rng.randrange(0, 10))}
        want: dict[tuple[Any], int] = {}
        for (x,), m in delta.items():
            for key, p in ref.items():
                if key[bound] == x:
                    y = (key[1 - bound],)
                    want[y] = want.get(y, 0) + p * m
        got = index.scan(delta, 0)
        assert got == {y: v for y, v in want.items() if v}, step
        assert index.scan({("never seen",): 1}, 0) == {}  # a value without a code meets no block
    for x in MIXED:  # (dicts: 0 and -0.0, 1 and True are one key, as in the view)
        block = index.block(x)
        assert len(block) == len(dict(block)) and dict(block) == {
            k[1 - bound]: p for k, p in ref.items() if k[bound] == x
        }
    assert len(index.keydict) > 0
    assert not index.set((float("nan"), 1), 1)  # NaN has no code: refused (the store drops the index)
    assert not BucketIndex(0).update([("a", 1)], [1])  # without a dictionary: int64 ints only, as before


def test_scan_sum_with_a_dictionary_equals_the_python_sum() -> None:
    rng = random.Random(38)
    keydict = KeyDictionary()
    for _ in range(200):
        buckets = [
            {(rng.choice(MIXED), rng.choice(MIXED)): rng.choice([1, -1, 5]) for _ in range(rng.randrange(0, 8))}
            for _ in range(rng.randrange(0, 6))
        ]
        mults = [rng.choice([1, -2, 3]) for _ in buckets]
        want: dict[tuple[Any], int] = {}
        for bucket, m in zip(buckets, mults, strict=True):
            for key, p in bucket.items():
                want[(key[1],)] = want.get((key[1],), 0) + p * m
        rows = sum(map(len, buckets))
        assert fivm_engine.scan_sum(buckets, mults, 1, rows, keydict) == {k: v for k, v in want.items() if v}
        if any(type(k[1]) is not int or not -(2**63) <= k[1] < 2**63 for b in buckets for k in b):
            assert fivm_engine.scan_sum(buckets, mults, 1, rows) is None  # without one: int64 keys only


def keyed_stream(stream: list[list[tuple[str, tuple[int, int], int]]], rels: list[str], kind: str) -> list[Any]:
    to_key = KEY_TYPES[kind]
    return [
        [(r, (to_key(a, rels.index(r)), to_key(b, rels.index(r))), m) for r, (a, b), m in batch] for batch in stream
    ]


@pytest.mark.parametrize("kind", sorted(KEY_TYPES))
@pytest.mark.parametrize("query", [LINE3, PATH4])
def test_fivm_counts_with_keys_of_every_type_equal_the_reference(kind: str, query: str) -> None:
    q = parse(query)
    rels = sorted(q.relations)
    for seed in range(2):
        rng = random.Random(3838 + seed)
        stream = keyed_stream(random_stream(rng, rels, 50, list(range(10)), [1, 1, 1, -1, -1, 2]), rels, kind)
        fast = FIVM(q)
        with dict_indices_only():
            ref = FIVM(q)
        for step, batch in enumerate(stream):
            fast.apply(batch)
            with dict_indices_only():
                ref.apply(batch)
            where = f"{kind} {query} seed {seed} batch {step}"
            assert fast.result() == ref.result(), where
            assert fast.views() == ref.views(), where
            if step == len(stream) // 2:
                fast = FIVM.restore(fast.snapshot())
                assert not compiled_indices(fast)  # derived: rebuilt after the restore
        assert fast.result() == brute_count(query, ref.base)
        live = compiled_indices(fast)
        assert live and None not in live, f"{kind}: a compiled index was dropped (fell back to the dict index)"
        if kind not in ("bool", "int_and_float"):  # (those values equal ints: their own codes)
            assert any(len(i.keydict) for i in live), f"{kind}: no key went through the dictionary"


def test_the_hybrid_on_string_keys_equals_the_reference() -> None:
    rels = ["R1", "R2", "R3"]
    rng = random.Random(3839)
    stream = keyed_stream(random_stream(rng, rels, 60, list(range(12)), [1, 1, 1, -1, 2]), rels, "string")
    fast = ivm.maintain(LINE3, engine="auto")
    with dict_indices_only():
        ref = ivm.maintain(LINE3, engine="fivm")
    for step, batch in enumerate(stream):
        fast.apply(batch)
        with dict_indices_only():
            ref.apply(batch)
        assert fast.result() == ref.result(), step
    assert fast.result() == brute_count(LINE3, ref.engine.base)
