"""``ivm run``: the Spark Structured Streaming job.

Before anything connects, the configuration (with the command-line overrides)
is validated and planned the way ``ivm check`` does it; every finding is
printed on its own line and the exit code is 2.  A Kafka failure (a broker that
cannot be reached) ends the run with one line and exit code 1; stored state that
cannot serve the configuration (a changed relation, history lost to retention)
with the reason and the commands that fix it, and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("run", help="run the streaming job of a pipeline configuration")
    p.add_argument("--config", "-c", required=True, help="pipeline configuration (TOML)")
    p.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT",
        help="Kafka bootstrap servers, host:port[,host:port...] (default: the configuration's [kafka].bootstrap, "
        "else 127.0.0.1:9092)",
    )  # fmt: skip
    p.add_argument("--metrics-port", type=int, help="port of the /metrics endpoint (0: none)")
    p.add_argument("--metrics-address", help="address the /metrics endpoint binds to (default 127.0.0.1)")
    p.add_argument("--master", help="Spark master (overrides [spark].master)")
    p.add_argument("--name", help="pipeline name: transactional id, progress topic, state folder")
    p.add_argument("--state-dir", help="folder of the state snapshots")
    p.add_argument("--shards", type=int, help="shards per query (HyperCube routing)")
    p.add_argument(
        "--placement", choices=["driver", "executors"],
        help="where the engines' state lives: in the driver (default) or in shard hosts on Spark's executors",
    )  # fmt: skip
    p.add_argument("--max-offsets-per-trigger", type=int, help="input records per micro-batch at most")
    return p


def kernels_at_start() -> bool:
    """Log which compiled kernels load (``ivm.kernels``: a warning naming the missing ones); ``False`` after
    printing why when one is missing under CI, where that fails the run."""
    from ivm.kernels import KernelsMissing, installed_kernels, require_compiled, summary

    report = installed_kernels()
    missing = any(not k.compiled for k in report)
    logging.getLogger("processor.kernels").log(logging.WARNING if missing else logging.INFO, summary(report))
    try:
        require_compiled(report)
    except KernelsMissing as err:
        print(f"ivm run: {err}", file=sys.stderr)
        return False
    return True


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from ivm.processor.commands.check import report, validate
    from ivm.processor.config import ConfigError, load_config
    from ivm.processor.job import run_job
    from ivm.processor.operations.logs import collapse_repeats
    from ivm.processor.state.recovery import RecoveryError

    try:
        config = load_config(args.config).with_overrides(
            bootstrap=args.bootstrap,
            metrics_port=args.metrics_port,
            metrics_address=args.metrics_address,
            spark_master=args.master,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            name=args.name,
            state_dir=args.state_dir,
            shards=args.shards,
            placement=args.placement,
        )
    except ConfigError as err:
        report(err, "run")
        return 2
    if validate(config, "run") is None:
        return 2
    logging.getLogger("processor").setLevel(logging.INFO)
    collapse_repeats()  # an outage's repeated warnings: one line, then a count
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    from ivm.processor.kafka.topics import kafka_reason, require_broker

    require_broker(config.kafka)  # one line at once, not 30 s of client timeouts (and nothing logged before it)
    if not kernels_at_start():
        return 1
    try:
        report = run_job(config, stop=stop)
    except RecoveryError as err:  # the stored state cannot serve this configuration: the reason and the fix
        print(f"ivm run: {err}", file=sys.stderr)
        return 2
    except KafkaException as err:
        if getattr(args, "verbose", False):
            logging.getLogger("processor").exception("Kafka failure")
        print(f"ivm run: Kafka at {config.bootstrap}: {kafka_reason(err)}", file=sys.stderr)
        return 1
    if report is not None and report.abandoned is not None:
        # a thread is still blocked in the Kafka client on the abandoned transaction: the client's
        # clean-up at interpreter exit would wait on it, so the process ends here
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
