"""``ivm subscribe``: print any topic of a pipeline as it changes."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

DESCRIPTION = """\
Print the records of one of a pipeline's topics, one line each, as they arrive
(isolation.level=read_committed): <query>.result, <query>.delta, <query>.model,
<pipeline>.progress, <pipeline>.control (the queries added and removed with
ivm query), the dead-letter topic, or a relation topic (with -c).

With -c the topic's kind comes from the configuration; without it, from the
name: the suffixes .result, .delta, .model, .progress, .control, and the
dead-letter topic (ivm.dead-letter, or any name ending in dead-letter). A topic
that is not the pipeline's, or whose kind the name does not tell, or that does
not exist on the broker, is an error (exit 2) listing the topics there are; a
broker that cannot be reached, one line naming its address (exit 1).

--json prints one JSON document per record, with the record's fields (as in
schemas/*.avsc): the fields that carry JSON text (a result's value, a delta's
answer, a model's model) parsed into JSON values; timestamps as ISO-8601 UTC
strings with milliseconds ("2024-05-01T12:00:00.250Z"); bytes (a dead letter's
key and value) as base64; decimals as strings; a relation topic's updates as
{"relation": R, <attribute>: value, ..., "mult": m}. The JSON forms of result
values per query kind: docs/results.md.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "subscribe",
        help="print a result, delta, model, progress, control, dead-letter or relation topic as it changes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "topic",
        help="e.g. triangle.result, triangle.delta, triangle.model, demo.progress, demo.control, ivm.dead-letter",
    )
    p.add_argument(
        "-c", "--config",
        help="the pipeline configuration (TOML): tells every topic's kind, and the schemas of relation topics",
    )  # fmt: skip
    p.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT",
        help="Kafka bootstrap servers, host:port[,host:port...] (default: the configuration's [kafka].bootstrap, "
        "else 127.0.0.1:9092)",
    )  # fmt: skip
    p.add_argument("--latest", action="store_true", help="start at the end instead of the beginning")
    p.add_argument(
        "--snapshot", action="store_true",
        help="for a <query>.result topic: print the current result first (read from the compacted topic), "
        "then each change as it commits; a tombstone prints the group as gone",
    )  # fmt: skip
    p.add_argument("--idle-timeout", type=float, help="exit after this many seconds without a record")
    p.add_argument(
        "--json", action="store_true",
        help="print each record as one JSON document per line (timestamps ISO-8601 UTC with milliseconds, "
        "bytes base64, JSON-text fields parsed)",
    )  # fmt: skip
    return p


def _error(message: str) -> int:
    print(f"ivm subscribe: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from ivm.processor.cli import CommandError
    from ivm.processor.kafka.subscribe import (
        UnknownTopicError,
        broker_topics,
        decoder_for,
        describe_topics,
        follow,
        infer_kind,
        pipeline_topics,
        render,
        resolve_topic,
    )

    config = None
    if args.config:
        from ivm.processor.config import load_config

        config = load_config(args.config)  # a ConfigError: one line per finding, exit 2 (ivm/processor/cli.py)
    bootstrap = (
        config.kafka.with_bootstrap(args.bootstrap) if config is not None else (args.bootstrap or DEFAULT_BOOTSTRAP)
    )
    try:
        spec = resolve_topic(args.topic, config)
    except UnknownTopicError as err:
        added = _with_control_queries(config, bootstrap) if config is not None else None
        if added is not None:  # a query added at run time (`ivm query add`): its topics are the pipeline's too
            try:
                spec = resolve_topic(args.topic, added)
            except UnknownTopicError as again:
                return _error(str(again))
        elif config is not None:
            return _error(str(err))  # the cause, then the pipeline's topics, one per line
        else:
            try:
                outputs = {t: resolve_topic(t) for t in broker_topics(bootstrap) if infer_kind(t)}
            except RuntimeError as unreachable:  # the name is the first mistake: exit 2, the broker's state as a note
                return _error(f"{err}\n({unreachable})")
            return _error(f"{err}\nthe output topics on {bootstrap}:\n{describe_topics(outputs)}")
    existing = broker_topics(bootstrap)
    if spec.topic not in existing:
        if config is not None:
            known = describe_topics(pipeline_topics(config), existing)
            return _error(
                f"topic {spec.topic!r} does not exist on {bootstrap}; pipeline {config.name!r}'s topics:\n{known}"
            )
        outputs = {t: resolve_topic(t) for t in existing if infer_kind(t)}
        when = " (ivm run creates a pipeline's output topics when it starts)" if spec.kind != "relation" else ""
        return _error(
            f"topic {spec.topic!r} does not exist on {bootstrap}{when}; the output topics there:\n"
            f"{describe_topics(outputs)}"
        )
    if args.snapshot:
        if spec.kind != "result":
            return _error(f"--snapshot reads a <query>.result topic; {spec.topic!r} is a {spec.kind} topic")
        return _snapshot(bootstrap, spec.topic, args)
    try:
        decoder = decoder_for(spec, config)
    except ValueError as err:  # a relation's schema that does not read, a registry not configured
        raise CommandError(str(err)) from err

    def skipped(topic: str, partition: int, offset: int, err: Exception) -> None:
        print(f"ivm subscribe: {topic}[{partition}]@{offset} skipped: {err}", file=sys.stderr, flush=True)

    records = follow(
        bootstrap,
        spec.topic,
        from_beginning=not args.latest,
        idle_timeout=args.idle_timeout,
        decoder=decoder,
        on_error=skipped,
        # a relation topic is input: read as the pipeline reads it; outputs are transactional
        isolation=config.isolation_level if config is not None and spec.kind == "relation" else "read_committed",
    )
    try:
        for record in records:
            print(render(spec.kind, record, as_json=args.json), flush=True)
    except RuntimeError as err:  # the broker or the schema registry failed (not a message's fault)
        raise CommandError(str(err), 1) from err
    return 0


def _with_control_queries(config, bootstrap: Kafka):
    """``config`` with the queries ``<pipeline>.control`` added at run time (none removed: a removed query's
    output topics stay), or ``None`` when the control topic holds none or cannot be read."""
    from dataclasses import replace

    from ivm.processor.control import control_topic, read_overrides
    from ivm.processor.kafka.subscribe import broker_topics

    try:
        if control_topic(config) not in broker_topics(bootstrap):
            return None
        overrides, _ = read_overrides(bootstrap, control_topic(config), timeout=30)
    except Exception:  # an unreachable broker: the caller reports the topic it does not know
        return None
    known = {q.name for q in config.queries}
    added = tuple(q for name, q in overrides.items() if q is not None and name not in known)
    return replace(config, queries=(*config.queries, *added)) if added else None


def _snapshot(bootstrap: Kafka, topic: str, args: argparse.Namespace) -> int:
    """The current result, then its changes (``ivm.processor.publish.snapshot_then_changes``)."""
    import json

    from ivm.processor.publish import snapshot_then_changes

    for event in snapshot_then_changes(bootstrap, topic, idle_timeout=args.idle_timeout):
        if args.json:
            print(json.dumps(event), flush=True)
        elif event["type"] == "snapshot":
            result = event["result"]
            if isinstance(result, dict):
                print(f"{event['query']} after batch {event['batch_id']}: {len(result)} groups", flush=True)
                for group, value in result.items():
                    print(f"  {group} = {json.dumps(value)}", flush=True)
            else:
                print(f"{event['query']} after batch {event['batch_id']} = {json.dumps(result)}", flush=True)
        elif event["value"] is None:
            print(f"{event['query']}{json.dumps(event['group'])} gone", flush=True)
        else:
            group = "" if event["group"] is None else json.dumps(event["group"])
            print(f"batch {event['batch_id']:>6}  {event['query']}{group} = {json.dumps(event['value'])}", flush=True)
    return 0
