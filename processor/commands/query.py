"""``ivm query add|remove|list -c CONFIG``: change a running pipeline's queries, without a restart.

The command is checked the way ``ivm check`` checks a configuration (against
the pipeline's queries as the control topic leaves them), then written to
``<pipeline>.control``; the job applies it at its next micro-batch, exactly
once (see ``ivm/processor/control.py``).  An added query is built from the
relations' current contents: its first result already counts every update
committed before it.  A removed query's output topics stay.

While the pipeline runs, add and remove wait (--wait seconds, default 120) for
the job's answer on the control topic and say what it did: applied (exit 0),
or refused with the reason (exit 1; a refused command is never applied later,
not by a restart either).  No answer in time: exit 1, the command is pending.
A pipeline that is not running takes the command when it next starts (exit 0).
`ivm query list` shows each query's state: maintained, pending (no answer yet)
or refused (with the reason).  With placement = "executors" the queries are
fixed for a run: a start takes every command not refused, and one written
while it runs is refused (stop, send, start).
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
    add.add_argument(
        "--method",
        choices=["closed_form", "gradient_descent"],
        help="the regression's method (default: closed_form; gradient_descent reports whether it converged)",
    )
    remove = actions.add_parser("remove", help="stop maintaining a query (its output topics stay)")
    remove.add_argument("name")
    listing = actions.add_parser("list", help="the pipeline's queries and where each comes from")
    listing.add_argument("--json", action="store_true", help="one JSON object")
    for sub in (add, remove):
        sub.add_argument(
            "--wait", type=float, default=120.0, metavar="SECONDS",
            help="how long to wait for the running job's answer (default 120; 0: do not wait)",
        )  # fmt: skip
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

    from ivm.processor.config import ConfigError, QueryConfig, load_config
    from ivm.processor.control import control_topic, effective, fold, read_log

    where = f"ivm query {args.action}"
    try:
        config = load_config(args.config).with_overrides(bootstrap=args.bootstrap)
    except ConfigError as err:
        for line in err.errors or str(err).splitlines():
            print(f"{where}: {line}", file=sys.stderr)
        return 2
    topic = control_topic(config)
    from ivm.processor.kafka.topics import require_broker

    require_broker(config.kafka)  # one line at once, not 30 s of client timeouts
    try:
        commands = read_log(config.kafka, topic)
    except (KafkaException, TimeoutError, RuntimeError) as err:
        print(f"{where}: cannot read {topic} at {config.bootstrap}: {err}", file=sys.stderr)
        return 1
    overrides = fold(commands)
    current = effective(config, overrides)
    if args.action == "list":
        return _list(config, current, overrides, commands, args.json)
    if args.action == "remove":
        if args.name not in {q.name for q in current.queries}:
            known = ", ".join(q.name for q in current.queries) or "none"
            print(f"{where}: pipeline {config.name} has no query {args.name!r} (its queries: {known})", file=sys.stderr)
            return 2
        return _send(config, topic, args.name, None, where, args.wait)
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

        from ivm.processor.planning import plan_pipeline

        others = tuple(c for c in current.queries if c.name != q.name)
        plan_pipeline(replace(current, queries=(*others, q)))
    except ConfigError as err:
        for line in err.errors or str(err).splitlines():
            print(f"{where}: {line}", file=sys.stderr)
        return 2
    return _send(config, topic, q.name, q, where, args.wait)


def _send(config, topic: str, name: str, q, where: str, wait: float) -> int:
    from ivm.processor.control import encode_add, encode_remove
    from ivm.processor.kafka.clients import producer as new_producer
    from ivm.processor.kafka.sink import PARTITIONER
    from ivm.processor.kafka.topics import create_kind

    try:  # as the job creates it: one partition, every command kept ([topics.control])
        create_kind(config.kafka, [topic], config.topics.control, **{"retention.ms": "-1"})
        producer = new_producer(config.kafka, {"enable.idempotence": True, **PARTITIONER})
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
    partition, offset = delivered[0][1].partition(), delivered[0][1].offset()
    what = "removal" if q is None else "query"
    from ivm.processor.job import state_dir
    from ivm.processor.operations.heartbeat import liveness

    process = liveness(state_dir(config))
    if not process.running or wait <= 0:
        later = "when it next starts" if not process.running else "at its next batch"
        print(
            f"query {name}: {what} sent ({topic} offset {offset}); pending: the pipeline ({process.describe()}) takes "
            f"it {later} (`ivm query list` shows whether it was applied)"
        )
        return 0
    answer = _await_answer(config, topic, partition, offset, wait)
    if answer is None:
        print(
            f"{where}: query {name}: sent ({topic} offset {offset}), but the running job did not answer within "
            f"{wait:g} s: pending (`ivm query list` shows when it is applied or refused)",
            file=sys.stderr,
        )
        return 1
    if answer.refused:
        print(f"{where}: query {name}: {answer.reason}", file=sys.stderr)
        return 1
    if q is None:
        print(f"query {name}: removed by the running job ({topic} offset {offset}); its output topics stay")
    else:
        print(
            f"query {name}: applied by the running job ({topic} offset {offset}): built from the relations' contents, "
            f"publishing to {q.result_topic}"
        )
    return 0


def _await_answer(config, topic: str, partition: int, offset: int, wait: float):
    """The command at ``partition``, ``offset`` once the job answered it (``None`` after ``wait`` seconds)."""
    import time

    from ivm.processor.control import read_log

    deadline = time.monotonic() + wait
    while True:
        for command in read_log(config.kafka, topic):
            if (command.partition, command.offset) == (partition, offset) and command.answer is not None:
                return command
        if time.monotonic() > deadline:
            return None
        time.sleep(1.0)


def _list(config, current, overrides, commands, as_json: bool) -> int:
    """Each query with where it comes from and its state: maintained, pending (a command the job has not
    answered yet) or refused (the last command for its name, with the reason)."""
    configured = {q.name for q in config.queries}
    last = {c.name: c for c in commands}  # the newest command per name
    rows = []
    for q in current.queries:
        source = "config"
        if q.name in overrides:
            source = "control (replaces the file's)" if q.name in configured else "control"
        state, reason = "maintained", None
        newest = last.get(q.name)
        if newest is not None and newest.answer is None:
            state = "pending"
        elif newest is not None and newest.refused:  # the query runs as before the refused command
            reason = f"its last command was refused: {newest.reason}"
        rows.append(
            {"name": q.name, "query": q.query, "engine": q.engine, "source": source, "state": state, "reason": reason}
        )
    listed = {q.name for q in current.queries}
    for name, c in last.items():  # commands for names the job does not maintain: pending adds, refused ones
        if name in listed or (c.op == "remove" and not c.refused and c.answer is not None):
            continue
        if c.op == "remove" and c.answer is None:
            continue  # a pending removal of a name that is gone anyway
        state = "pending" if c.answer is None else "refused"
        query = c.query.query if c.query is not None else ""
        engine = c.query.engine if c.query is not None else ""
        rows.append(
            {"name": name, "query": query, "engine": engine, "source": "control", "state": state, "reason": c.reason}
        )
    removed = sorted(n for n, q in overrides.items() if q is None and n in configured)
    if as_json:
        print(json.dumps({"pipeline": config.name, "queries": rows, "removed": removed}, indent=2))
        return 0
    for row in rows:
        state = row["state"] + (f" ({row['reason']})" if row["reason"] else "")
        print(f"{row['name']:<20} {row['source']:<30} {row['engine']:<12} {row['query']}  [{state}]")
    for name in removed:
        print(f"{name:<20} {'removed through control':<30}")
    return 0
