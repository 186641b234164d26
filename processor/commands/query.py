"""``ivm query add|remove|list -c CONFIG``: change a running pipeline's queries, without a restart.

The command is checked the way ``ivm check`` checks a configuration (against
the pipeline's queries as the control topic leaves them), then written to
``<pipeline>.control``; the job applies it at its next micro-batch, exactly
once (see ``processor/control.py``).  An added query is built from the
relations' current contents: its first result already counts every update
committed before it.  A removed query's output topics stay.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "query",
        help="add, replace, remove or list the queries of a running pipeline (through its control topic)",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="register a query (or replace the one of the same name)")
    add.add_argument("name", help="the query's name (its outputs: NAME.result, NAME.delta, NAME.model)")
    add.add_argument("query", help="the query, as a rule 'Q() :- R(a,b), S(b,c)' or SQL")
    add.add_argument("--engine", default="auto", help="engine (default: auto, the planner's choice)")
    add.add_argument("--eps", type=float, help="IVM^eps threshold exponent")
    add.add_argument("--shards", type=int, help="HyperCube shards (default: the pipeline's)")
    add.add_argument("--pattern", action="append", default=[], metavar="R=KIND", help="declared update pattern")
    add.add_argument("--model", choices=["linear_regression", "chow_liu"], help="a model fed by a COVAR query")
    add.add_argument("--label", help="the regression's label variable")
    add.add_argument("--method", help="the regression's method (gradient_descent or closed_form)")
    remove = actions.add_parser("remove", help="stop maintaining a query (its output topics stay)")
    remove.add_argument("name")
    listing = actions.add_parser("list", help="the pipeline's queries and where each comes from")
    listing.add_argument("--json", action="store_true", help="one JSON object")
    for sub in (add, remove, listing):
        sub.add_argument("--config", "-c", required=True, help="pipeline configuration (TOML)")
        sub.add_argument(
            "--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT",
            help="Kafka bootstrap servers, host:port[,host:port...] (default: the configuration's [kafka].bootstrap, "
            "else 127.0.0.1:9092)",
        )  # fmt: skip
    return p


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from processor.config import ConfigError, QueryConfig, load_config
    from processor.control import control_topic, effective, read_overrides

    where = f"ivm query {args.action}"
    try:
        config = load_config(args.config).with_overrides(bootstrap=args.bootstrap)
    except ConfigError as err:
        for line in err.errors or str(err).splitlines():
            print(f"{where}: {line}", file=sys.stderr)
        return 2
    topic = control_topic(config)
    from processor.topics import require_broker

    require_broker(config.bootstrap)  # one line at once, not 30 s of client timeouts
    try:
        overrides, _ = read_overrides(config.bootstrap, topic)
    except (KafkaException, TimeoutError, RuntimeError) as err:
        print(f"{where}: cannot read {topic} at {config.bootstrap}: {err}", file=sys.stderr)
        return 1
    current = effective(config, overrides)
    if args.action == "list":
        return _list(config, current, overrides, args.json)
    if args.action == "remove":
        if args.name not in {q.name for q in current.queries}:
            known = ", ".join(q.name for q in current.queries) or "none"
            print(f"{where}: pipeline {config.name} has no query {args.name!r} (its queries: {known})", file=sys.stderr)
            return 2
        return _send(config, topic, args.name, None, where)
    options = {"method": args.method} if args.method else {}
    q = QueryConfig(
        args.name,
        args.query,
        args.engine,
        args.eps,
        args.shards,
        tuple(args.pattern),
        args.model,
        args.label,
        **options,
    )
    try:  # the checks `ivm check` and the job make: the pipeline's queries with this one added or replaced
        from dataclasses import replace

        from processor.planning import plan_pipeline

        others = tuple(c for c in current.queries if c.name != q.name)
        plan_pipeline(replace(current, queries=(*others, q)))
    except ConfigError as err:
        for line in err.errors or str(err).splitlines():
            print(f"{where}: {line}", file=sys.stderr)
        return 2
    return _send(config, topic, q.name, q, where)


def _send(config, topic: str, name: str, q, where: str) -> int:
    from confluent_kafka import Producer

    from processor.control import encode_add, encode_remove
    from processor.sink import PARTITIONER
    from processor.topics import CLIENT_DEFAULTS, create_topics

    try:
        create_topics(config.bootstrap, [topic], config={"retention.ms": "-1"})
        producer = Producer(
            {"bootstrap.servers": config.bootstrap, "enable.idempotence": True, **PARTITIONER, **CLIENT_DEFAULTS}
        )
        delivered: list = []
        producer.produce(
            topic,
            key=name.encode(),
            value=encode_add(q) if q is not None else encode_remove(name),
            on_delivery=lambda err, msg: delivered.append((err, msg)),
        )
        producer.flush(30)
    except Exception as err:
        print(f"{where}: cannot write to {topic} at {config.bootstrap}: {err}", file=sys.stderr)
        return 1
    if not delivered or delivered[0][0] is not None:
        reason = delivered[0][0] if delivered else "not delivered within 30 s"
        print(f"{where}: cannot write to {topic} at {config.bootstrap}: {reason}", file=sys.stderr)
        return 1
    offset = delivered[0][1].offset()
    if q is None:
        print(f"query {name}: removal sent ({topic} offset {offset}); the pipeline drops it at its next batch")
    else:
        print(
            f"query {name}: sent ({topic} offset {offset}); the pipeline builds it from the relations' current "
            f"contents at its next batch and publishes to {q.result_topic}"
        )
    return 0


def _list(config, current, overrides, as_json: bool) -> int:
    configured = {q.name for q in config.queries}
    rows = []
    for q in current.queries:
        source = "config"
        if q.name in overrides:
            source = "control (replaces the file's)" if q.name in configured else "control"
        rows.append({"name": q.name, "query": q.query, "engine": q.engine, "source": source})
    removed = sorted(n for n, q in overrides.items() if q is None and n in configured)
    if as_json:
        print(json.dumps({"pipeline": config.name, "queries": rows, "removed": removed}, indent=2))
        return 0
    for row in rows:
        print(f"{row['name']:<20} {row['source']:<30} {row['engine']:<12} {row['query']}")
    for name in removed:
        print(f"{name:<20} {'removed through control':<30}")
    return 0
