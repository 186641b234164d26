"""``placement = "executors"`` on a multi-process Spark cluster on this machine (``local-cluster[2,1,1024]``:
two executor JVMs, each with its own Python workers), against a real broker.

The state lives in shard hosts started by the executors' tasks (``ivm.processor.placement``): the driver holds
no engine state.  The tests check the results against brute force, that every batch is published once and
in order (read_committed), and that killing a shard host with SIGKILL while the stream runs loses nothing:
the next batch's task rebuilds its slices from their snapshots and a replay of the committed inputs.
"""

from __future__ import annotations

import os
import signal
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from ivm.processor.config import QueryConfig
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.local.ports import free_port
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import pipeline_config, read_all, read_until
from tests.integration.test_stops import _produce, _start, _triangles, _wait_for

pytestmark = pytest.mark.integration
MASTER = "local-cluster[2,1,1024]"


def _hosts(tmp: Path) -> list[int]:
    """The pids of the shard hosts running for this test (their folders are under its TMPDIR)."""
    root = tmp / "ivm-hosts"
    pids = []
    for folder in root.glob("*") if root.exists() else []:
        try:
            pids.append(int((folder / "host.txt").read_text().split()[2]))
        except (OSError, IndexError, ValueError):
            continue
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


def _slice_hosts(port: int) -> dict[str, str]:
    """Each slice's shard host as the metrics show it (``ivm_slice_tuples``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        lines = [line for line in answer.read().decode().splitlines() if line.startswith("ivm_slice_tuples{")]
    return {line.split('slice="')[1].split('"')[0]: line.split('host="')[1].split('"')[0] for line in lines}


def _behind(bootstrap: str, config, topics: dict[str, str]) -> bool:
    """Whether the committed progress is short of the input topics' ends."""
    committed = read_committed_progress(bootstrap, config.progress_topic)
    return committed is None or not reflects(committed, end_offsets(bootstrap, list(topics.values())))


def _watched(tmp: Path) -> dict[int, int]:
    """Each running shard host's pid -> the executor JVM's pid it watches (from its log)."""
    out = {}
    for folder in (tmp / "ivm-hosts").glob("*"):
        try:
            pid = int((folder / "host.txt").read_text().split()[2])
            text = (folder / "host.log").read_text(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        marks = [line for line in text.splitlines() if f"(pid {pid}) serving" in line and "executor process" in line]
        if marks and Path(f"/proc/{pid}").exists():
            out[pid] = int(marks[-1].rsplit("executor process ", 1)[1].split()[0].rstrip(","))
    return out


def test_executors_placement_survives_a_killed_shard_host(kafka, topic_prefix, tmp_path, monkeypatch) -> None:
    domain = 200
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    config = pipeline_config(
        kafka.bootstrap, topic_prefix, tmp_path / "state", spark_master=MASTER, max_offsets_per_trigger=2000,
        snapshot_every=2, placement="executors", shards=4, engine="auto",
    )  # fmt: skip
    create_topics(kafka.bootstrap, list(topics.values()))
    _produce(kafka.bootstrap, topics, 12_000, domain, seed=21)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    proc = _start(tmp_path, config, kafka.bootstrap, "placed", monkeypatch, metrics_port=free_port())
    tmp = tmp_path / "tmp"
    try:
        _wait_for(lambda: proc.batches_logged() >= 3 or not proc.alive(), "no batch committed on the executors", 240)
        assert proc.alive(), proc.tail()
        # the slices' metrics (the dashboard's placement row; test_prometheus runs the driver placement)
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10) as answer:
            exported = answer.read().decode()
        for family in ("ivm_slice_tuples{", "ivm_slice_apply_seconds_bucket{", "ivm_slice_rebuilds_total{",
                       "ivm_slice_replayed_records_total{"):  # fmt: skip
            assert family in exported, f"{family} not exported"
        tuples = [line for line in exported.splitlines() if line.startswith("ivm_slice_tuples{")]
        assert len(tuples) == 4 and all('executor="' in line and 'host="' in line for line in tuples)
        executors = {line.split('executor="')[1].split('"')[0] for line in tuples}
        assert all(e and not e.startswith("driver@") for e in executors), executors  # the executors' ids
        hosts = _hosts(tmp)
        assert hosts, "the executors' tasks started shard hosts"
        for folder in (tmp / "ivm-hosts").glob("*"):  # no key on disk; private folders; not every interface
            assert oct(folder.stat().st_mode & 0o777) == oct(0o700) and not list(folder.glob("*.pickle"))
            address = (folder / "host.txt").read_text().split()[0]
            assert address not in ("0.0.0.0", ""), address
        for pid in hosts:
            os.kill(pid, signal.SIGKILL)
        _produce(kafka.bootstrap, topics, 6_000, domain, seed=22)
        final = end_offsets(kafka.bootstrap, list(topics.values()))
        _wait_for(
            lambda: (
                (c := read_committed_progress(kafka.bootstrap, config.progress_topic)) is not None
                and reflects(c, final)
            ),
            "the stream did not complete after the shard hosts were killed",
            timeout=300,
        )
        log = proc.log_path.read_text(errors="replace")
        assert "rebuilt" in log, "the slices were rebuilt after their hosts were killed"
        # a host lives and dies with its executor: kill -9 one executor JVM, its hosts exit within seconds
        watched = _watched(tmp)
        assert watched, "the new hosts name the executor process they watch"
        executor = sorted(set(watched.values()))[0]
        os.kill(executor, signal.SIGKILL)
        orphans = [pid for pid, jvm in watched.items() if jvm == executor]
        _wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in orphans), "a host outlived its executor", 15)
        # Spark relaunches the executor; as the stream goes on the slices spread over both executors' hosts again
        seed = 30
        while len(set(_slice_hosts(proc.metrics_port).values())) < 2:  # distinct hosts, not slices
            assert seed < 60, f"the slices stayed on {_slice_hosts(proc.metrics_port)}"
            _produce(kafka.bootstrap, topics, 300, domain, seed=seed)
            seed += 1
            _wait_for(
                lambda: proc.batches_logged() > 0 and not _behind(kafka.bootstrap, config, topics), "a batch", 120
            )
        assert sorted(Counter(_slice_hosts(proc.metrics_port).values()).values()) == [2, 2]
        final = end_offsets(kafka.bootstrap, list(topics.values()))
        _wait_for(
            lambda: (
                (c := read_committed_progress(kafka.bootstrap, config.progress_topic)) is not None
                and reflects(c, final)
            ),
            "the stream did not complete after the executor was killed",
            timeout=300,
        )
    finally:
        proc.stop()
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    assert [r["batch_id"] for r in results] == list(range(len(results))), "a batch is missing or duplicated"
    assert int(results[-1]["value"]) == _triangles(kafka.bootstrap, topics, domain)
    _wait_for(lambda: not _hosts(tmp), "the shard hosts did not stop with the driver", 30)


def test_executors_placement_equals_driver_placement(kafka, topic_prefix, tmp_path, monkeypatch) -> None:
    """A group-by and a self-join over 2 and 8 shards: the result topics of both placements are equal, with the
    slices on two executor JVMs and on one (of two cores)."""
    domain = 60
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    create_topics(kafka.bootstrap, list(topics.values()))
    _produce(kafka.bootstrap, topics, 4_000, domain, seed=23)
    queries = (
        QueryConfig(f"{topic_prefix}groups", "Q(a) :- R(a,b), S(b,c)", shards=2),
        QueryConfig(f"{topic_prefix}selfjoin", "Q() :- R(a,b), R(b,c), R(c,a)", shards=8),
    )
    final = end_offsets(kafka.bootstrap, list(topics.values()))
    tables = {}
    runs = {"driver": ("driver", MASTER), "executors": ("executors", MASTER),
            "oneexecutor": ("executors", "local-cluster[1,2,2048]")}  # fmt: skip
    for run, (placement, master) in runs.items():
        config = pipeline_config(
            kafka.bootstrap, topic_prefix, tmp_path / run, spark_master=master, placement=placement,
            queries=tuple(QueryConfig(f"{q.name}-{run}", q.query, shards=q.shards) for q in queries),
            name=f"{topic_prefix}{run}", dead_letter_topic=f"{topic_prefix}{run}.dead",
        )  # fmt: skip
        (tmp_path / run).mkdir()
        proc = _start(tmp_path / run, config, kafka.bootstrap, run, monkeypatch)
        try:
            _wait_for(
                lambda config=config, proc=proc: (
                    not proc.alive()
                    or (
                        (c := read_committed_progress(kafka.bootstrap, config.progress_topic)) is not None
                        and reflects(c, final)
                    )
                ),
                f"the {run} run did not complete",
                timeout=300,
            )
            assert proc.alive(), proc.tail()
        finally:
            proc.stop()
        tables[run] = {}
        for q in config.queries:
            records = read_all(kafka.bootstrap, q.result_topic)
            table = {}
            for r in records:
                table[r["group"]] = r["value"]
            tables[run][q.name.rsplit("-", 1)[0]] = table
    assert tables["executors"] == tables["driver"]
    assert tables["oneexecutor"] == tables["driver"]
    assert any(v not in ("0", None) for v in tables["driver"][f"{topic_prefix}groups"].values())
