"""A time window over a real broker and Spark, in both placements: the same results.

R keeps a 3-second window (record times: the producer's).  A burst of 300 distinct tuples, a pause longer
than the window, then one more tuple: the window then holds that one tuple only, so the count is 1 in
both placements.  In ``placement = "executors"`` the last tuple reaches one slice of two; the other slice
expires its part of the first burst only because the batch's seal carries the whole input's clock
(``ivm.processor.placement.driver.batch_clock``): without it that slice would keep about half the burst.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.config import RelationConfig
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from tests.integration.helpers import pipeline_config, read_until

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()
WINDOW = 3.0


@pytest.mark.parametrize("placement", ["driver", "executors"])
def test_a_time_window_expires_the_same_tuples_in_both_placements(
    kafka, start_job, topic_prefix, tmp_path, placement
) -> None:
    config = pipeline_config(
        kafka.bootstrap, topic_prefix, tmp_path / "state", query="Q() :- R(a,b)", relations="R", engine="auto",
        placement=placement, shards=2,
    )  # fmt: skip
    (relation,) = config.relations
    config = replace(config, relations=(replace(relation, window_seconds=WINDOW),))
    assert isinstance(config.relations[0], RelationConfig)
    topic = config.relations[0].topic
    create_topics(kafka.bootstrap, [topic])
    producer = UpdateProducer(kafka.bootstrap, CODECS, {"R": topic})
    for i in range(300):
        producer.send_raw(topic, *CODECS["R"].encode((i, i % 7), 1))
    producer.flush()
    job = start_job(config)
    query = config.queries[0]
    first = end_offsets(kafka.bootstrap, [topic])
    burst = read_until(kafka.bootstrap, query.result_topic, lambda rs: reflects(rs[-1], first), idle_timeout=120)
    assert int(burst[-1]["value"]) == 300
    time.sleep(WINDOW + 1.0)
    producer.send_raw(topic, *CODECS["R"].encode((1000, 1), 1))
    producer.flush()
    final = end_offsets(kafka.bootstrap, [topic])
    outputs = read_until(kafka.bootstrap, query.result_topic, lambda rs: reflects(rs[-1], final), idle_timeout=120)
    job.stop()
    assert [r["batch_id"] for r in outputs] == list(range(len(outputs)))
    assert int(outputs[-1]["value"]) == 1, "the first burst left the window"
    assert outputs[-1]["applied"] == 301, "one insert and 300 expirations, each counted once"
