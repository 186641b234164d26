"""The batch's input positions in the pipeline's consumer group: the lag ``kafka-consumer-groups`` shows.

Read with the Kafka distribution's own tool (``org.apache.kafka.tools.consumer.group.ConsumerGroupCommand``
from the fetched ``kafka-tools`` jars, what ``kafka-consumer-groups.sh --describe`` runs): after the last
batch the group's committed offset of every input partition is the partition's end offset (lag 0); updates
produced while the job is stopped show as exactly that lag, per topic; a restart brings it back to 0.  In
both modes: exactly once (committed right after the batch's transaction) and at least once (committed after
the batch's outputs are delivered).
Without the commit (the code before the consumer group) the tool finds no such group.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.local.artifacts import kafka_tools_jars
from ivm.processor.local.kafka import _java
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import pipeline_config, read_until
from tests.integration.test_stops import _wait_for

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()


def describe_group(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """``(current offset, log end offset, lag)`` per partition, as ``kafka-consumer-groups --describe`` prints."""
    proc = subprocess.run(
        [
            _java(), "-cp", f"{kafka_tools_jars()}/*", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server", bootstrap, "--describe", "--group", group,
        ],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[tuple[str, int], tuple[int, int, int]] = {}
    lines = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    header = next((i for i, cols in enumerate(lines) if cols[:2] == ["GROUP", "TOPIC"]), None)
    assert header is not None, proc.stdout + proc.stderr
    for cols in lines[header + 1 :]:
        _group, topic, partition, current, end, lag = cols[:6]
        out[(topic, int(partition))] = (int(current), int(end), int(lag))
    return out


def _produce(bootstrap: str, topics: dict[str, str], counts: dict[str, int], start: int) -> None:
    producer = UpdateProducer(bootstrap, CODECS, topics)
    for rel, n in counts.items():
        for i in range(start, start + n):
            producer.send_raw(topics[rel], *CODECS[rel].encode((i % 17, i % 13), 1))
    producer.flush()


@pytest.mark.parametrize("exactly_once", [True, False], ids=["transactional", "at-least-once"])
def test_lag_of_the_pipelines_consumer_group(kafka, start_job, topic_prefix, tmp_path, exactly_once: bool) -> None:
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    group = f"{topic_prefix}lag-group"
    config = replace(
        pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state", max_offsets_per_trigger=200),
        consumer_group=group,
        exactly_once=exactly_once,
    )
    create_topics(kafka.bootstrap, list(topics.values()))
    _produce(kafka.bootstrap, topics, {"R": 400, "S": 300, "T": 350}, 0)

    def run_to_end() -> None:
        final = end_offsets(kafka.bootstrap, list(topics.values()))
        job = start_job(config)

        def caught_up() -> bool:
            if not exactly_once:  # no progress topic: the last result reflects the end
                results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: False, 2)
                return bool(results) and reflects(results[-1], final)
            committed = read_committed_progress(kafka.bootstrap, config.progress_topic)
            return committed is not None and reflects(committed, final)

        _wait_for(caught_up, "the job did not reach the end of its input", timeout=300)
        job.stop()

    run_to_end()
    lag = describe_group(kafka.bootstrap, group)
    relation_partitions = {tp: v for tp, v in lag.items() if tp[0] in topics.values()}
    assert set(relation_partitions) == {(t, 0) for t in topics.values()}
    assert relation_partitions == {(t, 0): (n, n, 0) for t, n in zip(topics.values(), (400, 300, 350), strict=True)}
    assert all(v[2] == 0 for v in lag.values()), lag  # the control topic too

    _produce(kafka.bootstrap, topics, {"R": 37, "S": 0, "T": 5}, 1000)  # while the job is stopped
    lag = describe_group(kafka.bootstrap, group)
    assert {t: lag[(t, 0)] for t in topics.values()} == {
        topics["R"]: (400, 437, 37),
        topics["S"]: (300, 300, 0),
        topics["T"]: (350, 355, 5),
    }

    run_to_end()
    lag = describe_group(kafka.bootstrap, group)
    assert {t: lag[(t, 0)][2] for t in topics.values()} == dict.fromkeys(topics.values(), 0)
    assert lag[(topics["R"], 0)][0] == 437
