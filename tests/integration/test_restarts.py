"""Restarts over old state, on the real broker and Spark: a changed query, an added one, a removed one,
a bootstrap whose tuples are in no topic, and a retention gap.

The oracle is recomputed from what the relation topics hold (read back from Kafka) plus the bootstrap
files: every query's published result must be the query over all of it, whenever the query was added
or changed.  Where the history is gone, the processor must refuse to start and say how to fix it.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from ivm.processor.bootstrap import bootstrap
from ivm.processor.cli import main
from ivm.processor.codecs.avro import load_relation_codecs, schemas_dir
from ivm.processor.config import QueryConfig, RelationConfig, dump_config
from ivm.processor.job import prepare
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets, watermarks
from ivm.processor.operations.metrics import Metrics
from ivm.processor.state.recovery import RecoveryError
from ivm.query import parse
from tests.integration.helpers import TRIANGLE, consume_raw, pipeline_config, read_until
from tests.oracles import count

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()
TWO_PATH = "Q() :- R(a,b), S(b,c)"


def _edges(rng: random.Random, n: int) -> list[tuple[str, tuple[int, int]]]:
    return [(rng.choice("RST"), (rng.randrange(12), rng.randrange(12))) for _ in range(n)]


def _config(kafka, prefix: str, state: Path, queries: dict[str, str], **overrides):
    base = pipeline_config(kafka.bootstrap, prefix, state, **{"snapshot_every": 1, **overrides})
    relations = tuple(
        RelationConfig(r, f"{prefix}{r}", schemas_dir() / "relations" / f"{r}.avsc") for r in "RST"
    )  # absolute: the TOML written for `ivm reset` reads them back as they are
    return replace(base, relations=relations, queries=tuple(QueryConfig(n, q) for n, q in queries.items()))


def _topic_database(kafka, prefix: str, extra=()) -> dict[str, dict[tuple, int]]:
    """The relations as the topics hold them (each message decoded, multiplicities summed), plus ``extra``."""
    db: dict[str, dict[tuple, int]] = {r: {} for r in "RST"}
    for rel, row in extra:
        db[rel][row] = db[rel].get(row, 0) + 1
    for rel in "RST":
        for _p, _o, _k, value in consume_raw(kafka.bootstrap, f"{prefix}{rel}"):
            row, mult = CODECS[rel].decode(value)
            db[rel][row] = db[rel].get(row, 0) + mult
            if not db[rel][row]:
                del db[rel][row]
    return db


def _csv_files(folder, loaded) -> dict:
    """Bootstrap files: one CSV per relation with a header naming its attributes."""
    files = {}
    for rel in "RST":
        a, b = CODECS[rel].attributes
        path = folder / f"{rel}.csv"
        path.write_text(f"{a},{b}\n" + "".join(f"{x},{y}\n" for r, (x, y) in loaded if r == rel))
        files[rel] = path
    return files


def _produce(kafka, prefix: str, edges) -> None:
    producer = UpdateProducer(kafka.bootstrap, CODECS, {r: f"{prefix}{r}" for r in "RST"})
    for rel, row in edges:
        producer.send_raw(f"{prefix}{rel}", *CODECS[rel].encode(row, 1))
    producer.flush()


def _run_until_caught_up(kafka, start_job, config) -> dict[str, int]:
    """Run the job until every query's result reflects the topics' ends; the last value per query."""
    job = start_job(config)
    final = end_offsets(kafka.bootstrap, [r.topic for r in config.relations])
    values = {}
    for q in config.queries:
        records = read_until(kafka.bootstrap, q.result_topic, lambda rs: reflects(rs[-1], final))
        assert reflects(records[-1], final), f"{q.name} did not catch up"
        values[q.name] = int(records[-1]["value"])
    job.stop()
    return values


def test_changed_added_and_removed_queries_after_a_bootstrap(kafka, spark, start_job, topic_prefix, tmp_path) -> None:
    rng = random.Random(21)
    loaded = sorted(set(_edges(rng, 150)))
    files = _csv_files(tmp_path, loaded)
    create_topics(kafka.bootstrap, [f"{topic_prefix}{r}" for r in "RST"])
    first = _config(kafka, topic_prefix, tmp_path / "state", {"tri": TRIANGLE, "path": TWO_PATH})
    bootstrap(first, files, spark=spark, progress=False)
    _produce(kafka, topic_prefix, _edges(rng, 150))
    values = _run_until_caught_up(kafka, start_job, first)
    db = _topic_database(kafka, topic_prefix, loaded)
    assert values == {"tri": count(parse(TRIANGLE), db), "path": count(parse(TWO_PATH), db)}

    # the same names, one query changed, one removed, one added; a third of the data after the change
    second = _config(kafka, topic_prefix, tmp_path / "state", {"tri": TWO_PATH, "new": TRIANGLE})
    _produce(kafka, topic_prefix, _edges(rng, 150))
    values = _run_until_caught_up(kafka, start_job, second)
    db = _topic_database(kafka, topic_prefix, loaded)
    assert count(parse(TRIANGLE), db) > 0
    assert values == {"tri": count(parse(TWO_PATH), db), "new": count(parse(TRIANGLE), db)}

    # a deliberate reset of one query: rebuilt from the relations' contents, same value
    toml = tmp_path / "pipeline.toml"
    toml.write_text(dump_config(second))
    assert main(["reset", "new", "-c", str(toml), "--yes"]) == 0
    _produce(kafka, topic_prefix, _edges(rng, 30))
    values = _run_until_caught_up(kafka, start_job, second)
    db = _topic_database(kafka, topic_prefix, loaded)
    assert values == {"tri": count(parse(TWO_PATH), db), "new": count(parse(TRIANGLE), db)}


def test_bootstrap_without_its_snapshot_refuses_to_start(kafka, spark, topic_prefix, tmp_path) -> None:
    rng = random.Random(22)
    loaded = sorted(set(_edges(rng, 60)))
    files = _csv_files(tmp_path, loaded)
    create_topics(kafka.bootstrap, [f"{topic_prefix}{r}" for r in "RST"])
    config = _config(kafka, topic_prefix, tmp_path / "state", {"tri": TRIANGLE})
    bootstrap(config, files, spark=spark, progress=False)
    for snapshot in (tmp_path / "state").glob("snapshot-*.pkl"):
        snapshot.unlink()
    with pytest.raises(RecoveryError, match=r"bulk bootstrap.*ivm reset -c CONFIG --yes"):
        prepare(config, Metrics())


def test_retention_gap_refuses_to_start_then_reset_starts_over(kafka, start_job, topic_prefix, tmp_path) -> None:
    """No snapshot (snapshot_every = 0) and the first R records deleted (as retention does): the state
    cannot be rebuilt from the topics, so the processor refuses; after `ivm reset` it starts over from
    what the topics hold."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    rng = random.Random(23)
    config = _config(kafka, topic_prefix, tmp_path / "state", {"tri": TRIANGLE}, snapshot_every=0)
    create_topics(kafka.bootstrap, [r.topic for r in config.relations])
    _produce(kafka, topic_prefix, _edges(rng, 300))
    _run_until_caught_up(kafka, start_job, config)
    assert not list((tmp_path / "state").glob("snapshot-*.pkl"))

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.delete_records([TopicPartition(f"{topic_prefix}R", 0, 20)]).values():
        future.result()
    assert watermarks(kafka.bootstrap, [f"{topic_prefix}R"])[(f"{topic_prefix}R", 0)][0] == 20
    with pytest.raises(RecoveryError, match=r"R\[0\] starts at offset 20.*ivm reset -c CONFIG --yes"):
        prepare(config, Metrics())

    toml = tmp_path / "pipeline.toml"
    toml.write_text(dump_config(config))
    assert main(["reset", "-c", str(toml), "--yes"]) == 0
    _produce(kafka, topic_prefix, _edges(rng, 30))  # results of the new start reflect offsets the old ones never did
    values = _run_until_caught_up(kafka, start_job, config)
    held = {}
    for rel in "RST":  # what the topics still hold: R from offset 20 on
        rows = []
        for _p, offset, _k, value in consume_raw(kafka.bootstrap, f"{topic_prefix}{rel}"):
            rows.append((offset, CODECS[rel].decode(value)))
        held[rel] = rows
    assert min(o for o, _ in held["R"]) == 20
    db = {rel: {} for rel in "RST"}
    for rel, rows in held.items():
        for _o, (row, mult) in rows:
            db[rel][row] = db[rel].get(row, 0) + mult
    assert values == {"tri": count(parse(TRIANGLE), db)}


def test_replay_fails_loudly_when_retention_deletes_inputs_after_the_check(kafka, topic_prefix, tmp_path) -> None:
    """Retention can delete the offsets a replay needs after :func:`missing_history` looked (a start that
    races the log cleaner).  The replay's own consumer then meets an offset out of range: it must fail,
    naming the partition and offset, instead of jumping to the end and marking the gap as applied (what a
    consumer without ``auto.offset.reset = error`` does)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from ivm.processor.pipeline import Pipeline
    from ivm.processor.state import recovery
    from tests.unit.test_pipeline import MemorySink

    config = _config(kafka, topic_prefix, tmp_path / "state", {"tri": TRIANGLE})
    create_topics(kafka.bootstrap, [r.topic for r in config.relations])
    _produce(kafka, topic_prefix, _edges(random.Random(5), 300))
    end = end_offsets(kafka.bootstrap, [r.topic for r in config.relations])
    pipeline = Pipeline(config, MemorySink(), Metrics())
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.delete_records([TopicPartition(f"{topic_prefix}R", 0, 20)]).values():
        future.result()
    checked = recovery.missing_history
    try:
        recovery.missing_history = lambda *_: []  # the check ran before retention deleted the records
        with pytest.raises(RecoveryError, match=rf"{topic_prefix}R\[0\] no longer holds offset 0.*ivm reset"):
            recovery.replay(pipeline, kafka.bootstrap, end)
    finally:
        recovery.missing_history = checked
    assert pipeline.positions.get((f"{topic_prefix}R", 0), 0) == 0, "the gap was marked as applied"
    # and with the check in place the same start is refused before anything is read
    with pytest.raises(RecoveryError, match=r"R\[0\] starts at offset 20"):
        recovery.replay(pipeline, kafka.bootstrap, end)


def test_progress_is_read_from_the_first_offset_still_held(kafka, topic_prefix) -> None:
    """A progress topic whose first records were deleted is read from its low watermark: the last
    committed batch is found, never mistaken for a new pipeline (a reset to the end would read nothing)."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from ivm.processor.codecs.avro import OutputCodec
    from ivm.processor.state.recovery import read_committed_progress

    topic = f"{topic_prefix}progress"
    create_topics(kafka.bootstrap, [topic])
    codec = OutputCodec("progress")
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for batch in range(10):
        record = {
            "pipeline": "p", "batch_id": batch, "offsets": [], "timestamp_ms": 0, "origin": [], "bootstrapped": False
        }  # fmt: skip
        producer.produce(topic, codec.encode(record))
    producer.flush()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 6)]).values():
        future.result()
    assert read_committed_progress(kafka.bootstrap, topic)["batch_id"] == 9
