"""Packed records (``encoding = "avro-packed"``): many updates of a relation in one Kafka record.

The codec (array order, per-update errors with their index, a whole record that is not one), the
pipeline (each update's own identity for the input policy and the dead-letter topic, the same
results as the same updates in one-update records), the configuration and ``ivm produce``'s packer.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from ivm.kernels import under_ci
from ivm.processor.codecs.avro import DecodeError, PackedCodec, RelationCodec, load_relation_codecs, packed_schema
from ivm.processor.config import ConfigError, load_config, parse_config
from ivm.processor.kafka.produce import PackedProducer
from ivm.processor.pipeline import Pipeline, Record
from ivm.query.parse import parse
from ivm.updates import Update
from tests.oracles import apply_stream, count
from tests.unit.test_pipeline import MemorySink

ROOT = Path(__file__).resolve().parents[2]
CODECS = load_relation_codecs()
PACKED = {name: PackedCodec(codec) for name, codec in CODECS.items()}

FLOATS = {
    "type": "record",
    "name": "M",
    "fields": [{"name": "k", "type": "string"}, {"name": "x", "type": "double"}, {"name": "mult", "type": "long"}],
}


def test_round_trip_keeps_array_order() -> None:
    updates = [((1, 2), 1), ((3, 4), -1), ((1, 2), 2), ((-(2**40), 7), 5)]
    value = PACKED["R"].encode_many(updates)
    assert PACKED["R"].items(value) == updates
    # one record of 4 updates is far smaller than 4 one-update records of 3 varints each plus Kafka's overhead
    assert len(value) < sum(len(CODECS["R"].encode(r, m)[1]) for r, m in updates) + 3


def test_invalid_update_inside_is_named_by_index_and_the_rest_kept() -> None:
    codec = PackedCodec(RelationCodec.from_schema(FLOATS), FLOATS)
    value = codec.encode_many([(("a", 1.5), 1), (("b", float("nan")), 1), (("c", 2.0), 0), (("d", 3.0), -2)])
    flat = codec.decode_many([value])
    assert flat.rows == [("a", 1.5), None, None, ("d", 3.0)]
    assert flat.mults[0] == 1 and flat.mults[3] == -2
    assert flat.source == [0, 0, 0, 0]
    assert flat.index == [0, 1, 2, 3]
    assert set(flat.errors) == {1, 2}
    assert "M.x is nan" in flat.errors[1]
    assert "multiplicity 0" in flat.errors[2]


def test_a_record_that_is_not_packed_is_one_error() -> None:
    good = PACKED["R"].encode_many([((1, 2), 1), ((2, 3), 1)])
    one_update = CODECS["R"].encode((5, 6), 1)[1]  # a one-update record: not an array
    empty = b"\x00"  # an array of no blocks
    flat = PACKED["R"].decode_many([good, b"\xff\xff\xff", None, empty, good + b"\x00", good])
    assert flat.source == [0, 0, 1, 2, 3, 4, 5, 5]
    assert flat.index == [0, 1, None, None, None, None, 0, 1]
    assert flat.rows == [(1, 2), (2, 3), None, None, None, None, (1, 2), (2, 3)]
    assert "malformed Avro" in flat.errors[2]
    assert "empty message" in flat.errors[3]
    assert "with no updates" in flat.errors[4]
    assert "trailing bytes" in flat.errors[5]
    with pytest.raises(DecodeError):
        PACKED["R"].items(one_update)


def test_packed_schema_is_an_array_of_the_relation_records() -> None:
    schema = packed_schema(FLOATS)
    assert schema == {"type": "array", "items": FLOATS}
    with pytest.raises(ValueError, match="at least one update"):
        PACKED["R"].encode_many([])


def _config(encoding: str = "avro-packed"):
    config = load_config(ROOT / "config" / "demo.toml")
    return replace(config, relations=tuple(replace(r, encoding=encoding) for r in config.relations))


def test_pipeline_dead_letters_carry_offset_and_index_and_apply_the_rest() -> None:
    sink = MemorySink()
    pipeline = Pipeline(_config(), sink)
    r0 = PACKED["R"].encode_many([((1, 2), 1), ((9, 9), -1), ((4, 4), 1)])  # index 1: delete of an absent tuple
    s0 = PACKED["S"].encode_many([((2, 3), 1), ((7, 7), 0)])  # index 1: multiplicity 0
    t0 = PACKED["T"].encode_many([((3, 1), 1)])
    batch = [
        Record("R", 0, 0, b"k", r0),
        Record("S", 0, 0, None, s0),
        Record("T", 0, 0, None, b"\x01garbage"),  # not a packed record at all
        Record("T", 0, 1, None, t0),
    ]
    report = pipeline.process(batch, 0)
    assert report.results == {"triangle": 1}
    assert report.dead_letters == 3
    dead = {(d["topic"], d["offset"], d["index"]): d for d in sink.on("ivm.dead-letter")}
    assert set(dead) == {("R", 0, 1), ("S", 0, 1), ("T", 0, None)}
    assert dead["R", 0, 1]["reason"].startswith("update 1 of the packed record: ")
    assert "absent tuple" in dead["R", 0, 1]["reason"]
    assert "multiplicity 0" in dead["S", 0, 1]["reason"]
    assert "malformed Avro" in dead["T", 0, None]["reason"]
    assert dead["R", 0, 1]["value"] == r0 and dead["R", 0, 1]["key"] == b"k"  # the whole record, for a replay
    assert pipeline.state.relations["R"] == {(1, 2): 1, (4, 4): 1}
    # consumed counts updates: 3 + 2 + 1 (the garbage record) + 1 = applied 4 + dead-lettered 3
    assert pipeline.metrics.relation_consumed.labels("R")._value.get() == 3
    assert pipeline.metrics.relation_applied.labels("R")._value.get() == 2
    assert pipeline.metrics.relation_dead_lettered.labels("R")._value.get() == 1


def test_dead_letters_in_offset_then_index_order() -> None:
    sink = MemorySink()
    pipeline = Pipeline(_config(), sink)
    bad = [((i, i), -1) for i in range(3)]  # each a delete of an absent tuple: refused by the policy
    batch = [
        Record("R", 0, 5, None, PACKED["R"].encode_many([((0, 1), 0), *bad])),  # index 0: decode error
        Record("R", 0, 6, None, PACKED["R"].encode_many(bad)),
    ]
    pipeline.process(batch, 0)
    assert [(d["offset"], d["index"]) for d in sink.on("ivm.dead-letter")] == [
        (5, 0), (5, 1), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2)
    ]  # fmt: skip


def test_same_results_as_one_update_records() -> None:
    """The same stream in packed records of random sizes and in one-update records: the same
    result after every batch and the same contents (a recount by the oracle agrees)."""
    rng = random.Random(37)
    stream: list[tuple[str, tuple[int, int], int]] = []
    live: dict[tuple[str, tuple[int, int]], int] = {}
    for _ in range(3000):
        rel = rng.choice("RST")
        row = (rng.randrange(12), rng.randrange(12))
        mult = -1 if live.get((rel, row), 0) > 0 and rng.random() < 0.3 else 1
        live[rel, row] = live.get((rel, row), 0) + mult
        stream.append((rel, row, mult))
    one, packed = Pipeline(_config("avro"), MemorySink()), Pipeline(_config(), MemorySink())
    offsets = {"R": 0, "S": 0, "T": 0}
    packed_offsets = {"R": 0, "S": 0, "T": 0}
    for start in range(0, len(stream), 500):
        chunk = stream[start : start + 500]
        plain_batch = []
        for rel, row, mult in chunk:
            plain_batch.append(Record(rel, 0, offsets[rel], None, CODECS[rel].encode(row, mult)[1]))
            offsets[rel] += 1
        packed_batch = []
        for rel in "RST":
            mine = [(row, mult) for r, row, mult in chunk if r == rel]
            while mine:
                size = rng.randint(1, 60)
                value = PACKED[rel].encode_many(mine[:size])
                packed_batch.append(Record(rel, 0, packed_offsets[rel], None, value))
                packed_offsets[rel] += 1
                mine = mine[size:]
        last = packed.process(packed_batch).results
        assert one.process(plain_batch).results == last
    assert one.state.relations == packed.state.relations
    db, rejected = apply_stream(stream)
    assert not rejected
    assert last["triangle"] == count(parse("Q() :- R(a,b), S(b,c), T(c,a)"), db)


def test_config_accepts_packed_encodings_in_both_placements() -> None:
    base = {
        "kafka": {"bootstrap": "127.0.0.1:9092"},
        "relations": [{"name": "R", "schema": str(ROOT / "schemas/relations/R.avsc"), "encoding": "avro-packed"}],
        "queries": [{"name": "q", "query": "Q() :- R(a,b)"}],
    }
    assert parse_config(base).relations[0].encoding == "avro-packed"
    placed = parse_config({**base, "processor": {"placement": "executors"}})  # the shard hosts read them too
    assert placed.placement == "executors" and placed.relations[0].encoding == "avro-packed"
    confluent = {**base, "relations": [{**base["relations"][0], "encoding": "confluent-packed"}]}
    with pytest.raises(ConfigError, match='"confluent-packed" needs \\[kafka\\] schema_registry'):
        parse_config(confluent)
    with pytest.raises(ConfigError, match="encoding"):
        parse_config({**base, "relations": [{**base["relations"][0], "encoding": "packed"}]})


class ListSink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []

    def begin(self) -> None: ...

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.sent.append((topic, key, value))

    def commit(self) -> None: ...


def test_packer_keeps_every_tuples_updates_in_one_keyed_bucket_in_order() -> None:
    sink = ListSink()
    producer = PackedProducer("unused:1", {"R": PACKED["R"]}, {"R": "r-topic"}, pack=7, buckets={"r-topic": 4},
                              sink=sink)  # fmt: skip
    rng = random.Random(5)
    updates = [Update("R", (rng.randrange(20), 0), rng.choice((1, -1))) for _ in range(500)]
    for update in updates:
        producer.send(update)
    producer.flush()
    assert producer.sent == 500
    assert producer.records == len(sink.sent) >= 500 // 7
    keys_of: dict[tuple, set[bytes | None]] = {}
    seen: dict[tuple, list[int]] = {}
    for topic, key, value in sink.sent:
        assert topic == "r-topic"
        items = PACKED["R"].items(value)
        assert 1 <= len(items) <= 7
        for row, mult in items:
            keys_of.setdefault(row, set()).add(key)
            seen.setdefault(row, []).append(mult)
    assert all(len(keys) == 1 for keys in keys_of.values())  # one Kafka key (so one partition) per tuple
    assert len({k for keys in keys_of.values() for k in keys}) == 4
    for row, mults in seen.items():  # each tuple's updates in the order sent
        assert mults == [u.mult for u in updates if u.row == row]


def test_packer_refuses_one_update_codecs() -> None:
    with pytest.raises(ValueError, match="one-update records"):
        PackedProducer("unused:1", {"R": CODECS["R"]}, pack=10, sink=ListSink())


def _zigzag(n: int) -> bytes:
    raw = (n << 1) ^ (n >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def test_compiled_decoder_equals_the_reader_on_mixed_records() -> None:
    """The compiled pass (``_varint_kernel.decode_packed``) against fastavro on random packed records,
    good ones among records it must leave to the reader: the same updates, errors, sources and indexes."""
    from ivm.processor.codecs.varint import kernel_built

    if not kernel_built() and not under_ci():  # under CI a missing kernel fails, never skips
        pytest.skip("ivm.processor.codecs._varint_kernel is not built")
    rng = random.Random(3)
    codec = PACKED["R"]
    values: list[bytes | None] = []
    for _ in range(400):
        items = [((rng.randrange(-(2**40), 2**40), rng.randrange(-5, 5)), rng.choice((1, -1, 0, 7)))
                 for _ in range(rng.randint(1, 9))]  # fmt: skip
        good = codec.encode_many(items)
        kind = rng.randrange(8)
        if kind == 0:  # the same items in blocks of negative counts with byte sizes (Avro allows both)
            body = b"".join(_zigzag(r[0]) + _zigzag(r[1]) + _zigzag(m) for r, m in items)
            good = _zigzag(-len(items)) + _zigzag(len(body)) + body + b"\x00"
        elif kind == 1:
            good = good[: rng.randrange(len(good))]  # truncated
        elif kind == 2:
            good += b"\x00"  # trailing bytes
        elif kind == 3:
            good = rng.choice([b"", b"\x00", None, b"\xff" * 11])
        values.append(good)
    compiled = codec.decode_many(values)
    reader = codec.decode_many(values, implementation="reader")
    assert compiled == reader
    assert len(compiled.errors) > 50 and len(compiled.rows) - len(compiled.errors) > 500


def test_compiled_decoder_refuses_an_int_beyond_32_bits_as_the_reader() -> None:
    schema = {"type": "record", "name": "I", "fields": [{"name": "a", "type": "int"}, {"name": "mult", "type": "long"}]}
    codec = PackedCodec(RelationCodec.from_schema(schema), schema)
    value = _zigzag(1) + _zigzag(2**33) + _zigzag(1) + b"\x00"  # an int field holding 2^33
    assert codec.decode_many([value]) == codec.decode_many([value], implementation="reader")


def test_confluent_packed_resolves_array_and_record_writer_schemas() -> None:
    """``confluent-packed``: an evolved array writer schema resolves item by item, a one-update record
    schema is read as one update, a bad update keeps its index, and an array of something else is refused."""
    import copy
    import io
    import json

    import fastavro

    from ivm.processor.codecs.avro import load_schema, schemas_dir
    from ivm.processor.codecs.confluent import PackedWireCodec, RegisteredSchema, RegistryClient, RegistryError, frame

    schema = load_schema(schemas_dir() / "relations" / "R.avsc")
    registry = RegistryClient("http://127.0.0.1:1/unused")  # every schema below is in its cache: no request
    evolved = copy.deepcopy(schema)
    evolved["fields"] = [{"name": "note", "type": "string"}, {"name": "B", "type": "int"},
                         {"name": "A", "type": "long"}, {"name": "mult", "type": "int"}]  # fmt: skip
    writers = {
        1: {"type": "array", "items": evolved},
        2: schema,
        3: {"type": "array", "items": "long"},
    }
    for schema_id, writer in writers.items():
        registry._by_id[schema_id] = RegisteredSchema(schema_id, "AVRO", json.dumps(writer))
    codec = PackedWireCodec(schema, registry, "R-topic")

    def body(writer: dict, datum: object) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(writer), datum)
        return buf.getvalue()

    packed = body(writers[1], [{"note": "x", "B": -3, "A": 2**40, "mult": 2}, {"note": "", "B": 1, "A": 1, "mult": 0}])
    one = body(schema, {"A": 5, "B": 6, "mult": -1})
    longs = body(writers[3], [1, 2])
    flat = codec.decode_many([frame(1, packed), frame(2, one), frame(3, longs)])
    assert flat.rows[:3] == [(2**40, -3), None, (5, 6)]
    assert flat.mults[0] == 2 and flat.mults[2] == -1
    assert flat.source == [0, 0, 1, 2] and flat.index == [0, 1, 0, None]
    assert set(flat.errors) == {1, 3}
    assert "multiplicity 0" in flat.errors[1]
    assert "schema id 3 is not an Avro record" in flat.errors[3]
    with pytest.raises(RegistryError, match="cannot be reached"):  # not the record's fault: no dead letter
        codec.decode_many([frame(9, packed)])


# -- ivm produce --pack --------------------------------------------------------------------------------


def test_ivm_produce_packs_a_packed_relation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd) -> None:
    import ivm.processor.kafka.produce
    import ivm.processor.kafka.topics
    from tests.unit.test_produce_any_relation import ROWS, TOPIC, Recorder, inputs, produce, write_config

    monkeypatch.setattr(Recorder, "instances", [])  # no broker: the producer's sink records
    monkeypatch.setattr(ivm.processor.kafka.produce, "KafkaSink", Recorder)
    monkeypatch.setattr(ivm.processor.kafka.topics, "require_broker", lambda bootstrap, *a, **k: None)
    monkeypatch.setattr(ivm.processor.kafka.topics, "create_topics", lambda bootstrap, topics, *a, **k: None)
    monkeypatch.setattr(ivm.processor.kafka.topics, "partitions_of", lambda bootstrap, topics: {t: [0] for t in topics})
    config = write_config(tmp_path, encoding="avro-packed")
    code, lines, out = produce(capfd, "-c", str(config), "events", str(inputs(tmp_path)["csv"]), "--pack", "2")
    assert code == 0, lines
    (sink,) = Recorder.instances
    codec = Pipeline(load_config(config), MemorySink()).codecs[TOPIC]
    assert [len(codec.items(value)) for _, _, value in sink.sent] == [2, 1]  # 3 rows, one partition: 2 + 1
    flat = codec.decode_many([value for _, _, value in sink.sent])
    assert flat.errors == {}
    assert list(zip(flat.rows, flat.mults, strict=True)) == [(row, 1) for row in ROWS]  # in order
    assert f"produced {len(ROWS)} updates in 2 packed records" in out

    one = tmp_path / "one"
    one.mkdir()
    code, lines, _ = produce(capfd, "-c", str(write_config(one)), "events", str(inputs(tmp_path)["csv"]), "--pack", "2")
    assert code == 2
    assert "--pack: relation events is encoded one update per record" in lines[-1]
