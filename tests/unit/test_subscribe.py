"""``ivm subscribe`` without Kafka: topic kinds, decoders, JSON and plain rendering, result JSON forms.

Each record is encoded with the project's own codecs (``OutputCodec``,
``RelationCodec``, ``WireCodec``) as the pipeline and ``ivm produce`` write
them; the decoder and ``--json`` rendering must give one valid JSON document
with the right values.  Results of every ring (COVAR's covariance triple, the
categorical covariance, relations) must be JSON with the ring element's exact
numbers, not Python ``repr`` strings.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import ivm
import ivm.processor.codecs.confluent
from ivm.apps import ChowLiuTree, LinearRegression
from ivm.processor.cli import main
from ivm.processor.codecs.avro import OutputCodec, RelationCodec, json_value, load_schema, result_to_json
from ivm.processor.codecs.confluent import RegisteredSchema, RegistryClient, WireCodec
from ivm.processor.config import load_config
from ivm.processor.kafka.subscribe import (
    KINDS,
    TopicSpec,
    UnknownTopicError,
    decoder_for,
    infer_kind,
    pipeline_topics,
    render,
    resolve_topic,
    to_json,
)
from ivm.rings import CovarianceRing, GeneralizedCovarianceRing, Relation

ROOT = Path(__file__).resolve().parents[2]
R_SCHEMA = ROOT / "schemas" / "relations" / "R.avsc"
WHEN = datetime.datetime(2024, 5, 1, 12, 30, 45, 123000, tzinfo=datetime.UTC)
WHEN_MS = int(WHEN.timestamp() * 1000)
WHEN_TEXT = "2024-05-01T12:30:45.123Z"

BIG = 10**12  # its square, 10**24, is beyond a float's exact integers


def covar_view(rows: list[tuple[int, int]]) -> Any:
    view = ivm.maintain("Q(COVAR(a, b)) :- R(a, b)", engine="fivm")
    view.apply([("R", row, 1) for row in rows])
    return view


def round_trip(kind: str, record: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Encode ``record`` with the kind's output codec, decode it as subscribe does; (JSON document, plain line)."""
    value = OutputCodec(kind).encode(record)
    decoded = decoder_for(TopicSpec(f"x.{kind}", kind))(value)
    line = render(kind, decoded, as_json=True)
    return json.loads(line), render(kind, decoded)


# the topic kinds, each decoded and rendered


def test_result_with_covariance_value_is_one_json_document() -> None:
    view = covar_view([(BIG, 3), (2, -5), (BIG + 1, 7)])
    record = {
        "query": "cov",
        "batch_id": 4,
        "value": result_to_json(view.result(), view.query),
        "offsets": [{"topic": "R", "partition": 0, "offset": 3}],
        "applied": 3,
        "rejected": 0,
        "engine": "fivm",
        "timestamp_ms": WHEN_MS,
    }
    doc, plain = round_trip("result", record)
    cov = view.result()
    assert doc["timestamp_ms"] == WHEN_TEXT
    assert doc["offsets"] == [{"topic": "R", "partition": 0, "offset": 3}]
    value = doc["value"]
    assert value["type"] == "covariance" and value["variables"] == ["a", "b"]
    assert value["count"] == cov.c == 3
    assert [value["sums"][v] for v in "ab"] == cov.s.tolist()
    assert [[value["products"][x][y] for y in "ab"] for x in "ab"] == cov.Q.tolist()
    assert value["products"]["a"]["a"] == BIG**2 + 4 + (BIG + 1) ** 2  # exact, beyond a float
    assert plain.startswith("batch      4  cov = {") and WHEN_TEXT in plain


def test_count_result_keeps_exact_integers() -> None:
    record = {
        "query": "triangle",
        "batch_id": 0,
        "value": result_to_json(10**40),
        "offsets": [],
        "applied": 1,
        "rejected": 0,
        "engine": "ivm_eps",
        "timestamp_ms": WHEN_MS,
    }
    doc, plain = round_trip("result", record)
    assert doc["value"] == 10**40 and isinstance(doc["value"], int)
    assert f"triangle = {10**40}" in plain


def test_delta_answer_is_parsed() -> None:
    doc, plain = round_trip("delta", {"query": "q", "batch_id": 2, "answer": json.dumps([1, "x"]), "mult": -1})
    assert doc == {"query": "q", "batch_id": 2, "answer": [1, "x"], "mult": -1, "before": None, "after": None}
    assert plain == 'batch      2  q -1 [1, "x"]'


def test_model_record_is_parsed() -> None:
    view = covar_view([(1, 3), (2, 5), (3, 7), (4, 9)])
    model = LinearRegression(view, ("a", "b"), "b", method="closed_form").update()
    record = {"query": "cov", "batch_id": 1, "model": json.dumps(model, default=float), "timestamp_ms": WHEN_MS}
    doc, plain = round_trip("model", record)  # the same bytes the pipeline writes (the IndexError of old)
    assert doc["model"]["type"] == "linear_regression" and doc["model"]["label"] == "b"
    assert doc["model"]["intercept"] == pytest.approx(1.0) and doc["model"]["coefficients"]["a"] == pytest.approx(2.0)
    assert doc["timestamp_ms"] == WHEN_TEXT
    assert "b = " in plain and "* a" in plain and "4 rows" in plain


def test_chow_liu_model_plain_line() -> None:
    view = ivm.maintain("Q(COVAR(a, b)) :- R(a, b)", engine="fivm", options={"categorical": ("a", "b")})
    view.apply([("R", (1, 1), 1), ("R", (2, 2), 1)])
    model = ChowLiuTree(view, ("a", "b")).update()
    record = {"query": "tree", "batch_id": 0, "model": json.dumps(model, default=float), "timestamp_ms": WHEN_MS}
    doc, plain = round_trip("model", record)
    assert doc["model"]["type"] == "chow_liu_tree" and doc["model"]["rows"] == 2
    assert "Chow-Liu tree rooted at a" in plain and "->" in plain


def test_progress_record() -> None:
    offsets = [{"topic": "R", "partition": 0, "offset": 10}, {"topic": "S", "partition": 1, "offset": 2}]
    doc, plain = round_trip(
        "progress", {"pipeline": "demo", "batch_id": 9, "offsets": offsets, "timestamp_ms": WHEN_MS}
    )
    want = {"pipeline": "demo", "batch_id": 9, "offsets": offsets, "timestamp_ms": WHEN_TEXT}
    assert {k: doc[k] for k in want} == want
    assert "R[0]@10, S[1]@2" in plain


def test_dead_letter_bytes_are_base64() -> None:
    key, value = b"\x00\xffkey", b"\x01garbage\xfe"
    record = {
        "reason": "malformed Avro",
        "topic": "R",
        "partition": 0,
        "offset": 17,
        "key": key,
        "value": value,
        "query": None,
        "timestamp_ms": WHEN_MS,
    }
    doc, plain = round_trip("dead_letter", record)
    assert base64.b64decode(doc["key"]) == key and base64.b64decode(doc["value"]) == value
    assert doc["timestamp_ms"] == WHEN_TEXT and doc["query"] is None and doc["offset"] == 17
    assert plain.startswith("R[0]@17: malformed Avro")


def relation_spec(encoding: str = "avro") -> TopicSpec:
    rel = types.SimpleNamespace(name="R", topic="R", schema=R_SCHEMA, encoding=encoding)
    return TopicSpec("R", "relation", "R", rel)


def test_relation_record_plain_avro() -> None:
    _, value = RelationCodec.from_schema(load_schema(R_SCHEMA)).encode((2**40, -3), -1)
    decoded = decoder_for(relation_spec())(value)  # the EOFError of old
    assert json.loads(render("relation", decoded, as_json=True)) == {"relation": "R", "A": 2**40, "B": -3, "mult": -1}
    assert render("relation", decoded) == f"R({2**40}, -3) -1"


class FakeRegistry(RegistryClient):
    """A registry in memory, shared by every instance (the decoder makes its own client)."""

    schemas: ClassVar[dict[int, str]] = {}

    def register(self, subject: str, schema: Any, schema_type: str = "AVRO") -> int:
        schema_id = len(self.schemas) + 1
        self.schemas[schema_id] = schema if isinstance(schema, str) else json.dumps(schema)
        return schema_id

    def schema(self, schema_id: int) -> RegisteredSchema:
        return RegisteredSchema(schema_id, "AVRO", self.schemas[schema_id])


def test_relation_record_confluent_wire_format(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeRegistry, "schemas", {})
    monkeypatch.setattr(ivm.processor.codecs.confluent, "RegistryClient", FakeRegistry)
    _, value = WireCodec(load_schema(R_SCHEMA), FakeRegistry("http://registry.invalid"), "R").encode((1, 2), 3)
    config = types.SimpleNamespace(schema_registry="http://registry.invalid")
    decoded = decoder_for(relation_spec("confluent"), config)(value)
    assert json.loads(render("relation", decoded, as_json=True)) == {"relation": "R", "A": 1, "B": 2, "mult": 3}


def test_confluent_relation_without_a_registry_is_an_error() -> None:
    with pytest.raises(ValueError, match="schema_registry"):
        decoder_for(relation_spec("confluent"), types.SimpleNamespace(schema_registry=""))


def test_every_kind_has_a_decoder_and_renderings() -> None:
    assert set(KINDS) == {"result", "delta", "model", "progress", "dead_letter", "control", "relation"}
    for kind in KINDS:
        if kind != "relation":
            assert callable(decoder_for(TopicSpec(f"x.{kind}", kind)))


def test_json_text_that_is_not_json_stays_a_string() -> None:
    assert to_json("result", {"value": "Covariance(c=1)"})["value"] == "Covariance(c=1)"


def test_json_value_of_avro_logical_types() -> None:
    assert json_value(WHEN) == WHEN_TEXT
    assert json_value(WHEN.astimezone(datetime.timezone(datetime.timedelta(hours=2)))) == WHEN_TEXT
    assert json_value(datetime.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=datetime.UTC)) == "2024-01-02T03:04:05.000006Z"
    assert json_value(datetime.date(2024, 1, 2)) == "2024-01-02"
    assert json_value(decimal.Decimal("1.50")) == "1.50"
    assert json_value(float("inf")) is None and json_value(np.int64(7)) == 7
    with pytest.raises(TypeError):
        json_value(object())


# result JSON forms (docs/results.md)


def test_covariance_float_payload() -> None:
    view = ivm.maintain("Q(COVAR(a, b)) :- R(a, b)", engine="fivm", options={"exact": False})
    view.apply([("R", (1, 2), 1), ("R", (3, 5), 1)])
    cov = view.result()
    value = json.loads(result_to_json(cov, view.query))
    assert value["sums"] == {"a": 4.0, "b": 7.0} and value["products"]["a"]["b"] == float(cov.Q[0, 1])


def test_covariance_without_the_query_names_positions() -> None:
    cov = CovarianceRing(("x", "y")).lift_tuple(("x", "y"), (2, 3))
    value = json.loads(result_to_json(cov))
    assert value["variables"] == ["0", "1"] and value["products"]["0"]["1"] == 6


def test_group_by_covariance_values() -> None:
    view = ivm.maintain("Q(a, COVAR(b, c)) :- R(a, b), S(b, c)", engine="fivm")
    view.apply([("R", (1, 2), 1), ("S", (2, BIG), 1), ("R", (4, 2), 2)])
    result = view.result()
    value = json.loads(result_to_json(result, view.query))
    assert set(value) == {"[1]", "[4]"}
    for key, cov in result.items():
        got = value[json.dumps(list(key))]
        assert got["variables"] == ["b", "c"] and got["count"] == cov.c
        assert [got["sums"][v] for v in "bc"] == cov.s.tolist()
        assert [[got["products"][x][y] for y in "bc"] for x in "bc"] == cov.Q.tolist()


def test_group_by_sum_and_listing_stay_objects() -> None:
    view = ivm.maintain("Q(a, SUM(c)) :- R(a, b), S(b, c)")
    view.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("R", ("x", 2), 1)])
    assert json.loads(result_to_json(view.result(), view.query)) == {"[1]": 3, '["x"]': 3}
    listing = ivm.maintain("Q(a, c) :- R(a, b), S(b, c)")
    listing.apply([("R", (1, 2), 1), ("S", (2, 3), 2)])
    assert json.loads(result_to_json(listing.result(), listing.query)) == {"[1, 3]": 2}


def test_categorical_covariance_round_trip() -> None:
    ring = GeneralizedCovarianceRing(("c", "d", "e"), categorical={"c", "e"})
    g = (ring.lift("d", 2) + ring.lift("d", 3)) * ring.lift("e", "u") * ring.lift("c", "x")
    g = g + ring.lift("d", BIG) * ring.lift("e", "v") * ring.lift("c", "y")
    value = json.loads(result_to_json(g, ["c", "d", "e"]))
    assert value["type"] == "categorical_covariance" and value["categorical"] == ["c", "e"]
    assert value["count"] == g.c == 3
    assert value["sums"]["d"] == 5 + BIG  # continuous: a number
    assert sorted(map(tuple_key, value["sums"]["c"])) == sorted(g.s[0].items())
    for i, x in enumerate("cde"):
        for j, y in enumerate("cde"):
            got = value["products"][x][y]
            want = g.entry(i, j)
            if i not in g.cat and j not in g.cat:
                assert got == want.get((), 0)
                continue
            # keys in the order [x's value, y's value]; the ring stores (min, max)
            flip = i > j and i in g.cat and j in g.cat
            assert {k[::-1] if flip else k: v for k, v in map(tuple_key, got)} == want
    assert value["products"]["e"]["c"] == [[["u", "x"], 2], [["v", "y"], 1]]
    assert value["products"]["d"]["d"] == 4 + 9 + BIG**2


def tuple_key(pair: list[Any]) -> tuple[tuple[Any, ...], Any]:
    return tuple(pair[0]), pair[1]


def test_categorical_covariance_of_a_chow_liu_view() -> None:
    view = ivm.maintain("Q(COVAR(a, b)) :- R(a, b)", engine="fivm", options={"categorical": ("a", "b")})
    view.apply([("R", (1, "p"), 1), ("R", (2, "p"), 1)])
    value = json.loads(result_to_json(view.result(), view.query))
    assert value["variables"] == ["a", "b"] and value["sums"]["b"] == [[["p"], 2]]


def test_relation_result() -> None:
    view = ivm.maintain("Q(a, c) :- R(a, b), S(b, c)", engine="fivm", options={"ring": "factorized"})
    view.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("R", (4, 2), 1)])
    assert isinstance(view.result(), Relation)
    value = json.loads(result_to_json(view.result(), view.query))
    assert value == {"type": "relation", "variables": ["a"], "tuples": [[[1], 1], [[4], 1]]}


# topic kinds: from the configuration or the name


def write_config(tmp_path: Path, model: bool = True) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(
        f"""
[processor]
name = "demo"

[kafka]
bootstrap = "127.0.0.1:1"
dead_letter_topic = "rejects"

[[relations]]
name = "R"
topic = "r-updates"
schema = "{R_SCHEMA}"

[[queries]]
name = "cov"
query = "Q(COVAR(a, b)) :- R(a, b)"
{'model = "linear_regression"' if model else ""}
{'label = "b"' if model else ""}

[[queries]]
name = "pairs"
query = "Q(a, b) :- R(a, b)"
"""
    )
    return path


def test_pipeline_topics_from_a_configuration(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path))
    kinds = {t: s.kind for t, s in pipeline_topics(config).items()}
    assert kinds == {
        "cov.result": "result",
        "cov.delta": "delta",
        "cov.model": "model",
        "pairs.result": "result",
        "pairs.delta": "delta",
        "demo.progress": "progress",
        "demo.control": "control",
        "rejects": "dead_letter",
        "r-updates": "relation",
    }
    assert resolve_topic("rejects", config).kind == "dead_letter"
    spec = resolve_topic("r-updates", config)
    _, value = RelationCodec.from_schema(load_schema(R_SCHEMA)).encode((5, 6), 1)
    assert spec.relation.name == "R"
    assert decoder_for(spec, config)(value) == {"relation": "R", "A": 5, "B": 6, "mult": 1}
    with pytest.raises(UnknownTopicError, match=r"pairs\.model") as err:  # no model: not the pipeline's
        resolve_topic("pairs.model", config)
    assert "cov.result" in str(err.value) and "r-updates" in str(err.value)


def test_kinds_by_name_without_a_configuration() -> None:
    assert [infer_kind(t) for t in ("q.result", "q.delta", "q.model", "p.progress", "ivm.dead-letter")] == [
        "result",
        "delta",
        "model",
        "progress",
        "dead_letter",
    ]
    with pytest.raises(UnknownTopicError, match="-c"):
        resolve_topic("R")


def test_cli_unknown_topic_exits_2_listing_the_pipeline_topics(tmp_path: Path, capsys) -> None:
    code = main(["subscribe", "nope.result", "-c", str(write_config(tmp_path)), "--json"])
    err = capsys.readouterr().err
    assert code == 2
    assert "nope.result" in err and "cov.result" in err and "r-updates" in err and "rejects" in err


def test_cli_bad_configuration_exits_2(tmp_path: Path, capsys) -> None:
    assert main(["subscribe", "q.result", "-c", str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml" in capsys.readouterr().err


def test_snapshot_after_a_reset_reports_the_newest_batch_not_the_highest_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36 point 5d: after `ivm reset` the batch ids start over while the compacted result topic still
    holds groups of the earlier history with higher ids; ``--snapshot`` reported the highest of them."""
    import ivm.processor.publish

    codec = OutputCodec("result")

    def result(group: int, value: int, batch: int, second: int) -> tuple[bytes, bytes]:
        record = {
            "query": "q", "batch_id": batch, "value": str(value), "offsets": [], "applied": 1, "rejected": 0,
            "engine": "fivm", "timestamp_ms": datetime.datetime(2026, 1, 1, 0, 0, second, tzinfo=datetime.UTC),
            "group": json.dumps([group]),
        }  # fmt: skip
        return f"[{group}]".encode(), codec.encode(record)

    held = [result(1, 5, 900, 1), result(2, 7, 901, 2), result(3, 1, 4, 30)]  # group 3: the new history's batch 4

    class Reader:
        def __init__(self, *_args: Any) -> None:
            pass

        def __enter__(self) -> Reader:
            return self

        def __exit__(self, *_exc: object) -> None:
            pass

        def to_end(self, timeout: float = 60):
            return iter(held)

        def follow(self, *_args: Any):
            return iter(())

    monkeypatch.setattr(ivm.processor.publish, "TopicReader", Reader)
    (snapshot,) = list(ivm.processor.publish.snapshot_then_changes("unused:9092", "q.result"))
    assert snapshot["batch_id"] == 4
    assert snapshot["result"] == {"[1]": 5, "[2]": 7, "[3]": 1}
