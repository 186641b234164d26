"""The micro-batch path around the engines against its record-by-record definition (issue 18).

- the compiled Avro decoder (``ivm/processor/codecs/_varint_kernel.pyx``) and the numpy one against
  fastavro's reader record by record, on random and corrupted messages;
- the compiled admission loop (``ivm/processor/state/_admit_kernel.pyx``) against
  ``RelationStore.admit_each`` under every policy, on random streams with repeated tuples,
  multiplicities other than 1, zeros and integers beyond 64 bits: the same decisions, reasons,
  contents and contents order;
- a pipeline fed mixed batches (good records, malformed ones, absent deletes, zero
  multiplicities, duplicates under set semantics, unknown topics, redeliveries) against the
  same records one per batch: the same dead letters in the same order, the same relation
  contents and the same results, with and without the compiled kernels, on a triangle, a
  self-join on 8 shards and a group-by;
- ``interleave`` (each run's order kept, runs spread evenly), and why it is there: a batch handed
  over relation after relation made ``ivm_eps_auto`` partition a relation of the facebook
  stream that the stream itself never makes it partition;
- ``View.apply_admitted`` against ``View.apply``; ``RecordBatch.runs`` and ``from_arrow``.

Under ``CI=true`` a kernel that is not built fails its tests instead of skipping them.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pyarrow as pa
import pytest

import ivm
from ivm.policy import Policy
from ivm.processor.codecs import varint as varint_module
from ivm.processor.codecs.avro import RelationCodec, decode_each, load_relation_codecs
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.data import facebook_edges
from ivm.processor.pipeline import Pipeline, Record, RecordBatch, interleave
from ivm.processor.state import relations as relations_module
from ivm.processor.state.relations import RelationStore
from tests.unit.test_bulk_decode import INT_SCHEMA, _corrupt
from tests.unit.test_pipeline import MemorySink

CODECS = load_relation_codecs()
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
VARINT_BUILT = varint_module.kernel_built()
ADMIT_BUILT = relations_module._admit_kernel is not None
needs_varint = pytest.mark.skipif(
    not VARINT_BUILT and not CI, reason="ivm.processor.codecs._varint_kernel is not built"
)
needs_admit = pytest.mark.skipif(not ADMIT_BUILT and not CI, reason="ivm.processor.state._admit_kernel is not built")


@pytest.fixture
def no_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallbacks: numpy decoding and the Python admission loop."""
    monkeypatch.setattr(varint_module, "_varint_kernel", None)
    monkeypatch.setattr(relations_module, "_admit_kernel", None)


# -- decoding -----------------------------------------------------------------------------------


def _values(seed: int, codec: RelationCodec, n: int = 3000) -> list[bytes | None]:
    rng = random.Random(seed)
    values: list[bytes | None] = []
    for _ in range(n):
        big = rng.random() < 0.2
        row = tuple(rng.randrange(-(2**63), 2**63) if big else rng.randrange(-300, 300) for _ in codec.attributes)
        _, value = codec.encode(row, rng.choice([1, -1, 7, -(2**63), 2**63 - 1]))
        values.append(_corrupt(rng, value) if rng.random() < 0.1 else value)
    values.append(codec.encode((1,) * len(codec.attributes), 1)[1][:-1] + b"\x00")  # multiplicity 0
    return values


@needs_varint
@pytest.mark.parametrize("seed", range(6))
def test_compiled_decoder_equals_fastavro_one_by_one(seed: int) -> None:
    codec = CODECS["R"]
    values = _values(seed, codec)
    expected = decode_each(codec, values)
    compiled = codec.decode_many(values, "compiled")
    assert compiled == expected
    assert codec.decode_many(values, "numpy") == expected
    assert 100 < len(expected[2]) < 600  # the corruptions were caught, the rest decoded
    assert any("multiplicity 0" in reason for reason in expected[2].values())


@needs_varint
def test_compiled_decoder_keeps_ints_within_32_bits() -> None:
    codec = RelationCodec.from_schema(INT_SCHEMA)
    long_codec = RelationCodec.from_schema(
        {**INT_SCHEMA, "fields": [{"name": "x", "type": "long"}, INT_SCHEMA["fields"][1]]}
    )
    xs = (0, -(2**31), 2**31 - 1, 2**31, -(2**31) - 1, 2**40)
    values = [long_codec.encode((x,), 1)[1] for x in xs] + [None, b"", codec.encode((5,), -3)[1] + b"\x00"]
    rows, mults, unsure = varint_module.decode_varint_rows(values, codec.varint_widths, 1, [0], "compiled")
    assert rows[:3] == [(0,), (-(2**31),), (2**31 - 1,)] and mults[:3] == [1, 1, 1]
    assert unsure == [3, 4, 5, 6, 7, 8]
    assert codec.decode_many(values, "compiled") == decode_each(codec, values)
    rng = random.Random(4)
    many = [codec.encode((rng.randrange(-(2**31), 2**31),), rng.choice([1, -1, 2**62]))[1] for _ in range(500)]
    assert codec.decode_many(many, "compiled") == decode_each(codec, many) == codec.decode_many(many, "numpy")


def test_numpy_decoder_without_the_kernel(no_kernels: None) -> None:
    codec = CODECS["S"]
    values = _values(7, codec)
    assert codec.decode_many(values) == decode_each(codec, values)
    with pytest.raises(ImportError):
        codec.decode_many(values, "compiled")
    with pytest.raises(ValueError, match="implementation"):
        codec.decode_many(values, "fast")


# -- admission ----------------------------------------------------------------------------------

POLICIES = [
    Policy(),
    Policy(negative="allow"),
    Policy(duplicate="reject"),
    Policy(negative="allow", duplicate="reject"),
    Policy(delete_only=frozenset({"R"})),
]


def _admissions(seed: int) -> list[tuple[list, list, dict]]:
    """Random batches of one relation: repeated tuples, inserts and deletes (of absent tuples too),
    multiplicities other than 1, zeros, integers past 64 bits, and indices to skip."""
    rng = random.Random(seed)
    out = []
    for _ in range(12):
        n = rng.choice([1, 5, 40, 300])
        domain = rng.choice([3, 20, 10_000])
        rows: list = []
        mults: list = []
        for _ in range(n):
            rows.append((rng.randrange(domain), rng.randrange(3)))
            roll = rng.random()
            if roll < 0.02:
                mults.append(0)
            elif roll < 0.05:
                mults.append(rng.choice([2**63, -(2**63) - 5, 2**70]))
            else:
                mults.append(rng.choice([1, 1, 1, -1, -1, 2, -2, 3]))
        skip = {j: "malformed" for j in rng.sample(range(n), k=min(n, rng.choice([0, 0, 1, 3])))}
        for j in skip:
            rows[j] = None
        out.append((rows, mults, skip))
    return out


@needs_admit
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.negative}-{p.duplicate}-{sorted(p.delete_only)}")
@pytest.mark.parametrize("seed", range(4))
def test_compiled_admission_equals_the_loop(policy: Policy, seed: int) -> None:
    compiled, loop = RelationStore.empty("RS", policy), RelationStore.empty("RS", policy)
    compiled.contents["R"][(99, 99)] = loop.contents["R"][(99, 99)] = -4  # a negative left by an earlier policy
    for i, (rows, mults, skip) in enumerate(_admissions(seed)):
        initial = i == 0
        got = compiled.admit("R", rows, mults, skip, initial=initial, implementation="compiled")
        want = loop.admit("R", rows, mults, skip, initial=initial, implementation="python")
        assert got == want
        assert list(compiled.contents["R"].items()) == list(loop.contents["R"].items())  # the order too
        rows2 = [(99, 99), *[r for r in rows if r is not None][:5]]
        assert compiled.admit("R", rows2, [1] * len(rows2), implementation="compiled") == loop.admit(
            "R", rows2, [1] * len(rows2), implementation="python"
        )
    assert compiled.contents == loop.contents


@needs_admit
def test_compiled_admission_refuses_like_the_loop_and_raises_on_unhashable_rows() -> None:
    store = RelationStore.empty(["R"], Policy())
    kept, refused = store.admit("R", [(1,), (1,), (2,), (1,), (1,)], [1, -1, -1, -1, 0], implementation="compiled")
    assert kept == [0, 1]
    assert [(j, kind) for j, kind, _ in refused] == [
        (2, "absent_delete"),
        (3, "absent_delete"),
        (4, "zero_multiplicity"),
    ]
    assert store.contents["R"] == {}
    with pytest.raises(TypeError):
        store.admit("R", [([1],)], [1], implementation="compiled")
    with pytest.raises(TypeError):
        store.admit("R", [([1],)], [1], implementation="python")


def test_admission_without_the_kernel(no_kernels: None) -> None:
    store = RelationStore.empty(["R"], Policy())
    assert store.admit("R", [(1,), (1,)], [1, -2]) == ([0], [(1, *Policy().check(1, -2, "R"))])  # type: ignore[misc]
    with pytest.raises(ImportError):
        store.admit("R", [(1,)], [1], implementation="compiled")


# -- a batch against its records one by one -----------------------------------------------------

QUERIES = {
    "triangle": ("Q() :- R(a,b), S(b,c), T(c,a)", None),
    "selfjoin": ("Q() :- R(a,b), R(b,c), R(c,a)", 8),
    "grouped": ("Q(a) :- R(a,b), S(b,c)", 2),
}


def _config(policy: Policy) -> PipelineConfig:
    relations = tuple(RelationConfig(n, n, Path(f"relations/{n}.avsc")) for n in "RST")
    queries = tuple(QueryConfig(name, text, shards=s) for name, (text, s) in QUERIES.items())
    return PipelineConfig(relations=relations, queries=queries, policy=policy, snapshot_every=0)


def _mixed_batches(seed: int, batches: int = 5, size: int = 150) -> list[list[Record]]:
    """Random batches over R, S, T of good and bad records (see the module docstring), shuffled."""
    rng = random.Random(seed)
    offsets: dict[tuple[str, int], int] = {}
    held: list[tuple[str, tuple]] = []
    out: list[list[Record]] = []
    previous: list[Record] = []
    for _ in range(batches):
        batch: list[Record] = []
        for _ in range(size):
            topic = rng.choice("RRSTX")
            partition = rng.randrange(2)
            offset = offsets.get((topic, partition), 0)
            offsets[topic, partition] = offset + 1
            if topic == "X":  # a topic no relation reads
                batch.append(Record(topic, partition, offset, None, b"\x02", 7))
                continue
            roll = rng.random()
            if roll < 0.05:
                batch.append(Record(topic, partition, offset, b"k", b"\x01bad", 1000 + offset))
                continue
            if roll < 0.08:
                value = CODECS[topic].encode((1, 2), 1)[1][:-1] + b"\x00"  # multiplicity 0
                batch.append(Record(topic, partition, offset, b"k", value, 1000 + offset))
                continue
            if roll < 0.35 and held:
                t, row = rng.choice(held)
                if t != topic:
                    row = (rng.randrange(6), rng.randrange(6))
                mult = -rng.choice([1, 1, 2])
            elif roll < 0.42:
                row, mult = (rng.randrange(6), rng.randrange(6)), -1  # often of an absent tuple
            else:
                row, mult = (rng.randrange(6), rng.randrange(6)), rng.choice([1, 1, 1, 2])
                held.append((topic, row))
            key, value = CODECS[topic].encode(row, mult)
            batch.append(Record(topic, partition, offset, key, value, 1000 + offset))
        if previous and rng.random() < 0.5:
            batch += rng.sample(previous, 10)  # redelivered: applied once, dead-lettered once
        rng.shuffle(batch)
        previous = batch
        out.append(batch)
    return out


def _dead(sink: MemorySink) -> list[tuple]:
    return [(d["topic"], d["partition"], d["offset"], d["reason"]) for d in sink.on("ivm.dead-letter")]


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "fallbacks"])
@pytest.mark.parametrize(
    "policy", [Policy(), Policy(duplicate="reject"), Policy(negative="allow")], ids=["default", "set", "allow"]
)
@pytest.mark.parametrize("seed", range(2))
def test_a_mixed_batch_equals_its_records_one_by_one(
    seed: int, policy: Policy, kernels: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not kernels:
        monkeypatch.setattr(varint_module, "_varint_kernel", None)
        monkeypatch.setattr(relations_module, "_admit_kernel", None)
    config = _config(policy)
    whole_sink, each_sink = MemorySink(), MemorySink()
    whole, each = Pipeline(config, whole_sink), Pipeline(config, each_sink)
    for batch_id, batch in enumerate(_mixed_batches(seed)):
        whole_before, each_before = len(_dead(whole_sink)), len(_dead(each_sink))
        whole.process(batch, batch_id)
        ordered = RecordBatch.of(batch)
        for _tp, rows in ordered.runs():  # the batch's records one by one, in (topic, partition, offset) order
            for i in rows:
                each.process([ordered.record(i)])
        assert _dead(whole_sink)[whole_before:] == _dead(each_sink)[each_before:]  # the same, in the same order
        assert whole.positions == each.positions
        assert whole.state.relations == each.state.relations
        for name in QUERIES:
            assert whole.views[name].result() == each.views[name].result(), name
    assert _dead(whole_sink) == _dead(each_sink)
    reasons = " ".join(d[3] for d in _dead(whole_sink))
    assert "malformed Avro" in reasons and "multiplicity 0" in reasons and "unknown relation topic" in reasons
    assert ("absent tuple" in reasons) == (policy.negative == "reject")
    for relation, contents in whole.state.relations.items():
        assert list(contents.items()) == list(each.state.relations[relation].items()), relation


def test_dead_letters_of_a_partition_follow_its_offsets() -> None:
    """A malformed record after a refused one in one partition: published in offset order."""
    sink = MemorySink()
    pipeline = Pipeline(_config(Policy()), sink)
    key, absent = CODECS["R"].encode((5, 5), -1)
    batch = [
        Record("R", 0, 0, key, absent),
        Record("R", 0, 1, b"k", b"\x01bad"),
        Record("R", 0, 2, key, absent),
        Record("R", 0, 3, b"k", b""),
    ]
    pipeline.process(batch, 0)
    assert [(d[2], d[3].split(" ")[0]) for d in _dead(sink)] == [
        (0, "delete"),
        (1, "malformed"),
        (2, "delete"),
        (3, "empty"),
    ]


# -- interleaving ---------------------------------------------------------------------------------


def test_interleave_keeps_each_run_and_spreads_the_runs() -> None:
    rng = random.Random(5)
    for _ in range(50):
        lengths = [rng.randrange(0, 30) for _ in range(rng.randrange(1, 5))]
        updates, spans = [], []
        for r, n in enumerate(lengths):
            spans.append((len(updates), len(updates) + n))
            updates += [(r, j) for j in range(n)]
        merged = interleave(updates, [s for s in spans if s[1] > s[0]])
        assert sorted(merged) == sorted(updates)
        for r, n in enumerate(lengths):
            positions = [k for k, u in enumerate(merged) if u[0] == r]
            assert [merged[k][1] for k in positions] == list(range(n))  # each run in its order
            if n and len(merged):  # spread: the j-th of n sits near the fraction (j + 1/2)/n of the batch
                assert all(abs(k - (j + 0.5) / n * len(merged)) <= len(lengths) + len(merged) / n
                           for j, k in enumerate(positions))  # fmt: skip
    two = interleave([("R", 0), ("R", 1), ("R", 2), ("S", 0), ("S", 1), ("S", 2)], [(0, 3), (3, 6)])
    assert two == [("R", 0), ("S", 0), ("R", 1), ("S", 1), ("R", 2), ("S", 2)]
    assert interleave([1, 2, 3], [(1, 3)]) == [2, 3] and interleave([1], []) == []


def _facebook_updates(n: int) -> list[tuple[str, tuple[int, int], int]]:
    out: list[tuple[str, tuple[int, int], int]] = []
    for u, v in facebook_edges():
        for rel in "RST":
            out += [(rel, (u, v), 1), (rel, (v, u), 1)]
        if len(out) >= n:
            return out[:n]
    return out


def test_a_batch_in_topic_order_keeps_the_adaptive_triangle_first_order() -> None:
    """The first 60k updates of the facebook stream (6 per edge, R, S and T interleaved as produced)
    keep ivm_eps_auto first-order; under the degree rule (``promote="degree"``) the same updates
    relation after relation make it partition R (node 107's degree 1045 reaches 8·√N while N holds
    R's tuples alone; the default work rule does not: R's updates alone join nothing).  The
    pipeline, handed the batch topic by topic as Spark does, interleaves it and stays first-order."""
    query = "Q() :- R(a,b), S(b,c), T(c,a)"
    updates = _facebook_updates(60_000)
    by_relation = sorted(updates, key=lambda u: u[0])  # stable: each relation's order kept
    degree = {"promote": "degree"}
    produced, sorted_view = ivm.maintain(query, options=degree), ivm.maintain(query, options=degree)
    by_work = ivm.maintain(query)
    produced.apply(updates)
    sorted_view.apply(by_relation)
    by_work.apply(by_relation)
    assert produced.result() == sorted_view.result() == by_work.result()
    assert produced.stats()["partitioned"] == 0
    assert sorted_view.stats()["partitioned"] == 1  # what the interleaving avoids
    assert by_work.stats()["partitioned"] == 0
    relations = tuple(RelationConfig(n, n, Path(f"relations/{n}.avsc")) for n in "RST")
    pipeline = Pipeline(PipelineConfig(relations=relations, queries=(QueryConfig("q", query, "auto"),)), MemorySink())
    offsets = {"R": 0, "S": 0, "T": 0}
    records = []
    for rel, row, mult in by_relation:
        records.append(Record(rel, 0, offsets[rel], None, CODECS[rel].encode(row, mult)[1]))
        offsets[rel] += 1
    report = pipeline.process(RecordBatch.of(records), 0)
    view = pipeline.views["q"]
    assert view.engine.name == "ivm_eps_auto"
    assert report.results["q"] == produced.result() and report.dead_letters == 0
    assert view.stats()["partitioned"] == 0


# -- the view's entry for admitted batches ----------------------------------------------------------


@pytest.mark.parametrize("shards", [1, 4])
def test_apply_admitted_equals_apply(shards: int) -> None:
    rng = random.Random(shards)
    query = "Q(a) :- R(a,b), R(b,c), S(c,a)"
    allow = Policy(negative="allow")
    admitted, applied = (
        ivm.maintain(query, policy=allow, shards=shards),
        ivm.maintain(query, policy=allow, shards=shards),
    )
    for _ in range(10):
        batch = [(rng.choice("RS"), (rng.randrange(6), rng.randrange(6)), rng.choice([1, 1, 2, -1]))
                 for _ in range(rng.randrange(0, 400))]  # fmt: skip
        assert admitted.apply_admitted(batch).applied == applied.apply(batch).applied == len(batch)
        assert admitted.result() == applied.result()
    rejecting = ivm.maintain(query, shards=shards)  # the default policy can refuse: apply's checks run
    outcome = rejecting.apply_admitted([("R", (1, 2), 1), ("R", (3, 3), -1)])
    assert outcome.applied == 1 and [r.kind for r in outcome.rejected] == ["absent_delete"]


# -- the columnar batch ---------------------------------------------------------------------------


def test_runs_are_ranges_when_spark_hands_partitions_over_in_order() -> None:
    records = [Record(t, p, o, None, b"") for t in "RS" for p in (0, 1) for o in range(5)]
    runs = RecordBatch.of(records).runs()
    assert [tp for tp, _ in runs] == [("R", 0), ("R", 1), ("S", 0), ("S", 1)]
    assert all(isinstance(rows, range) for _, rows in runs)
    swapped = records[:]
    swapped[1], swapped[2] = swapped[2], swapped[1]  # out of offset order within one run
    split = records[5:10] + records[:5] + records[10:12] + records[0:0] + records[12:]
    for batch in (RecordBatch.of(swapped), RecordBatch.of(split)):
        got = [batch.record(i) for _, rows in batch.runs() for i in rows]
        assert got == sorted(records)
    assert RecordBatch.of([]).runs() == []


def test_from_arrow_shares_one_string_per_topic() -> None:
    table = pa.table({
        "topic": ["R", "S", "R", "T"], "partition": [0, 1, 0, 0], "offset": [3, 1, 4, 0],
        "key": [b"a", None, b"c", b"d"], "value": [b"1", b"2", None, b"4"], "timestamp_ms": [1, 2, 3, 4],
    })  # fmt: skip
    batch = RecordBatch.from_arrow(table)
    assert batch.columns() == tuple(table.column(name).to_pylist() for name in Record._fields)
    assert batch.topic[0] is batch.topic[2]
    with_null = table.set_column(0, "topic", pa.array(["R", None, "R", "T"]))
    assert RecordBatch.from_arrow(with_null).topic == ["R", None, "R", "T"]
    assert len(RecordBatch.from_arrow(table.slice(0, 0))) == 0


def test_the_collector_is_paused_during_a_batch_and_restored_after() -> None:
    import gc

    from ivm.processor.pipeline import collector_paused

    seen: list[bool] = []
    pipeline = Pipeline(_config(Policy()), MemorySink())
    view = pipeline.views["triangle"]
    original = view.apply_admitted
    view.apply_admitted = lambda updates, **kw: (seen.append(gc.isenabled()), original(updates, **kw))[1]  # type: ignore[method-assign]
    assert gc.isenabled()
    key, value = CODECS["R"].encode((1, 2), 1)
    pipeline.process([Record("R", 0, 0, key, value)], 0)
    assert seen == [False] and gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a failing batch")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before: off after
    finally:
        gc.enable()
