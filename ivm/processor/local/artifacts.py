"""Fetch the services' JVM artifacts with Maven, cached between runs.

The cache lives in ``$IVM_CACHE`` (default ``~/.cache/ivm-kafka``), one folder
per artifact set and version; a folder is complete once its ``.complete``
marker exists, so an interrupted fetch is simply repeated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

KAFKA_VERSION = "4.1.0"
SCALA_BINARY = "2.13"
LOG4J_VERSION = "2.24.3"
# Spark's Kafka connector must match the pyspark version (see pyproject.toml).
SPARK_VERSION = "4.0.0"
# The connector's own runtime dependencies (from its POM).  They are fetched one
# by one: resolving them transitively reads Spark's parent POM, which declares
# an extra repository that these machines cannot reach.
SPARK_KAFKA_ARTIFACTS = (
    f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}",
    f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}",
    "org.apache.kafka:kafka-clients:3.9.1",
    "org.apache.commons:commons-pool2:2.12.0",
)

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>ivm.local</groupId><artifactId>fetch</artifactId><version>1</version>
  <dependencies>{deps}</dependencies>
</project>
"""
_DEP = "<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"


class ArtifactError(RuntimeError):
    """An artifact could not be fetched; the message carries Maven's output."""


def cache_dir() -> Path:
    return Path(os.environ.get("IVM_CACHE", Path.home() / ".cache" / "ivm-kafka"))


def kafka_jars() -> Path:
    """The folder holding the Kafka broker and its runtime dependencies."""
    target = cache_dir() / f"kafka_{SCALA_BINARY}-{KAFKA_VERSION}"
    coords = [
        f"org.apache.kafka:kafka_{SCALA_BINARY}:{KAFKA_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
    ]
    return _ensure(target, lambda tmp: _copy_dependencies(coords, tmp))


def kafka_tools_jars() -> Path:
    """The folder holding the Kafka distribution's command-line tools (``kafka-tools``: the console producer,
    ``kafka-consumer-groups``) and their runtime dependencies; the tests check the processor against them."""
    target = cache_dir() / f"kafka-tools-{KAFKA_VERSION}"
    coords = [
        f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
    ]
    return _ensure(target, lambda tmp: _copy_dependencies(coords, tmp))


def spark_kafka_jars() -> list[Path]:
    """The jars of Spark's Kafka connector matching the installed pyspark."""
    target = cache_dir() / f"spark-sql-kafka-{SPARK_VERSION}"
    _ensure(target, lambda tmp: [_copy_one(c, tmp) for c in SPARK_KAFKA_ARTIFACTS])
    return sorted(target.glob("*.jar"))


def _ensure(target: Path, fetch) -> Path:
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        fetch(tmp)
        (tmp / ".complete").touch()
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _mvn(args: list[str], cwd: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ArtifactError("Maven (mvn) is not installed: it fetches the Kafka and Spark jars")
    proc = subprocess.run([mvn, "-B", "-q", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArtifactError(f"mvn {' '.join(args)} failed:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")


def _copy_dependencies(coords: list[str], out: Path) -> None:
    deps = "".join(_DEP.format(g=g, a=a, v=v) for g, a, v in (c.split(":") for c in coords))
    with tempfile.TemporaryDirectory() as work:
        Path(work, "pom.xml").write_text(_POM.format(deps=deps))
        _mvn(
            ["dependency:copy-dependencies", f"-DoutputDirectory={out}", "-DincludeScope=runtime"],
            Path(work),
        )


def _copy_one(coord: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as work:
        Path(work, "pom.xml").write_text(_POM.format(deps=""))
        _mvn(["dependency:copy", f"-Dartifact={coord}", f"-DoutputDirectory={out}"], Path(work))


# Apicurio Registry (DESIGN §6), the Schema Registry for the Confluent wire format.
# Maven Central carries its ready-to-run Quarkus distribution, attached to
# io.apicurio:apicurio-registry-app with classifier "all" (tar.gz, ~150 MB).  The 3.x
# line needs Java 21 or newer; the 2.x line runs on Java 17.  The one artifact is
# fetched alone: its parent POM declares extra repositories these machines cannot reach.
APICURIO_VERSION = "3.3.3"
APICURIO_LEGACY_VERSION = "2.6.13.Final"


def apicurio_registry_dist(version: str = APICURIO_VERSION) -> Path:
    """The folder holding the unpacked Apicurio Registry distribution ``version``.

    It contains the runnable jar (``quarkus-run.jar`` for 3.x, ``*-runner.jar`` for 2.x)
    and its ``lib/`` folder; the downloaded archive is not kept in the cache.
    """
    target = cache_dir() / f"apicurio-registry-app-{version}"

    def fetch(tmp: Path) -> None:
        download = tmp / ".download"
        _copy_one(f"io.apicurio:apicurio-registry-app:{version}:tar.gz:all", download)
        archives = sorted(download.glob("*.tar.gz"))
        if len(archives) != 1:
            raise ArtifactError(f"expected one Apicurio Registry archive, found {archives}")
        with tarfile.open(archives[0]) as tar:
            tar.extractall(tmp, filter="data")
        shutil.rmtree(download)

    return _ensure(target, fetch)
