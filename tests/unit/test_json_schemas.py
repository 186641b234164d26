"""``--json`` is valid JSON for every field of every schema the project writes or reads.

The generic test walks each ``schemas/*.avsc`` (result, delta, model, progress,
dead letter, control) and ``schemas/relations/*.avsc``, builds a record with
every field set (unions on their non-null branch, arrays and maps with two
items, every logical type) together with the JSON each value must become,
encodes it with fastavro, decodes it with the decoder ``ivm subscribe`` uses,
renders it through the project's one JSON path (``render(kind, record,
as_json=True)``, :func:`ivm.processor.codecs.avro.json_value`) and reads it back with
``json.loads``.  A new field, a new logical type in a schema or a new schema is
covered without editing this file (a schema with no topic kind in
``ivm.processor.kafka.subscribe.KINDS`` fails).  ``ivm status --json``, ``ivm explain
--json`` and ``ivm query list --json`` are checked the same way.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest

from ivm.processor.cli import main
from ivm.processor.codecs.avro import load_schema, schemas_dir
from ivm.processor.config import RelationConfig, load_config
from ivm.processor.kafka.subscribe import KINDS, TopicSpec, decoder_for, render

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_SCHEMAS = sorted(schemas_dir().glob("*.avsc"))
RELATION_SCHEMAS = sorted((schemas_dir() / "relations").glob("*.avsc"))
DEMO = ROOT / "config" / "demo.toml"

#: JSON text set in the fields a kind parses (``TopicKind.json_text``), and what it must become.
JSON_TEXT = '{"a": [1, 2.5, null, "x"], "b": {"c": true}, "big": 123456789012345678901234567890}'
JSON_TEXT_VALUE = {"a": [1, 2.5, None, "x"], "b": {"c": True}, "big": 123456789012345678901234567890}

BASE_TIME = datetime.datetime(2024, 5, 1, 12, 30, 45, tzinfo=datetime.UTC)


class Generator:
    """Builds ``(Avro value, expected JSON)`` for a schema, every field set.

    Values differ per position (``n`` counts the values made), so that a field
    rendered in the place of another is caught.  The expected JSON is written
    from the JSON forms the help texts state (ISO-8601 UTC timestamps with a ``Z``,
    bytes base64, decimals and UUIDs strings), not by calling the code under test.
    """

    def __init__(self, json_text_fields: tuple[str, ...] = ()) -> None:
        self.named: dict[str, Any] = {}
        self.json_text_fields = json_text_fields
        self.n = 0
        self.logical_types: set[str] = set()

    def next(self) -> int:
        self.n += 1
        return self.n

    def value(self, schema: Any, namespace: str = "", field: str = "") -> tuple[Any, Any]:
        if isinstance(schema, list):  # a union: its first non-null branch (null alone: null)
            branches = [b for b in schema if b != "null"]
            return self.value(branches[0], namespace, field) if branches else (None, None)
        if isinstance(schema, str):
            if schema in self.named or f"{namespace}.{schema}" in self.named:
                return self.value(self.named.get(f"{namespace}.{schema}", self.named.get(schema)), namespace, field)
            return self.primitive(schema, field)
        logical = schema.get("logicalType")
        if logical:
            self.logical_types.add(logical)
            return self.logical(schema, logical)
        kind = schema["type"]
        if kind in ("record", "enum", "fixed"):
            namespace = schema.get("namespace", namespace)
            full = schema["name"] if "." in schema["name"] else f"{namespace}.{schema['name']}".strip(".")
            self.named[full] = self.named[schema["name"].rsplit(".", 1)[-1]] = schema
        if kind == "record":
            avro, expected = {}, {}
            for f in schema["fields"]:
                avro[f["name"]], expected[f["name"]] = self.value(f["type"], namespace, f["name"])
            return avro, expected
        if kind == "enum":
            symbol = schema["symbols"][self.next() % len(schema["symbols"])]
            return symbol, symbol
        if kind == "array":
            items = [self.value(schema["items"], namespace) for _ in range(2)]
            return [a for a, _ in items], [e for _, e in items]
        if kind == "map":
            items = {f"key{self.next()}": self.value(schema["values"], namespace) for _ in range(2)}
            return {k: a for k, (a, _) in items.items()}, {k: e for k, (_, e) in items.items()}
        if kind == "fixed":
            data = bytes((self.next() + i) % 256 for i in range(schema["size"]))
            return data, base64.b64encode(data).decode()
        return self.value(kind, namespace, field)  # {"type": "long"}

    def primitive(self, kind: str, field: str) -> tuple[Any, Any]:
        n = self.next()
        if kind == "null":
            return None, None
        if kind == "boolean":
            return n % 2 == 0, n % 2 == 0
        if kind == "int":
            return -(1000 + n), -(1000 + n)
        if kind == "long":
            return 2**40 + n, 2**40 + n  # beyond 32 bits, exact
        if kind in ("float", "double"):
            return n + 0.5, n + 0.5  # exact in both
        if kind == "string":
            if field in self.json_text_fields:
                return JSON_TEXT, JSON_TEXT_VALUE
            text = f'{field or "text"} {n} \u00fc"\\'  # non-ASCII, a quote and a backslash
            return text, text
        if kind == "bytes":
            data = bytes([0, 255, n % 256, 10])
            return data, base64.b64encode(data).decode()
        raise AssertionError(f"unknown Avro type {kind!r}: teach this generator")

    def logical(self, schema: dict[str, Any], logical: str) -> tuple[Any, Any]:
        n = self.next()
        when = BASE_TIME + datetime.timedelta(seconds=n)
        if logical == "timestamp-millis":
            value = when.replace(microsecond=123000)
            return value, value.strftime("%Y-%m-%dT%H:%M:%S.123Z")
        if logical == "timestamp-micros":
            value = when.replace(microsecond=123456)
            return value, value.strftime("%Y-%m-%dT%H:%M:%S.123456Z")
        if logical == "local-timestamp-millis":
            value = when.replace(microsecond=123000, tzinfo=None)
            return value, value.strftime("%Y-%m-%dT%H:%M:%S.123")
        if logical == "local-timestamp-micros":
            value = when.replace(microsecond=123456, tzinfo=None)
            return value, value.strftime("%Y-%m-%dT%H:%M:%S.123456")
        if logical == "date":
            value = when.date()
            return value, value.strftime("%Y-%m-%d")
        if logical in ("time-millis", "time-micros"):
            value = datetime.time(12, 30, n % 60, 123000)
            return value, value.strftime("%H:%M:%S.%f")
        if logical == "decimal":
            scale = schema.get("scale", 0)
            value = decimal.Decimal(f"{n}1234").scaleb(-scale)
            return value, str(value)
        if logical == "uuid":
            value = uuid.UUID(int=n)
            return str(value), str(value)
        raise AssertionError(f"unknown logical type {logical!r}: teach this generator")


def encode(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def strict_loads(text: str) -> Any:
    """``json.loads`` that refuses NaN and infinities (not JSON)."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def kind_of(path: Path) -> str:
    """The topic kind whose records ``path`` describes."""
    kinds = [name for name, kind in KINDS.items() if kind.schema == path.stem]
    assert kinds, (
        f"schemas/{path.name} has no topic kind in ivm.processor.kafka.subscribe.KINDS: ivm subscribe cannot read it"
    )
    return kinds[0]


def test_the_schemas_are_found() -> None:
    assert {p.stem for p in OUTPUT_SCHEMAS} >= {"result", "delta", "model", "progress", "dead_letter", "control"}
    assert RELATION_SCHEMAS


@pytest.mark.parametrize("path", OUTPUT_SCHEMAS, ids=lambda p: p.stem)
def test_every_field_of_an_output_schema_renders_as_json(path: Path) -> None:
    kind = kind_of(path)
    schema = load_schema(path)
    generator = Generator(KINDS[kind].json_text)
    record, expected = generator.value(schema)
    assert set(record) == {f["name"] for f in schema["fields"]}
    decoded = decoder_for(TopicSpec(f"x.{kind}", kind))(encode(schema, record))
    line = render(kind, decoded, as_json=True)
    assert "\n" not in line
    assert strict_loads(line) == expected
    assert render(kind, decoded)  # the plain line too


@pytest.mark.parametrize("path", RELATION_SCHEMAS, ids=lambda p: p.stem)
def test_every_field_of_a_relation_schema_renders_as_json(path: Path) -> None:
    schema = load_schema(path)
    record, expected = Generator().value(schema)
    spec = TopicSpec("updates", "relation", "rel", RelationConfig("rel", "updates", path))
    decoded = decoder_for(spec)(encode(schema, record))
    assert strict_loads(render("relation", decoded, as_json=True)) == {"relation": "rel", **expected}
    assert render("relation", decoded).startswith("rel(")


WIDE = {
    "type": "record",
    "name": "Wide",
    "namespace": "ivm.test",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": ["null", "double"]},
        {"name": "s", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["red", "green"]}},
        {"name": "tags", "type": {"type": "map", "values": "long"}},
        {"name": "list", "type": {"type": "array", "items": "Four"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tus", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tod", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tmu", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "mult", "type": "long"},
    ],
}


def test_the_generator_and_the_json_path_cover_every_avro_type() -> None:
    """A relation record with every Avro type and logical type: each reaches JSON as the help texts state."""
    generator = Generator()
    record, expected = generator.value(WIDE)
    assert generator.logical_types == {
        "timestamp-millis", "timestamp-micros", "local-timestamp-millis", "date", "time-millis", "time-micros",
        "decimal", "uuid",
    }  # fmt: skip
    assert expected["ts"].endswith("Z") and expected["dec"] == str(record["dec"])
    # decoded by fastavro itself: RelationCodec.from_schema does not take a union-typed attribute yet
    decoded = fastavro.schemaless_reader(io.BytesIO(encode(WIDE, record)), fastavro.parse_schema(WIDE), None)
    assert strict_loads(render("relation", {"relation": "wide", **decoded}, as_json=True)) == {
        "relation": "wide",
        **expected,
    }


# --- the other --json outputs -------------------------------------------------------------------------


def progress_record() -> dict[str, Any]:
    """A decoded progress record, every field set (as ``read_committed_progress`` returns it)."""
    schema = load_schema(schemas_dir() / "progress.avsc")
    record, _ = Generator().value(schema)
    return decoder_for(TopicSpec("demo.progress", "progress"))(encode(schema, record))


def test_status_json_has_every_field_as_json(tmp_path: Path) -> None:
    from ivm.processor.commands.status import status_document

    config = load_config(DEMO).with_overrides(state_dir=str(tmp_path))
    committed = progress_record()
    first = committed["offsets"][0]
    ends = {(first["topic"], first["partition"]): first["offset"] + 7, ("R", 0): 5}
    status = strict_loads(json.dumps(status_document(config, committed, ends, ["snapshot-3.pkl"]), allow_nan=False))
    assert status["pipeline"] == "demo"
    assert status["last_committed_batch"] == committed["batch_id"]
    assert status["committed_at"] == committed["timestamp_ms"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert status["committed_offsets"] == [dict(o) for o in committed["offsets"]]
    assert status["lag"] == {f"{first['topic']}[{first['partition']}]": 7, "R[0]": 5}
    assert status["total_lag"] == 12
    assert status["snapshots"] == ["snapshot-3.pkl"] and status["state_dir"] == str(tmp_path)
    assert status["queries"] == [q.name for q in config.queries]
    assert strict_loads(json.dumps(status_document(config, None, {}, []))) | {"state_dir": ""} == {
        "pipeline": "demo", "last_committed_batch": None, "committed_at": None, "committed_offsets": [], "lag": {},
        "total_lag": 0, "snapshots": [], "state_dir": "", "queries": [q.name for q in config.queries],
    }  # fmt: skip


def test_ivm_status_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import ivm.processor.kafka.deadletters
    import ivm.processor.kafka.topics
    import ivm.processor.state.recovery
    from ivm.processor.kafka.deadletters import DeadLetters

    committed = progress_record()
    monkeypatch.setattr(ivm.processor.kafka.topics, "require_broker", lambda bootstrap, timeout=5.0: None)
    monkeypatch.setattr(ivm.processor.state.recovery, "read_committed_progress", lambda bootstrap, topic: committed)
    monkeypatch.setattr(
        ivm.processor.kafka.topics,
        "end_offsets",
        lambda bootstrap, topics, isolation="read_committed": {(t, 0): 10 for t in topics},
    )
    monkeypatch.setattr("ivm.processor.commands.status.read_results", lambda bootstrap, config, **_: [])  # no broker
    # no broker: without this the dead-letter read waits its 30 s timeout out (twice)
    held = DeadLetters("dead-letter", total=3, by_reason={"negative multiplicity": 2, "malformed Avro": 1})
    monkeypatch.setattr(
        ivm.processor.kafka.deadletters, "read_dead_letters", lambda bootstrap, topic, inputs, timeout: held
    )
    assert main(["status", "-c", str(DEMO), "--json"]) == 0
    status = strict_loads(capsys.readouterr().out)
    reasons = {"negative multiplicity": 2, "malformed Avro": 1}
    assert status["dead_letters"] == {"topic": "dead-letter", "total": 3, "by_reason": reasons, "error": None}
    assert status["committed_at"].endswith("Z") and status["last_committed_batch"] == committed["batch_id"]
    assert set(status["lag"]) == {"R[0]", "S[0]", "T[0]"}
    assert main(["status", "-c", str(DEMO)]) == 0
    assert "last committed batch" in capsys.readouterr().out


@pytest.mark.parametrize(
    "query",
    [
        "Q() :- R(a,b), S(b,c), T(c,a)",
        "SELECT B, SUM(A * C) FROM R NATURAL JOIN S GROUP BY B",
        "Q(COVAR(a, b, c)) :- R(a, b), S(b, c)",
        "Q(a, b) :- R(a, b), S(b, c)",
    ],
)
def test_ivm_explain_json(query: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", query, "--json", "--pattern", "R=insert-only"]) == 0
    out = strict_loads(capsys.readouterr().out)
    assert isinstance(out["query"], str) and out["engine"] and out["guarantee"]


def test_ivm_explain_json_of_a_configured_query(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "-c", str(DEMO), "--json"]) == 0
    assert strict_loads(capsys.readouterr().out)["query"]


def test_ivm_query_list_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import ivm.processor.control
    from ivm.processor.config import QueryConfig

    added = QueryConfig("pairs", "Q(a) :- R(a, b)", patterns=("R=fifo",))
    log = [
        ivm.processor.control.Command(0, 0, "add", "pairs", added, "applied"),
        ivm.processor.control.Command(0, 1, "add", "late", added, None),
        ivm.processor.control.Command(0, 2, "add", "no", added, "refused", "control command refused: why"),
    ]
    monkeypatch.setattr(ivm.processor.control, "read_log", lambda bootstrap, topic: log)
    monkeypatch.setattr("ivm.processor.kafka.topics.require_broker", lambda *_a, **_k: None)  # no broker here
    assert main(["query", "list", "-c", str(DEMO), "--json"]) == 0
    listing = strict_loads(capsys.readouterr().out)
    assert listing["pipeline"] == "demo"
    queries = {q["name"]: q for q in listing["queries"]}
    assert queries["pairs"]["source"] == "control"
    assert [(queries[n]["state"], queries[n]["reason"]) for n in ("pairs", "late", "no")] == [
        ("maintained", None),
        ("pending", None),
        ("refused", "control command refused: why"),
    ]


def test_a_control_record_renders_every_field() -> None:
    """The control kind reads what ``ivm query add|remove`` writes (``ivm/processor/control.py``)."""
    from ivm.processor.config import QueryConfig
    from ivm.processor.control import encode_add, encode_remove

    decode = decoder_for(TopicSpec("demo.control", "control"))
    q = QueryConfig("q", "Q() :- R(a,b)", "ivm_eps", 0.25, 2, ("R=fifo",), "linear_regression", "a")
    added = strict_loads(render("control", decode(encode_add(q)), as_json=True))
    assert added | {"timestamp_ms": None} == {
        "op": "add", "name": "q", "query": "Q() :- R(a,b)", "engine": "ivm_eps", "eps": 0.25, "shards": 2,
        "patterns": ["R=fifo"], "model": "linear_regression", "label": "a", "method": "closed_form",
        "timestamp_ms": None, "command_partition": None, "command_offset": None, "reason": None,
    }  # fmt: skip
    assert added["timestamp_ms"].endswith("Z")
    assert render("control", decode(encode_add(q))).startswith("add q: Q() :- R(a,b)  (engine ivm_eps; eps 0.25")
    assert render("control", decode(encode_remove("q"))).startswith("remove q  (")
