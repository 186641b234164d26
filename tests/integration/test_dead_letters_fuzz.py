"""A flood of malformed input mixed with good updates: the job keeps going, every
bad message is in the dead-letter topic exactly once with its position, and the
state equals the oracle over the good updates alone."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ivm.processor.codecs.avro import DecodeError, load_relation_codecs
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from tests.integration.helpers import pipeline_config, read_until

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()


def _malformed(rng: random.Random, rel: str) -> tuple[bytes | None, str]:
    """A message that is not a valid update of ``rel``, and the reason's expected words."""
    codec = CODECS[rel]
    good = codec.encode((rng.randrange(50), rng.randrange(50)), 1)[1]
    kind = rng.randrange(6)
    if kind == 0:
        return None, "empty message"  # a tombstone
    if kind == 1:
        return good[: rng.randrange(1, len(good))], "malformed Avro"
    if kind == 2:
        return good + bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))), "trailing bytes"
    if kind == 3:
        return codec.encode((1, 2), 0)[1], "multiplicity 0"
    if kind == 4:
        return codec.encode((999, 999), -rng.randint(1, 3))[1], "absent tuple"
    while True:  # random bytes that do not happen to be a valid update
        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 12)))
        try:
            codec.decode(data)
        except DecodeError:
            return data, ""


def test_ten_thousand_malformed_messages(kafka, start_job, topic_prefix, tmp_path) -> None:
    rng = random.Random(8)
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path, max_offsets_per_trigger=5000)
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    create_topics(kafka.bootstrap, list(topics.values()))
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    next_offset = dict.fromkeys(topics.values(), 0)
    bad: dict[tuple[str, int], str] = {}
    matrices = {rel: np.zeros((50, 50), dtype=np.int64) for rel in "RST"}
    n_bad = 0
    while n_bad < 10_000 or sum(next_offset.values()) < 20_000:
        rel = rng.choice("RST")
        topic = topics[rel]
        if rng.random() < 0.5:
            value, words = _malformed(rng, rel)
            bad[(topic, next_offset[topic])] = words
            n_bad += 1
        else:
            a, b = rng.randrange(50), rng.randrange(50)
            mult = -1 if matrices[rel][a, b] > 0 and rng.random() < 0.3 else 1
            matrices[rel][a, b] += mult
            value = CODECS[rel].encode((a, b), mult)[1]
        producer.send_raw(topic, b"k", value)
        next_offset[topic] += 1
    producer.flush()
    job = start_job(config)
    final = end_offsets(kafka.bootstrap, list(topics.values()))
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    dead = read_until(kafka.bootstrap, config.dead_letter_topic, lambda rs: len(rs) >= len(bad))
    job.stop()
    expected = int(np.einsum("ab,bc,ca->", matrices["R"], matrices["S"], matrices["T"]))
    assert int(results[-1]["value"]) == expected
    got = {(d["topic"], d["offset"]): d for d in dead}
    assert len(dead) == len(got) == len(bad), "dead letters lost or duplicated"
    assert set(got) == set(bad)
    for position, words in bad.items():
        assert words in got[position]["reason"], (position, got[position]["reason"])
        assert got[position]["partition"] == 0
