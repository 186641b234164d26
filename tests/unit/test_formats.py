"""Keyed relation topics (``ivm/processor/codecs/formats.py``): upsert and Debezium records turned into -old +new.

Every stream here is checked against a recount that shares no code with the conversion: the table a
keyed topic describes is "the last row per key, a tombstone or delete removes the key", folded in plain
Python, and the query counted over it by ``tests.oracles.count_answers``.
"""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path
from typing import Any

import pytest

import ivm
from ivm.processor.codecs.avro import OutputCodec
from ivm.processor.codecs.formats import KeyedCodec, KeyIndex, with_mult
from ivm.processor.config import ConfigError, load_config
from ivm.processor.pipeline import Pipeline, Record
from tests.oracles import count_answers
from tests.seeds import stable_seed
from tests.unit.test_pipeline import MemorySink

ORDERS = {
    "type": "record",
    "name": "orders",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "long"}, {"name": "qty", "type": "long"}],
}
CUSTOMERS = {
    "type": "record",
    "name": "customers",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": "string"}],
}
CUSTOMERS_UPSERT = 'format = "upsert"\nencoding = "json"\nkey = ["id"]'
GROUPED = "Q(r) :- orders(o, c, q), customers(c, r)"
TOTAL = "Q() :- orders(o, c, q), customers(c, r)"


def write_config(tmp_path: Path, orders: str, customers: str, extra: str = "") -> Path:
    """A pipeline over ``orders`` and ``customers`` with the relation options given (TOML lines)."""
    (tmp_path / "orders.avsc").write_text(json.dumps(ORDERS))
    (tmp_path / "customers.avsc").write_text(json.dumps(CUSTOMERS))
    path = tmp_path / "shop.toml"
    path.write_text(
        f"""
[processor]
name = "shop"
[[relations]]
name = "orders"
schema = "orders.avsc"
{orders}
[[relations]]
name = "customers"
schema = "customers.avsc"
{customers}
[[queries]]
name = "by_region"
query = "{GROUPED}"
[[queries]]
name = "total"
query = "{TOTAL}"
{extra}
"""
    )
    return path


def upsert_pipeline(tmp_path: Path) -> Pipeline:
    path = write_config(tmp_path, 'format = "upsert"\nkey = ["id"]', CUSTOMERS_UPSERT)
    return Pipeline(load_config(path), MemorySink())


def recount(tables: dict[str, dict[tuple, tuple]], query: str) -> dict[tuple, int]:
    """The query over the keyed tables (key -> row), each row once: the oracle."""
    db = {name: {row: 1 for row in table.values()} for name, table in tables.items()}
    return count_answers(ivm.parse(query, {"orders": ["id", "customer", "qty"], "customers": ["id", "region"]}), db)


def dead_reasons(pipeline: Pipeline) -> list[tuple[str, int, str]]:
    sink: Any = pipeline.sink
    return [(d["topic"], d["offset"], d["reason"]) for d in sink.on(pipeline.config.dead_letter_topic)]


# ---------------------------------------------------------------- the conversion


def test_key_index_turns_rows_into_minus_old_plus_new_in_order() -> None:
    contents: dict[tuple, int] = {(1, 10, 5): 1}
    index = KeyIndex("orders", (0,), contents)
    changes = [
        ((1,), (1, 10, 5)),  # the same row again: no change
        ((1,), (1, 10, 7)),  # a new row for key 1: -old +new
        ((2,), None),  # a tombstone of an absent key: no-op
        ((2,), (2, 11, 1)),  # an insert
        ((1,), (1, 12, 7)),  # key 1 again in the same batch: against the row just written
        ((2,), None),  # delete key 2
        None,  # a refused record (its index is in errors)
    ]
    rows, mults, source = index.convert(changes, {6: "bad"})
    assert list(zip(rows, mults, source, strict=True)) == [
        ((1, 10, 5), -1, 1),
        ((1, 10, 7), 1, 1),
        ((2, 11, 1), 1, 3),
        ((1, 10, 7), -1, 4),
        ((1, 12, 7), 1, 4),
        ((2, 11, 1), -1, 5),
    ]
    assert index.rows == {(1,): (1, 12, 7)}


def test_key_index_refuses_contents_that_are_not_a_keyed_table() -> None:
    with pytest.raises(ValueError, match="second row for key"):
        KeyIndex("orders", (0,), {(1, 10, 5): 1, (1, 11, 5): 1})
    with pytest.raises(ValueError, match="multiplicity 2"):
        KeyIndex("orders", (0,), {(1, 10, 5): 2})


# ---------------------------------------------------------------- codecs


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_upsert_codec_round_trip_and_refusals(encoding: str) -> None:
    codec = KeyedCodec(ORDERS, ["id"], "upsert", encoding)
    key, value = codec.encode_upsert((1, 10, 5))
    tomb_key, tomb = codec.encode_upsert(None, (3,))
    other_key, _ = codec.encode_upsert((2, 10, 5))
    changes, errors = codec.decode_changes(
        [key, tomb_key, other_key, None, key], [value, tomb, value, value, b"\x01garbage"]
    )
    assert changes[:2] == [((1,), (1, 10, 5)), ((3,), None)]
    assert changes[2:] == [None, None, None]
    assert "record key {'id': 2}" in errors[2] and "differs from its row's key attributes {'id': 1}" in errors[2]
    assert "record without a key" in errors[3]
    assert "malformed" in errors[4]


def test_upsert_json_rows_are_checked_field_by_field() -> None:
    codec = KeyedCodec(ORDERS, ["id"], "upsert", "json")
    key = json.dumps({"id": 1}).encode()
    values = [
        {"id": 1, "customer": 10},  # a missing attribute
        {"id": 1, "customer": 10, "qty": 5, "note": "x"},  # an attribute the relation does not have
        {"id": 1, "customer": "10", "qty": 5},  # a string for a long
        {"id": 1, "customer": 10, "qty": True},  # a boolean is not a long
        {"id": 1, "customer": 10, "qty": 2**63},  # beyond a long
        {"schema": {"type": "struct"}, "payload": {"id": 1, "customer": 10, "qty": 5}},  # the Connect wrapper
    ]
    changes, errors = codec.decode_changes([key] * len(values), [json.dumps(v).encode() for v in values])
    assert "field 'qty' is missing" in errors[0]
    assert "field 'note' is not an attribute of relation orders" in errors[1]
    assert "field 'customer' is a string '10', its type is \"long\"" in errors[2]
    assert "field 'qty' is a boolean" in errors[3]
    assert "field 'qty' is 9223372036854775808, out of range of an Avro long" in errors[4]
    assert changes[5] == ((1,), (1, 10, 5)) and 5 not in errors


def debezium_json(op: str, before: dict | None, after: dict | None, wrapped: bool = False) -> bytes:
    """A change event as Debezium's JSON converter writes it (``wrapped``: ``schemas.enable=true``)."""
    payload = {
        "before": before,
        "after": after,
        "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "shop", "db": "shop",
                   "schema": "public", "table": "customers", "snapshot": "false", "lsn": 1, "ts_ms": 1},
        "op": op,
        "ts_ms": 2,
        "transaction": None,
    }  # fmt: skip
    if wrapped:
        return json.dumps({"schema": {"type": "struct", "name": "shop.public.customers.Envelope"},
                           "payload": payload}).encode()  # fmt: skip
    return json.dumps(payload).encode()


@pytest.mark.parametrize("wrapped", [False, True])
def test_debezium_json_events(wrapped: bool) -> None:
    codec = KeyedCodec(CUSTOMERS, ["id"], "debezium", "json")

    def key(i: int) -> bytes:
        document: Any = {"id": i}
        return json.dumps({"schema": {}, "payload": document} if wrapped else document).encode()

    events = [
        (key(1), debezium_json("r", None, {"id": 1, "region": "EU"}, wrapped)),  # snapshot
        (key(2), debezium_json("c", None, {"id": 2, "region": "US"}, wrapped)),  # insert
        (key(1), debezium_json("u", None, {"id": 1, "region": "APAC"}, wrapped)),  # REPLICA IDENTITY DEFAULT
        (key(2), debezium_json("u", {"id": 2, "region": "US"}, {"id": 2, "region": "EU"}, wrapped)),
        (key(2), debezium_json("d", {"id": 2, "region": None}, None, wrapped)),  # a delete: the key in before
        (key(2), None),  # the tombstone after it
        (key(3), debezium_json("c", None, {"id": 3, "region": "EU", "email": "a@b"}, wrapped)),  # a new column
        (key(3), debezium_json("c", None, {"id": 3}, wrapped)),  # a dropped column
        (key(1), debezium_json("t", None, None, wrapped)),  # a truncate
        (key(4), debezium_json("d", {"id": 5, "region": None}, None, wrapped)),  # before's key is not the key
        (key(1), json.dumps({"id": 1, "region": "EU"}).encode()),  # an unwrapped row: not an event
    ]
    changes, errors = codec.decode_changes([k for k, _ in events], [v for _, v in events])
    assert changes[:6] == [
        ((1,), (1, "EU")),
        ((2,), (2, "US")),
        ((1,), (1, "APAC")),
        ((2,), (2, "EU")),
        ((2,), None),
        ((2,), None),
    ]
    assert sorted(errors) == [6, 7, 8, 9, 10]
    assert errors[6].startswith("schema change in the source of relation customers: field 'email' is not an attribute")
    assert "field 'region' is missing" in errors[7] and errors[7].startswith("schema change")
    assert "op 't' (a truncate)" in errors[8]
    assert "differs from the deleted row's key {'id': 5}" in errors[9]
    assert "no 'op' field" in errors[10] and 'format = "upsert"' in errors[10]


def test_debezium_encoder_writes_what_the_decoder_reads() -> None:
    codec = KeyedCodec(CUSTOMERS, ["id"], "debezium", "json")
    records = [
        codec.encode_debezium("r", None, (1, "EU")),
        codec.encode_debezium("u", (1, "EU"), (1, "US"), with_schema=True),
        codec.encode_debezium("d", (1, "US"), None),
        codec.encode_tombstone((1,)),
    ]
    changes, errors = codec.decode_changes([k for k, _ in records], [v for _, v in records])
    assert not errors
    assert changes == [((1,), (1, "EU")), ((1,), (1, "US")), ((1,), None), ((1,), None)]
    assert json.loads(records[1][1])["schema"]["fields"][0]["fields"][1] == {
        "type": "string",
        "optional": False,
        "field": "region",
    }


# ---------------------------------------------------------------- the pipeline against a recount


def test_upsert_pipeline_matches_a_recount_batch_after_batch(tmp_path: Path) -> None:
    """Random upserts, repeats and tombstones (absent keys too) over two partitions per topic, keyed by the
    record key as Kafka's partitioner would, in batches of several records per key; after every batch the
    results are the recount's, and nothing is dead-lettered."""
    pipeline = upsert_pipeline(tmp_path)
    orders = pipeline.codecs["orders"]
    customers = pipeline.codecs["customers"]
    rng = random.Random(stable_seed("upsert-recount"))
    tables: dict[str, dict[tuple, tuple]] = {"orders": {}, "customers": {}}
    offsets = {("orders", 0): 0, ("orders", 1): 0, ("customers", 0): 0, ("customers", 1): 0}
    regions = ["EU", "US", "APAC"]
    for batch_id in range(12):
        batch = []
        for _ in range(60):
            relation = rng.choice(["orders", "customers"])
            codec = orders if relation == "orders" else customers
            k = rng.randrange(8)
            if rng.random() < 0.2:
                key, value = codec.encode_upsert(None, (k,))
                tables[relation].pop((k,), None)
            else:
                if relation == "orders":
                    row: tuple = (k, rng.randrange(6), rng.randrange(3))
                else:
                    row = (k, rng.choice(regions))
                key, value = codec.encode_upsert(row)
                tables[relation][(k,)] = row
            tp = (relation, k % 2)
            batch.append(Record(relation, tp[1], offsets[tp], key, value))
            offsets[tp] += 1
        rng.shuffle(batch)  # the pipeline puts each partition in offset order
        report = pipeline.process(batch, batch_id)
        assert report.dead_letters == 0
        assert report.results["total"] == recount(tables, TOTAL).get((), 0)
        assert {k: v for k, v in report.results["by_region"].items() if v} == recount(tables, GROUPED)
        assert pipeline.state.relations["orders"] == {row: 1 for row in tables["orders"].values()}


def test_upsert_dead_letters_and_no_ops(tmp_path: Path) -> None:
    pipeline = upsert_pipeline(tmp_path)
    orders = pipeline.codecs["orders"]
    key1, row1 = orders.encode_upsert((1, 10, 5))
    key2, _ = orders.encode_upsert((2, 10, 5))
    batch = [
        Record("orders", 0, 0, key1, row1),
        Record("orders", 0, 1, key1, row1),  # the same row: no change
        Record("orders", 0, 2, *orders.encode_upsert(None, (7,))),  # tombstone of an absent key: no-op
        Record("orders", 0, 3, key2, row1),  # record key 2, row key 1: refused
        Record("orders", 0, 4, None, row1),  # no record key: refused
        Record("customers", 0, 0, b'{"id": 10}', b'{"id": 10, "region": "EU", "vip": true}'),  # a new field
        Record("customers", 0, 1, b'{"id": 10}', b'{"id": 10, "region": "EU"}'),
    ]
    report = pipeline.process(batch, 0)
    assert report.results["total"] == 1
    assert report.applied["total"] == 4  # records applied (no-ops included), as the executors' placement counts
    reasons = dead_reasons(pipeline)
    assert [(t, o) for t, o, _ in reasons] == [("customers", 0), ("orders", 3), ("orders", 4)]
    assert "field 'vip' is not an attribute of relation customers" in reasons[0][2]
    assert "differs from its row's key attributes" in reasons[1][2]
    assert "record without a key" in reasons[2][2]
    consumed = pipeline.metrics.relation_consumed.labels("orders")._value.get()
    applied = pipeline.metrics.relation_applied.labels("orders")._value.get()
    dead = pipeline.metrics.relation_dead_lettered.labels("orders")._value.get()
    assert (consumed, applied, dead) == (5, 3, 2)  # records: consumed = applied + dead-lettered


def test_debezium_pipeline_matches_a_recount(tmp_path: Path) -> None:
    """Debezium events (snapshot, inserts, updates with and without ``before``, deletes, tombstones, and
    events re-sent as a restarted connector does) for customers, upserts for orders."""
    path = write_config(
        tmp_path, 'format = "upsert"\nkey = ["id"]', 'format = "debezium"\nencoding = "json"\nkey = ["id"]'
    )
    pipeline = Pipeline(load_config(path), MemorySink())
    orders, customers = pipeline.codecs["orders"], pipeline.codecs["customers"]
    rng = random.Random(stable_seed("debezium-recount"))
    tables: dict[str, dict[tuple, tuple]] = {"orders": {}, "customers": {}}
    offset = {"orders": 0, "customers": 0}
    sent: list[tuple[bytes, bytes | None]] = []
    for batch_id in range(10):
        batch = []
        for _ in range(50):
            k = rng.randrange(6)
            if rng.random() < 0.4:
                row = (k, rng.randrange(6), rng.randrange(3))
                key, value = orders.encode_upsert(row)
                tables["orders"][(k,)] = row
                relation = "orders"
            else:
                relation = "customers"
                old = tables["customers"].get((k,))
                if sent and rng.random() < 0.1:  # at least once: an earlier event again
                    key, value = rng.choice(sent)
                    changes, _ = customers.decode_changes([key], [value])
                    ck, crow = changes[0]  # type: ignore[misc]
                    if crow is None:
                        tables["customers"].pop(ck, None)
                    else:
                        tables["customers"][ck] = crow
                elif old is not None and rng.random() < 0.3:
                    key, value = customers.encode_debezium("d", old, None)
                    tables["customers"].pop((k,))
                    sent.append((key, value))
                    batch.append(Record("customers", 0, offset["customers"], key, value))
                    offset["customers"] += 1
                    key, value = customers.encode_tombstone((k,))
                else:
                    row = (k, rng.choice(["EU", "US"]))
                    op = "u" if old is not None else rng.choice("cr")
                    before = old if op == "u" and rng.random() < 0.5 else None
                    key, value = customers.encode_debezium(op, before, row, with_schema=rng.random() < 0.5)
                    tables["customers"][(k,)] = row
                sent.append((key, value))
            batch.append(Record(relation, 0, offset[relation], key, value))
            offset[relation] += 1
        report = pipeline.process(batch, batch_id)
        assert report.dead_letters == 0
        assert report.results["total"] == recount(tables, TOTAL).get((), 0)
        assert {k: v for k, v in report.results["by_region"].items() if v} == recount(tables, GROUPED)


def test_restored_state_continues_the_keyed_relation(tmp_path: Path) -> None:
    """A restart restores the relations' contents with the positions (a snapshot): the key index is derived
    from them again, so the next record of a key retracts the row its last applied record left."""
    first = upsert_pipeline(tmp_path)
    orders = first.codecs["orders"]
    first.process([Record("orders", 0, 0, *orders.encode_upsert((1, 10, 5))),
                   Record("customers", 0, 0, b'{"id": 10}', b'{"id": 10, "region": "EU"}')], 0)  # fmt: skip
    restored = pickle.loads(pickle.dumps(first.state))
    second = upsert_pipeline(tmp_path)
    second.state = restored
    for view_name, view in second.state.views.items():
        assert view.result() == first.state.views[view_name].result()
    report = second.process([Record("orders", 0, 0, *orders.encode_upsert((1, 10, 5))),  # a redelivery: skipped
                             Record("orders", 0, 1, *orders.encode_upsert((1, 11, 5)))], 1)  # fmt: skip
    assert report.results["total"] == 0  # order 1 moved to customer 11, who is not there
    assert second.state.relations["orders"] == {(1, 11, 5): 1}
    assert not dead_reasons(second)


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("orders", "extra", "message"),
    [
        ('format = "upsert"', "", 'key: format = "upsert" needs the key attributes, e.g. key = ["id"]'),
        ('format = "upsert"\nkey = ["nope"]', "", "key: ['nope'] not attributes of relation orders"),
        ('format = "upsert"\nkey = ["id", "id"]', "", "names an attribute twice"),
        ('key = ["id"]', "", 'key: only for a keyed relation (format = "upsert" or "debezium")'),
        ('encoding = "json"', "", 'encoding: "json" is only for format = "upsert" or "debezium"'),
        ('format = "debezium"\nkey = ["id"]', "", 'format = "debezium" is read in encoding json or confluent'),
        ('format = "upsert"\nencoding = "avro-packed"\nkey = ["id"]', "", 'not "avro-packed"'),
        ('format = "upsert"\nkey = ["id"]\nwindow_count = 5', "", 'a keyed relation (format = "upsert") has no window'),
        ('format = "upsert"\nencoding = "confluent"\nkey = ["id"]', "", "needs [kafka] schema_registry"),
        ('format = "cdc"', "", "format"),
        (
            'format = "upsert"\nkey = ["id"]',
            '[[queries]]\nname = "q3"\nquery = "Q() :- orders(o, c, q)"\npatterns = ["orders=insert-only"]',
            'relation orders is format = "upsert", whose records update and delete any row',
        ),
    ],
)
def test_keyed_relation_configuration_is_checked(tmp_path: Path, orders: str, extra: str, message: str) -> None:
    path = write_config(tmp_path, orders, CUSTOMERS_UPSERT, extra)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value)


def test_keyed_relation_configuration_round_trips(tmp_path: Path) -> None:
    from ivm.processor.config import dump_config

    config = load_config(write_config(tmp_path, 'format = "upsert"\nkey = ["id"]', CUSTOMERS_UPSERT))
    rel = config.relations[0]
    assert (rel.format, rel.key, rel.keyed) == ("upsert", ("id",), True)
    again = tmp_path / "again.toml"
    again.write_text(dump_config(config))
    assert load_config(again).relations == config.relations
    assert with_mult(ORDERS)["fields"][-1] == {"name": "mult", "type": "long"}
    assert OutputCodec  # the dead-letter codec the sink decodes with


# ---------------------------------------------------------------- the executors' placement


def keyed_stream(seed: int, batches: int, size: int) -> list[list[Record]]:
    """Random upsert batches for orders (Avro) and customers (JSON): new rows, moved rows, the same row again,
    tombstones of present and absent keys, malformed records, redeliveries."""
    probe = Pipeline(load_config(write_config_dir(seed)), MemorySink())
    orders, customers = probe.codecs["orders"], probe.codecs["customers"]
    rng = random.Random(stable_seed("keyed-slices", seed))
    offsets = {"orders": 0, "customers": 0}
    out: list[list[Record]] = []
    previous: list[Record] = []
    for _ in range(batches):
        batch = []
        for _ in range(size):
            relation = rng.choice(["orders", "orders", "customers"])
            codec = orders if relation == "orders" else customers
            k = rng.randrange(10)
            roll = rng.random()
            if roll < 0.03:
                key, value = b"k", b"\x01bad"
            elif roll < 0.2:
                key, value = codec.encode_upsert(None, (k,))  # type: ignore[union-attr]
            elif relation == "orders":
                key, value = codec.encode_upsert((k, rng.randrange(5), rng.randrange(3)))  # type: ignore[union-attr]
            else:
                key, value = codec.encode_upsert((k % 5, rng.choice(["EU", "US"])))  # type: ignore[union-attr]
            batch.append(Record(relation, 0, offsets[relation], key, value, 1000))
            offsets[relation] += 1
        if previous and rng.random() < 0.5:
            batch += rng.sample(previous, 3)  # redelivered: applied once
        previous = batch
        out.append(batch)
    return out


def write_config_dir(seed: int) -> Path:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=f"keyed-{seed}-"))
    return write_config(folder, 'format = "upsert"\nkey = ["id"]', CUSTOMERS_UPSERT)


def sharded(config: Any) -> Any:
    from dataclasses import replace

    queries = (replace(config.queries[0], shards=2), replace(config.queries[1], shards=4))
    return replace(config, queries=queries, shards=4, snapshot_every=0)


@pytest.mark.parametrize("seed", range(3))
def test_slices_publish_what_the_driver_publishes_for_keyed_relations(seed: int) -> None:
    """A keyed relation on the executors' placement: every slice gets its records and keeps its rows whole,
    its shards get the -old +new updates routed to them; the published records (results, dead letters,
    progress) are the driver placement's."""
    from tests.unit.test_placement import InProcess, _outputs

    config = sharded(load_config(write_config_dir(seed)))
    driver_sink = MemorySink()
    driver = Pipeline(config, driver_sink)
    placed = InProcess(config)
    assert placed.pipeline.slices == 4
    for records in keyed_stream(seed, batches=10, size=40):
        report = driver.process(records)
        placed.process(records)
        for name, view in placed.pipeline.views.items():
            assert view.result() == report.results[name], name
    assert driver_sink.on("ivm.dead-letter"), "the stream has dead letters"
    assert any(r["value"] not in ("0", "{}") for r in driver_sink.on("total.result"))
    assert _outputs(placed.sink) == _outputs(driver_sink)
    for index, current in placed.table.slices.items():
        assert current.pipeline.state.relations == driver.state.relations, index  # whole in every slice


def test_a_rebuilt_slice_loads_only_its_rows_of_a_keyed_relation(tmp_path: Path) -> None:
    """A fresh host rebuilds each slice from its snapshot with a query's state dropped (``ivm reset QUERY``):
    the query is built again from the slice's keyed contents, only the rows routed to the slice (the
    contents are whole there), and reaches the first host's state."""
    from dataclasses import replace

    from ivm.processor.placement.host import SliceTable, slice_stores
    from tests.unit.test_placement import InProcess

    config = replace(sharded(load_config(write_config_dir(11))), snapshot_every=2)
    location = str(tmp_path / "snapshots")
    first = InProcess(config, location)
    for records in keyed_stream(11, batches=4, size=60):
        first.process(records)
    first.table.close()
    stores = slice_stores(location)
    assert sum(store.drop_query("total") for store in stores) >= first.pipeline.slices
    second = SliceTable(first.table.spec)
    pieces, seals = first.history[3]
    second.stage(pieces)
    for seal in seals:
        assert second.seal(seal).rebuilt
    for index, current in first.table.slices.items():
        rebuilt = second.slices[index]
        for name in current.pipeline.held:
            assert rebuilt.pipeline.views[name].result() == current.pipeline.views[name].result(), (index, name)
        assert rebuilt.pipeline.state.relations == current.pipeline.state.relations


# ---------------------------------------------------------------- ivm produce


def test_produce_writes_what_the_pipeline_reads(tmp_path: Path) -> None:
    """``ivm produce``'s path (a JSON lines file read for each relation's target, sent by ``UpdateProducer``)
    for an upsert and a Debezium relation: rows, then ``--delete`` of some; the pipeline fed its records
    holds exactly the rows not deleted, and a Debezium delete is its ``d`` event then its tombstone."""
    from ivm.processor.kafka.produce import Target, UpdateProducer, read_updates

    path = write_config(
        tmp_path, 'format = "upsert"\nkey = ["id"]', 'format = "debezium"\nencoding = "json"\nkey = ["id"]'
    )
    pipeline = Pipeline(load_config(path), MemorySink())
    codecs = {c.relation: c for c in pipeline.codecs.values()}
    codecs["customers"].op = "r"  # type: ignore[union-attr]
    (tmp_path / "orders.jsonl").write_text("".join(json.dumps({"id": i, "customer": i % 3, "qty": 2}) + "\n"
                                                   for i in range(6)))  # fmt: skip
    (tmp_path / "customers.jsonl").write_text('{"id": 0, "region": "EU"}\n{"id": 1, "region": "US"}\n')
    (tmp_path / "gone.jsonl").write_text('{"id": 4, "customer": 1, "qty": 2}\n')
    (tmp_path / "left.jsonl").write_text('{"id": 1, "region": "US"}\n')
    sink = MemorySink()
    producer = UpdateProducer("unused:0", codecs, {r: r for r in codecs}, sink=sink)  # type: ignore[arg-type]
    for relation, name, mult in [("orders", "orders", 1), ("customers", "customers", 1), ("orders", "gone", -1),
                                 ("customers", "left", -1)]:  # fmt: skip
        updates = read_updates(tmp_path / f"{name}.jsonl", [Target.of(codecs[relation])], mult, format="jsonl")
        producer.send_all(updates)
    customers = [(k, v) for t, k, v in sink.sent if t == "customers"]
    assert [json.loads(v)["op"] if v else None for _k, v in customers] == ["r", "r", "d", None]
    offsets: dict[str, int] = {}
    records = []
    for topic, key, value in sink.sent:
        records.append(Record(topic, 0, offsets.setdefault(topic, 0), key, value))
        offsets[topic] += 1
    report = pipeline.process(records, 0)
    assert report.dead_letters == 0
    assert pipeline.state.relations["orders"] == {(i, i % 3, 2): 1 for i in range(6) if i != 4}
    assert pipeline.state.relations["customers"] == {(0, "EU"): 1}
    assert report.results["total"] == 2  # orders 0 and 3 of customer 0


def test_subscribe_shows_keyed_records(tmp_path: Path) -> None:
    """``ivm subscribe`` on a keyed relation topic: an upsert's row, a Debezium event, a tombstone; a row
    with a field the relation does not have is a decode error naming it."""
    from ivm.processor.codecs.avro import DecodeError
    from ivm.processor.kafka.subscribe import TopicSpec, relation_decoder, render

    config = load_config(
        write_config(
            tmp_path, 'format = "upsert"\nkey = ["id"]', 'format = "debezium"\nencoding = "json"\nkey = ["id"]'
        )
    )
    orders, customers = (TopicSpec(r.topic, "relation", r.name, r) for r in config.relations)
    codecs = Pipeline(config, MemorySink()).codecs
    decode_orders, decode_customers = relation_decoder(orders, config), relation_decoder(customers, config)
    row = decode_orders(codecs["orders"].encode_upsert((1, 10, 5))[1])  # type: ignore[union-attr]
    assert render("relation", row) == 'orders row {"id": 1, "customer": 10, "qty": 5}'
    event = decode_customers(codecs["customers"].encode_debezium("u", (1, "EU"), (1, "US"))[1])  # type: ignore[union-attr]
    assert (
        render("relation", event) == 'customers op u: before {"id": 1, "region": "EU"}, after {"id": 1, "region": "US"}'
    )
    assert render("relation", {"tombstone": True, "key": b'{"id": 1}'}) == 'tombstone of record key {"id": 1}'
    with pytest.raises(DecodeError, match="field 'vip' is not an attribute of relation customers"):
        decode_customers(debezium_json("c", None, {"id": 1, "region": "EU", "vip": True}))
