"""``ivm local``: the local services (fetch their artifacts, run a broker or Prometheus).

A port that is taken is refused before anything starts (exit 1, naming the
address); a service that does not start ends the command with one line naming
its log.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from ivm.processor.cli import CommandError


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port, 1..65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (1..65535)")
    return port


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("local", help="fetch artifacts and run local services (Kafka broker, Prometheus)")
    sub = p.add_subparsers(dest="service", metavar="SERVICE", required=True)
    sub.add_parser(
        "fetch",
        help="fetch the Kafka broker and Spark connector jars with Maven (cached)",
        description="Fetch the Apache Kafka broker and Spark's Kafka connector jars with Maven, cached in "
        "~/.cache/ivm-kafka (make setup does it); print where they are.",
    )
    sub.add_parser(
        "jars",
        help="print Spark's Kafka connector jars, comma-separated (spark-submit --jars)",
        description="Print the jars of Spark's Kafka connector (fetched with Maven and cached, as `ivm local "
        'fetch`) comma-separated, for spark-submit\'s --jars: spark-submit --jars "$(ivm local jars)" '
        "ivm/processor/submit.py -c pipeline.toml.",
    )
    kafka = sub.add_parser(
        "kafka",
        help="run a single-node KRaft broker on loopback until interrupted",
        description="Run a single-node Kafka broker (KRaft, plaintext) on 127.0.0.1:PORT until Ctrl-C, its data "
        "and log in --dir. A port that is taken is an error (exit 1) before anything starts.",
    )
    kafka.add_argument("--port", type=tcp_port, default=9092, help="listener port (default 9092)")
    kafka.add_argument("--dir", help="data and log folder (default: .local/kafka/<time>)")
    prom = sub.add_parser(
        "prometheus",
        help="run Prometheus scraping the processor until interrupted",
        description="Run Prometheus (the Debian package) on 127.0.0.1:PORT until Ctrl-C, scraping each --target "
        "every 5 s with the alert rules of monitoring/. A port that is taken is an error (exit 1).",
    )
    prom.add_argument("--target", action="append", default=None, help="host:port of /metrics (default 127.0.0.1:9108)")
    prom.add_argument("--port", type=tcp_port, default=9090, help="Prometheus port (default 9090)")
    return p


def _wait_for_interrupt() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def run(args: argparse.Namespace) -> int:
    from ivm.processor.local import artifacts
    from ivm.processor.local.ports import ensure_free
    from ivm.processor.local.stack import local_dir

    if args.service == "fetch":
        print(f"Kafka broker jars:    {artifacts.kafka_jars()}")
        print(f"Spark Kafka connector: {artifacts.spark_kafka_jars()[0].parent}")
        return 0
    if args.service == "jars":
        print(",".join(str(jar) for jar in artifacts.spark_kafka_jars()))
        return 0
    if args.service == "kafka":
        import time

        from ivm.processor.local.kafka import KafkaBroker

        workdir = Path(args.dir) if args.dir else local_dir() / "kafka" / time.strftime("%Y%m%d-%H%M%S")
        props = workdir / "server.properties"
        if props.exists():  # a broker of this folder restarts on its own port, with its data
            ensure_free(_listener_port(props), hint=f"the broker of {workdir} listens there: stop what holds it")
        else:
            ensure_free(args.port)
        try:
            broker = KafkaBroker.start(workdir, port=args.port)
        except RuntimeError as err:  # no Java, storage not formatted, the broker exited: the log says why
            raise CommandError(_first_line(err), 1) from err
        with broker:
            print(f"Kafka broker (KRaft) on {broker.bootstrap}; log {broker.log_path}; Ctrl-C stops it", flush=True)
            _wait_for_interrupt()
        return 0
    if args.service == "prometheus":
        from ivm.processor.local.prometheus import RULES_DIR, PrometheusServer

        rules = sorted(RULES_DIR.glob("*.yml")) if RULES_DIR.exists() else []
        ensure_free(args.port)
        try:
            server = PrometheusServer.start(
                args.target or ["127.0.0.1:9108"], local_dir() / "prometheus", args.port, "5s", rules
            )
        except RuntimeError as err:  # not installed, or it exited: the log says why
            raise CommandError(_first_line(err), 1) from err
        with server:
            print(f"Prometheus on {server.url}; Ctrl-C stops it", flush=True)
            _wait_for_interrupt()
        return 0
    return 2


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _listener_port(props: Path) -> int:
    """The PLAINTEXT listener port of a broker folder's ``server.properties``."""
    for line in props.read_text().splitlines():
        if line.startswith("listeners="):
            return int(line.split(",")[0].rsplit(":", 1)[1])
    raise CommandError(f"{props}: no listeners= line")
