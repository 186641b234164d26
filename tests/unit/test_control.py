"""Queries added, replaced and removed through the control topic (no Kafka: an in-memory sink)."""

from __future__ import annotations

import json
from pathlib import Path

from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.control import decode, effective, encode_add, encode_remove
from ivm.processor.pipeline import Pipeline, Record
from ivm.processor.state.recovery import StateStore, adopt
from ivm.query import parse
from tests.oracles import count
from tests.unit.test_pipeline import MemorySink
from tests.unit.test_relation_state import _database, _records, _stream

TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"
TWO_PATH = "Q() :- R(a,b), S(b,c)"
CONFIG = PipelineConfig(
    relations=tuple(RelationConfig(r, r, Path(f"relations/{r}.avsc")) for r in "RST"),
    queries=(QueryConfig("tri", TRIANGLE),),
)


class Control:
    """Records of the control topic ``ivm.control`` (the default pipeline's)."""

    def __init__(self) -> None:
        self.offset = 0

    def __call__(self, value: bytes) -> Record:
        self.offset += 1
        return Record("ivm.control", 0, self.offset - 1, b"k", value)


def _process(pipeline: Pipeline, records: list[Record], size: int = 60) -> None:
    for i in range(0, len(records), size):
        pipeline.process(records[i : i + size])


def _value(sink: MemorySink, name: str) -> int:
    return json.loads(sink.on(f"{name}.result")[-1]["value"])


def test_codec_round_trip_and_overrides() -> None:
    q = QueryConfig("p", TWO_PATH, "fivm", None, 2, ("R=insert-only",))
    assert decode(encode_add(q)) == ("add", "p", q)
    assert decode(encode_remove("tri")) == ("remove", "tri", None)
    assert [x.name for x in effective(CONFIG, {"p": q, "tri": None}).queries] == ["p"]


def test_add_replace_and_remove_while_running() -> None:
    sink = MemorySink()
    pipeline = Pipeline(CONFIG, sink)
    control = Control()
    first, second, third = _stream(11, 300), _stream(12, 300), _stream(13, 300)
    offsets = {r: 0 for r in "RST"}

    def records(stream):
        out = _records(stream, offsets)
        for rel, *_ in stream:
            offsets[rel] += 1
        return out

    _process(pipeline, records(first))
    # added mid-stream: its first result already counts everything before it
    later = records(second)
    batch = [control(encode_add(QueryConfig("path", TWO_PATH))), *later[:1]]
    pipeline.process(batch)
    db = _database(first + second[:1])
    assert _value(sink, "path") == count(parse(TWO_PATH), db)
    _process(pipeline, later[1:])
    db = _database(first + second)
    assert _value(sink, "path") == count(parse(TWO_PATH), db)
    assert _value(sink, "tri") == count(parse(TRIANGLE), db)
    # replaced under the same name, the configured one removed
    pipeline.process([control(encode_add(QueryConfig("path", TRIANGLE, "first_order"))), control(encode_remove("tri"))])
    _process(pipeline, records(third))
    db = _database(first + second + third)
    assert _value(sink, "path") == count(parse(TRIANGLE), db)
    assert pipeline.views["path"].engine.name == "first_order"
    assert "tri" not in pipeline.views
    assert all(d["topic"] != "ivm.control" for d in sink.on("ivm.dead-letter"))


def test_a_command_the_pipeline_cannot_serve_is_dead_lettered() -> None:
    sink = MemorySink()
    pipeline = Pipeline(CONFIG, sink)
    control = Control()
    pipeline.process(
        [
            control(encode_add(QueryConfig("bad", "Q() :- R(a,b), X(b)"))),  # no relation X
            control(encode_add(QueryConfig("eps", TWO_PATH, "first_order", eps=0.3))),  # no eps in first_order
            control(encode_remove("nothing")),
            control(b"\x07garbage"),
        ]
    )
    dead = sink.on("ivm.dead-letter")
    assert [d["offset"] for d in dead] == [0, 1, 2, 3]
    assert all(d["reason"].startswith("control command refused") for d in dead)
    assert "X" in dead[0]["reason"] and "eps" in dead[1]["reason"] and "no query 'nothing'" in dead[2]["reason"]
    assert set(pipeline.views) == {"tri"}


def test_control_queries_survive_a_restart(tmp_path: Path) -> None:
    sink = MemorySink()
    pipeline = Pipeline(CONFIG, sink)
    control = Control()
    stream = _stream(14, 400)
    pipeline.process([control(encode_add(QueryConfig("path", TWO_PATH))), control(encode_remove("tri"))])
    _process(pipeline, _records(stream))
    store = StateStore(tmp_path)
    store.save(pipeline.state)
    again = Pipeline(CONFIG, MemorySink())
    report = adopt(again, store.load())
    assert report.kept == ["path"] and report.rebuilt == {} and set(again.views) == {"path"}
    assert again.views["path"].result() == count(parse(TWO_PATH), _database(stream))
    assert again.state.control == {"path": QueryConfig("path", TWO_PATH), "tri": None}


def _acks(sink: MemorySink) -> list[tuple[str, str, int, str | None]]:
    """The job's answers on the control topic: (op, name, command offset, reason)."""
    from ivm.processor.control import _decode

    out = []
    for topic, _key, value in sink.sent:
        if topic == "ivm.control":
            op, name, _q, record = _decode(value)
            out.append((op, name, record["command_offset"], record["reason"]))
    return out


def test_every_command_is_answered_in_its_batch_and_a_refused_one_stays_refused_in_a_replay() -> None:
    """Issue 36 point 4: the job answers each command (applied, or refused with the reason) on the control
    topic; a command refused once is refused again when replayed, even by a pipeline that could serve it
    (the executors' placement refuses what the driver's would apply)."""
    from ivm.processor.control import Command, fold, refusals

    sink = MemorySink()
    pipeline = Pipeline(CONFIG, sink)
    control = Control()
    add = control(encode_add(QueryConfig("path", TWO_PATH)))
    bad = control(encode_add(QueryConfig("bad", "Q() :- R(a,b), X(b)")))
    pipeline.process([add, bad])
    acks = _acks(sink)
    assert [(op, name, offset) for op, name, offset, _ in acks] == [("applied", "path", 0), ("refused", "bad", 1)]
    assert acks[0][3] is None and "X" in acks[1][3]
    answered = pipeline.process([control(_ack_of(acks[0]))])  # the job reads its own answers: no answer to them
    assert answered.dead_letters == 0 and len(_acks(sink)) == 2

    # the log as `ivm query list` and a start read it: the refused command is no override
    commands = [
        Command(0, 0, "add", "path", QueryConfig("path", TWO_PATH), "applied"),
        Command(0, 1, "add", "bad", None, "refused", acks[1][3]),
        Command(0, 2, "add", "later", QueryConfig("later", TWO_PATH), "refused", "placement executors"),
    ]
    assert fold(commands) == {"path": QueryConfig("path", TWO_PATH)}
    again = Pipeline(CONFIG, MemorySink())
    again.refused_commands = refusals(commands)
    again.replay([add, bad, Record("ivm.control", 0, 2, b"k", encode_add(QueryConfig("later", TWO_PATH)))])
    assert set(again.views) == {"tri", "path"}  # "later" would be served, but it was refused: it stays so


def _ack_of(ack: tuple[str, str, int, str | None]) -> bytes:
    from ivm.processor.control import encode_ack

    return encode_ack(ack[1], 0, ack[2], ack[3])


def test_a_command_written_before_the_answer_fields_still_decodes() -> None:
    """Commands in existing control topics were written without ``command_partition``, ``command_offset``
    and ``reason``: they must still count (a pipeline's added queries would vanish otherwise)."""
    import io

    import fastavro

    from ivm.processor.codecs.avro import load_schema, schemas_dir

    raw = load_schema(schemas_dir() / "control.avsc")
    earlier = fastavro.parse_schema({**raw, "fields": raw["fields"][:-3]})
    buf = io.BytesIO()
    record = {"op": "add", "name": "path", "query": TWO_PATH, "engine": "auto", "eps": None, "shards": None,
              "patterns": [], "model": None, "label": None, "method": "closed_form", "timestamp_ms": 1}  # fmt: skip
    fastavro.schemaless_writer(buf, earlier, record)
    assert decode(buf.getvalue()) == ("add", "path", QueryConfig("path", TWO_PATH))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, earlier, {"op": "remove", "name": "tri", "timestamp_ms": 1})
    assert decode(buf.getvalue()) == ("remove", "tri", None)
    try:
        decode(buf.getvalue() + b"\x00\x00\x00\x00\x00")
    except ValueError as err:
        assert "malformed control record" in str(err)
    else:
        raise AssertionError("trailing bytes must be refused")


def test_an_executors_start_serves_the_unrefused_commands_or_refuses_by_name() -> None:
    """Issue 36 point 3: the executors' placement built the file's queries only, so a query added at run time
    stopped being maintained without a word.  A start serves the configuration with every command not refused;
    one it cannot serve stops it, naming the query, the reason and the fix."""
    import pytest

    from ivm.processor.control import Command
    from ivm.processor.job import served_at_start
    from ivm.processor.state.recovery import RecoveryError

    distinct = QueryConfig("distinct", "SELECT COUNT(DISTINCT S.C) FROM R JOIN S USING (B)")
    commands = [
        Command(0, 0, "add", "distinct", distinct, "applied"),
        Command(0, 1, "add", "later", QueryConfig("later", TWO_PATH), None),  # pending: the start takes it
        Command(0, 2, "add", "no", QueryConfig("no", TWO_PATH), "refused", "control command refused: why"),
        Command(0, 3, "remove", "tri", None, "applied"),
    ]
    served = served_at_start(CONFIG, commands)
    assert [q.name for q in served.queries] == ["distinct", "later"]
    assert served_at_start(CONFIG, []) is CONFIG

    two = PipelineConfig(relations=CONFIG.relations[:2], queries=(QueryConfig("path", TWO_PATH),), name="p")
    over_t = QueryConfig("tri_again", TRIANGLE)  # added while T was configured; T is gone from the file now
    with pytest.raises(RecoveryError, match=r"p\.control \(tri_again\).*remove them with `ivm query remove NAME"):
        served_at_start(two, [Command(0, 0, "add", "tri_again", over_t, "applied")])
