"""The control topic: queries added, replaced and removed while a pipeline runs.

``ivm query add|remove`` writes a :data:`Control <schemas/control.avsc>` record to
``<pipeline>.control``.  The job reads that topic with its relation topics; at
the start of each micro-batch it applies the control records of the batch, in
offset order, before the batch's updates:

- ``add`` registers the query (or replaces the one of the same name).  Its
  view is built from the relations' current contents (``Pipeline.build_query``,
  the same mechanism as a restart over changed queries), so its first result
  is the query over every update committed before it, and the batch's updates
  then reach it like every other query;
- ``remove`` drops the query's state; its output topics stay.

The control topic's positions are committed with every batch, like the
relation topics', so a command is applied exactly once, and a restart replays
the commands after its snapshot.  The set of queries a pipeline runs is the
configuration's, overridden by the control records: an added name wins over
the file, a removed name is gone until it is added again (``ivm query list``
says where each query comes from).  A command the pipeline cannot serve (a
query that does not parse, an engine that refuses it) goes to the dead-letter
topic with the reason, and nothing changes.

Acknowledgements: the job answers every command it takes with an ``applied`` or
``refused`` record (with the reason) on the control topic itself, in the
transaction of the batch that took it (so it is visible exactly when the
command's effect is).  ``ivm query add`` waits for it; ``ivm query list`` shows
each query as maintained, pending (no answer yet) or refused.  A refused
command stays refused: :func:`read_log` leaves it out of the overrides, and a
replay (a restart, in either placement) skips it (``Pipeline.refused_commands``).

With ``placement = "executors"`` the queries are fixed for a run: a start takes
the configuration with every command of the control topic that is not refused
(:func:`effective`), and a command written while it runs is refused unless it
asks for what the run already does (the reason names the fix: restart).
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import fastavro

from ivm.processor.codecs.avro import OutputCodec, load_schema, schemas_dir
from ivm.processor.config import PipelineConfig, QueryConfig

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka

Overrides = dict[str, QueryConfig | None]  # query name -> the query added last, or None: removed
ACKS = ("applied", "refused")

_SCHEMA = fastavro.parse_schema(load_schema(schemas_dir() / "control.avsc"))
_CODEC = OutputCodec("control")  # reads the records of earlier versions too (without trailing fields)


def control_topic(config: PipelineConfig) -> str:
    """``<pipeline>.control``."""
    return f"{config.name}.control"


def encode_add(q: QueryConfig) -> bytes:
    record = {
        "op": "add",
        "name": q.name,
        "query": q.query,
        "engine": q.engine,
        "eps": None if q.eps is None else float(q.eps),
        "shards": q.shards,
        "patterns": list(q.patterns),
        "model": q.model,
        "label": q.label,
        "method": q.method,
        "timestamp_ms": int(time.time() * 1000),
    }
    return _write(record)


def encode_remove(name: str) -> bytes:
    return _write({"op": "remove", "name": name, "timestamp_ms": int(time.time() * 1000)})


def encode_ack(name: str, partition: int, offset: int, reason: str | None) -> bytes:
    """The job's answer to the command at ``partition``, ``offset``: applied (``reason`` None) or refused."""
    return _write(
        {
            "op": "applied" if reason is None else "refused",
            "name": name,
            "timestamp_ms": int(time.time() * 1000),
            "command_partition": partition,
            "command_offset": offset,
            "reason": reason,
        }
    )


def _write(record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _SCHEMA, record)
    return buf.getvalue()


def decode(value: bytes | None) -> tuple[str, str, QueryConfig | None]:
    """``(op, name, query)`` of a control record (``query`` is ``None`` for a removal and an
    acknowledgement); ValueError with the reason if the bytes are not one."""
    op, name, q, _record = _decode(value)
    return op, name, q


def _decode(value: bytes | None) -> tuple[str, str, QueryConfig | None, dict[str, Any]]:
    if not value:
        raise ValueError("empty control message")
    buf = io.BytesIO(value)
    try:
        record = fastavro.schemaless_reader(buf, _SCHEMA, None)
    except EOFError:  # a command written before the answers' fields were appended (their defaults apply)
        try:
            record, _missing = _CODEC.decode_versioned(value)
        except Exception as err:
            raise ValueError(f"malformed control record: {type(err).__name__}: {err}") from None
        buf.seek(len(value))
    except Exception as err:
        raise ValueError(f"malformed control record: {type(err).__name__}: {err}") from None
    if buf.tell() != len(value):
        raise ValueError(f"malformed control record: {len(value) - buf.tell()} trailing bytes")
    if record["op"] in ("remove", *ACKS):
        return record["op"], record["name"], None, record
    if not record.get("query"):
        raise ValueError(f"control record adds query {record['name']!r} without its text")
    q = QueryConfig(
        record["name"],
        record["query"],
        record["engine"],
        record["eps"],
        record["shards"],
        tuple(record["patterns"]),
        record["model"],
        record["label"],
        record["method"],
    )
    return "add", q.name, q, record


def effective(config: PipelineConfig, overrides: Overrides) -> PipelineConfig:
    """The configuration with the control topic's overrides applied (added or replaced, removed)."""
    queries = {q.name: q for q in config.queries}
    for name, q in overrides.items():
        if q is None:
            queries.pop(name, None)
        else:
            queries[name] = q
    return replace(config, queries=tuple(queries.values()))


@dataclass
class Command:
    """A command of the control topic and the job's answer to it (``None``: none yet, pending)."""

    partition: int
    offset: int
    op: str  # "add" | "remove"
    name: str
    query: QueryConfig | None
    answer: str | None = None  # "applied" | "refused"
    reason: str | None = None

    @property
    def refused(self) -> bool:
        return self.answer == "refused"


def read_log(bootstrap: Kafka, topic: str, timeout: float = 60) -> list[Command]:
    """Every command of ``topic`` in offset order (per partition), each with the job's answer if it has
    one, read with read_committed.  Undecodable records are left out (the job dead-letters them)."""
    from ivm.processor.kafka.topics import TopicReader

    commands: dict[tuple[int, int], Command] = {}
    answers: dict[tuple[int, int], tuple[str, str | None]] = {}
    with TopicReader(bootstrap, topic) as reader:
        for msg in reader.messages(timeout):
            try:
                op, name, q, record = _decode(msg.value())
            except ValueError:
                continue
            if op in ACKS:
                answers[(record["command_partition"], record["command_offset"])] = (op, record.get("reason"))
            else:
                commands[(msg.partition(), msg.offset())] = Command(msg.partition(), msg.offset(), op, name, q)
    for where, (answer, reason) in answers.items():
        if where in commands:
            commands[where].answer, commands[where].reason = answer, reason
    return [commands[k] for k in sorted(commands)]


def fold(commands: list[Command]) -> Overrides:
    """The overrides of ``commands`` (the last one per name wins); refused commands do not count."""
    overrides: Overrides = {}
    for c in commands:
        if not c.refused:
            overrides[c.name] = c.query if c.op == "add" else None
    return overrides


def refusals(commands: list[Command]) -> dict[tuple[int, int], str]:
    """``(partition, offset) -> reason`` of every refused command: what a replay must refuse again."""
    return {(c.partition, c.offset): c.reason or "refused" for c in commands if c.refused}


def read_overrides(bootstrap: Kafka, topic: str, timeout: float = 60) -> tuple[Overrides, int]:
    """Every command of ``topic`` that the job did not refuse, folded into overrides (the last command
    per name wins), read with read_committed; also the number of commands read."""
    commands = read_log(bootstrap, topic, timeout)
    return fold(commands), len(commands)
