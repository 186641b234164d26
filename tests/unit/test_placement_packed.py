"""Packed records (``encoding = "avro-packed"``) in the executors' placement, with the slices in this process.

A packed record carries updates of many tuples, which the routing (``ivm.processor.placement.routing``) sends to
different slices: the record goes to every slice holding one of its updates (``routes.Router``), and each
slice keeps exactly its own updates, reporting the dead letters of those it is the primary of
(``SlicePipeline._select_packed``).  The driver's pipeline over the same records is the oracle: results,
dead letters (offset and index), progress and counts must be the same, record for record.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from ivm.processor.codecs.avro import PackedCodec
from ivm.processor.config import PipelineConfig
from ivm.processor.pipeline import PackedUpdate, Pipeline, Record, RecordBatch
from ivm.processor.placement.driver import assemble
from ivm.processor.placement.routes import Router
from ivm.processor.placement.slices import SlicePipeline
from ivm.processor.placement.wire import decode, encode
from tests.unit.test_pipeline import MemorySink
from tests.unit.test_placement import CODECS, QUERIES, InProcess, _config, _outputs

PACKED = {name: PackedCodec(codec) for name, codec in CODECS.items()}


def _packed(config: PipelineConfig) -> PipelineConfig:
    return replace(config, relations=tuple(replace(r, encoding="avro-packed") for r in config.relations))


def _packed_stream(seed: int, batches: int, size: int, domain: int = 6) -> list[list[Record]]:
    """Random batches of packed records over R, S, T, U (1-12 updates each): inserts, deletes (some of
    absent tuples, refused alone), bad updates (multiplicity 0) between good ones, records that are not
    packed records at all, and redelivered records."""
    rng = random.Random(seed)
    offsets: dict[str, int] = {}
    held: dict[str, list[tuple]] = {t: [] for t in "RSTU"}
    out: list[list[Record]] = []
    previous: list[Record] = []
    for _ in range(batches):
        batch: list[Record] = []
        for _ in range(size):
            topic = rng.choice("RRSTU")
            offset = offsets.get(topic, 0)
            offsets[topic] = offset + 1
            if rng.random() < 0.04:
                batch.append(Record(topic, 0, offset, None, b"\x01bad", 1000 + offset))
                continue
            updates = []
            for _ in range(rng.randint(1, 12)):
                roll = rng.random()
                if roll < 0.03:
                    updates.append(((rng.randrange(domain), rng.randrange(domain)), 0))  # not an update
                elif roll < 0.3 and held[topic]:
                    updates.append((rng.choice(held[topic]), -rng.choice([1, 1, 2])))
                elif roll < 0.35:
                    updates.append(((rng.randrange(domain), rng.randrange(domain)), -1))  # often of an absent tuple
                else:
                    row = (rng.randrange(domain), rng.randrange(domain))
                    held[topic].append(row)
                    updates.append((row, rng.choice([1, 1, 1, 2])))
            value = PACKED["R" if topic == "U" else topic].encode_many(updates)
            batch.append(Record(topic, 0, offset, None, value, 1000 + offset))
        if previous and rng.random() < 0.5:
            batch += rng.sample(previous, min(3, len(previous)))  # redelivered: applied once
        previous = batch
        out.append(batch)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_packed_slices_publish_what_the_driver_publishes(seed: int) -> None:
    """Results, dead letters (each update once, by offset and index, in order), progress and counts: equal."""
    config = _packed(_config(4, **QUERIES))
    driver_sink = MemorySink()
    driver = Pipeline(config, driver_sink)
    placed = InProcess(config)
    spread = 0
    for records in _packed_stream(seed, batches=10, size=25):
        report = driver.process(records)
        routed = placed.router.split(RecordBatch.of(records), dict(placed.pipeline.positions))
        spread += sum(len(rows) for rows in routed.rows.values()) > len(records)
        placed.process(records)
        for name, view in placed.pipeline.views.items():
            assert view.result() == report.results[name], name
    dead = driver_sink.on("ivm.dead-letter")
    assert any(d["index"] is not None and d["index"] > 0 for d in dead), "dead letters inside packed records"
    assert any(d["index"] is None for d in dead), "a record that is not a packed record"
    assert any("absent tuple" in d["reason"] for d in dead) and any("multiplicity 0" in d["reason"] for d in dead)
    assert spread, "packed records should go to several slices"
    assert any(r["value"] not in ("0", "{}") for r in driver_sink.on("triangle.result"))
    assert _outputs(placed.sink) == _outputs(driver_sink)
    driver_consumed = driver.metrics.relation_consumed.labels("R")._value.get()
    assert driver_consumed > 0
    assert placed.pipeline.metrics.relation_consumed.labels("R")._value.get() == driver_consumed


def test_a_packed_record_goes_to_the_slices_of_its_updates_and_slice_zero_for_a_bad_one() -> None:
    config = _packed(_config(8, triangle=QUERIES["triangle"]))
    router = Router(config)
    rows = [(1, 2), (3, 4), (5, 1), (0, 7)]
    slices = [router.placement.slices_of("R", row) for row in rows]
    good = PACKED["R"].encode_many([(row, 1) for row in rows])
    bad = PACKED["R"].encode_many([((1, 2), 1), ((2, 2), 0)])
    batch = RecordBatch.of([Record("R", 0, 0, None, good), Record("R", 0, 1, None, bad), Record("R", 0, 2, None, b"x")])
    routed = router.split(batch, {})
    holders = {s for targets in slices for s in targets}
    assert len(holders) > 2
    assert {s for s, members in routed.rows.items() if 0 in members} == holders
    assert {s for s, members in routed.rows.items() if 1 in members} == {0, *slices[0]}
    assert [s for s, members in routed.rows.items() if 2 in members] == [0]
    assert not any(routed.quiet.values()), "a packed record is never quiet as a whole"
    (summary,) = routed.summaries
    assert (summary.records, summary.updates, summary.consumed) == (3, 7, 7)
    # the host's own reading (a lost piece, a rebuild's replay) routes a record the same way
    for i in range(3):
        record = batch.record(i)
        for index in range(8):
            assert SlicePipeline(config, index).holds(record) == (index in routed.rows and i in routed.rows[index])


def test_each_slice_keeps_its_own_updates_and_reports_those_it_is_primary_of() -> None:
    """A delete of an absent tuple replicated on two slices is refused by both, dead-lettered once; every
    update is applied by exactly the slices its tuple goes to."""
    config = _packed(_config(8, triangle=QUERIES["triangle"]))
    router = Router(config)
    rows = [(1, 2), (3, 4), (5, 1)]
    value = PACKED["R"].encode_many([(rows[0], 1), (rows[1], 1), ((9, 9), -1), (rows[2], 2)])
    record = Record("R", 0, 0, None, value)
    dead = []
    for index in range(8):
        pipeline = SlicePipeline(config, index)
        applied = pipeline._apply([record])
        held = pipeline.state.relations["R"]
        for row, mult in zip(rows, (1, 1, 2), strict=True):
            assert (index in router.placement.slices_of("R", row)) == (held.get(row) == mult), (index, row)
        dead += applied.dead
    assert len(router.placement.slices_of("R", (9, 9))) > 1
    assert [(d[0].offset, d[0].item, d[2]) for d in dead] == [(0, 2, "absent_delete")]
    (update,) = [d[0] for d in dead]
    assert decode(encode(update)) == update and isinstance(decode(encode(update)), PackedUpdate)


def test_assemble_counts_the_updates_of_packed_records() -> None:
    config = _packed(_config(2, triangle=QUERIES["triangle"]))
    placed = InProcess(config)
    value = PACKED["S"].encode_many([((1, 2), 1), ((2, 3), 1), ((3, 4), 1)])
    placed.process([Record("S", 0, 0, None, value)])
    routed = Router(config).split(RecordBatch.of([Record("S", 0, 0, None, value)]), {})
    applied = assemble(placed.pipeline, [], routed.summaries)
    assert applied.per_topic == {"S": 1} and applied.packed_extra == {"S": 2} and applied.accepted == {"S": 3}
