"""`ivm run` on a multi-process Spark cluster on this machine (``local-cluster[2,1,1024]``: a master, two
workers, two executor JVMs), as a user points ``[spark] master`` at a cluster.

Today's placement (``driver``) reads Kafka on the executors and applies every batch in the driver; the
test checks that this holds up when an executor JVM is killed with SIGKILL while the stream runs: Spark
reruns its tasks on the other executor (the worker starts a new one), and the result topic read with
read_committed holds every batch once, in order, ending at the brute-force count of what the topics
hold.  It also checks that a cluster master is not pinned to the loopback address by the processor
(SPARK_LOCAL_IP is set only for local masters).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import pipeline_config, read_until
from tests.integration.test_stops import _produce, _start, _triangles, _wait_for

pytestmark = pytest.mark.integration
MASTER = "local-cluster[2,1,1024]"


def _descendants(root: int) -> list[int]:
    """Every process under ``root`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _executors(root: int) -> list[int]:
    """The executor JVMs of the cluster started by the processor ``root``."""
    found = []
    for pid in _descendants(root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmdline:
            found.append(pid)
    return found


def test_driver_placement_on_a_cluster_survives_a_killed_executor(kafka, topic_prefix, tmp_path, monkeypatch) -> None:
    domain = 300
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    config = pipeline_config(
        kafka.bootstrap, topic_prefix, tmp_path / "state", spark_master=MASTER, max_offsets_per_trigger=3000,
        snapshot_every=3,
    )  # fmt: skip
    create_topics(kafka.bootstrap, list(topics.values()))
    _produce(kafka.bootstrap, topics, 20_000, domain, seed=11)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    proc = _start(tmp_path, config, kafka.bootstrap, "cluster", monkeypatch)
    try:
        _wait_for(lambda: len(_executors(proc.proc.pid)) == 2, "the cluster's two executors did not start", 180)
        for pid in _executors(proc.proc.pid):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert b"SPARK_LOCAL_IP=127.0.0.1" in environ, "a local-cluster master binds the loopback address"
        _wait_for(lambda: proc.batches_logged() >= 1, "no batch committed", 180)
        victim = _executors(proc.proc.pid)[0]
        os.kill(victim, signal.SIGKILL)
        _produce(kafka.bootstrap, topics, 10_000, domain, seed=12)  # read after the loss, on the executors left
        final = end_offsets(kafka.bootstrap, list(topics.values()))
        _wait_for(
            lambda: (
                (c := read_committed_progress(kafka.bootstrap, config.progress_topic)) is not None
                and reflects(c, final)
            ),
            "the stream did not complete after the executor was killed",
            timeout=300,
        )
        survivors = _executors(proc.proc.pid)
        assert victim not in survivors
    finally:
        proc.stop()
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    assert [r["batch_id"] for r in results] == list(range(len(results))), "a batch is missing or duplicated"
    assert len(results) >= 4, "the stream ran in several batches, some after the executor was lost"
    assert int(results[-1]["value"]) == _triangles(kafka.bootstrap, topics, domain)
