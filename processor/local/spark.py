"""Spark in local mode with the Kafka connector on its class path."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ivm.processor.local.artifacts import spark_kafka_jars

_LOG4J2 = Path(__file__).with_name("log4j2-spark.properties")
# The driver JVM: the throughput collector, and the C1 compiler only.  Measured with a
# 400k-message Kafka source handed over as Arrow (bench/README, "Spark's JVM"): the same
# steady cost per message (about 7 µs of CPU), and a first run that costs 18 µs per
# message instead of 25-34 µs, because C2 compiles Spark's code for seconds of CPU.
# IVM_SPARK_JAVA_OPTIONS replaces these.
_JVM_OPTIONS = "-XX:+UseParallelGC -XX:TieredStopAtLevel=1"

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


#: the prefix of the per-session scratch folder (``spark.local.dir``), removed by :func:`stop_session`
LOCAL_DIR_PREFIX = "ivm-spark-"


def is_local(master: str) -> bool:
    """Whether ``master`` runs every Spark process on this machine (``local``, ``local[N]``,
    ``local-cluster[...]``), so that binding to the loopback address is right.

    >>> is_local("local[2]"), is_local("local-cluster[2,1,1024]"), is_local("spark://host:7077"), is_local("yarn")
    (True, True, False, False)
    """
    return master == "local" or master.startswith(("local[", "local-cluster["))


def default_settings() -> dict[str, str]:
    """The processor's defaults, which ``[spark.conf]`` may override (``IVM_SPARK_DRIVER_MEMORY``: the
    driver's memory, 2g unless set)."""
    return {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": os.environ.get("IVM_SPARK_DRIVER_MEMORY", "2g"),
        "spark.ui.showConsoleProgress": "false",
    }


def owned_settings() -> dict[str, str]:
    """The settings the processor owns whatever the master (also under spark-submit, :mod:`ivm.processor.submit`):
    no speculation, and the stream's temporary checkpoint and stop bound."""
    return {
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.sql.streaming.stopTimeout": "5s",  # a stop never waits on a Kafka fetch for long
        "spark.speculation": "false",  # a second attempt of a batch would only cost (ivm.processor.placement)
    }


def spark_session(
    app_name: str = "ivm",
    master: str = "local[2]",
    log_dir: str | None = None,
    conf: Sequence[tuple[str, str]] = (),
) -> SparkSession:
    """A SparkSession for the streaming job; the UI is off and shuffles are small.

    ``conf`` (``[spark.conf]``) overrides the processor's defaults (driver memory, shuffle partitions, the
    UI, the application's name); the settings the processor owns (:func:`owned_settings`) come last and
    cannot be overridden (the configuration refuses them by name, :data:`ivm.processor.config.OWNED_SPARK_CONF`).

    On a local master Spark binds to the loopback address (``SPARK_LOCAL_IP=127.0.0.1`` for the JVM it
    launches, unless set already), so a machine whose host name resolves to an unreachable address still
    works; on a cluster master nothing is pinned: executors on other hosts must reach the driver.  The
    scratch folder is a fresh ``ivm-spark-*`` folder; :func:`stop_session` removes it.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    pinned = is_local(master) and "SPARK_LOCAL_IP" not in os.environ
    if not is_local(master) and os.environ.get("SPARK_LOCAL_IP", "").startswith("127."):
        log.warning(
            "SPARK_LOCAL_IP=%s with the cluster master %s: executors on other hosts cannot reach this driver",
            os.environ["SPARK_LOCAL_IP"], master,
        )  # fmt: skip
    local_dir = tempfile.mkdtemp(prefix=LOCAL_DIR_PREFIX)
    log_file = Path(log_dir or local_dir) / "spark-driver.log"
    java_options = f"-Dlog4j2.configurationFile=file:{_LOG4J2} -Divm.spark.log={log_file} " + os.environ.get(
        "IVM_SPARK_JAVA_OPTIONS", _JVM_OPTIONS
    )
    builder = SparkSession.builder.appName(app_name)
    for key, value in {**default_settings(), **dict(conf)}.items():
        builder = builder.config(key, value)
    owned = {
        **owned_settings(),
        "spark.master": master,
        "spark.jars": ",".join(str(j) for j in spark_kafka_jars()),
        "spark.local.dir": local_dir,
        "spark.driver.extraJavaOptions": java_options,
        # the executors' JVMs the same way (a cluster's executors read Kafka; placement = "executors" runs there)
        "spark.executor.extraJavaOptions": os.environ.get("IVM_SPARK_JAVA_OPTIONS", _JVM_OPTIONS),
    }
    for key, value in owned.items():
        builder = builder.config(key, value)
    if pinned:  # only the JVM launched now sees it: the environment of this process is left as it was
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    try:
        session = builder.getOrCreate()
    finally:
        if pinned:
            os.environ.pop("SPARK_LOCAL_IP", None)
    if session.conf.get("spark.local.dir", None) != local_dir:  # an existing session: its folder is in use
        shutil.rmtree(local_dir, ignore_errors=True)
    _users[id(session)] = _users.get(id(session), 0) + 1
    return session


#: callers of spark_session per session: a process has one SparkSession, which spark_session hands to
#: every caller (getOrCreate); only the last stop_session of its callers stops it
_users: dict[int, int] = {}


def stop_session(spark: SparkSession, jvm_exit_timeout: float = 10.0) -> None:
    """Stop ``spark``, end the driver JVM this process launched and remove the ``ivm-spark-*`` scratch
    folder (shuffle files, the Python workers' files, the driver's log when no other folder was given).
    A session :func:`spark_session` also handed to another caller that has not stopped it yet is left
    running (the bootstrap inside a process whose job already runs Spark, the tests' shared session).

    The JVM deletes its own ``spark-*`` folders in the system temp directory by a shutdown hook, which runs
    when it sees this process's end; waiting for it here means they are gone when the stop returns, not
    a moment after.  A later :func:`spark_session` in this process launches a new JVM.
    """
    users = _users.get(id(spark), 1) - 1
    if users > 0:  # another caller in this process got the same session from spark_session: it stops it
        _users[id(spark)] = users
        return
    _users.pop(id(spark), None)
    local = spark.conf.get("spark.local.dir", None)
    try:
        context = getattr(spark, "sparkContext", None)  # read before the stop clears it
        gateway = getattr(context, "_gateway", None)
        spark.stop()
        _end_gateway(gateway, jvm_exit_timeout)
    finally:
        if local and Path(local).name.startswith(LOCAL_DIR_PREFIX):
            shutil.rmtree(local, ignore_errors=True)


def _end_gateway(gateway: Any, timeout: float) -> None:
    """Close the stopped session's driver JVM's stdin (it exits on that, running its shutdown hooks) and
    wait; only the gateway this process launched for that session, never another one."""
    from pyspark import SparkContext

    proc = getattr(gateway, "proc", None)
    if proc is None or gateway is not SparkContext._gateway:  # not a JVM this process launched for it
        return
    # py4j's callback threads report the sockets closing under them (at INFO, with a traceback): expected now
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        gateway.shutdown()
    except Exception as err:  # the gateway connection may already be gone
        log.debug("closing the Spark gateway: %s", err)
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout)
    except Exception:
        log.warning("the Spark driver JVM (pid %d) did not exit within %.0f s; killing it", proc.pid, timeout)
        proc.kill()
    SparkContext._gateway = None
    SparkContext._jvm = None


def temporary_checkpoint() -> str:
    """A fresh folder for the streaming query's checkpoint when the user gives none (the caller removes it
    at the stop).  Spark's own default, a ``temporary-*`` folder in the JVM's temp directory, stays behind
    whenever the query's stop does not finish in time; a fresh folder also never resumes old offsets."""
    return tempfile.mkdtemp(prefix="ivm-checkpoint-")
