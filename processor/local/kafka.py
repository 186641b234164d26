"""A single-node Apache Kafka broker in KRaft mode, as a local JVM process (and a cluster of several,
:class:`KafkaCluster`, for the multi-broker tests).

The broker runs from the official artifacts (``artifacts.kafka_jars``), binds
to 127.0.0.1 on free ports, keeps its data in a folder of its own and its log
beside it.  It is configured for transactions on one node (replication 1), as
the exactly-once outputs need.

With a :class:`BrokerSecurity` its one listener is ``SASL_SSL``: TLS with a
PEM key and certificate (signed by a CA the caller made, e.g. with openssl),
SCRAM users created when the storage is formatted (``kafka-storage format
--add-scram``), the broker's own connections as one of them.
:attr:`KafkaBroker.client_properties` are then the ``[kafka.properties]`` a
client needs (librdkafka's names, :mod:`ivm.processor.kafka.clients`).

>>> # with KafkaBroker.start() as broker: broker.bootstrap -> '127.0.0.1:PORT'
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ivm.processor.local.artifacts import kafka_jars
from ivm.processor.local.ports import free_port, wait_for_port
from ivm.processor.local.process import stop_group

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = info
logger.state.name = state.change.logger
logger.state.level = warn
"""


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("no Java runtime found: the Kafka broker needs Java 17 or newer")
    return java


# The local broker's JVM: the throughput collector and the C1 compiler only, as Spark's
# driver (ivm/processor/local/spark.py): C2 spends seconds of CPU compiling while a short
# run needs the cores.  IVM_KAFKA_JAVA_OPTIONS replaces these.
_JVM_OPTIONS = os.environ.get("IVM_KAFKA_JAVA_OPTIONS", "-XX:+UseParallelGC -XX:TieredStopAtLevel=1").split()


@dataclass(frozen=True)
class BrokerSecurity:
    """A ``SASL_SSL`` listener: the broker's TLS key and certificate chain (PEM files; the key PKCS#8,
    unencrypted), the CA that signed them, the SCRAM mechanism and its users (name -> password), and
    whether clients must present a certificate of that CA too (``client_auth``).

    The first user is the broker's own (its connections to itself: transaction markers).
    """

    key: Path
    certificate: Path
    ca: Path
    users: dict[str, str] = field(default_factory=dict)
    mechanism: str = "SCRAM-SHA-512"
    client_auth: bool = False  # mutual TLS: clients must show a certificate the CA signed (ssl.client.auth)

    def client_properties(self, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """``[kafka.properties]`` for a client of this listener as ``user`` (default: the first user); with
        ``client_auth`` the broker's own certificate and key serve as the client's (the CA signed them)."""
        user = user or next(iter(self.users))
        out = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": self.mechanism,
            "sasl.username": user,
            "sasl.password": self.users.get(user, "") if password is None else password,
            "ssl.ca.location": str(self.ca),
        }
        if self.client_auth:
            out |= {"ssl.certificate.location": str(self.certificate), "ssl.key.location": str(self.key)}
        return out


class KafkaBroker:
    """A running broker; stop it with :meth:`stop` (or use it as a context manager)."""

    def __init__(
        self,
        workdir: Path,
        port: int,
        controller_port: int,
        proc: subprocess.Popen,
        security: BrokerSecurity | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = port
        self.controller_port = controller_port
        self.proc = proc
        self.security = security

    @property
    def client_properties(self) -> dict[str, str]:
        """What a client needs besides the bootstrap servers (none for a plaintext broker)."""
        return self.security.client_properties() if self.security is not None else {}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    @classmethod
    def start(
        cls,
        workdir: Path | None = None,
        port: int | None = None,
        heap: str = "512m",
        timeout: float = 90.0,
        security: BrokerSecurity | None = None,
    ) -> KafkaBroker:
        """Format the storage (first start only) and start the broker (``security``: a SASL_SSL listener)."""
        workdir = Path(workdir or tempfile.mkdtemp(prefix="ivm-kafka-"))
        workdir.mkdir(parents=True, exist_ok=True)
        data = workdir / "data"
        props = workdir / "server.properties"
        if props.exists():  # a restart keeps the ports and the data
            conf = dict(line.split("=", 1) for line in props.read_text().splitlines() if "=" in line)
            port = int(conf["listeners"].split(",")[0].rsplit(":", 1)[1])
            controller_port = int(conf["controller.quorum.voters"].rsplit(":", 1)[1])
        else:
            port = port or free_port()
            controller_port = free_port()
            props.write_text(_server_properties(data, port, controller_port, security=security))
        proc = _launch(workdir, props, heap, standalone=True, scram=_scram_users(security))
        broker = cls(workdir, port, controller_port, proc, security)
        try:
            wait_for_port(port, timeout, alive=lambda: proc.poll() is None)
            broker.wait_ready(timeout)
        except Exception as err:
            broker.stop()
            raise RuntimeError(f"the Kafka broker did not start; see {broker.log_path}") from err
        return broker

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until the broker answers metadata requests."""
        from ivm.processor.kafka.clients import KafkaConnection
        from ivm.processor.kafka.clients import admin as new_admin

        admin = new_admin(KafkaConnection(self.bootstrap, tuple(self.client_properties.items())))
        deadline = time.monotonic() + timeout
        while True:
            try:
                if admin.list_topics(timeout=5).brokers:
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.3)

    def stop(self, kill: bool = False) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 30 s; ``kill`` kills at once)."""
        stop_group(self.proc, kill=kill)

    def restart(self, timeout: float = 90.0) -> KafkaBroker:
        """Stop and start again on the same ports with the same data."""
        self.stop()
        started = KafkaBroker.start(self.workdir, timeout=timeout, security=self.security)
        self.proc = started.proc
        return self

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class KafkaCluster:
    """Several combined broker and controller nodes in KRaft mode on 127.0.0.1, a static quorum of them all
    (3 nodes: 3 voters, one may fail), as the multi-broker tests need: the internal topics (offsets,
    transactions) and new topics by default replicated on every node (``transaction.state.log.min.isr`` 2).

    Each node is a :class:`KafkaBroker` (its own folder under ``workdir``, ports, JVM); :meth:`leader` says
    which node leads a partition and ``node(i).stop(kill=True)`` kills one.
    """

    def __init__(self, workdir: Path, nodes: dict[int, KafkaBroker]) -> None:
        self.workdir = workdir
        self.nodes = nodes

    @property
    def bootstrap(self) -> str:
        """Every node's address, comma-separated."""
        return ",".join(node.bootstrap for node in self.nodes.values())

    @classmethod
    def start(
        cls, workdir: Path | None = None, nodes: int = 3, heap: str = "384m", timeout: float = 180.0
    ) -> KafkaCluster:
        """Format and start ``nodes`` nodes at once (the quorum needs a majority before any node serves),
        then wait until the cluster's metadata lists them all."""
        workdir = Path(workdir or tempfile.mkdtemp(prefix="ivm-kafka-cluster-"))
        ports = {i: (free_port(), free_port()) for i in range(1, nodes + 1)}
        voters = ",".join(f"{i}@127.0.0.1:{controller}" for i, (_port, controller) in ports.items())
        cluster_id = uuid.uuid4().hex[:22]
        started: dict[int, KafkaBroker] = {}
        cluster = cls(workdir, started)
        try:
            for i, (port, controller) in ports.items():
                folder = workdir / f"node-{i}"
                folder.mkdir(parents=True, exist_ok=True)
                props = folder / "server.properties"
                props.write_text(_server_properties(folder / "data", port, controller, i, voters, replicas=nodes))
                started[i] = KafkaBroker(folder, port, controller, _launch(folder, props, heap, False, cluster_id))
            for node in started.values():
                wait_for_port(node.port, timeout, alive=lambda node=node: node.proc.poll() is None)
            cluster.wait_ready(timeout, brokers=nodes)
        except Exception as err:
            cluster.stop()
            raise RuntimeError(f"the Kafka cluster did not start; see the broker.log files under {workdir}") from err
        return cluster

    def wait_ready(self, timeout: float = 120.0, brokers: int | None = None) -> None:
        """Wait until the metadata lists ``brokers`` brokers (default: every node)."""
        from ivm.processor.kafka.clients import admin as new_admin

        want = brokers or len(self.nodes)
        admin = new_admin(self.bootstrap)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if len(admin.list_topics(timeout=5).brokers) >= want:
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {want} brokers after {timeout:.0f} s")
            time.sleep(0.5)

    def leader(self, topic: str, partition: int = 0) -> int:
        """The node id that leads ``topic``'s ``partition`` now."""
        from ivm.processor.kafka.clients import admin as new_admin

        admin = new_admin(self.bootstrap)
        return admin.list_topics(topic, timeout=30).topics[topic].partitions[partition].leader

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id]

    def stop(self, kill: bool = False) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 30 s; ``kill`` kills at once)."""
        for node in self.nodes.values():
            node.stop(kill=kill)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _launch(
    workdir: Path,
    props: Path,
    heap: str,
    standalone: bool,
    cluster_id: str | None = None,
    scram: list[str] | None = None,
) -> subprocess.Popen:
    """Format the node's storage (first start only; ``standalone``: a quorum of this node alone, else the
    static voters of its ``controller.quorum.voters``; every node of a cluster gets the same ``cluster_id``;
    ``scram``: the ``--add-scram`` arguments of the users a secured broker knows) and start its JVM."""
    data = workdir / "data"
    (workdir / "log4j2.properties").write_text(_LOG4J2.format(log=workdir / "broker.log"))
    classpath = f"{kafka_jars()}/*"
    java = _java()
    base = [java, "-cp", classpath, f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}"]
    if not (data / "meta.properties").exists():
        cluster_id = cluster_id or uuid.uuid4().hex[:22]
        fmt = subprocess.run(
            [*base, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props),
             *(["--standalone"] if standalone else []), *(scram or [])],
            capture_output=True, text=True,
        )  # fmt: skip
        if fmt.returncode != 0:
            raise RuntimeError(f"formatting the Kafka storage failed:\n{fmt.stdout}{fmt.stderr}")
    out = open(workdir / "broker.stdout", "ab")  # noqa: SIM115 (lives as long as the broker)
    return subprocess.Popen(
        [*base, f"-Xmx{heap}", "-Xms128m", *_JVM_OPTIONS, "kafka.Kafka", str(props)],
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def _scram_users(security: BrokerSecurity | None) -> list[str]:
    """``--add-scram`` arguments of ``kafka-storage format``: the users exist before the broker starts."""
    if security is None:
        return []
    out = []
    for name, password in security.users.items():
        out += ["--add-scram", f"{security.mechanism}=[name={name},password={password}]"]
    return out


def _listener(port: int, controller_port: int, security: BrokerSecurity | None) -> list[str]:
    """The listener lines: plaintext, or SASL_SSL with the users' SCRAM and the PEM key and certificate."""
    if security is None:
        return [
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        ]
    user, password = next(iter(security.users.items()))
    mechanism = security.mechanism.lower()
    keystore = security.key.with_name("broker-keystore.pem")
    keystore.write_text(security.key.read_text() + security.certificate.read_text())
    return [
        f"listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{port}",
        "inter.broker.listener.name=SASL_SSL",
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        f"sasl.enabled.mechanisms={security.mechanism}",
        f"sasl.mechanism.inter.broker.protocol={security.mechanism}",
        f"listener.name.sasl_ssl.{mechanism}.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="{user}" password="{password}";',
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={security.ca}",
        # on a SASL_SSL listener Kafka applies ssl.client.auth only with the listener's prefix (KIP-684)
        f"listener.name.sasl_ssl.ssl.client.auth={'required' if security.client_auth else 'none'}",
    ]


def _server_properties(
    data: Path,
    port: int,
    controller_port: int,
    node_id: int = 1,
    voters: str | None = None,
    replicas: int = 1,
    security: BrokerSecurity | None = None,
) -> str:
    """A combined broker and controller node; ``voters`` the quorum (default: this node alone), ``replicas``
    the replication of the internal topics (offsets, transactions) and the topics' default, ``security`` a
    SASL_SSL listener instead of the plaintext one."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node_id}",
            f"controller.quorum.voters={voters or f'{node_id}@127.0.0.1:{controller_port}'}",
            *_listener(port, controller_port, security),
            "controller.listener.names=CONTROLLER",
            f"log.dirs={data}",
            "num.partitions=1",
            "auto.create.topics.enable=true",
            f"default.replication.factor={replicas}",
            f"offsets.topic.replication.factor={replicas}",
            "offsets.topic.num.partitions=3",
            f"transaction.state.log.replication.factor={replicas}",
            f"transaction.state.log.min.isr={min(replicas, 2)}",
            "transaction.state.log.num.partitions=3",
            "group.initial.rebalance.delay.ms=0",
            "log.retention.hours=-1",
            "log.segment.bytes=104857600",
            "",
        ]
    )
