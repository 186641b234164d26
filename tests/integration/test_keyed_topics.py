"""Keyed relation topics against the real broker and Spark: upsert and Debezium pipelines (``codecs.formats``).

Every published result is checked against a recount of exactly the input prefix its offsets name: the
topics are read back, each record folded into "the last row per key; a tombstone or delete removes the
key" in offset order per partition (records of one key share a partition: the producers key them), and
the join counted by ``tests.oracles.count_answers``, which shares no code with the conversion.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

import ivm
from ivm.processor.codecs.formats import KeyedCodec
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig, dump_config
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.local.stack import ProcessorProcess
from ivm.processor.pipeline import relation_codecs
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import consume_raw, read_until
from tests.oracles import count_answers
from tests.unit.test_formats import CUSTOMERS, ORDERS, TOTAL

pytestmark = pytest.mark.integration

SCHEMA_OF = {"orders": ["id", "customer", "qty"], "customers": ["id", "region"]}


def shop_config(
    bootstrap: str, prefix: str, tmp_path: Path, orders: dict[str, Any], customers: dict[str, Any], **overrides: Any
) -> PipelineConfig:
    """The shop pipeline (a join count of orders with customers) with each relation's format options."""
    (tmp_path / "orders.avsc").write_text(json.dumps(ORDERS))
    (tmp_path / "customers.avsc").write_text(json.dumps(CUSTOMERS))
    settings: dict[str, Any] = {
        "bootstrap": bootstrap,
        "dead_letter_topic": f"{prefix}dead-letter",
        "relations": (
            RelationConfig("orders", f"{prefix}orders", tmp_path / "orders.avsc", **orders),
            RelationConfig("customers", f"{prefix}customers", tmp_path / "customers.avsc", **customers),
        ),
        "queries": (QueryConfig(f"{prefix}total", TOTAL, "auto"),),
        "trigger_ms": 100,
        "name": f"{prefix}pipe",
        "state_dir": str(tmp_path / "state"),
    }
    return PipelineConfig(**{**settings, **overrides})


def produce_keyed(bootstrap: str, codecs: dict[str, KeyedCodec], topics: dict[str, str], n: int, seed: int) -> None:
    """``n`` random records: rows for keys new and old, the same row again, deletes of present and absent keys;
    Debezium relations with a mix of c/r/u events (``before`` given or not) and d events with their tombstone."""
    rng = random.Random(seed)
    producer = UpdateProducer(bootstrap, codecs, topics)
    live: dict[str, dict[int, tuple]] = {r: {} for r in codecs}
    for _ in range(n):
        relation = rng.choice(sorted(codecs))
        codec = codecs[relation]
        k = rng.randrange(30)
        old = live[relation].get(k)
        topic = topics[relation]
        if rng.random() < 0.15:  # a delete (of an absent key now and then: a no-op)
            if codec.format == "upsert":
                producer.send_raw(topic, *codec.encode_upsert(None, (k,)))
            elif old is not None:
                producer.send_raw(topic, *codec.encode_debezium("d", old, None))
                producer.send_raw(topic, *codec.encode_tombstone((k,)))
            else:
                producer.send_raw(topic, *codec.encode_tombstone((k,)))
            live[relation].pop(k, None)
            continue
        if old is not None and rng.random() < 0.1:
            row = old  # the same row again
        elif relation == "orders":
            row = (k, rng.randrange(12), rng.randrange(4))
        else:
            row = (k % 12, rng.choice(["EU", "US", "APAC"]))
            k = k % 12
            old = live[relation].get(k)
        if codec.format == "upsert":
            producer.send_raw(topic, *codec.encode_upsert(row))
        else:
            op = "u" if old is not None else rng.choice("cr")
            before = old if op == "u" and rng.random() < 0.5 else None
            producer.send_raw(topic, *codec.encode_debezium(op, before, row, ts_ms=int(time.time() * 1000)))
        live[relation][k] = row
    producer.flush()


def check_against_recount(bootstrap: str, config: PipelineConfig, codecs: dict[str, KeyedCodec]) -> list[dict]:
    """Every result of the query equals the recount of the input prefix it reflects; returns the results."""
    topics = {codec.topic: relation for relation, codec in codecs.items()}
    final = end_offsets(bootstrap, list(topics))
    result_topic = config.queries[0].result_topic
    results = read_until(bootstrap, result_topic, lambda rs: reflects(rs[-1], final), idle_timeout=300)
    assert reflects(results[-1], final), "the last result does not reflect all input"
    changes: dict[tuple[str, int], list[tuple[int, Any]]] = {}
    for topic, relation in topics.items():
        for partition, offset, key, value in consume_raw(bootstrap, topic):
            decoded, errors = codecs[relation].decode_changes([key], [value])
            assert not errors, errors
            changes.setdefault((topic, partition), []).append((offset, decoded[0]))
    query = ivm.parse(TOTAL, SCHEMA_OF)
    assert len(results) >= 2, "expected several micro-batches"
    for result in results:
        positions = {(o["topic"], o["partition"]): o["offset"] for o in result["offsets"]}
        tables: dict[str, dict[tuple, tuple]] = {r: {} for r in codecs}
        for (topic, partition), records in changes.items():
            table = tables[topics[topic]]
            for offset, (key, row) in sorted(records, key=lambda c: c[0]):
                if offset >= positions.get((topic, partition), 0):
                    break
                if row is None:
                    table.pop(key, None)
                else:
                    table[key] = row
        db = {r: {row: 1 for row in table.values()} for r, table in tables.items()}
        expected = count_answers(query, db).get((), 0)
        assert json.loads(result["value"]) == expected, f"batch {result['batch_id']}"
    return results


@pytest.mark.parametrize("placement", ["driver", pytest.param("executors", marks=pytest.mark.slow)])
def test_upsert_pipeline_matches_a_recount(kafka, start_job, topic_prefix, tmp_path, placement: str) -> None:
    """Upsert topics of three partitions (Avro and JSON), produced while the job runs; under the executors'
    placement the query has two shards (two slices, each keeping the keyed relations whole)."""
    config = shop_config(
        kafka.bootstrap,
        topic_prefix,
        tmp_path,
        {"format": "upsert", "key": ("id",)},
        {"format": "upsert", "encoding": "json", "key": ("id",)},
        max_offsets_per_trigger=400,
        placement=placement,
        shards=2 if placement == "executors" else 1,
    )
    codecs, _schemas = relation_codecs(config)
    by_relation = {c.relation: c for c in codecs.values()}
    topics = {r: c.topic for r, c in by_relation.items()}
    create_topics(kafka.bootstrap, list(topics.values()), partitions=3)
    job = start_job(config)
    for chunk in range(3):
        produce_keyed(kafka.bootstrap, by_relation, topics, 600, seed=chunk)  # type: ignore[arg-type]
        time.sleep(0.5)
    check_against_recount(kafka.bootstrap, config, by_relation)  # type: ignore[arg-type]
    job.stop()
    assert sum(report.dead_letters for report in job.reports) == 0


def test_debezium_pipeline_json_and_avro_with_a_schema_change(
    kafka, schema_registry, start_job, topic_prefix, tmp_path
) -> None:
    """Debezium events as the JSON converter (orders) and the Avro converter through the registry (customers)
    write them; then a column added to the customers table upstream: its events are dead letters naming the
    new field, and the results stay the recount of the events applied."""
    config = shop_config(
        kafka.bootstrap,
        topic_prefix,
        tmp_path,
        {"format": "debezium", "encoding": "json", "key": ("id",)},
        {"format": "debezium", "encoding": "confluent", "key": ("id",)},
        schema_registry=schema_registry.url,
        max_offsets_per_trigger=400,
    )
    codecs, _schemas = relation_codecs(config)
    by_relation = {c.relation: c for c in codecs.values()}
    topics = {r: c.topic for r, c in by_relation.items()}
    create_topics(kafka.bootstrap, list(topics.values()), partitions=2)
    job = start_job(config)
    produce_keyed(kafka.bootstrap, by_relation, topics, 800, seed=7)  # type: ignore[arg-type]
    results = check_against_recount(kafka.bootstrap, config, by_relation)  # type: ignore[arg-type]

    # the source table gains a column: Debezium registers the new envelope and writes with it
    evolved = {**CUSTOMERS, "fields": [*CUSTOMERS["fields"], {"name": "email", "type": ["null", "string"],
                                                              "default": None}]}  # fmt: skip
    newer = KeyedCodec(evolved, ["id"], "debezium", "confluent", "customers", topics["customers"],
                       by_relation["customers"].registry)  # fmt: skip
    producer = UpdateProducer(kafka.bootstrap, {}, {})
    producer.send_raw(topics["customers"], *newer.encode_debezium("c", None, (99, "EU", "a@example.com")))
    producer.flush()
    dead = read_until(kafka.bootstrap, config.dead_letter_topic, lambda rs: len(rs) >= 1, idle_timeout=120)
    job.stop()
    assert len(dead) == 1
    assert dead[0]["topic"] == topics["customers"]
    assert dead[0]["reason"].startswith(
        "schema change in the source of relation customers: field 'email' is not an attribute of relation customers"
    )
    assert len(results) >= 2


@pytest.mark.slow
def test_upsert_exactly_once_across_kill_dash_nine(kafka, topic_prefix, tmp_path) -> None:
    """``ivm run`` killed with SIGKILL twice mid-stream over upsert topics: the restarted runs recover the
    relations' contents with the positions (snapshot + replay), so every key's old row is known; the results
    are the recount of their prefixes, batch ids 0, 1, 2, ... without a gap or a repeat."""
    config = shop_config(
        kafka.bootstrap,
        topic_prefix,
        tmp_path,
        {"format": "upsert", "key": ("id",)},
        {"format": "upsert", "key": ("id",)},
        max_offsets_per_trigger=300,
        snapshot_every=3,
        trigger_ms=50,
    )
    config_path = tmp_path / "shop.toml"
    config_path.write_text(dump_config(config))
    codecs, _schemas = relation_codecs(config)
    by_relation = {c.relation: c for c in codecs.values()}
    topics = {r: c.topic for r, c in by_relation.items()}
    create_topics(kafka.bootstrap, list(topics.values()), partitions=2)
    produce_keyed(kafka.bootstrap, by_relation, topics, 6000, seed=3)  # type: ignore[arg-type]
    at_kill = []
    for i in range(2):
        proc = ProcessorProcess(config_path, kafka.bootstrap, tmp_path / f"processor-{i}.log", metrics_port=0)
        deadline = time.monotonic() + 180
        while proc.batches_logged() < 2 + i and proc.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.alive(), proc.tail()
        proc.stop(kill=True)
        committed = read_committed_progress(kafka.bootstrap, config.progress_topic)
        at_kill.append(committed["batch_id"] if committed else -1)
    proc = ProcessorProcess(config_path, kafka.bootstrap, tmp_path / "processor-final.log", metrics_port=0)
    try:
        results = check_against_recount(kafka.bootstrap, config, by_relation)  # type: ignore[arg-type]
    finally:
        proc.stop()
    assert [r["batch_id"] for r in results] == list(range(len(results))), "a batch is missing or duplicated"
    assert 0 <= at_kill[0] < results[-1]["batch_id"], f"the kills did not land mid-stream: {at_kill}"
    assert "recovered in" in (tmp_path / "processor-final.log").read_text()
