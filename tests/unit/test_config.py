"""Pipeline configuration: the demo file loads; a file is validated whole by a declared schema and
every finding is one line naming the key as the file spells it."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from ivm.processor.config import (
    ConfigError,
    PipelineConfig,
    QueryConfig,
    RelationConfig,
    dump_config,
    load_config,
    parse_config,
)

ROOT = Path(__file__).resolve().parents[2]
TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"
RST = [{"name": "R"}, {"name": "S"}, {"name": "T"}]


def config(**tables) -> dict:
    """A valid raw configuration (the triangle over R, S, T) with ``tables`` replaced."""
    raw = {"relations": [dict(r) for r in RST], "queries": [{"name": "tri", "query": TRIANGLE}]}
    raw.update(tables)
    return raw


def errors_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert str(info.value) == "\n".join(info.value.errors)
    return info.value.errors


def test_demo_config_loads() -> None:
    config = load_config(ROOT / "config" / "demo.toml")
    assert [r.name for r in config.relations] == ["R", "S", "T"]
    assert config.queries[0].result_topic == "triangle.result"
    assert config.policy.negative == "reject"
    assert config.with_overrides(bootstrap="x:1", metrics_port=None).bootstrap == "x:1"
    # relative paths in the file resolve against its folder; load_config returns absolute ones
    assert [r.schema for r in config.relations] == [ROOT / "schemas" / "relations" / f"{n}.avsc" for n in "RST"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"relations": [{"name": "R"}]}, r"no \[\[queries\]\] configured"),
        ({"queries": [{"name": "q", "query": "Q() :- R(a,b)"}]}, r"no \[\[relations\]\] configured"),
        (config(bogus=1), r"unknown key 'bogus' at the top level"),
        (config(queries=[{"name": "q"}]), r"^\[queries\.q\] query: required key missing$"),
        (
            config(queries=[{"name": "q", "query": TRIANGLE, "eps": 2}]),
            r"^\[queries\.q\] eps: expected a number <= 1, got the integer 2$",
        ),
        (
            config(policy={"negative": "no"}),
            r'^\[policy\] negative: expected "reject" or "allow", got the string "no"$',
        ),
        (config(queries=[{"name": "q", "query": "x"}]), r"^\[queries\.q\] query: expected a rule"),
        (
            config(spark={"starting_offsets": "earlist"}),
            r"^\[spark\] starting_offsets: expected \"earliest\" or \"latest\", got the string \"earlist\"; "
            r"did you mean 'earliest'\?$",
        ),
        (config(metrics={"port": 70000}), r"^\[metrics\] port: expected an integer <= 65535, got the integer 70000$"),
        (config(kafka={"bootstrap": "h:0"}), r"^\[kafka\] bootstrap: \"h:0\": port '0' is not in 1\.\.65535$"),
        (
            config(kafka={"schema_registry": "localhost:8081"}),
            r"^\[kafka\] schema_registry: \"localhost:8081\" is not an http:// or https:// URL$",
        ),
        (config(spark={"trigger_ms": -1}), r"^\[spark\] trigger_ms: expected an integer >= 0, got the integer -1$"),
        (
            config(relations=[*RST, {"name": "R", "topic": "R2"}]),
            r"^\[relations\.R\] name: relation 'R' is configured twice$",
        ),
        (
            config(relations=[{"name": "R"}, {"name": "S", "topic": "R"}, {"name": "T"}]),
            r"^\[relations\.S\] topic: topic 'R' is already the topic of relation R$",
        ),
        (
            config(queries=[{"name": "tri", "query": TRIANGLE}, {"name": "tri", "query": TRIANGLE}]),
            r"^\[queries\.tri\] name: query 'tri' is configured twice$",
        ),
        (
            config(relations=[{"name": "R", "window_group": "w"}, {"name": "S"}, {"name": "T"}]),
            r"^\[relations\.R\] window_group: only for a windowed relation",
        ),
        (
            config(
                relations=[
                    {"name": "R", "window_count": 3, "window_group": "w"},
                    {"name": "S", "window_count": 4, "window_group": "w"},
                    {"name": "T"},
                ]
            ),
            r"^\[relations\.S\] window_count: window group 'w' is window_count = 3 \(relation R\); "
            r"relation S has window_count = 4: one group shares one window$",
        ),
        (
            config(relations=[{"name": "R", "window_count": 3, "window_seconds": 1.5}, {"name": "S"}, {"name": "T"}]),
            r"^\[relations\.R\] window_seconds: give window_count or window_seconds, not both$",
        ),
        (
            config(queries=[{"name": "tri", "query": TRIANGLE, "engine": "ivm_esp"}]),
            r"^\[queries\.tri\] engine: unknown engine \"ivm_esp\"; did you mean 'ivm_eps'\?",
        ),
        (
            config(queries=[{"name": "tri", "query": TRIANGLE, "engine": "first_order", "eps": 0.5}]),
            r"^\[queries\.tri\] eps: engine 'first_order' has no eps",
        ),
        (
            config(queries=[{"name": "tri", "query": TRIANGLE, "patterns": ["X=insert-only"]}]),
            r"^\[queries\.tri\] patterns\[0\]: \"X=insert-only\" names X, which the query does not use",
        ),
        (
            config(queries=[{"name": "tri", "query": TRIANGLE, "patterns": ["R=sometimes"]}]),
            r"^\[queries\.tri\] patterns\[0\]: unknown update pattern 'sometimes' for R",
        ),
        (
            config(queries=[{"name": "tri", "query": TRIANGLE, "model": "linear_regression"}]),
            r'^\[queries\.tri\] label: required with model = "linear_regression"',
        ),
        (config(processor={"name": "my pipeline"}), r'^\[processor\] name: "my pipeline" is not a Kafka topic name'),
    ],
)
def test_invalid_configs_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_a_misspelled_key_is_refused_with_the_nearest_valid_key() -> None:
    raw = config(queries=[{"name": "tri", "query": TRIANGLE, "modle": "chow_liu", "engin": "fivm"}])
    assert errors_of(raw) == [
        "unknown key 'modle' in [queries.tri]; did you mean 'model'?",
        "unknown key 'engin' in [queries.tri]; did you mean 'engine'?",
    ]
    assert errors_of(config(procesor={})) == ["unknown key 'procesor' at the top level; did you mean 'processor'?"]
    unnamed = config(relations=[{"nmae": "R"}, {"name": "S"}, {"name": "T"}])
    assert "unknown key 'nmae' in [relations[0]]; did you mean 'name'?" in errors_of(unnamed)
    assert "[relations[0]] name: required key missing" in errors_of(unnamed)


def test_a_string_for_a_boolean_is_refused_not_coerced() -> None:
    # the loose loader took bool("false"), i.e. true
    assert errors_of(config(processor={"exactly_once": "false"})) == [
        '[processor] exactly_once: expected a boolean, got the string "false"'
    ]


def test_no_float_or_bool_for_an_integer() -> None:
    assert errors_of(config(spark={"max_offsets_per_trigger": 1000.0})) == [
        "[spark] max_offsets_per_trigger: expected an integer, got the float 1000.0"
    ]
    assert errors_of(config(metrics={"port": True})) == ["[metrics] port: expected an integer, got the boolean true"]
    assert errors_of(config(spark={"trigger_ms": "200"})) == [
        '[spark] trigger_ms: expected an integer, got the string "200"'
    ]


def test_encoding_is_read_and_validated() -> None:
    registry = {"schema_registry": "http://127.0.0.1:8081"}
    rels = [{"name": "R", "encoding": "confluent"}, {"name": "S"}, {"name": "T"}]
    loaded = parse_config(config(relations=rels, kafka=registry))
    assert [r.encoding for r in loaded.relations] == ["confluent", "avro", "avro"]  # was silently dropped
    assert errors_of(config(relations=rels)) == [
        '[relations.R] encoding: "confluent" needs [kafka] schema_registry (the registry URL)'
    ]
    wrong = [{"name": "R", "encoding": "protobuf"}, {"name": "S"}, {"name": "T"}]
    assert errors_of(config(relations=wrong)) == [
        '[relations.R] encoding: expected "avro" or "confluent" or "avro-packed" or "confluent-packed", '
        'got the string "protobuf"'
    ]


def test_label_and_method_only_with_a_linear_regression() -> None:
    raw = config(queries=[{"name": "tri", "query": TRIANGLE, "label": "a", "method": "closed_form"}])
    assert errors_of(raw) == [
        '[queries.tri] label: only used with model = "linear_regression"',
        '[queries.tri] method: only used with model = "linear_regression"',
    ]
    covar = "Q(COVAR(a, b)) :- R(a,b)"
    ok = parse_config(
        config(
            queries=[{"name": "m", "query": covar, "model": "linear_regression", "label": "b", "method": "closed_form"}]
        )
    )
    assert (ok.queries[0].label, ok.queries[0].method) == ("b", "closed_form")


def test_spark_checkpoint_is_refused_with_the_reason() -> None:
    (line,) = errors_of(config(spark={"checkpoint": "/tmp/ivm-checkpoint"}))
    assert line.startswith("[spark] checkpoint: ")
    assert "committed positions" in line and "losing or repeating updates" in line
    assert "checkpoint" not in dump_config(load_config(ROOT / "config" / "demo.toml"))


def test_relative_paths_resolve_against_the_configuration_folder(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "pipelines"
    (folder / "schemas").mkdir(parents=True)
    for name in "RST":
        shutil.copy(ROOT / "schemas" / "relations" / f"{name}.avsc", folder / "schemas" / f"{name}.avsc")
    (folder / "p.toml").write_text(
        '[processor]\nstate_dir = "state"\n'
        + "".join(f'[[relations]]\nname = "{n}"\nschema = "schemas/{n}.avsc"\n' for n in "RST")
        + f'[[queries]]\nname = "tri"\nquery = "{TRIANGLE}"\n'
    )
    monkeypatch.chdir(tmp_path)  # not the file's folder
    loaded = load_config("pipelines/p.toml")
    assert [r.schema for r in loaded.relations] == [folder / "schemas" / f"{n}.avsc" for n in "RST"]
    assert loaded.state_dir == str(folder / "state")
    (folder / "q.toml").write_text(
        '[[relations]]\nname = "R"\nschema = "R.avsc"\n[[queries]]\nname = "q"\nquery = "Q() :- R(a,b)"\n'
    )
    with pytest.raises(ConfigError, match=r"^\[relations\.R\] schema: schema file .*pipelines/R\.avsc does not exist$"):
        load_config(folder / "q.toml")


def test_a_query_over_an_unconfigured_relation_is_refused_at_load() -> None:
    raw = config(relations=[{"name": "T"}])
    assert errors_of(raw) == ["[queries.tri] query: uses R, S with no [[relations]] entry (configured: T)"]


def test_every_finding_of_a_file_is_reported_together() -> None:
    raw = config(
        processor={"exactly_once": "false", "shards": 0},
        spark={"checkpoint": "x", "master": "local[2]"},
        relations=[{"name": "R", "window_group": "w"}, {"name": "S", "encodng": "avro"}, {"name": "T"}],
        queries=[
            {"name": "tri", "query": TRIANGLE, "modle": "chow_liu", "eps": 1.5},
            {"name": "u", "query": "Q() :- U(a)"},
        ],
    )
    found = errors_of(raw)
    assert len(found) == 8, found
    for text in (
        "[processor] exactly_once",
        "[processor] shards",
        "[spark] checkpoint",
        "[relations.R] window_group",
        "'encodng' in [relations.S]",
        "'modle' in [queries.tri]",
        "[queries.tri] eps",
        "[queries.u] query: uses U",
    ):
        assert sum(text in line for line in found) == 1, (text, found)


def test_with_overrides_validates_like_the_file() -> None:
    loaded = load_config(ROOT / "config" / "demo.toml")
    with pytest.raises(ConfigError, match=r"^\[processor\] shards: expected an integer >= 1, got the integer 0$"):
        loaded.with_overrides(shards=0)
    with pytest.raises(ConfigError, match=r"^\[metrics\] port: expected an integer <= 65535"):
        loaded.with_overrides(metrics_port=99999)
    assert loaded.with_overrides(shards=4, name="other").shards == 4


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent.toml")


def test_dump_round_trips() -> None:
    loaded = load_config(ROOT / "config" / "demo.toml").with_overrides(spark_master='we"ird', shards=8, metrics_port=9)
    assert parse_config(tomllib.loads(dump_config(loaded))) == loaded


def test_dump_of_code_made_relative_paths_keeps_their_meaning(tmp_path: Path) -> None:
    """In code a relative schema is relative to the schemas folder; the dumped file says so absolutely."""
    made = PipelineConfig(
        relations=tuple(RelationConfig(n, f"t.{n}", Path(f"relations/{n}.avsc")) for n in "RST"),
        queries=(QueryConfig("tri", TRIANGLE, "ivm_eps", eps=0.25, patterns=("R=insert-only",)),),
    )
    path = tmp_path / "elsewhere" / "p.toml"
    path.parent.mkdir()
    path.write_text(dump_config(made))
    loaded = load_config(path)
    assert [r.schema_file() for r in loaded.relations] == [r.schema_file() for r in made.relations]
    assert loaded.queries == made.queries
    assert json.loads(loaded.relations[0].schema.read_text())["name"] == "R"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("not json at all", "is not JSON"),
        ('{"type": "record", "name": "R", "fields": [{"name": "A", "type": "long"}]}', "not a relation update schema"),
    ],
)
def test_a_schema_file_that_is_no_relation_schema_is_one_finding(tmp_path: Path, text: str, reason: str) -> None:
    """A broken .avsc is reported once, by the relation's key, and no misleading finding follows from it."""
    (tmp_path / "R.avsc").write_text(text)
    raw = config()
    raw["relations"][0] = {"name": "R", "schema": str(tmp_path / "R.avsc")}
    (line,) = errors_of(raw)
    assert line.startswith("[relations.R] schema: ") and reason in line


def test_isolation_level_and_consumer_group() -> None:
    """``[kafka] isolation_level``: read_committed by default, only the two Kafka levels; ``consumer_group``
    defaults to the pipeline's name; both round-trip through ``dump_config``."""
    default = parse_config(config(processor={"name": "pipe"}))
    assert (default.isolation_level, default.consumer_group, default.group_id) == ("read_committed", "", "pipe")
    chosen = parse_config(config(kafka={"isolation_level": "read_uncommitted", "consumer_group": "team.lag"}))
    assert (chosen.isolation_level, chosen.group_id) == ("read_uncommitted", "team.lag")
    assert parse_config(tomllib.loads(dump_config(chosen))) == chosen
    assert errors_of(config(kafka={"isolation_level": "read_comitted"})) == [
        '[kafka] isolation_level: expected "read_committed" or "read_uncommitted", got the string "read_comitted"; '
        "did you mean 'read_committed'?"
    ]
    assert errors_of(config(kafka={"consumer_group": " lag"})) == [
        '[kafka] consumer_group: " lag" is not a consumer group name (printable, no surrounding blanks)'
    ]
    with pytest.raises(ConfigError, match=r"^\[kafka\] isolation_level: expected"):
        PipelineConfig(isolation_level="committed")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^\[kafka\] isolation_level: expected"):
        default.with_overrides(isolation_level="uncommitted")
