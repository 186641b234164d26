"""The pipeline on Confluent wire-format topics with the real Schema Registry.

Good updates (including ones written with an evolved writer schema) are
applied; messages with an unknown schema id or without the magic byte go to the
dead-letter topic with the reason.
"""

from __future__ import annotations

import dataclasses

import pytest

from ivm.processor.codecs.avro import load_schema, schemas_dir
from ivm.processor.codecs.confluent import RegistryClient, WireCodec, frame
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from tests.integration.helpers import pipeline_config, read_until

pytestmark = pytest.mark.integration


def test_confluent_topics(kafka, schema_registry, start_job, topic_prefix, tmp_path) -> None:
    base = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path, schema_registry=schema_registry.url)
    config = dataclasses.replace(
        base, relations=tuple(dataclasses.replace(r, encoding="confluent") for r in base.relations)
    )
    topics = {r.name: r.topic for r in config.relations}
    create_topics(kafka.bootstrap, list(topics.values()))
    registry = RegistryClient(schema_registry.url)
    codecs = {rel: WireCodec.for_relation(rel, registry, topics[rel]) for rel in "RST"}
    producer = UpdateProducer(kafka.bootstrap, codecs, topics)
    for rel, row in [("R", (1, 2)), ("S", (2, 3)), ("T", (3, 1)), ("R", (4, 2))]:
        producer.send_raw(topics[rel], *codecs[rel].encode(row, 1))
    # an evolved writer schema for T: an extra field with a default
    evolved = load_schema(schemas_dir() / "relations" / "T.avsc")
    evolved["fields"].append({"name": "note", "type": "string", "default": ""})
    evolved_codec = WireCodec(evolved, registry, topics["T"])
    key, value = evolved_codec.encode((3, 4, "written by a newer producer"), 1)
    producer.send_raw(topics["T"], key, value)
    producer.send_raw(topics["S"], b"k", frame(987654, b"\x02\x04\x02"))  # unknown schema id
    producer.send_raw(topics["S"], b"k", b"\x02\x04\x02")  # plain Avro on a wire-format topic
    producer.flush()
    job = start_job(config)
    final = end_offsets(kafka.bootstrap, list(topics.values()))
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    dead = read_until(kafka.bootstrap, config.dead_letter_topic, lambda rs: len(rs) >= 2)
    job.stop()
    assert int(results[-1]["value"]) == 2  # triangles (1,2,3) and (4,2,3) via the evolved T(3,4)
    assert sorted(d["offset"] for d in dead) == [1, 2]
    reasons = " | ".join(d["reason"] for d in dead)
    assert "987654" in reasons and "magic" in reasons.lower()
