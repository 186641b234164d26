"""Spark in local mode with the Kafka connector on its class path."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from processor.local.artifacts import spark_kafka_jars

_LOG4J2 = Path(__file__).with_name("log4j2-spark.properties")
# The driver JVM: the throughput collector, and the C1 compiler only.  Measured with a
# 400k-message Kafka source handed over as Arrow (bench/README, "Spark's JVM"): the same
# steady cost per message (about 7 µs of CPU), and a first run that costs 18 µs per
# message instead of 25-34 µs, because C2 compiles Spark's code for seconds of CPU.
# IVM_SPARK_JAVA_OPTIONS replaces these.
_JVM_OPTIONS = "-XX:+UseParallelGC -XX:TieredStopAtLevel=1"

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_session(app_name: str = "ivm", master: str = "local[2]", log_dir: str | None = None) -> SparkSession:
    """A SparkSession for the streaming job; the UI is off and shuffles are small."""
    from pyspark.sql import SparkSession

    jars = ",".join(str(j) for j in spark_kafka_jars())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    local_dir = tempfile.mkdtemp(prefix="ivm-spark-")
    log_file = Path(log_dir or local_dir) / "spark-driver.log"
    java_options = f"-Dlog4j2.configurationFile=file:{_LOG4J2} -Divm.spark.log={log_file} " + os.environ.get(
        "IVM_SPARK_JAVA_OPTIONS", _JVM_OPTIONS
    )
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", os.environ.get("IVM_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.local.dir", local_dir)
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.sql.streaming.stopTimeout", "5s")  # a stop never waits on a Kafka fetch for long
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.ui.showConsoleProgress", "false")
    )
    return builder.getOrCreate()
