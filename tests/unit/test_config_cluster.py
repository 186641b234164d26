"""``[topics]`` (how the processor creates each kind of topic) and ``[spark.conf]`` (any ``spark.*``
setting, the processor's own refused by name): parsed, validated one line per finding, written back by
``dump_config``, printed by ``ivm check``, and handed to the Spark session builder."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ivm.processor.cli import main
from ivm.processor.config import (
    OWNED_SPARK_CONF,
    TOPIC_KINDS,
    ConfigError,
    TopicsConfig,
    TopicSettings,
    dump_config,
    parse_config,
)

TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"


def config(**tables) -> dict:
    raw = {"relations": [{"name": r} for r in "RST"], "queries": [{"name": "tri", "query": TRIANGLE}]}
    raw.update(tables)
    return raw


def errors_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value.errors


def test_topics_default_to_the_clusters_defaults_with_one_partition_for_progress_and_control() -> None:
    topics = parse_config(config()).topics
    assert topics == TopicsConfig()
    for kind in ("relations", "outputs", "dead_letters"):
        assert getattr(topics, kind) == TopicSettings(-1, -1, ())
    assert topics.progress == topics.control == TopicSettings(1, -1, ())


def test_topics_per_kind() -> None:
    c = parse_config(
        config(
            topics={
                "outputs": {"partitions": 6, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
                "progress": {"replication_factor": 3, "config": {"min.insync.replicas": "2"}},
                "relations": {"partitions": 3},
                "dead_letters": {"config": {"retention.ms": 604800000, "unclean.leader.election.enable": False}},
            }
        )
    )
    assert c.topics.outputs == TopicSettings(6, 3, (("min.insync.replicas", "2"),))
    assert c.topics.progress == TopicSettings(1, 3, (("min.insync.replicas", "2"),))
    assert c.topics.relations == TopicSettings(3, -1, ())
    assert c.topics.control == TopicSettings(1, -1, ())
    assert c.topics.dead_letters.config == (("retention.ms", "604800000"), ("unclean.leader.election.enable", "false"))
    # the processor's own configs are added to the kind's, never the other way round
    assert c.topics.progress.config_dict(**{"cleanup.policy": "compact"}) == {
        "min.insync.replicas": "2",
        "cleanup.policy": "compact",
    }
    assert parse_config(tomllib.loads(dump_config(c))) == c


@pytest.mark.parametrize(
    ("topics", "line"),
    [
        ({"output": {}}, "unknown key 'output' in [topics]; did you mean 'outputs'?"),
        ({"outputs": 3}, "[topics] outputs: expected a table ([topics.outputs]), got the integer 3"),
        ({"outputs": {"partition": 3}}, "unknown key 'partition' in [topics.outputs]; did you mean 'partitions'?"),
        ({"outputs": {"partitions": 0}}, "[topics.outputs] partitions: expected -1 (the cluster's default) or an"),
        ({"outputs": {"partitions": "3"}}, '[topics.outputs] partitions: expected an integer, got the string "3"'),
        ({"outputs": {"replication_factor": -2}}, "[topics.outputs] replication_factor: expected -1"),
        ({"progress": {"partitions": 3}}, "[topics.progress] partitions: must be 1 for the progress topic ("),
        ({"control": {"partitions": -1}}, "[topics.control] partitions: must be 1 for the control topic ("),
        (
            {"outputs": {"config": {"min.insync.replica": 2}}},
            "unknown topic config 'min.insync.replica' in [topics.outputs.config]; did you mean 'min.insync.replicas'?",
        ),
        ({"outputs": {"config": {"cleanup.policy": "delete"}}}, "[topics.outputs.config] cleanup.policy: set by the"),
        ({"progress": {"config": {"cleanup.policy": "delete"}}}, "[topics.progress.config] cleanup.policy: set by"),
        ({"control": {"config": {"retention.ms": 1000}}}, "[topics.control.config] retention.ms: set by the processor"),
        ({"outputs": {"config": {"retention.ms": [1]}}}, "[topics.outputs.config] retention.ms: expected a string,"),
        (
            {"outputs": {"replication_factor": 1, "config": {"min.insync.replicas": 2}}},
            "[topics.outputs.config] min.insync.replicas: 2 is more than replication_factor = 1",
        ),
    ],
)
def test_topics_findings(topics: dict, line: str) -> None:
    (error,) = errors_of(config(topics=topics))
    assert error.startswith(line), error


def test_topics_is_a_table() -> None:
    assert errors_of(config(topics=[1])) == ["[topics]: expected a table of [topics.KIND] tables, got the array [1]"]


def test_spark_conf_passes_any_spark_setting_as_a_string() -> None:
    c = parse_config(
        config(
            spark={
                "master": "local[2]",
                "conf": {"spark.executor.memory": "2g", "spark.sql.adaptive.enabled": False, "spark.task.cpus": 1},
            }
        )
    )
    assert c.spark_conf == (
        ("spark.executor.memory", "2g"),
        ("spark.sql.adaptive.enabled", "false"),
        ("spark.task.cpus", "1"),
    )
    assert parse_config(tomllib.loads(dump_config(c))) == c


@pytest.mark.parametrize("key", sorted(OWNED_SPARK_CONF))
def test_spark_conf_refuses_what_the_processor_owns_by_name(key: str) -> None:
    (error,) = errors_of(config(spark={"conf": {key: "x"}}))
    assert error == f"[spark.conf] {key}: owned by the processor: {OWNED_SPARK_CONF[key]}"


def test_spark_conf_findings() -> None:
    assert errors_of(config(spark={"conf": {"executor.memory": "2g", "spark.x": {"y": 1}}})) == [
        "[spark.conf] executor.memory: not a Spark setting (the keys of [spark.conf] start with 'spark.')",
        "[spark.conf] spark.x: expected a string, number or boolean, got a table",
    ]
    assert errors_of(config(spark={"conf": "spark.x=1"})) == [
        '[spark] conf: expected a table, got the string "spark.x=1"'
    ]


def test_ivm_check_prints_the_topics_and_spark_conf(tmp_path: Path, capsys) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        '[spark.conf]\n"spark.executor.memory" = "2g"\n"spark.hadoop.fs.s3a.secret.key" = "s3cr3t"\n\n'
        "[topics.outputs]\npartitions = 3\nreplication_factor = 3\n\n"
        '[topics.outputs.config]\n"min.insync.replicas" = 2\n\n'
        + "".join(f'[[relations]]\nname = "{r}"\n\n' for r in "RST")
        + f'[[queries]]\nname = "tri"\nquery = "{TRIANGLE}"\n'
    )
    assert main(["check", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert "spark.conf: spark.executor.memory=2g, spark.hadoop.fs.s3a.secret.key=****" in out
    assert "s3cr3t" not in out
    assert "  outputs      partitions 3, replication factor 3, min.insync.replicas=2" in out
    assert "  progress     partitions 1, replication factor -1" in out
    assert all(f"  {kind}" in out for kind in TOPIC_KINDS)


def test_spark_session_builder_gets_the_conf_and_keeps_what_the_processor_owns(monkeypatch) -> None:
    """The builder is given [spark.conf] over the processor's defaults, then the processor's own settings."""
    from pyspark.sql import SparkSession

    from ivm.processor.local import spark as local_spark

    given: dict[str, str] = {}

    class Builder:
        def appName(self, name: str) -> Builder:
            given["spark.app.name"] = name
            return self

        def config(self, key: str, value: str) -> Builder:
            given[key] = value
            return self

        def getOrCreate(self):
            raise RuntimeError("built")

    monkeypatch.setattr(SparkSession, "builder", Builder())
    with pytest.raises(RuntimeError, match="built"):
        local_spark.spark_session(
            "ivm-processor",
            "local[2]",
            conf=(("spark.driver.memory", "3g"), ("spark.app.name", "mine"), ("spark.speculation", "true")),
        )
    assert given["spark.driver.memory"] == "3g" and given["spark.app.name"] == "mine"
    assert given["spark.speculation"] == "false"  # the processor's settings come last, whatever was given
    assert given["spark.master"] == "local[2]"
    assert given["spark.sql.streaming.stopTimeout"] == "5s"
