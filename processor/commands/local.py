"""``ivm local``: the local services (fetch their artifacts, run a broker or Prometheus)."""

from __future__ import annotations

import argparse
import signal
import threading


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("local", help="fetch artifacts and run local services (Kafka broker, Prometheus)")
    sub = p.add_subparsers(dest="service", metavar="SERVICE", required=True)
    sub.add_parser("fetch", help="fetch the Kafka broker and Spark connector jars with Maven (cached)")
    kafka = sub.add_parser("kafka", help="run a single-node KRaft broker on loopback until interrupted")
    kafka.add_argument("--port", type=int, default=9092, help="listener port (default 9092)")
    kafka.add_argument("--dir", help="data and log folder (default: .local/kafka/<time>)")
    prom = sub.add_parser("prometheus", help="run Prometheus scraping the processor until interrupted")
    prom.add_argument("--target", action="append", default=None, help="host:port of /metrics (default 127.0.0.1:9108)")
    prom.add_argument("--port", type=int, default=9090, help="Prometheus port (default 9090)")
    return p


def _wait_for_interrupt() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from processor.local import artifacts
    from processor.local.stack import local_dir

    if args.service == "fetch":
        print(f"Kafka broker jars:    {artifacts.kafka_jars()}")
        print(f"Spark Kafka connector: {artifacts.spark_kafka_jars()[0].parent}")
        return 0
    if args.service == "kafka":
        import time

        from processor.local.kafka import KafkaBroker

        workdir = Path(args.dir) if args.dir else local_dir() / "kafka" / time.strftime("%Y%m%d-%H%M%S")
        with KafkaBroker.start(workdir, port=args.port) as broker:
            print(f"Kafka broker (KRaft) on {broker.bootstrap}; log {broker.log_path}; Ctrl-C stops it", flush=True)
            _wait_for_interrupt()
        return 0
    if args.service == "prometheus":
        from processor.local.prometheus import RULES_DIR, PrometheusServer

        rules = sorted(RULES_DIR.glob("*.yml")) if RULES_DIR.exists() else []
        with PrometheusServer.start(
            args.target or ["127.0.0.1:9108"], local_dir() / "prometheus", args.port, "5s", rules
        ) as server:
            print(f"Prometheus on {server.url}; Ctrl-C stops it", flush=True)
            _wait_for_interrupt()
        return 0
    return 2
