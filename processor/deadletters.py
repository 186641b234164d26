"""What a pipeline's dead-letter topic holds: for ``ivm status``, the exported counter, and a new history.

The dead-letter topic (``[kafka] dead_letter_topic``) may be shared by pipelines; a
pipeline's dead letters are the records whose source topic is one of its inputs (its
relation topics and its control topic).  :func:`read_dead_letters` reads the topic once
(read_committed, O(records held)) and counts them, in total and per reason (the reason's
text up to its first colon: ``malformed Avro for relation R``, ``control command refused``).

Two uses besides ``ivm status``:

- ``ivm_dead_letters_total{topic}`` starts at the number of the pipeline's dead letters the
  topic holds when the job starts (not 0), then counts the ones the job writes: its value is
  the number of the pipeline's records in the topic (as long as retention deleted none);
- a pipeline that starts over (``ivm reset``, then ``starting_offsets = "earliest"``) meets
  the same bad records again: a dead letter already in the topic for the same record
  (topic, partition, offset) and reason is not written a second time
  (``Pipeline.dead_lettered``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka

DeadLetterKey = tuple[str, int, int, str]  # source topic, partition, offset, reason


@dataclass
class DeadLetters:
    """A pipeline's dead letters in its dead-letter topic: how many, per reason, and which records."""

    topic: str
    total: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    keys: set[DeadLetterKey] = field(default_factory=set)


def reason_kind(reason: str) -> str:
    """The reason without its details: its text up to the first colon (at most 80 characters).

    >>> reason_kind("malformed Avro for relation R: EOFError at byte 3")
    'malformed Avro for relation R'
    """
    return reason.split(":", 1)[0].strip()[:80]


def read_dead_letters(bootstrap: Kafka, topic: str, inputs: Iterable[str], timeout: float = 60) -> DeadLetters:
    """The dead letters of the records of ``inputs`` (topic names) that ``topic`` holds (module docstring)."""
    from ivm.processor.codecs.avro import OutputCodec
    from ivm.processor.kafka.topics import TopicReader

    wanted = set(inputs)
    codec = OutputCodec("dead_letter")
    out = DeadLetters(topic)
    with TopicReader(bootstrap, topic) as reader:
        for _key, value in reader.to_end(timeout):
            if value is None:
                continue
            try:
                record = codec.decode(value)
            except Exception:  # not one of ours (another writer): not this pipeline's
                continue
            if record["topic"] not in wanted:
                continue
            out.total += 1
            kind = reason_kind(record["reason"])
            out.by_reason[kind] = out.by_reason.get(kind, 0) + 1
            out.keys.add((record["topic"], record["partition"], record["offset"], record["reason"]))
    return out
