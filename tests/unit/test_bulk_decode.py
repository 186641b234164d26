"""The bulk paths of the runtime against their one-at-a-time definitions.

- :func:`ivm.processor.codecs.varint.decode_varint_records` and ``RelationCodec.decode_many``
  against fastavro's reader record by record, on random and corrupted messages;
- ``RecordBatch.runs`` against sorting the rows by (topic, partition, offset);
- the pipeline fed a shuffled columnar batch against the same records in order;
- :class:`ivm.processor.job.Handoff`: order, back-pressure, and a failing batch.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from ivm.processor.codecs.avro import RelationCodec, decode_each, load_relation_codecs
from ivm.processor.codecs.varint import decode_varint_records
from ivm.processor.config import load_config
from ivm.processor.job import Handoff
from ivm.processor.pipeline import Pipeline, Record, RecordBatch
from tests.unit.test_pipeline import MemorySink

ROOT = Path(__file__).resolve().parents[2]
CODECS = load_relation_codecs()
INT_SCHEMA = {
    "type": "record",
    "name": "P",
    "fields": [{"name": "x", "type": "int"}, {"name": "mult", "type": {"type": "long"}}],
}


def _corrupt(rng: random.Random, value: bytes) -> bytes | None:
    kind = rng.randrange(7)
    if kind == 0:
        return value[: rng.randrange(len(value))]  # truncated
    if kind == 1:
        return value + bytes([rng.randrange(256)])  # a trailing byte
    if kind == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 14)))  # noise
    if kind == 3:
        return b"\xff" * rng.randrange(9, 13) + b"\x01" + value  # an over-long varint
    if kind == 4:
        return None
    if kind == 5:
        return b""
    i = rng.randrange(len(value))
    return value[:i] + bytes([value[i] ^ 0x80]) + value[i + 1 :]  # a flipped continuation bit


@pytest.mark.parametrize("seed", range(5))
def test_decode_many_equals_fastavro_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    codec = CODECS["R"]
    values = []
    for _ in range(3000):
        big = rng.random() < 0.2
        row = tuple(rng.randrange(-(2**63), 2**63) if big else rng.randrange(-300, 300) for _ in range(2))
        _, value = codec.encode(row, rng.choice([1, -1, 7, -(2**63), 2**63 - 1]))
        values.append(_corrupt(rng, value) if rng.random() < 0.1 else value)
    values += [codec.encode((1, 2), 1)[1][:-1] + b"\x00"]  # multiplicity 0
    assert codec.varint_widths == (10, 10, 10)
    bulk = codec.decode_many(values)
    assert bulk == decode_each(codec, values)
    assert any("multiplicity 0" in reason for reason in bulk[2].values())
    assert 100 < len(bulk[2]) < 600  # the corruptions were caught, the rest decoded


def test_int_fields_outside_32_bits_go_to_the_full_reader() -> None:
    codec = RelationCodec.from_schema(INT_SCHEMA)
    assert codec.varint_widths == (5, 10)
    long_codec = RelationCodec.from_schema(
        {**INT_SCHEMA, "fields": [{"name": "x", "type": "long"}, INT_SCHEMA["fields"][1]]}
    )
    values = [long_codec.encode((x,), 1)[1] for x in (0, -(2**31), 2**31 - 1, 2**31, -(2**31) - 1, 2**40)]
    columns, unsure = decode_varint_records(values, codec.varint_widths)
    assert columns[0][:3] == [0, -(2**31), 2**31 - 1]
    assert unsure.tolist() == [3, 4, 5]
    assert codec.decode_many(values) == decode_each(codec, values)


def test_schemas_with_other_types_decode_one_by_one() -> None:
    schema = {**INT_SCHEMA, "fields": [{"name": "s", "type": "string"}, INT_SCHEMA["fields"][1]]}
    codec = RelationCodec.from_schema(schema)
    assert codec.varint_widths is None
    values = [codec.encode(("a",), 1)[1], b"\x02"]
    rows, mults, errors = codec.decode_many(values)
    assert rows[0] == ("a",) and mults[0] == 1 and list(errors) == [1]


def test_runs_group_partitions_in_offset_order() -> None:
    rng = random.Random(1)
    records = [Record(t, p, o, None, b"") for t in "RS" for p in range(3) for o in range(rng.randrange(0, 40))]
    batch = RecordBatch.of(records)  # contiguous and ordered, as Spark hands them over
    shuffled = records[:]
    rng.shuffle(shuffled)
    for b in (batch, RecordBatch.of(shuffled)):
        got = [b.record(i) for _, rows in b.runs() for i in rows]
        assert got == sorted(records)
        assert [tp for tp, _ in b.runs()] == sorted({(r.topic, r.partition) for r in records})


def test_a_shuffled_batch_gives_the_ordered_result() -> None:
    rng = random.Random(2)
    records, offsets, live = [], {"R": 0, "S": 0, "T": 0}, []
    for _ in range(2000):
        topic = rng.choice("RST")
        if live and rng.random() < 0.3:
            t, row = live.pop(rng.randrange(len(live)))
            key, value = CODECS[t].encode(row, -1)
            topic = t
        else:
            row = (rng.randrange(30), rng.randrange(30))
            live.append((topic, row))
            key, value = CODECS[topic].encode(row, 1)
        records.append(Record(topic, 0, offsets[topic], key, value))
        offsets[topic] += 1
    config = load_config(ROOT / "config" / "demo.toml")
    ordered, shuffled = Pipeline(config, MemorySink()), Pipeline(config, MemorySink())
    mixed = records[:]
    rng.shuffle(mixed)
    a = ordered.process(records, 0)
    b = shuffled.process(RecordBatch.of(mixed), 0)
    assert a.results == b.results and a.dead_letters == b.dead_letters == 0
    assert (
        ordered.positions
        == shuffled.positions
        == {("R", 0): offsets["R"], ("S", 0): offsets["S"], ("T", 0): offsets["T"]}
    )
    # a redelivered tail is skipped: nothing changes
    again = shuffled.process(RecordBatch.of(mixed[:500]), 1)
    assert again.records == 0 and again.results == a.results


def test_handoff_applies_in_order_and_reports_a_failure() -> None:
    seen: list[int] = []
    gate = threading.Event()

    def apply(batch: RecordBatch) -> None:
        gate.wait(5)
        if batch.offset[0] == 3:
            raise ValueError("boom")
        seen.append(batch.offset[0])

    handoff = Handoff(apply)
    batches = [RecordBatch.of([Record("R", 0, i, None, b"")]) for i in range(5)]
    handoff.put(batches[0])
    handoff.put(batches[1])  # waits in the queue while the worker holds batch 0
    blocked = threading.Thread(target=handoff.put, args=(batches[2],))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()  # back-pressure: a third batch waits for room
    gate.set()
    blocked.join(5)
    handoff.put(batches[3])
    handoff._worker.join(10)  # the worker stops at the first failure
    assert seen == [0, 1, 2] and isinstance(handoff.error, ValueError)
    with pytest.raises(RuntimeError, match="boom"):
        handoff.put(batches[4])
    handoff.close()
