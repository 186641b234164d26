"""``ivm reset [QUERY] -c CONFIG``: drop a query's state, or the whole pipeline's, on purpose.

A query's state: removed from every snapshot, so that the next ``ivm run``
builds it again from the relations' contents kept in the snapshot (the query
over every update ever committed, bootstrap included), leaving the other
queries untouched.

The pipeline's state: every snapshot and the committed progress (the
``<pipeline>.progress`` topic) are deleted; the next ``ivm run`` starts over
from the relation topics at ``starting_offsets``.  Tuples a bootstrap loaded
are in no topic: bootstrap again after a reset.  Output topics are kept.

Stop the pipeline first: a running one would write a new snapshot.  While
its heartbeat (<state_dir>/running.json) says it runs, the reset is refused
(exit 1) and nothing is changed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "reset",
        help="drop a query's state (rebuilt from the relations at the next start) or the whole pipeline's",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("query", nargs="?", help="the query whose state to drop (default: the whole pipeline's)")
    p.add_argument("--config", "-c", required=True, help="pipeline configuration (TOML)")
    p.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT",
        help="Kafka bootstrap servers, host:port[,host:port...] (default: the configuration's [kafka].bootstrap, "
        "else 127.0.0.1:9092)",
    )  # fmt: skip
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    return p


def _confirm(question: str, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        print(f"ivm reset: {question} Not confirmed: run it in a terminal or pass --yes.", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def run(args: argparse.Namespace) -> int:
    from ivm.processor.config import ConfigError, load_config
    from ivm.processor.job import snapshot_location
    from ivm.processor.state.recovery import StateStore

    try:
        config = load_config(args.config).with_overrides(bootstrap=args.bootstrap)
    except ConfigError as err:
        for line in err.errors or str(err).splitlines():
            print(f"ivm reset: {line}", file=sys.stderr)
        return 2
    from ivm.processor.job import state_dir
    from ivm.processor.operations.heartbeat import liveness
    from ivm.processor.placement.host import clear_slices, slice_stores

    process = liveness(state_dir(config))
    if process.running:  # it would write a new snapshot, or go on from the state being dropped
        print(
            f"ivm reset: pipeline {config.name} is {process.describe()}: stop it first (Ctrl-C or SIGTERM to its "
            "`ivm run`), then reset",
            file=sys.stderr,
        )
        return 1

    store = StateStore(snapshot_location(config))
    snapshots = store.snapshots() + [p for s in slice_stores(snapshot_location(config)) for p in s.snapshots()]
    if args.query is not None:
        if args.query not in {q.name for q in config.queries}:
            known = ", ".join(q.name for q in config.queries)
            print(f"ivm reset: no query {args.query!r} in {args.config} (its queries: {known})", file=sys.stderr)
            return 2
        if not snapshots:
            print(
                f"pipeline {config.name}: no snapshot in {store.directory}: no query state is stored (the next start "
                "rebuilds every query from the relation topics)"
            )
            return 0
        question = (
            f"Drop the state of query {args.query!r} of pipeline {config.name!r} ({len(snapshots)} snapshots in "
            f"{store.directory})? The next `ivm run` rebuilds it from the relations' contents."
        )
        if not _confirm(question, args.yes):
            return 1
        changed = store.drop_query(args.query)
        changed += sum(s.drop_query(args.query) for s in slice_stores(snapshot_location(config)))
        print(f"query {args.query}: state dropped from {changed} snapshot(s); rebuilt at the next start")
        return 0
    from ivm.processor.kafka.topics import require_broker

    require_broker(config.kafka)  # one line at once, before asking
    question = (
        f"Drop ALL state of pipeline {config.name!r}: {len(snapshots)} snapshot(s) in {store.directory} and the "
        f"committed progress (topic {config.progress_topic})? The next `ivm run` starts over from the relation "
        f"topics at starting_offsets = {config.starting_offsets!r}; tuples loaded by `ivm bootstrap` are not in "
        "them."
    )
    if not _confirm(question, args.yes):
        return 1
    try:
        deleted = delete_topic(config.kafka, config.progress_topic)
    except Exception as err:
        print(f"ivm reset: cannot delete {config.progress_topic} at {config.bootstrap}: {err}", file=sys.stderr)
        return 1
    removed = store.clear() + clear_slices(snapshot_location(config))
    print(
        f"pipeline {config.name}: {removed} snapshot(s) removed, "
        f"{'topic ' + config.progress_topic + ' deleted' if deleted else 'no committed progress'}; "
        "the next start begins anew"
    )
    return 0


def delete_topic(bootstrap: Kafka, topic: str, timeout: float = 60) -> bool:
    """Delete ``topic`` and wait until the broker no longer lists it; False if it did not exist."""

    from ivm.processor.kafka.clients import admin as new_admin

    admin = new_admin(bootstrap)
    if topic not in admin.list_topics(timeout=30).topics:
        return False
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result()
    deadline = time.monotonic() + timeout
    while topic in admin.list_topics(timeout=30).topics:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} still listed {timeout:.0f} s after its deletion")
        time.sleep(0.2)
    return True
