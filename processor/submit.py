"""A pipeline under ``spark-submit``: the entry script for a Spark cluster's own launcher.

::

    spark-submit --master local-cluster[2,1,1024] --jars "$(ivm local jars)" \\
        ivm/processor/submit.py -c pipeline.toml [--metrics-port 9108]

``ivm run`` builds its Spark session itself (``[spark] master``, ``[spark.conf]``); here spark-submit has
launched the driver JVM and holds the session's configuration, and this script only adds to it:

- **The master is spark-submit's** (``--master``, else its ``spark-defaults.conf``).  ``[spark] master`` is
  not used; when the file names another master, one log line says which one runs.  The summary, the metrics
  and ``ivm status`` show spark-submit's.
- **``[spark.conf]``** applies to what spark-submit's command line and defaults leave unset (spark-submit's
  ``--conf`` wins for a key both give); settings the driver JVM reads at its launch (``spark.driver.memory``,
  ``spark.driver.extraJavaOptions``) only take effect from spark-submit's command line.
- **What the processor owns** (:func:`ivm.processor.local.spark.owned_settings`: speculation off, the stream's
  temporary checkpoint and stop bound) is set on the session; a spark-submit ``--conf`` that contradicts it
  (``spark.speculation=true``, a ``spark.sql.streaming.checkpointLocation``) is refused with the reason
  (exit 2), as ``[spark.conf]`` refuses it.
- **Spark's Kafka connector** must be on spark-submit's class path (``--jars "$(ivm local jars)"`` or
  ``--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<Spark's version>``); without it the script says
  so and exits 2.

The stream, the exactly-once commits and the recovery are :func:`ivm.processor.job.run_job`'s, as under
``ivm run``; SIGTERM and SIGINT stop it cleanly.  Run outside spark-submit the script refuses to start.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

if __package__ in (None, ""):  # spark-submit runs this file as a script: the package is beside it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

log = logging.getLogger("ivm.processor.submit")

#: spark-submit settings that contradict what the processor owns: key -> (the value it needs, why)
_CONTRADICTIONS: dict[str, tuple[str | None, str]] = {
    "spark.speculation": ("false", "spark.speculation"),
    "spark.sql.streaming.checkpointLocation": (None, "spark.sql.streaming.checkpointLocation"),
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": (
        "true",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation",
    ),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spark-submit [OPTIONS] ivm/processor/submit.py",
        description="Run a pipeline's streaming job under spark-submit (its master and configuration).",
    )
    p.add_argument("--config", "-c", required=True, help="pipeline configuration (TOML)")
    p.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT")
    p.add_argument("--metrics-port", type=int, help="port of the /metrics endpoint (0: none)")
    p.add_argument("--metrics-address", help="address the /metrics endpoint binds to")
    p.add_argument("--name", help="pipeline name: transactional id, progress topic, state folder")
    p.add_argument("--state-dir", help="folder of the state snapshots")
    p.add_argument("--placement", choices=["driver", "executors"])
    p.add_argument("-v", "--verbose", action="store_true", help="the Kafka client's own log lines too")
    return p


def contradictions(launched: dict[str, str]) -> list[str]:
    """spark-submit settings that contradict what the processor owns, one line each with the reason.

    >>> contradictions({"spark.speculation": "true", "spark.master": "yarn"})  # doctest: +ELLIPSIS
    ['spark-submit --conf spark.speculation=true: must stay false (the processor sets it): ...']
    >>> contradictions({"spark.speculation": "false"})
    []
    """
    from ivm.processor.config import OWNED_SPARK_CONF

    out = []
    for key, (needed, reason) in _CONTRADICTIONS.items():
        if key in launched and (needed is None or launched[key].strip().lower() != needed):
            out.append(f"spark-submit --conf {key}={launched[key]}: {OWNED_SPARK_CONF[reason]}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from ivm.processor.cli import configure_logging

    configure_logging(args.verbose)
    logging.getLogger("processor").setLevel(logging.INFO)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        print(
            "ivm/processor/submit.py: not running under spark-submit (run `spark-submit [--master M] --jars "
            '"$(ivm local jars)" ivm/processor/submit.py -c FILE`, or `ivm run -c FILE` without spark-submit)',
            file=sys.stderr,
        )
        return 2
    from ivm.processor.commands.check import report, validate
    from ivm.processor.config import ConfigError, load_config

    try:
        config = load_config(args.config).with_overrides(
            bootstrap=args.bootstrap, metrics_port=args.metrics_port, metrics_address=args.metrics_address,
            name=args.name, state_dir=args.state_dir, placement=args.placement,
        )  # fmt: skip
    except ConfigError as err:
        report(err, "submit")
        return 2
    if validate(config, "submit") is None:
        return 2

    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # the gateway to the driver JVM spark-submit launched
    launched = dict(SparkConf().getAll())  # spark-submit's --master, --conf, --jars and defaults
    refused = contradictions(launched)
    if refused:
        for line in refused:
            print(f"ivm/processor/submit.py: {line}", file=sys.stderr)
        return 2
    master = launched.get("spark.master", "local[*]")
    if master != config.spark_master:
        log.info("[spark] master %s not used: spark-submit's master %s runs the pipeline", config.spark_master, master)
    config = config.with_overrides(spark_master=master)

    from pyspark.sql import SparkSession

    from ivm.processor.config import shown
    from ivm.processor.local.spark import owned_settings

    builder = SparkSession.builder.appName(launched.get("spark.app.name", "ivm-processor"))
    applied = [(key, value) for key, value in config.spark_conf if key not in launched]  # spark-submit's wins
    for key, value in applied:
        builder = builder.config(key, value)
    if config.spark_conf:
        left = [key for key, _ in config.spark_conf if key in launched]
        log.info(
            "[spark.conf] applied: %s; left to spark-submit: %s",
            ", ".join(shown(k, v) for k, v in applied) or "none", ", ".join(left) or "none",
        )  # fmt: skip
    for key, value in owned_settings().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        if not _has_kafka_connector(spark):
            print(
                "ivm/processor/submit.py: Spark's Kafka connector is not on spark-submit's class path: add "
                '--jars "$(ivm local jars)" (or --packages org.apache.spark:spark-sql-kafka-0-10_2.13:'
                f"{spark.version})",
                file=sys.stderr,
            )
            return 2
        return _run(config, spark)
    finally:
        spark.stop()


def _has_kafka_connector(spark) -> bool:
    """Whether Spark finds the ``kafka`` data source (looked up as ``readStream.format("kafka")`` does: in
    the class loader that holds spark-submit's ``--jars``)."""
    try:
        datasource = spark._jvm.org.apache.spark.sql.execution.datasources.DataSource
        datasource.lookupDataSource("kafka", spark._jsparkSession.sessionState().conf())
    except Exception:  # py4j's error around Spark's "Failed to find data source: kafka"
        return False
    return True


def _run(config, spark) -> int:
    from confluent_kafka import KafkaException

    from ivm.processor.job import run_job
    from ivm.processor.kafka.topics import BrokerUnreachable, kafka_reason, require_broker
    from ivm.processor.operations.logs import collapse_repeats
    from ivm.processor.state.recovery import RecoveryError

    collapse_repeats()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        require_broker(config.kafka)  # one line at once, not 30 s of client timeouts
        report = run_job(config, stop=stop, spark=spark)
    except BrokerUnreachable as err:
        print(f"ivm/processor/submit.py: {err}", file=sys.stderr)
        return 1
    except RecoveryError as err:  # the stored state cannot serve this configuration: the reason and the fix
        print(f"ivm/processor/submit.py: {err}", file=sys.stderr)
        return 2
    except KafkaException as err:
        print(f"ivm/processor/submit.py: Kafka at {config.bootstrap}: {kafka_reason(err)}", file=sys.stderr)
        return 1
    if report.abandoned is not None:
        # a thread is still blocked in the Kafka client on the abandoned transaction (as ivm run): end here
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
