"""Exactly once with the state on the executors, under kill -9 of every kind of process.

``placement = "executors"`` on ``local-cluster[2,1,1024]`` while updates arrive in chunks (10^5 / 12 each): at
random points (seeded), kill -9 an executor JVM, a shard host, a Python worker or the driver (the
whole ``ivm run`` process group: the driver's Python and JVM, Spark's master, workers and executors;
a new ``ivm run`` then starts), 12 kills in all, in two halves of six that run apart (each half kills every
kind, on a pipeline of its own).  Afterwards the result topic, read with
read_committed, holds every batch once and in order, and its last value is the brute-force triangle
count of everything the topics hold, as an uninterrupted run would publish.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest

from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import pipeline_config, read_until
from tests.integration.test_cluster import _descendants, _executors
from tests.integration.test_placement_cluster import _hosts
from tests.integration.test_stops import _produce, _start, _triangles, _wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MASTER = "local-cluster[2,1,1024]"
KILLS = ["host", "executor", "worker", "driver", "host", "worker", "executor", "host", "driver", "worker",
         "executor", "host"]  # fmt: skip


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _workers(root: int) -> list[int]:
    """The Python workers (and their daemon) under the executors of the processor ``root``."""
    out = []
    for executor in _executors(root):
        for pid in _descendants(executor):
            line = _cmdline(pid)
            if b"pyspark" in line and b"ivm.processor.placement.host" not in line:
                out.append(pid)
    return out


def _committed(bootstrap: str, topic: str) -> int:
    progress = read_committed_progress(bootstrap, topic)
    return -1 if progress is None else progress["batch_id"]


#: the twelve kills in halves that run apart (in parallel under pytest-xdist), each with every kind of process:
#: (the kills, seed of the victims, seed of the first chunk of updates).  The first half is the first six kills
#: of the single run it was, with its seeds.
PARTS = [(KILLS[:6], 17, 100), (KILLS[6:], 18, 200)]


@pytest.mark.parametrize("part", range(len(PARTS)), ids=[f"half{i + 1}" for i in range(len(PARTS))])
def test_exactly_once_under_kill_dash_nine_of_every_process(kafka, topic_prefix, tmp_path, monkeypatch, part) -> None:
    kills, seed, produce_seed = PARTS[part]
    assert set(kills) == set(KILLS), "each half kills every kind of process"
    rng = random.Random(seed)
    domain = 300
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    config = pipeline_config(
        kafka.bootstrap, topic_prefix, tmp_path / "state", spark_master=MASTER, max_offsets_per_trigger=4000,
        snapshot_every=3, placement="executors", shards=4, engine="auto",
    )  # fmt: skip
    create_topics(kafka.bootstrap, list(topics.values()))
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.setenv("IVM_SHARD_HOST_IDLE_SECONDS", "30")  # the hosts of a killed driver's run leave soon
    chunk = 100_000 // len(KILLS)
    _produce(kafka.bootstrap, topics, chunk, domain, seed=produce_seed)
    runs = 0
    proc = _start(tmp_path, config, kafka.bootstrap, f"run{runs}", monkeypatch)
    tmp = tmp_path / "tmp"
    done: list[str] = []
    try:
        for i, kind in enumerate(kills):
            last = _committed(kafka.bootstrap, config.progress_topic)
            _wait_for(
                lambda last=last, proc=proc: (
                    _committed(kafka.bootstrap, config.progress_topic) > last or not proc.alive()
                ),
                f"no batch committed before kill {i} ({kind})",
                timeout=300,
            )
            assert proc.alive(), proc.tail()
            _produce(kafka.bootstrap, topics, chunk, domain, seed=produce_seed + 1 + i)
            if kind == "driver":
                proc.stop(kill=True)
                runs += 1
                proc = _start(tmp_path, config, kafka.bootstrap, f"run{runs}", monkeypatch)
                done.append(kind)
                continue
            root = proc.proc.pid
            targets = {
                "host": lambda: _hosts(tmp),
                "executor": lambda root=root: _executors(root),
                "worker": lambda root=root: _workers(root),
            }[kind]
            _wait_for(lambda targets=targets, proc=proc: bool(targets()) or not proc.alive(), f"no {kind} to kill", 120)
            victim = rng.choice(targets())
            os.kill(victim, signal.SIGKILL)
            done.append(kind)
        final = end_offsets(kafka.bootstrap, list(topics.values()))
        _wait_for(
            lambda: not proc.alive()
            or ((c := read_committed_progress(kafka.bootstrap, config.progress_topic)) is not None
                and reflects(c, final)),
            "the stream did not complete after the kills",
            timeout=600,
        )  # fmt: skip
        assert proc.alive(), proc.tail()
    finally:
        proc.stop()
    assert sorted(done) == sorted(kills)
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    assert [r["batch_id"] for r in results] == list(range(len(results))), "a batch is missing or duplicated"
    assert int(results[-1]["value"]) == _triangles(kafka.bootstrap, topics, domain)
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("run*.log"))
    assert "rebuilt" in logs, "slices were rebuilt after their hosts were lost"
