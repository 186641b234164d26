"""The Spark session's environment: the loopback pin only for local masters, the scratch folder removed.

Spark's launch is replaced by a recorder of what the JVM would be started with (the environment and the
configuration at ``getOrCreate``): starting a JVM per master, a cluster one among them, is the integration
suites' business (tests/integration/test_stops.py checks the folders of a real run).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ivm.processor.local import spark as spark_module


class _Recorded:
    def __init__(self, options: dict[str, str]) -> None:
        self.conf = self
        self.options = options
        self.stopped = False

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def launches(monkeypatch):
    seen: list[tuple[str | None, _Recorded]] = []

    def get_or_create(builder):
        session = _Recorded(dict(builder._options))
        seen.append((os.environ.get("SPARK_LOCAL_IP"), session))
        return session

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", get_or_create)
    monkeypatch.setattr(spark_module, "spark_kafka_jars", lambda: [])
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    return seen


@pytest.mark.parametrize("master", ["local[2]", "local", "local-cluster[2,1,1024]"])
def test_a_local_master_binds_the_loopback_address_for_the_launch_only(launches, master) -> None:
    session = spark_module.spark_session("t", master)
    assert launches[-1][0] == "127.0.0.1"
    assert "SPARK_LOCAL_IP" not in os.environ, "the pin leaked into this process's environment"
    spark_module.stop_session(session)


@pytest.mark.parametrize("master", ["spark://10.0.0.5:7077", "yarn", "k8s://https://api:6443"])
def test_a_cluster_master_is_never_pinned_to_loopback(launches, master) -> None:
    session = spark_module.spark_session("t", master)
    assert launches[-1][0] is None
    spark_module.stop_session(session)


def test_a_users_own_address_is_kept(launches, monkeypatch) -> None:
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    spark_module.spark_session("t", "local[2]")
    assert launches[-1][0] == "10.1.2.3"
    assert os.environ["SPARK_LOCAL_IP"] == "10.1.2.3"


def test_stop_session_removes_the_scratch_folder(launches, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(spark_module.tempfile, "tempdir", str(tmp_path))
    session = spark_module.spark_session("t", "local[2]")
    local = Path(session.conf.get("spark.local.dir"))
    assert local.parent == tmp_path and local.name.startswith("ivm-spark-") and local.is_dir()
    (local / "blockmgr-1").mkdir()
    spark_module.stop_session(session)
    assert session.stopped and not local.exists()
    assert not list(tmp_path.iterdir())


def test_a_folder_of_someone_elses_is_never_removed(tmp_path) -> None:
    mine = tmp_path / "spark-scratch"
    mine.mkdir()
    session = _Recorded({"spark.local.dir": str(mine)})
    spark_module.stop_session(session)  # type: ignore[arg-type]
    assert session.stopped and mine.is_dir()


def test_a_session_handed_to_two_callers_is_stopped_by_the_last(launches, monkeypatch) -> None:
    shared = _Recorded({})
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", lambda builder: shared)
    first = spark_module.spark_session("job", "local[2]")
    second = spark_module.spark_session("bootstrap", "local[2]")  # getOrCreate: the same session
    assert first is second is shared
    spark_module.stop_session(second)
    assert not shared.stopped, "the bootstrap stopped the job's session"
    spark_module.stop_session(first)
    assert shared.stopped
