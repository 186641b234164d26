"""Clean stops of `ivm run` (a child process, as a user runs it), with the broker up or down.

A stop ends the process by itself (how fast: bench/stops.py), says whether the batch in flight was
committed or its transaction abandoned, removes Spark's temporary folder, and loses nothing: a restart
after an abandoned transaction publishes every batch exactly once (the reliability suite's oracle).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.config import dump_config
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.local.kafka import KafkaBroker
from ivm.processor.local.spark import _JVM_OPTIONS
from ivm.processor.local.stack import ProcessorProcess
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import consume_raw, pipeline_config, read_until
from tests.integration.test_reliability import LOGS

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()
HANG = 60.0  # a stop that has not ended by then hangs; how long stops take is measured by bench/stops.py


def _produce(bootstrap: str, topics: dict[str, str], n: int, domain: int, seed: int) -> None:
    rng = random.Random(seed)
    producer = UpdateProducer(bootstrap, CODECS, topics)
    for _ in range(n):
        rel = rng.choice("RST")
        producer.send_raw(topics[rel], *CODECS[rel].encode((rng.randrange(domain), rng.randrange(domain)), 1))
    producer.flush()


def _start(tmp_path: Path, config, bootstrap: str, name: str, monkeypatch, metrics_port: int = 0) -> ProcessorProcess:
    path = tmp_path / "pipeline.toml"
    path.write_text(dump_config(config))
    # the child's temporary folders land here, Python's and the JVM's (Spark's default checkpoint among them)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("IVM_SPARK_JAVA_OPTIONS", f"-Djava.io.tmpdir={tmp_path / 'tmp'} {_JVM_OPTIONS}")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    proc = ProcessorProcess(path, bootstrap, tmp_path / f"{name}.log", metrics_port=metrics_port)
    monkeypatch.delenv("TMPDIR")
    monkeypatch.delenv("IVM_SPARK_JAVA_OPTIONS")
    return proc


def _left_behind(tmp: Path) -> list[str]:
    """The run's temporary folders still there: Spark's scratch folder, the streaming query's checkpoint
    and Spark's own ``temporary-*`` checkpoints and ``spark-*`` folders."""
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("ivm-", "temporary-", "spark-")))


def _wait_for(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:  # a hang, not a speed check
            raise TimeoutError(what)
        time.sleep(0.05)


def _stop(proc: ProcessorProcess, sig: int) -> bool:
    """Signal the processor; whether it ended by itself (before :data:`HANG`) rather than being killed."""
    os.kill(proc.proc.pid, sig)
    try:
        proc.proc.wait(HANG)
    except subprocess.TimeoutExpired:
        proc.stop(kill=True)
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stop_with_the_broker_up(kafka, topic_prefix, tmp_path, monkeypatch, sig) -> None:
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state", snapshot_every=2)
    create_topics(kafka.bootstrap, list(topics.values()))
    _produce(kafka.bootstrap, topics, 3000, 200, seed=1)
    proc = _start(tmp_path, config, kafka.bootstrap, "run", monkeypatch)
    _wait_for(lambda: proc.batches_logged() >= 1, "no batch committed")
    _produce(kafka.bootstrap, topics, 3000, 200, seed=2)
    ended = _stop(proc, sig)
    log = proc.log_path.read_text(errors="replace")
    assert ended, "the stop hung"
    assert proc.proc.returncode == 0
    assert "stopped: last committed batch" in log and "nothing left open" in log
    # the start-up summary: what runs, with which engine and guarantee
    assert f"pipeline {config.name}: Kafka {kafka.bootstrap}" in log
    assert f"query {config.queries[0].name}: Q() :- R(a, b), S(b, c), T(c, a) -- engine first_order" in log
    assert "Traceback" not in log
    assert _left_behind(tmp_path / "tmp") == [], "temporary folders were left behind"


def test_stop_with_the_broker_down_abandons_the_open_transaction(tmp_path, monkeypatch) -> None:
    broker = KafkaBroker.start(LOGS / f"kafka-stops-{time.strftime('%H%M%S')}-{random.randrange(10**6)}")
    try:
        bootstrap, domain = broker.bootstrap, 3000
        topics = {r: f"stop.{r}" for r in "RST"}
        config = pipeline_config(
            bootstrap, "stop.", tmp_path / "state", engine="first_order", max_offsets_per_trigger=200_000,
            snapshot_every=0,
        )  # fmt: skip
        create_topics(bootstrap, list(topics.values()))
        # three full batches: 0 committed, 1 in flight when the broker dies, 2 only after the restart (it was
        # 1,000,000 updates: two more full batches prove nothing more and cost ~15-20 s of CPU, 9.4 s of it the
        # test's own Avro encoding and decoding of them, the rest the replay and the broker)
        _produce(bootstrap, topics, 600_000, domain, seed=3)
        proc = _start(tmp_path, config, bootstrap, "run-0", monkeypatch)
        # the broker dies while batch 1 (200,000 updates, about a second of work) is being applied
        _wait_for(lambda: "applying batch 1:" in proc.log_path.read_text(errors="replace"), "no batch 1", 180)
        broker.stop(kill=True)
        ended = _stop(proc, signal.SIGTERM)
        log = proc.log_path.read_text(errors="replace")
        assert ended, "the stop hung"
        assert proc.proc.returncode == 0
        assert "stopped: abandoned batch" in log and "not committed" in log
        assert _left_behind(tmp_path / "tmp") == []

        # nothing lost: the broker and the processor come back, every batch once, results exact
        broker = KafkaBroker.start(broker.workdir)
        proc = _start(tmp_path, config, bootstrap, "run-1", monkeypatch)
        final = end_offsets(bootstrap, list(topics.values()))
        _wait_for(
            lambda: (c := read_committed_progress(bootstrap, config.progress_topic)) is not None and reflects(c, final),
            "the stream did not complete after the restart",
            timeout=300,
        )
        proc.stop()
        results = read_until(bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
        assert [r["batch_id"] for r in results] == list(range(len(results))), "a batch is missing or duplicated"
        assert int(results[-1]["value"]) == _triangles(bootstrap, topics, domain)
    finally:
        broker.stop()


def _triangles(bootstrap: str, topics: dict[str, str], domain: int) -> int:
    """The triangle count of everything the topics hold: trace(R S T) with dense matrices (BLAS)."""
    matrices = {}
    for rel, topic in topics.items():
        m = np.zeros((domain, domain))
        for *_, value in consume_raw(bootstrap, topic):
            (a, b), mult = CODECS[rel].decode(value)
            m[a, b] += mult
        matrices[rel] = m
    return round(float(np.sum((matrices["R"] @ matrices["S"]) * matrices["T"].T)))
