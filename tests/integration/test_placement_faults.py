"""Exactly once with the state on the executors, under kill -9 of every kind of process and a broker restart.

``placement = "executors"`` on ``local-cluster[2,1,1024]``, on a broker of the test's own (free ports, its
own folder: the test can run beside others), while 60,000 updates (inserts, deletes of present tuples,
deletes of absent ones) arrive in chunks.  At random points (seeded) it kills with SIGKILL, 20 times in
all: an executor JVM, a shard host, a Python worker while a batch is in flight (its CPU time moving when
one is seen) and one between tasks (its CPU time still), and the driver (the whole ``ivm run`` process
group: the driver's Python and JVM, Spark's master, workers and executors; a new ``ivm run`` then
starts); halfway it restarts the broker.
Afterwards every batch the result topic holds (read_committed) is checked against an independent count
at that batch's committed offsets (``test_reliability.check_exactly_once``: the triangle count of the
input prefix the batch names, with the default policy's refusals, and every refused input dead-lettered
once), batch ids run 0, 1, 2, ... once each, and the last batch reflects everything the topics hold.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from processor.local.kafka import KafkaBroker
from processor.recovery import read_committed_progress
from processor.subscribe import reflects
from processor.topics import create_topics, end_offsets
from tests.integration.helpers import pipeline_config
from tests.integration.test_cluster import _descendants, _executors
from tests.integration.test_placement_cluster import _hosts
from tests.integration.test_reliability import LOGS, check_exactly_once, produce_stream
from tests.integration.test_stops import _start, _wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MASTER = "local-cluster[2,1,1024]"
# 20 kills; a driver kill costs a new Spark session and cluster (minutes on a loaded 2-core machine): two of them
KINDS = {"host": 6, "executor": 4, "busy worker": 4, "idle worker": 4, "driver": 2}
UPDATES = 60_000


def _plan(rng: random.Random) -> list[str]:
    """The kills in a seeded random order, with the broker restart halfway."""
    kills = [kind for kind, n in KINDS.items() for _ in range(n)]
    rng.shuffle(kills)
    return [*kills[: len(kills) // 2], "broker", *kills[len(kills) // 2 :]]


@pytest.fixture
def own_broker(tmp_path: Path):
    broker = KafkaBroker.start(LOGS / f"kafka-placement-faults-{tmp_path.name}-{random.randrange(10**6)}")
    yield broker
    broker.stop()


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
            if b"pyspark" in line and b"processor.placement.host" not in line:
                out.append(pid)
    return out


def _cpu(pid: int) -> int | None:
    """Process ``pid``'s CPU time so far in clock ticks (user + system), None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])


def _by_activity(pids: list[int], seconds: float = 0.3) -> tuple[list[int], list[int]]:
    """``pids`` split into those whose CPU time moved over ``seconds`` (busy in a task) and the others (idle)."""
    before = {pid: _cpu(pid) for pid in pids}
    time.sleep(seconds)
    busy, idle = [], []
    for pid, ticks in before.items():
        now = _cpu(pid)
        if ticks is None or now is None:
            continue
        (busy if now > ticks else idle).append(pid)
    return busy, idle


def _in_flight(log: Path) -> bool:
    """Whether the run whose log is ``log`` is in the middle of a batch: routed, not yet committed."""
    text = log.read_text(errors="replace")
    return text.count("routing batch ") > text.count("processor.job: batch ")


def _busy(root: int, log: Path) -> list[int]:
    """The Python workers in a task: while a batch is in flight, those whose CPU time moves (else, then, all)."""
    if not _in_flight(log):
        return []
    workers = _workers(root)
    busy = _by_activity(workers, 0.1)[0]
    return busy or (workers if _in_flight(log) else [])


def _committed(bootstrap: str, topic: str) -> int:
    progress = read_committed_progress(bootstrap, topic)
    return -1 if progress is None else progress["batch_id"]


@pytest.mark.timeout(1800)  # 20 faults, each after a committed batch; 15-25 min under a load of 15-20 on 2 cores
def test_exactly_once_under_kill_dash_nine_of_every_process(own_broker, tmp_path, monkeypatch) -> None:
    rng = random.Random(17)
    plan = _plan(rng)
    assert plan.count("broker") == 1 and len(plan) - 1 >= 20
    bootstrap = own_broker.bootstrap
    domain = 150
    prefix = "faults."
    topics = {r: f"{prefix}{r}" for r in "RST"}
    config = pipeline_config(
        bootstrap, prefix, tmp_path / "state", spark_master=MASTER, max_offsets_per_trigger=1500,
        snapshot_every=3, placement="executors", shards=4, engine="auto",
    )  # fmt: skip
    create_topics(bootstrap, list(topics.values()))
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.setenv("IVM_SHARD_HOST_IDLE_SECONDS", "30")  # the hosts of a killed driver's run leave soon
    chunk = UPDATES // (len(plan) + 1)
    produce_stream(bootstrap, topics, chunk, seed=100, domain=domain)
    runs = 0
    proc = _start(tmp_path, config, bootstrap, f"run{runs}", monkeypatch)
    tmp = tmp_path / "tmp"
    done: list[str] = []
    try:
        for i, kind in enumerate(plan):
            last = _committed(bootstrap, config.progress_topic)
            _wait_for(
                lambda last=last, proc=proc: _committed(bootstrap, config.progress_topic) > last or not proc.alive(),
                f"no batch committed before fault {i} ({kind})",
                timeout=900 if i == 0 else 420,  # a hang, not a speed check: the first start shares 2 cores
            )
            if not proc.alive() and done[-1:] == ["broker"]:  # the outage made it exit: a supervisor starts it
                runs += 1
                proc = _start(tmp_path, config, bootstrap, f"run{runs}", monkeypatch)
                _wait_for(
                    lambda last=last, proc=proc: _committed(bootstrap, config.progress_topic) > last
                    or not proc.alive(),
                    f"no batch committed after the broker restart, before fault {i} ({kind})",
                    timeout=300,
                )  # fmt: skip
            assert proc.alive(), proc.tail()
            produce_stream(bootstrap, topics, chunk, seed=101 + i, domain=domain)
            if kind == "broker":
                own_broker.restart()
                done.append(kind)
                continue
            if kind == "driver":
                time.sleep(rng.uniform(0.0, 2.0))
                proc.stop(kill=True)
                runs += 1
                proc = _start(tmp_path, config, bootstrap, f"run{runs}", monkeypatch)
                done.append(kind)
                continue
            root = proc.proc.pid
            pick: Callable[[], list[int]] = {
                "host": lambda: _hosts(tmp),
                "executor": lambda root=root: _executors(root),
                "busy worker": lambda root=root, log=proc.log_path: _busy(root, log),
                "idle worker": lambda root=root: _by_activity(_workers(root))[1],
            }[kind]
            found: list[list[int]] = [[]]
            looks = [0]

            def targets(pick=pick, found=found, proc=proc, kind=kind, looks=looks, i=i) -> bool:
                found[0] = pick()
                looks[0] += 1
                if not found[0] and kind == "busy worker" and looks[0] % 20 == 0:  # no task running: more input
                    produce_stream(bootstrap, topics, 1500, seed=10_000 + 100 * i + looks[0], domain=domain)
                return bool(found[0]) or not proc.alive()

            _wait_for(targets, f"no {kind} to kill", 180)
            assert proc.alive(), proc.tail()
            os.kill(rng.choice(found[0]), signal.SIGKILL)
            done.append(kind)
        final = end_offsets(bootstrap, list(topics.values()))
        _wait_for(
            lambda: not proc.alive()
            or ((c := read_committed_progress(bootstrap, config.progress_topic)) is not None and reflects(c, final)),
            "the stream did not complete after the faults",
            timeout=600,
        )  # fmt: skip
        assert proc.alive(), proc.tail()
    finally:
        proc.stop()
    assert sorted(done) == sorted(plan)
    results = check_exactly_once(bootstrap, config, topics, domain)
    assert len(results) >= len(plan), "batches ran between the faults"
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("run*.log"))
    assert "rebuilt" in logs, "slices were rebuilt after their hosts were lost"
