"""Dead letters across runs (issue 36 point 5a, 5d), on the real broker and Spark: ``ivm status`` shows the
pipeline's dead letters per reason; ``ivm_dead_letters_total`` goes on from the topic's count at a restart
(it restarted at 0 while the topic held 11); after a full ``ivm reset`` the pipeline starts over and meets the
same bad records, and their dead letters are not written a second time."""

from __future__ import annotations

import json
import time

import pytest

from ivm.processor.cli import main
from ivm.processor.codecs.avro import OutputCodec, load_relation_codecs
from ivm.processor.config import dump_config
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import TopicReader, create_topics, end_offsets
from ivm.processor.operations.metrics import Metrics
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import pipeline_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CODECS = load_relation_codecs()
BAD = 3


def _dead_letters(bootstrap: str, topic: str) -> list[dict]:
    codec = OutputCodec("dead_letter")
    with TopicReader(bootstrap, topic) as reader:
        return [codec.decode(v) for _k, v in reader.to_end() if v is not None]


def _caught_up(kafka, config, inputs: list[str], timeout: float = 180) -> None:
    """Until the committed progress (not a result topic: it keeps an earlier history's records) reflects the
    inputs' ends."""
    final = end_offsets(kafka.bootstrap, inputs)
    deadline = time.monotonic() + timeout
    while not ((c := read_committed_progress(kafka.bootstrap, config.progress_topic)) and reflects(c, final)):
        assert time.monotonic() < deadline, "the pipeline did not consume its input"
        time.sleep(0.5)


def test_dead_letters_are_shown_counted_on_and_not_repeated_after_a_reset(
    kafka, start_job, topic_prefix, tmp_path, capsys
) -> None:
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state", snapshot_every=2)
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    inputs = list(topics.values())
    toml = tmp_path / "pipeline.toml"
    toml.write_text(dump_config(config))
    create_topics(kafka.bootstrap, inputs)
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    for i in range(20):
        producer.send_raw(topics["R"], *CODECS["R"].encode((i, i + 1), 1))
        if i % 7 == 0:
            producer.send_raw(topics["R"], b"k", b"\x07garbage")  # not an R update: dead-lettered
    producer.flush()

    job = start_job(config)
    _caught_up(kafka, config, inputs)
    job.stop()
    assert len(_dead_letters(kafka.bootstrap, config.dead_letter_topic)) == BAD

    producer.send_raw(topics["R"], *CODECS["R"].encode((100, 101), 1))  # a good one: the restart commits a batch
    producer.flush()
    metrics = Metrics()
    job = start_job(config, metrics)  # nothing new to dead-letter: the counter still says what the topic holds
    _caught_up(kafka, config, inputs)
    sample = metrics.registry.get_sample_value("ivm_dead_letters_total", {"topic": config.dead_letter_topic})
    assert sample == BAD
    capsys.readouterr()
    assert main(["status", "-c", str(toml), "--json"]) == 0
    dead = json.loads(capsys.readouterr().out)["dead_letters"]
    assert dead["total"] == BAD and dead["error"] is None
    assert dead["by_reason"] == {"malformed Avro for relation R": BAD}, dead
    assert main(["status", "-c", str(toml)]) == 0
    text = capsys.readouterr().out
    assert f"dead letters in {config.dead_letter_topic}: {BAD}" in text and "malformed Avro for relation R" in text
    job.stop()

    assert main(["reset", "-c", str(toml), "--yes"]) == 0
    job = start_job(config)  # a new history from the earliest offsets: the same bad records again
    _caught_up(kafka, config, inputs)
    job.stop()
    assert len(_dead_letters(kafka.bootstrap, config.dead_letter_topic)) == BAD
