"""Reliability: kill -9 at random points, a broker restart, and a flood of malformed input.

Every published batch is checked against an independent oracle (the triangle
count as ``trace(R·S·T)`` of dense numpy matrices over the input prefix the
batch's offsets name), batch ids must run 0, 1, 2, ... with no gap and no
duplicate (read_committed), and every rejected input must be in the
dead-letter topic exactly once.
"""

from __future__ import annotations

import random
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
from ivm.processor.local.stack import ProcessorProcess
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import consume_raw, pipeline_config, read_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CODECS = load_relation_codecs()
LOGS = Path(__file__).resolve().parents[2] / ".local" / "test-logs"


@pytest.fixture
def own_broker():
    broker = KafkaBroker.start(LOGS / f"kafka-reliability-{time.strftime('%H%M%S')}-{random.randrange(10**6)}")
    yield broker
    broker.stop()


def produce_stream(bootstrap: str, topics: dict[str, str], n: int, seed: int, domain: int) -> int:
    """``n`` random updates (inserts, deletes of present tuples, a few deletes of absent ones)."""
    rng = random.Random(seed)
    producer = UpdateProducer(bootstrap, CODECS, topics)
    live: dict[tuple[str, tuple[int, int]], int] = {}
    keys: list[tuple[str, tuple[int, int]]] = []
    for _ in range(n):
        r = rng.random()
        if keys and r < 0.3:
            key = keys[rng.randrange(len(keys))]
            if key in live:  # a delete of a present tuple; otherwise fall through to an insert
                rel, row = key
                live[key] -= 1
                if live[key] == 0:
                    del live[key]
                producer.send_raw(topics[rel], *CODECS[rel].encode(row, -1))
                continue
        if r > 0.995:  # a delete of a tuple that is absent: the dead-letter topic gets it
            rel = rng.choice("RST")
            producer.send_raw(topics[rel], *CODECS[rel].encode((domain + 1, domain + 1), -1))
            continue
        rel = rng.choice("RST")
        row = (rng.randrange(domain), rng.randrange(domain))
        live[(rel, row)] = live.get((rel, row), 0) + 1
        keys.append((rel, row))
        producer.send_raw(topics[rel], *CODECS[rel].encode(row, 1))
    producer.flush()
    return producer.sent


def check_exactly_once(bootstrap: str, config, topics: dict[str, str], domain: int) -> list[dict]:
    """Assert the committed outputs are exactly the uninterrupted run's; return the results."""
    final = end_offsets(bootstrap, list(topics.values()))
    results = read_until(bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    assert reflects(results[-1], final)
    assert [r["batch_id"] for r in results] == list(range(len(results))), "a batch is missing or duplicated"
    # the input, in offset order per topic (one partition each)
    inputs = {}
    for rel, topic in topics.items():
        inputs[topic] = [(rel, *CODECS[rel].decode(value)) for _p, _o, _k, value in consume_raw(bootstrap, topic)]
    size = domain + 2
    matrices = {rel: np.zeros((size, size), dtype=np.int64) for rel in "RST"}
    done = dict.fromkeys(topics.values(), 0)
    rejected = 0
    for result in results:
        positions = {o["topic"]: o["offset"] for o in result["offsets"] if o["topic"] in done}  # not .control
        for topic, stop in positions.items():
            assert stop >= done[topic], "input positions went backwards"
            for rel, (a, b), mult in inputs[topic][done[topic] : stop]:
                m = matrices[rel]
                if m[a, b] + mult < 0:  # the default policy rejects it
                    rejected += 1
                    continue
                m[a, b] += mult
            done[topic] = stop
        expected = int(np.einsum("ab,bc,ca->", matrices["R"], matrices["S"], matrices["T"]))
        assert int(result["value"]) == expected, f"batch {result['batch_id']}"
    dead = read_until(bootstrap, config.dead_letter_topic, lambda rs: len(rs) >= rejected)
    assert len(dead) == rejected, "dead letters lost or duplicated"
    assert len({(d["topic"], d["offset"]) for d in dead}) == rejected
    return results


def _start(config_path: Path, bootstrap: str, log: Path) -> ProcessorProcess:
    return ProcessorProcess(config_path, bootstrap, log, metrics_port=0)


#: the kill -9 test's twenty kills, in halves that run apart (in parallel under pytest-xdist: each half is a
#: processor's JVM start-up after another, ten times, which is most of its time): (updates, seed of the updates,
#: seed of the kill points, kills).  The first half's kill points are the first ten of the single run it was.
KILL_PARTS = [(50_000, 1, 2, 10), (50_000, 3, 4, 10)]


@pytest.mark.parametrize("part", range(len(KILL_PARTS)), ids=[f"half{i + 1}" for i in range(len(KILL_PARTS))])
def test_kill_dash_nine_at_random_points(kafka, topic_prefix: str, tmp_path: Path, part: int) -> None:
    """kill -9 of the processor ten times at random points of a stream of 50,000 updates (in each half: twenty
    kills in all), then one run to the end: every batch exactly once and exact (:func:`check_exactly_once`)."""
    n, seed, kill_seed, kills = KILL_PARTS[part]
    bootstrap = kafka.bootstrap  # the processor is what gets killed: the session's broker serves
    prefix, domain = topic_prefix, 120
    topics = {r: f"{prefix}{r}" for r in "RST"}
    config = pipeline_config(
        bootstrap, prefix, tmp_path / "state", max_offsets_per_trigger=1500, snapshot_every=4, trigger_ms=50
    )
    config_path = tmp_path / "pipeline.toml"
    config_path.write_text(dump_config(config))
    create_topics(bootstrap, list(topics.values()))
    sent = produce_stream(bootstrap, topics, n, seed=seed, domain=domain)
    assert sent >= n * 0.95
    rng = random.Random(kill_seed)
    progress_at_kill = []
    for i in range(kills):
        proc = _start(config_path, bootstrap, tmp_path / f"processor-{i}.log")
        if rng.random() < 0.25:  # during start-up or recovery
            time.sleep(rng.uniform(0.5, 10.0))
        else:  # mid-stream: once this run is committing batches, at a random moment
            deadline = time.monotonic() + 90
            while proc.batches_logged() == 0 and proc.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(rng.uniform(0.0, 1.5))
        proc.stop(kill=True)
        committed = read_committed_progress(bootstrap, config.progress_topic)
        progress_at_kill.append(committed["batch_id"] if committed else -1)
    proc = _start(config_path, bootstrap, tmp_path / "processor-final.log")
    try:
        results = check_exactly_once(bootstrap, config, topics, domain)
    finally:
        proc.stop()
    midway = [b for b in progress_at_kill if 0 <= b < results[-1]["batch_id"]]
    assert len(set(midway)) >= 3, f"kills did not land mid-stream: {progress_at_kill}"
    recovered = (tmp_path / "processor-final.log").read_text()
    assert "recovered in" in recovered


def test_broker_restart_mid_stream(own_broker, tmp_path: Path) -> None:
    bootstrap = own_broker.bootstrap
    prefix, domain = "restart.", 60
    topics = {r: f"{prefix}{r}" for r in "RST"}
    config = pipeline_config(bootstrap, prefix, tmp_path / "state", max_offsets_per_trigger=2000, snapshot_every=3)
    config_path = tmp_path / "pipeline.toml"
    config_path.write_text(dump_config(config))
    create_topics(bootstrap, list(topics.values()))
    produce_stream(bootstrap, topics, 20_000, seed=3, domain=domain)
    proc = _start(config_path, bootstrap, tmp_path / "processor-0.log")
    restarts = 0
    try:
        deadline = time.monotonic() + 120
        while read_committed_progress(bootstrap, config.progress_topic) is None:
            if time.monotonic() > deadline:  # a hang, not a speed check
                raise TimeoutError("no batch committed before the restart")
            time.sleep(1)
        own_broker.restart()
        produce_stream(bootstrap, topics, 20_000, seed=4, domain=domain)
        # a supervisor restarts the processor if the outage made it exit
        deadline = time.monotonic() + 300
        final = end_offsets(bootstrap, list(topics.values()))
        while True:
            committed = read_committed_progress(bootstrap, config.progress_topic)
            if committed and reflects(committed, final):
                break
            if not proc.alive():
                restarts += 1
                proc = _start(config_path, bootstrap, tmp_path / f"processor-{restarts}.log")
            if time.monotonic() > deadline:  # a hang, not a speed check
                raise TimeoutError("the stream did not complete after the broker restart")
            time.sleep(1)
        check_exactly_once(bootstrap, config, topics, domain)
    finally:
        proc.stop()
