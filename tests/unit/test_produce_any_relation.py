"""``ivm produce -c CONFIG RELATION FILE``: input for any relation of a configuration, no Kafka needed.

A relation whose schema has every type a file can give (long, int, double, float, string, bytes, boolean,
``["null", "long"]``, timestamp-millis, timestamp-micros, date): the same rows as CSV, JSON lines and an
Avro container file parse to the same updates, and each update ``ivm produce`` encodes decodes, through the
codec the pipeline itself builds for the relation's topic (plain Avro, and the Confluent wire format), to
the row it came from.  Retractions (``--delete``, a ``mult`` column), standard input, ``--topic``,
``--bootstrap-server``, the one-line errors (file, line or record, field) with nothing sent, and
``--rate`` held within a few percent (timed on a fake producer that records send times).

Kafka is replaced by a recording sink (``ivm.processor.kafka.produce.KafkaSink``) and the broker probe by a no-op.
"""

from __future__ import annotations

import base64
import datetime
import functools
import io
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import fastavro
import pytest

import ivm.processor.kafka.produce
import ivm.processor.kafka.topics
import ivm.processor.pipeline
from ivm.processor.cli import main
from ivm.processor.codecs.confluent import RegisteredSchema, RegistryClient
from ivm.processor.config import load_config
from ivm.processor.kafka.produce import (
    InMemory,
    Target,
    TokenBucket,
    UpdateProducer,
    format_of,
    read_updates,
    send_updates,
)
from ivm.processor.pipeline import Pipeline
from ivm.updates import Update

UTC = datetime.UTC
TOPIC = "ev.updates"
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "namespace": "test.relations",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "n", "type": "int"},
        {"name": "x", "type": "double"},
        {"name": "f", "type": "float"},
        {"name": "s", "type": "string"},
        {"name": "b", "type": "bytes"},
        {"name": "ok", "type": "boolean"},
        {"name": "opt", "type": ["null", "long"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "mult", "type": "long"},
    ],
}
ATTRIBUTES = [f["name"] for f in SCHEMA["fields"] if f["name"] != "mult"]
NOON = datetime.datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)
NOON_MS = int(NOON.timestamp() * 1000)
DAY = datetime.date(2024, 5, 1)
DAY_N = (DAY - datetime.date(1970, 1, 1)).days
US = datetime.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
LONG_MIN = -(2**63)
ROWS: list[tuple] = [
    (1, -5, 2.5, 0.25, "hello, world", b"\x00\xff", True, None, NOON, US, DAY),
    (2, 2**31 - 1, -0.001, 1.5, 'quote " here', b"", False, None, NOON, US, DAY),
    (LONG_MIN, 0, 1e10, -2.0, "ünïcødé", b"hi", True, 42, NOON, US, datetime.date(2024, 2, 29)),
]
CSV = f"""\
# events, every type
id,n,x,f,s,b,ok,opt,at,us,day
1,-5,2.5,0.25,"hello, world",AP8=,true,,2024-05-01T12:00:00.250Z,2024-05-01T12:00:00.123456Z,2024-05-01
2,2147483647,-0.001,1.5,"quote "" here",,false,null,{NOON_MS},{int(US.timestamp()) * 10**6 + 123456},{DAY_N}

{LONG_MIN},0,1e10,-2,ünïcødé,aGk=,1,42,2024-05-01T14:00:00.250+02:00,2024-05-01 12:00:00.123456,2024-02-29
"""
JSONL = "\n".join(
    json.dumps(record)
    for record in (
        {"id": 1, "n": -5, "x": 2.5, "f": 0.25, "s": "hello, world", "b": "AP8=", "ok": True, "opt": None,
         "at": "2024-05-01T12:00:00.250Z", "us": "2024-05-01T12:00:00.123456Z", "day": "2024-05-01"},
        {"id": 2, "n": 2**31 - 1, "x": -0.001, "f": 1.5, "s": 'quote " here', "b": "", "ok": False,
         "at": NOON_MS, "us": int(US.timestamp()) * 10**6 + 123456, "day": DAY_N},  # opt: its default, null
        {"id": LONG_MIN, "n": 0, "x": 1e10, "f": -2, "s": "ünïcødé", "b": "aGk=", "ok": True, "opt": 42,
         "at": "2024-05-01T14:00:00.250+02:00", "us": "2024-05-01T12:00:00.123456", "day": "2024-02-29"},
    )
) + "\n"  # fmt: skip


def _without_mult(schema: dict[str, Any], extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    fields = [f for f in schema["fields"] if f["name"] != "mult"]
    return {**schema, "fields": fields + (extra or [])}


def write_avro(path: Path, rows: list[tuple], mults: list[int] | None = None) -> Path:
    """An Avro container file of ``rows`` (with a ``mult`` field when ``mults``), written by fastavro."""
    schema = _without_mult(SCHEMA, [{"name": "mult", "type": "long"}] if mults else None)
    records = [dict(zip(ATTRIBUTES, row, strict=True)) for row in rows]
    for record, m in zip(records, mults or [], strict=False):
        record["mult"] = m
    with path.open("wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), records)
    return path


class Recorder:
    """Stands in for KafkaSink: records (topic, key, value), the send times and the bootstrap it was given."""

    instances: ClassVar[list[Recorder]] = []
    clock: ClassVar[Any] = staticmethod(time.monotonic)  # what stamps the send times (a test may simulate one)

    def __init__(self, bootstrap: str = "", **conf: Any) -> None:
        self.bootstrap = bootstrap
        self.sent: list[tuple[str, bytes | None, bytes | None]] = []
        self.times: list[float] = []
        self.commits = 0
        Recorder.instances.append(self)

    def begin(self) -> None:
        pass

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.times.append(self.clock())
        self.sent.append((topic, key, value))

    def commit(self) -> None:
        self.commits += 1


class FakeRegistry(RegistryClient):
    """A schema registry in memory, shared by every client (the producer's and the pipeline's)."""

    schemas: ClassVar[dict[int, str]] = {}

    def register(self, subject: str, schema: Any, schema_type: str = "AVRO") -> int:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        for schema_id, known in self.schemas.items():
            if known == text:
                return schema_id
        schema_id = len(self.schemas) + 1
        self.schemas[schema_id] = text
        return schema_id

    def schema(self, schema_id: int) -> RegisteredSchema:
        return RegisteredSchema(schema_id, "AVRO", self.schemas[schema_id])


@pytest.fixture
def kafka_stub(monkeypatch: pytest.MonkeyPatch) -> type[Recorder]:
    """No broker: the probe and topic creation do nothing, the producer's sink records."""
    monkeypatch.setattr(Recorder, "instances", [])
    monkeypatch.setattr(ivm.processor.kafka.produce, "KafkaSink", Recorder)
    monkeypatch.setattr(ivm.processor.kafka.topics, "require_broker", lambda bootstrap, *a, **k: None)
    monkeypatch.setattr(ivm.processor.kafka.topics, "create_topics", lambda bootstrap, topics, *a, **k: None)
    return Recorder


def write_config(folder: Path, encoding: str = "avro") -> Path:
    """A pipeline configuration with the relation ``events`` (topic ``ev.updates``) and a count over it."""
    (folder / "events.avsc").write_text(json.dumps(SCHEMA))
    registry = 'schema_registry = "http://registry.invalid"\n' if encoding == "confluent" else ""
    text = (
        f'[processor]\nname = "any"\nstate_dir = "{folder / "state"}"\n'
        f'[kafka]\nbootstrap = "127.0.0.1:39092"\n{registry}'
        f'[[relations]]\nname = "events"\ntopic = "{TOPIC}"\nschema = "events.avsc"\nencoding = "{encoding}"\n'
        f'[[queries]]\nname = "q"\nquery = "Q() :- events({", ".join(ATTRIBUTES)})"\n'
    )
    path = folder / "pipeline.toml"
    path.write_text(text)
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path)


def target(config_path: Path) -> Target:
    rel = load_config(config_path).relation("events")
    from ivm.processor.codecs.avro import RelationCodec, load_schema

    return Target.of(RelationCodec.from_schema(load_schema(rel.schema_file()), rel.name))


def inputs(tmp_path: Path) -> dict[str, Path]:
    """The same rows as CSV, JSON lines and an Avro container file."""
    (tmp_path / "events.csv").write_text(CSV)
    (tmp_path / "events.jsonl").write_text(JSONL)
    return {
        "csv": tmp_path / "events.csv",
        "jsonl": tmp_path / "events.jsonl",
        "avro": write_avro(tmp_path / "events.avro", ROWS),
    }


def produce(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    """``(exit code, stderr lines, stdout)`` of ``ivm produce ARGV`` in-process."""
    code = main(["produce", *argv])
    out, err = capfd.readouterr()
    return code, [line for line in err.splitlines() if line.strip()], out


def decoded(config_path: Path, sent: list[tuple[str, bytes | None, bytes | None]]) -> list[tuple[tuple, int]]:
    """The updates ``sent`` as the pipeline of ``config_path`` decodes them (its own codec for the topic)."""
    pipeline = Pipeline(load_config(config_path), Recorder())
    assert {topic for topic, _, _ in sent} == {TOPIC}
    rows, mults, errors = pipeline.codecs[TOPIC].decode_many([value for _, _, value in sent])
    assert errors == {}
    return list(zip(rows, mults, strict=True))


# -- the same rows in every format --------------------------------------------------------------------


def test_the_format_follows_the_extension_or_the_first_bytes() -> None:
    assert [format_of(n) for n in ("a.csv", "a.tsv.gz", "a.jsonl", "a.ndjson", "a.avro", "a.txt", "a.edges.gz")] == [
        "csv", "csv", "jsonl", "jsonl", "avro", "edges", "edges",
    ]  # fmt: skip
    assert format_of(InMemory(b'  {"id": 1}\n'), default="csv") == "jsonl"
    assert format_of(InMemory(b"Obj\x01..."), default="csv") == "avro"
    assert format_of(InMemory(b"id,n\n1,2\n"), default="csv") == "csv"


def test_every_type_parses_to_the_same_updates_from_csv_jsonl_and_avro(config: Path, tmp_path: Path) -> None:
    events = target(config)
    expected = [Update("events", row, 1) for row in ROWS]
    for form, path in inputs(tmp_path).items():
        assert read_updates(path, [events], 1, format=form) == expected, form


@pytest.mark.parametrize("form", ["csv", "jsonl", "avro"])
def test_each_update_round_trips_through_the_pipelines_decoder(
    form: str, config: Path, tmp_path: Path, kafka_stub: type[Recorder], capfd
) -> None:
    path = inputs(tmp_path)[form]
    code, lines, out = produce(capfd, "-c", str(config), "events", str(path))
    assert code == 0, lines
    (sink,) = kafka_stub.instances
    assert str(sink.bootstrap) == "127.0.0.1:39092" and sink.commits == 1  # the configuration's broker, flushed
    assert decoded(config, sink.sent) == [(row, 1) for row in ROWS]
    assert out.startswith(f"produced 3 updates (3 inserts, 0 deletes) to {TOPIC} from {path} ({form}) in ")


def test_the_confluent_wire_format_round_trips_through_the_pipelines_decoder(
    tmp_path: Path, kafka_stub: type[Recorder], monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    monkeypatch.setattr(FakeRegistry, "schemas", {})
    monkeypatch.setattr(ivm.processor.pipeline, "RegistryClient", FakeRegistry)
    config = write_config(tmp_path, encoding="confluent")
    code, lines, _ = produce(capfd, "-c", str(config), "events", str(inputs(tmp_path)["csv"]))
    assert code == 0, lines
    (sink,) = kafka_stub.instances
    assert all(value[:1] == b"\x00" for _, _, value in sink.sent)  # framed: magic byte, schema id
    assert len(FakeRegistry.schemas) == 2  # the key and value schemas, registered under the topic's subjects
    assert decoded(config, sink.sent) == [(row, 1) for row in ROWS]


def test_standard_input_topic_and_bootstrap_server_overrides(
    config: Path, kafka_stub: type[Recorder], monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(JSONL.encode())))
    code, lines, out = produce(
        capfd, "-c", str(config), "events", "-", "--topic", "elsewhere", "--bootstrap-server", "127.0.0.1:1234"
    )
    assert code == 0, lines
    (sink,) = kafka_stub.instances
    assert str(sink.bootstrap) == "127.0.0.1:1234"
    assert {topic for topic, _, _ in sink.sent} == {"elsewhere"}
    assert "from <stdin> (jsonl)" in out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(CSV.encode())))
    code, lines, out = produce(capfd, "-c", str(config), "events", "-", "--bootstrap", "127.0.0.1:4321")
    assert code == 0, lines
    assert str(kafka_stub.instances[-1].bootstrap) == "127.0.0.1:4321"  # --bootstrap: the old name, an alias
    assert decoded(config, kafka_stub.instances[-1].sent) == [(row, 1) for row in ROWS]


def test_a_progress_bar_when_stderr_is_a_terminal(
    config: Path, tmp_path: Path, kafka_stub: type[Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["produce", "-c", str(config), "events", str(inputs(tmp_path)["csv"])]) == 0
    assert "\rproduce  [" in terminal.getvalue() and "3/3 updates" in terminal.getvalue()


# -- retractions ------------------------------------------------------------------------------------


def test_delete_makes_every_row_a_delete(config: Path, tmp_path: Path, kafka_stub: type[Recorder], capfd) -> None:
    events = target(config)
    for form, path in inputs(tmp_path).items():
        assert read_updates(path, [events], -1, format=form) == [Update("events", row, -1) for row in ROWS]
    code, _, out = produce(capfd, "-c", str(config), "events", str(tmp_path / "events.csv"), "--delete")
    assert code == 0
    assert decoded(config, kafka_stub.instances[0].sent) == [(row, -1) for row in ROWS]
    assert "produced 3 updates (0 inserts, 3 deletes)" in out


def test_a_mult_column_gives_each_rows_multiplicity(config: Path, tmp_path: Path) -> None:
    events = target(config)
    mults = [3, -1, -2]
    lines = CSV.splitlines()
    header = lines.index("id,n,x,f,s,b,ok,opt,at,us,day")
    data = [i for i, line in enumerate(lines) if i > header and line]
    csv_lines = [*lines[:header], "mult," + lines[header]]
    csv_lines += [f"{m}," + lines[i] for m, i in zip(mults, data, strict=True)]
    (tmp_path / "m.csv").write_text("\n".join(csv_lines) + "\n")
    records = [json.loads(line) for line in JSONL.splitlines()]
    (tmp_path / "m.jsonl").write_text(
        "".join(json.dumps({**r, "mult": m}) + "\n" for r, m in zip(records, mults, strict=True))
    )
    write_avro(tmp_path / "m.avro", ROWS, mults)
    for form in ("csv", "jsonl", "avro"):
        path = tmp_path / f"m.{form}"
        assert read_updates(path, [events], 1, format=form) == [
            Update("events", r, m) for r, m in zip(ROWS, mults, strict=True)
        ]
        # --delete negates the file's own multiplicities (undoes the file)
        assert [u.mult for u in read_updates(path, [events], -1, format=form)] == [-3, 1, 2]


# -- errors: one line naming the file, the line (or record) and the field; nothing sent ---------------

HEADER = "id,n,x,f,s,b,ok,opt,at,us,day"
GOOD = "1,-5,2.5,0.25,s,AP8=,true,,2024-05-01T12:00:00Z,0,2024-05-01"


def _csv_with(row: str, header: str = HEADER) -> str:
    return f"{header}\n{GOOD}\n{GOOD}\n{row}\n{GOOD}\n"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.csv", _csv_with(GOOD.replace("1,", "x,", 1)), "line 4, field id: 'x' is not a long"),
        (
            "bad.csv",
            _csv_with(GOOD.replace("-5", "2147483648")),
            "line 4, field n: '2147483648' is not an int: out of range (32-bit)",
        ),
        ("bad.csv", _csv_with(GOOD.replace("2.5", "two")), "line 4, field x: 'two' is not a double"),
        ("bad.csv", _csv_with(GOOD.replace("0.25", "1e39")), "line 4, field f: '1e39' is not a float: out of range"),
        ("bad.csv", _csv_with(GOOD.replace("AP8=", "AP8")), "line 4, field b: 'AP8' is not base64 bytes"),
        ("bad.csv", _csv_with(GOOD.replace("true", "yes")), "line 4, field ok: 'yes' is not a boolean"),
        ("bad.csv", _csv_with(GOOD.replace(",,", ",1.5,")), "line 4, field opt: '1.5' is not a long or null"),
        (
            "bad.csv",
            _csv_with(GOOD.replace("2024-05-01T12:00:00Z", "noon")),
            "line 4, field at: 'noon' is not a timestamp (ISO-8601, or epoch milliseconds)",
        ),
        (
            "bad.csv",
            _csv_with(GOOD.rsplit(",", 1)[0] + ",2024-02-30"),
            "line 4, field day: '2024-02-30' is not a date",
        ),
        ("bad.csv", _csv_with("1,2"), "line 4: 2 fields, the header (line 1) has 11"),
        (
            "bad.csv",
            _csv_with(GOOD + ",7", HEADER + ",weight"),
            "line 1, field weight: unknown column; relation events's attributes are id, n, x",
        ),
        ("bad.csv", _csv_with(GOOD.rsplit(",", 1)[0], HEADER.rsplit(",", 1)[0]), "line 1, field day: missing;"),
        (
            "bad.csv",
            _csv_with("0," + GOOD, "mult," + HEADER).replace(f"\n{GOOD}", f"\n1,{GOOD}"),
            "line 4, field mult: '0' is not a multiplicity (a non-zero integer",
        ),
        (
            "bad.jsonl",
            "\n".join([*JSONL.splitlines()[:2], json.dumps({**json.loads(JSONL.splitlines()[0]), "id": "x"})]),
            "line 3, field id: 'x' is not a long",
        ),
        (
            "bad.jsonl",
            json.dumps({**json.loads(JSONL.splitlines()[0]), "ok": 1}),
            "line 1, field ok: 1 is not a boolean",
        ),
        (
            "bad.jsonl",
            json.dumps({**json.loads(JSONL.splitlines()[0]), "n": None}),
            "line 1, field n: null is not an int",
        ),
        (
            "bad.jsonl",
            JSONL + json.dumps({**json.loads(JSONL.splitlines()[0]), "colour": "red"}),
            "line 4, field colour: unknown field",
        ),
        (
            "bad.jsonl",
            "\n\n" + json.dumps({k: v for k, v in json.loads(JSONL.splitlines()[0]).items() if k != "s"}),
            "line 3, field s: missing",
        ),
        ("bad.jsonl", JSONL + "[1, 2]\n", "line 4: expected a JSON object"),
        ("bad.jsonl", JSONL + "{oops\n", "line 4: not JSON"),
        (
            "bad.jsonl",
            json.dumps({**json.loads(JSONL.splitlines()[0]), "mult": 0}),
            "line 1, field mult: 0 is not a multiplicity",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 12 else "",
)
def test_an_error_is_one_line_with_file_line_and_field_and_nothing_is_sent(
    name: str, text: str, message: str, config: Path, tmp_path: Path, kafka_stub: type[Recorder], capfd
) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, lines, out = produce(capfd, "-c", str(config), "events", str(path))
    assert code == 2 and not out
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ivm produce: {path}: {message}"), lines
    assert kafka_stub.instances == []  # no producer was even made: nothing sent


def test_avro_errors_name_the_record(config: Path, tmp_path: Path, kafka_stub: type[Recorder], capfd) -> None:
    schema = _without_mult(SCHEMA)
    schema["fields"] = [{**f, "type": "string"} if f["name"] == "id" else f for f in schema["fields"]]
    records = [dict(zip(ATTRIBUTES, row, strict=True)) for row in ROWS]
    records = [{**r, "id": str(r["id"])} for r in records[:2]] + [{**records[2], "id": "x"}]
    path = tmp_path / "bad.avro"
    with path.open("wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), records)
    code, lines, _ = produce(capfd, "-c", str(config), "events", str(path))
    assert code == 2
    assert lines == [f"ivm produce: {path}: record 1, field id: '1' is not a long"]
    extra = _without_mult(SCHEMA, [{"name": "colour", "type": "string"}])
    with path.open("wb") as out:
        fastavro.writer(
            out, fastavro.parse_schema(extra), [{**dict(zip(ATTRIBUTES, ROWS[0], strict=True)), "colour": "red"}]
        )
    code, lines, _ = produce(capfd, "-c", str(config), "events", str(path))
    assert code == 2 and lines[0].startswith(f"ivm produce: {path}: record 1, field colour: unknown field")
    path.write_text("id,n\n1,2\n")
    code, lines, _ = produce(capfd, "-c", str(config), "events", str(path))
    assert code == 2 and lines[0].startswith(f"ivm produce: {path}: not an Avro container file")
    assert kafka_stub.instances == []


def test_a_relation_not_in_the_configuration(config: Path, tmp_path: Path, kafka_stub: type[Recorder], capfd) -> None:
    code, lines, _ = produce(capfd, "-c", str(config), "orders", str(inputs(tmp_path)["csv"]))
    assert code == 2
    assert lines == [f"ivm produce: relation orders is not in {config} (its relations: events)"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["events"], "expected RELATION FILE (or FILE -r RELATION)"),
        (["events", "{csv}", "-r", "events"], "use RELATION FILE or FILE -r RELATION, not both"),
        (["events", "{csv}", "--rate", "0"], "--rate: expected a positive number"),
        (["events", "{csv}", "--encoding", "confluent"], "--encoding: with -c the relation's encoding"),
        (["events", "{csv}", "--columns", "1,2"], "--columns is for the edges format"),
        (["events", "{csv}", "--format", "jsonl"], "events.csv: line 1: not JSON"),  # --format overrides
    ],
    ids=["no-file", "both-forms", "rate-0", "encoding", "columns", "format"],
)
def test_usage_errors(
    argv: list[str], message: str, config: Path, tmp_path: Path, kafka_stub: type[Recorder], capfd
) -> None:
    csv_path = inputs(tmp_path)["csv"]
    args = [a.format(csv=csv_path) for a in argv]
    code, lines, _ = produce(capfd, "-c", str(config), *args)
    assert code == 2 and len(lines) == 1, lines
    assert message in lines[0], lines
    assert kafka_stub.instances == []


# -- --rate --------------------------------------------------------------------------------------------


def _measured_rate(times: list[float]) -> float:
    return (len(times) - 1) / (times[-1] - times[0])


class LoadedClock:
    """The token bucket's clock and sleep on a loaded machine, simulated (seeded, the same every run): a sleep
    overshoots by up to 2 ms, and one in fifty by 30 ms more (the process was not scheduled); every look at the
    clock costs up to 20 µs of work.  The rate's checks run on it, not on the wall clock, which a busy machine
    makes miss any bound (the guide: no timed assertions); the real clock's part is
    test_rate_is_never_exceeded_on_the_real_clock."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 0.0

    def clock(self) -> float:
        self.now += self.rng.uniform(0.0, 20e-6)
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds + self.rng.uniform(0.0, 0.002) + (0.03 if self.rng.random() < 0.02 else 0.0)


def _never_ahead(times: list[float], started: float, rate: float) -> None:
    """The i-th send (from 0) is not before ``started + i / rate``: the bucket starts with one token and
    gains ``rate`` a second, so no stall and no burst after it runs ahead of the rate."""
    ahead = [(i, t - started) for i, t in enumerate(times) if t - started < i / rate - 1e-6]
    assert not ahead, f"sends ahead of the rate {rate}/s (index, seconds since start): {ahead[:5]}"


@pytest.mark.parametrize(("rate", "n"), [(5000.0, 5000), (60.0, 61)])
def test_rate_holds_within_a_few_percent(rate: float, n: int, config: Path) -> None:
    """A fast rate (many sends per sleep) and a slow one (a sleep per send), on a simulated loaded clock
    (:class:`LoadedClock`): the sends keep the rate within 3% over the run (overshooting sleeps are made up
    for), never run ahead of it, start without a burst and end without a long tail."""
    from ivm.processor.codecs.avro import RelationCodec, load_schema

    codec = RelationCodec.from_schema(load_schema(load_config(config).relation("events").schema_file()), "events")
    updates = [Update("events", ROWS[i % 3], 1) for i in range(n)]
    loaded = LoadedClock(seed=int(rate))
    sink = Recorder()
    sink.clock = loaded.clock
    producer = UpdateProducer("unused:1", {"events": codec}, {"events": TOPIC}, sink=sink)
    progress: list[int] = []
    started = loaded.clock()
    bucket = TokenBucket(rate, clock=loaded.clock, sleep=loaded.sleep)
    assert send_updates(producer, updates, bucket=bucket, progress=progress.append) == n
    elapsed = loaded.now - started
    assert sum(progress) == n and len(sink.sent) == n
    measured = _measured_rate(sink.times)
    assert abs(measured / rate - 1) < 0.03, (measured, rate)
    _never_ahead(sink.times, started, rate)
    assert elapsed > (n - 1) / rate * 0.95  # no burst at the start
    assert abs(elapsed - (n - 1) / rate) < 0.05 * n / rate, elapsed  # no long tail


@pytest.mark.parametrize(("rate", "n"), [(5000.0, 5000), (60.0, 61)])
def test_rate_is_never_exceeded_on_the_real_clock(rate: float, n: int, config: Path) -> None:
    """With the bucket ``send_updates`` makes for a rate (the real clock and sleep), every send comes no
    earlier than the rate allows: a bound a loaded machine cannot break (it only makes sends later)."""
    from ivm.processor.codecs.avro import RelationCodec, load_schema

    codec = RelationCodec.from_schema(load_schema(load_config(config).relation("events").schema_file()), "events")
    updates = [Update("events", ROWS[i % 3], 1) for i in range(n)]
    sink = Recorder()
    producer = UpdateProducer("unused:1", {"events": codec}, {"events": TOPIC}, sink=sink)
    started = time.monotonic()
    assert send_updates(producer, updates, rate=rate) == n
    assert len(sink.sent) == n
    _never_ahead(sink.times, started, rate)


def test_rate_of_ivm_produce(
    config: Path, tmp_path: Path, kafka_stub: type[Recorder], capfd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--rate 400`` paces the sends at 400 a second (on a simulated loaded clock, :class:`LoadedClock`)."""
    loaded = LoadedClock(seed=400)
    monkeypatch.setattr(
        ivm.processor.kafka.produce,
        "TokenBucket",
        functools.partial(TokenBucket, clock=loaded.clock, sleep=loaded.sleep),
    )
    monkeypatch.setattr(Recorder, "clock", staticmethod(loaded.clock))
    path = tmp_path / "many.csv"
    path.write_text("\n".join([HEADER] + [GOOD.replace("1,", f"{i},", 1) for i in range(400)]) + "\n")
    code, err, out = produce(capfd, "-c", str(config), "events", str(path), "--rate", "400")
    assert code == 0, err
    measured = _measured_rate(kafka_stub.instances[0].times)
    assert abs(measured / 400 - 1) < 0.03, measured
    assert "produced 400 updates" in out


def test_token_bucket_on_a_fake_clock() -> None:
    """The bucket's arithmetic, exactly: one token at start, then one per 1/rate, a burst after a stall."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    bucket = TokenBucket(100, clock=lambda: now[0], sleep=sleep, min_sleep=0)
    taken = []
    for _ in range(101):
        bucket.take()
        taken.append(now[0])
    assert taken[0] == 0 and taken[-1] == pytest.approx(1.0)
    now[0] += 5  # a stall: at most burst (a tenth of a second's worth) is sent at once
    for _ in range(10):
        bucket.take()
    assert now[0] == pytest.approx(6.0)
    bucket.take()
    assert now[0] == pytest.approx(6.01)


def test_edges_format_of_a_typed_relation_is_unchanged_for_plain_types(config: Path, tmp_path: Path) -> None:
    """The old reader still serves the edges format; a relation's logical and nullable types now parse there."""
    path = tmp_path / "e.txt"
    path.write_text(GOOD.replace(",", " ").replace("  ", " null ") + "\n")
    (update,) = read_updates(path, [target(config)], 1)
    assert update.row[0] == 1 and update.row[7] is None
    assert update.row[8] == datetime.datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert base64.b64encode(update.row[5]) == b"AP8="


def test_no_register_is_only_for_the_confluent_encoding(config: Path, tmp_path: Path, kafka_stub, capfd) -> None:
    code, lines, _ = produce(capfd, "-c", str(config), "events", str(inputs(tmp_path)["csv"]), "--no-register")
    assert code == 2
    assert lines == ["ivm produce: --no-register: only for the confluent encoding; relation events is plain Avro "
                     "(no registry involved)"]  # fmt: skip
    assert kafka_stub.instances == []
