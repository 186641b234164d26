"""``ivm status``'s lag against a real broker when the input was written in transactions: a partition whose
committed position is short of its end only by a commit marker, or by an aborted transaction's records and
their marker, has a lag of 0; one with a readable record after the position keeps its lag."""

from __future__ import annotations

from pathlib import Path

import pytest

from ivm.processor.commands.status import settled_ends
from ivm.processor.kafka.clients import CLIENT_DEFAULTS
from ivm.processor.kafka.topics import create_topics, end_offsets
from tests.integration.helpers import pipeline_config

pytestmark = pytest.mark.integration


def _transaction(producer, topic: str, partition: int, n: int, commit: bool) -> list[int]:
    offsets: list[int] = []
    producer.begin_transaction()
    for i in range(n):
        producer.produce(topic, key=b"k%d" % i, value=b"v", partition=partition,
                         on_delivery=lambda err, msg: offsets.append(msg.offset()))  # fmt: skip
    assert producer.flush(60) == 0
    (producer.commit_transaction if commit else producer.abort_transaction)(60)
    return offsets


def test_a_partition_ending_in_markers_has_no_lag(kafka, topic_prefix, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    topic = f"{topic_prefix}markers"
    create_topics(kafka.bootstrap, [topic], partitions=3)
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{topic_prefix}tx", **CLIENT_DEFAULTS}
    )
    producer.init_transactions(60)
    committed = _transaction(producer, topic, 0, 3, commit=True)  # offsets 0-2, its marker at 3
    assert committed == [0, 1, 2]
    _transaction(producer, topic, 1, 2, commit=True)  # 0-1, marker 2
    _transaction(producer, topic, 1, 2, commit=False)  # 3-4 aborted, marker 5
    _transaction(producer, topic, 2, 4, commit=True)  # 0-3, marker 4
    ends = end_offsets(kafka.bootstrap, [topic])
    assert ends == {(topic, 0): 4, (topic, 1): 6, (topic, 2): 5}
    # a pipeline's positions: the offset after the last record it read
    positions = {(topic, 0): 3, (topic, 1): 2, (topic, 2): 2}
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state")
    settled = settled_ends(config.kafka, positions, ends)
    lag = {tp: settled[tp] - positions[tp] for tp in ends}
    assert lag == {(topic, 0): 0, (topic, 1): 0, (topic, 2): 3}, "markers and aborted records are no lag"
    assert settled_ends(config.kafka, {(topic, 2): 5}, ends) == ends  # nothing behind: nothing read
