"""Bulk bootstrap from CSV and Parquet with Spark, then streaming from the topics' current offsets."""

from __future__ import annotations

import random

import pytest

from ivm.processor.bootstrap import BootstrapError, bootstrap
from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.query import parse
from tests.integration.helpers import TRIANGLE, pipeline_config, read_until
from tests.oracles import apply_stream, count

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()


def test_bootstrap_then_stream(kafka, spark, start_job, topic_prefix, tmp_path) -> None:
    rng = random.Random(4)
    bulk = {rel: sorted({(rng.randrange(15), rng.randrange(15)) for _ in range(120)}) for rel in "RST"}
    files = {}
    for rel, rows in bulk.items():
        a, b = CODECS[rel].attributes
        path = tmp_path / f"{rel}.csv"
        path.write_text(f"{a},{b}\n" + "".join(f"{x},{y}\n" for x, y in rows))
        files[rel] = path
    # T as Parquet, written by Spark
    a, b = CODECS["T"].attributes
    spark.createDataFrame(bulk["T"], [a, b]).write.parquet(str(tmp_path / "T.parquet"))
    files["T"] = tmp_path / "T.parquet"

    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state", engine="ivm_eps")
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    create_topics(kafka.bootstrap, list(topics.values()))
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    # updates already in the topics before the bootstrap are not part of the initial database
    for rel in "RST":
        producer.send_raw(topics[rel], *CODECS[rel].encode((0, 0), 5))
    producer.flush()

    results = bootstrap(config, files, spark=spark, progress=False)
    stream = [(rel, row, 1) for rel, rows in bulk.items() for row in rows]
    db, _ = apply_stream(stream)
    assert results[config.queries[0].name] == count(parse(TRIANGLE), db)
    with pytest.raises(BootstrapError, match="committed batches already"):
        bootstrap(config, files, spark=spark, progress=False)

    later = []
    for _ in range(300):
        rel = rng.choice("RST")
        row = (rng.randrange(15), rng.randrange(15))
        mult = -1 if db[rel].get(row, 0) > 0 and rng.random() < 0.4 else 1
        db[rel][row] = db[rel].get(row, 0) + mult
        if not db[rel][row]:
            del db[rel][row]
        later.append((rel, row, mult))
        producer.send_raw(topics[rel], *CODECS[rel].encode(row, mult))
    producer.flush()
    job = start_job(config)
    final = end_offsets(kafka.bootstrap, list(topics.values()))
    outputs = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    job.stop()
    assert outputs[0]["batch_id"] == 0 and outputs[0]["engine"] == "ivm_eps"
    assert [r["batch_id"] for r in outputs] == list(range(len(outputs)))
    assert int(outputs[-1]["value"]) == count(parse(TRIANGLE), db)
