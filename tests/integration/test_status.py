"""``ivm status`` of a real pipeline: a child ``ivm run`` on the real broker, watched from another process.

While it runs: running (its pid, on this host), the metrics endpoint answering, the last committed batch,
zero lag once the input is consumed, the scalar query's value equal to a brute-force count, the group-by
query's number of groups equal to a brute-force one.  After SIGTERM: not running, stopped cleanly.  After
a kill -9: not running, the process gone.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.config import QueryConfig, dump_config
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.local.stack import ProcessorProcess, project_root
from ivm.processor.operations.heartbeat import RUNNING_FILE
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import TRIANGLE, pipeline_config

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()
GROUP_BY = "Q(a) :- R(a, b), S(b, c)"


def ivm_status(config: Path, *flags: str) -> subprocess.CompletedProcess:
    """``ivm status -c CONFIG FLAGS`` as a user runs it, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "ivm.processor.cli", "status", "-c", str(config), *flags],
        capture_output=True, text=True, timeout=120, cwd=project_root(),
    )  # fmt: skip


def status_json(config: Path) -> dict:
    done = ivm_status(config, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def produce(bootstrap: str, topics: dict[str, str], seed: int) -> dict[str, Counter]:
    """Inserts and deletes (of tuples inserted before) into R, S, T; returns each relation's contents."""
    rng = random.Random(seed)
    producer = UpdateProducer(bootstrap, CODECS, topics)
    contents: dict[str, Counter] = {r: Counter() for r in topics}
    for _ in range(3000):
        rel = rng.choice("RST")
        present = [t for t, m in contents[rel].items() if m > 0]
        if present and rng.random() < 0.2:
            row, mult = rng.choice(present), -1
        else:
            row, mult = (rng.randrange(25), rng.randrange(25)), 1
        contents[rel][row] += mult
        producer.send_raw(topics[rel], *CODECS[rel].encode(row, mult))
    producer.flush()
    return contents


def triangles(contents: dict[str, Counter]) -> int:
    """``Q() :- R(a,b), S(b,c), T(c,a)`` by brute force: the sum of the multiplicities' products."""
    s_from: dict[int, list[tuple[int, int]]] = {}
    for (b, c), m in contents["S"].items():
        s_from.setdefault(b, []).append((c, m))
    return sum(mr * ms * contents["T"][(c, a)] for (a, b), mr in contents["R"].items() for c, ms in s_from.get(b, []))


def groups(contents: dict[str, Counter]) -> int:
    """The groups of ``Q(a) :- R(a, b), S(b, c)``: the values of a with a nonzero count of answers."""
    s_count: Counter = Counter()
    for (b, _c), m in contents["S"].items():
        s_count[b] += m
    per_a: Counter = Counter()
    for (a, b), m in contents["R"].items():
        per_a[a] += m * s_count[b]
    return sum(1 for n in per_a.values() if n != 0)


def wait_for(predicate, what: str, proc: ProcessorProcess, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.alive(), f"ivm run exited:\n{proc.tail()}"
        if time.monotonic() > deadline:  # a hang, not a speed check
            raise TimeoutError(f"{what}\n{proc.tail()}")
        time.sleep(0.5)


def test_status_of_a_running_then_stopped_pipeline(kafka, topic_prefix: str, tmp_path: Path) -> None:
    p = topic_prefix
    topics = {r: f"{p}{r}" for r in "RST"}
    config = pipeline_config(
        kafka.bootstrap, p, tmp_path / "state",
        queries=(QueryConfig(f"{p}tri", TRIANGLE, "first_order"), QueryConfig(f"{p}by_a", GROUP_BY)),
        snapshot_every=5,
    )  # fmt: skip
    path = tmp_path / "pipeline.toml"
    path.write_text(dump_config(config))
    create_topics(kafka.bootstrap, list(topics.values()))
    contents = produce(kafka.bootstrap, topics, seed=11)
    final = end_offsets(kafka.bootstrap, list(topics.values()))

    before = status_json(path)
    assert before["running"] is False and before["process"]["summary"] == "never ran here"
    assert before["last_committed_batch"] is None and before["total_lag"] == sum(final.values())

    proc = ProcessorProcess(path, kafka.bootstrap, tmp_path / "run.log")  # with a metrics endpoint
    try:
        wait_for(
            lambda: (c := read_committed_progress(kafka.bootstrap, config.progress_topic)) is not None
            and reflects(c, final),
            "the pipeline did not consume its input", proc,
        )  # fmt: skip
        committed = read_committed_progress(kafka.bootstrap, config.progress_topic)
        status = status_json(path)
        assert status["running"] is True, status["process"]
        process = status["process"]
        assert process["pid"] == proc.proc.pid and process["host"] == socket.gethostname()
        assert process["summary"].startswith(f"running (pid {proc.proc.pid} on {socket.gethostname()}, heartbeat ")
        assert process["heartbeat_age_seconds"] < 9 and process["started_at"].endswith("Z")
        url = f"http://127.0.0.1:{proc.metrics_port}/metrics"
        assert status["metrics"] == {"url": url, "answering": True, "error": None}
        assert status["last_committed_batch"] == committed["batch_id"]
        assert status["committed_at"].endswith("Z") and 0 <= status["committed_age_seconds"] < 120
        assert status["total_lag"] == 0 and status["lag_by_topic"] == {t: 0 for t in topics.values()}
        results = {r["query"]: r for r in status["results"]}
        tri, by_a = results[f"{p}tri"], results[f"{p}by_a"]
        assert not tri["keyed"] and tri["error"] is None and tri["value"] == triangles(contents) > 0
        assert tri["batch_id"] == committed["batch_id"] and tri["produced_at"].endswith("Z")
        assert by_a["keyed"] and by_a["error"] is None and by_a["groups"] == groups(contents) > 0
        assert status["snapshots"], "snapshot_every = 5: the folder holds one"

        text = ivm_status(path, "--partitions")
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        assert lines[0].startswith(f"pipeline {config.name}: running (pid {proc.proc.pid} on ")
        assert f"  metrics {url}: answering" in lines
        assert any(line.startswith(f"last committed batch {committed['batch_id']} (") for line in lines)
        assert "input lag: 0 records" in lines and any(line.split() == [f"{p}R[0]", "0"] for line in lines)
        assert f"  {p}tri = {triangles(contents)}  (batch {committed['batch_id']}, " in text.stdout
        assert f"  {p}by_a: {groups(contents):,} groups" in lines

        os.kill(proc.proc.pid, signal.SIGTERM)
        proc.proc.wait(60)
    finally:
        if proc.alive():
            proc.stop(kill=True)
    assert proc.proc.returncode == 0, proc.tail()
    assert not (tmp_path / "state" / RUNNING_FILE).exists()
    after = status_json(path)
    assert after["running"] is False and after["process"]["summary"].startswith("not running (stopped cleanly ")
    assert after["last_committed_batch"] == committed["batch_id"] and after["total_lag"] == 0
    assert after["metrics"] is None  # the configuration has no metrics port: only a running job's is checked
    text = ivm_status(path)
    assert text.stdout.splitlines()[0].startswith(f"pipeline {config.name}: not running (stopped cleanly ")

    # a process that dies leaves its heartbeat behind: not running, its pid gone
    proc = ProcessorProcess(path, kafka.bootstrap, tmp_path / "run-2.log")
    try:
        wait_for(lambda: status_json(path)["running"], "the second run did not report running", proc, timeout=180)
    finally:
        proc.stop(kill=True)
    assert (tmp_path / "state" / RUNNING_FILE).exists()
    crashed = status_json(path)
    assert crashed["running"] is False and crashed["process"]["pid"] == proc.proc.pid
    assert crashed["process"]["summary"].startswith("not running (last heartbeat ")
    assert crashed["process"]["summary"].endswith(f"; pid {proc.proc.pid} is gone)")
