"""Keys land on the partitions Java clients put them on (murmur2), in ``ivm produce`` and the output sinks.

The oracle is the Kafka distribution's own Java console producer (``org.apache.kafka.tools.ConsoleProducer``
from the fetched ``kafka-tools`` jars, the default partitioner of Java clients) writing the same key bytes
to a topic with 6 partitions: text keys, and the Avro-encoded tuple keys ``ivm produce`` writes (tuples
whose encoding is plain ASCII, so that the console producer's text line carries the identical bytes).
``ivm produce`` (a CSV file through the command), the :class:`KafkaSink` under it and the outputs'
:class:`TransactionalKafkaSink` must put every key on the Java producer's partition.  librdkafka's
default partitioner (CRC32) puts most of them elsewhere, so the test fails without ``murmur2_random``.
A Python murmur2 (Kafka's ``Utils.murmur2``) is a second oracle for the tuple keys.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ivm.processor.cli import main
from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.kafka.clients import CLIENT_DEFAULTS
from ivm.processor.kafka.sink import KafkaSink, TransactionalKafkaSink
from ivm.processor.kafka.topics import create_topics
from ivm.processor.local.artifacts import kafka_tools_jars
from ivm.processor.local.kafka import _java

pytestmark = pytest.mark.integration
PARTITIONS = 6
CODEC = load_relation_codecs()["R"]
# Avro ints 0..61 but 5 encode as one byte 0x00..0x7a other than 0x0a (a newline); '|' (0x7c) separates
VALUES = [n for n in range(62) if n != 5]
ROWS = [(a, b) for a in VALUES[::4] for b in VALUES[::5]]
TEXT_KEYS = [f"key-{i}".encode() for i in range(150)] + [f"order/{i:05d}".encode() for i in range(50)]


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = data[length - length % 4 :]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def java_partition(key: bytes) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % partitions``: the Java clients' choice for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


def java_produce(bootstrap: str, topic: str, keys: list[bytes], log: Path) -> None:
    """Each key (bytes below 0x80, no newline, no '|') with the value ``v`` through the console producer."""
    lines = b"".join(key + b"|v\n" for key in keys)
    proc = subprocess.run(
        [
            _java(), "-cp", f"{kafka_tools_jars()}/*", "org.apache.kafka.tools.ConsoleProducer",
            "--bootstrap-server", bootstrap, "--topic", topic,
            "--property", "parse.key=true", "--property", "key.separator=|",
        ],
        input=lines, capture_output=True, timeout=180,
    )  # fmt: skip
    log.write_bytes(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode(errors="replace")[-3000:]


def partitions_of_keys(bootstrap: str, topic: str, records: int) -> dict[bytes, int]:
    """Each key's partition, from the first ``records`` records of ``topic`` (read_committed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "partitions", "enable.auto.commit": False, **CLIENT_DEFAULTS}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: dict[bytes, int] = {}
    read = 0
    deadline = time.monotonic() + 120
    while read < records and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        read += 1
        key = msg.key()
        assert key is not None
        assert out.setdefault(key, msg.partition()) == msg.partition(), f"key {key!r} on two partitions of {topic}"
    consumer.close()
    assert read == records, f"read {read} of {records} records of {topic}"
    return out


def test_keys_land_where_the_java_console_producer_puts_them(kafka, topic_prefix, tmp_path: Path) -> None:
    java, produced, sent, outputs = (f"{topic_prefix}{t}" for t in ("java", "produce", "sink", "outputs"))
    create_topics(kafka.bootstrap, [java, produced, sent, outputs], partitions=PARTITIONS)
    tuple_keys = [CODEC.encode(row, 1)[0] for row in ROWS]
    assert all(max(k) < 0x7C and b"\n" not in k for k in tuple_keys)
    keys = TEXT_KEYS + tuple_keys
    java_produce(kafka.bootstrap, java, keys, tmp_path / "console-producer.log")

    csv = tmp_path / "R.csv"
    csv.write_text("A,B\n" + "".join(f"{a},{b}\n" for a, b in ROWS))
    assert main(["produce", "R", str(csv), "--topic", produced, "--bootstrap", kafka.bootstrap]) == 0
    sink = KafkaSink(kafka.bootstrap)  # what `ivm produce` sends through, for the text keys
    for key in TEXT_KEYS:
        sink.send(produced, key, b"v")
    sink.commit()
    transactional = TransactionalKafkaSink(kafka.bootstrap, f"{topic_prefix}outputs")  # the outputs' producer
    transactional.begin()
    for key in keys:
        transactional.send(outputs, key, b"v")
    transactional.commit()
    plain = KafkaSink(kafka.bootstrap)  # the outputs' producer with exactly_once = false
    for key in keys:
        plain.send(sent, key, b"v")
    plain.commit()

    expected = partitions_of_keys(kafka.bootstrap, java, len(keys))
    assert set(expected) == set(keys)
    assert len(set(expected.values())) == PARTITIONS, "the sample does not reach every partition"
    assert {k: java_partition(k) for k in keys} == expected, "the Python murmur2 disagrees with the Java producer"
    for topic in (produced, sent, outputs):
        assert partitions_of_keys(kafka.bootstrap, topic, len(keys)) == expected, f"{topic}: not the Java partitions"
