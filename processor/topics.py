"""Kafka topic helpers: creating topics, reading their end offsets, and checking that a broker answers.

Every Kafka client of the project is made by :mod:`ivm.processor.kafka.clients`
(with the pipeline's ``[kafka.properties]``) and its ``CLIENT_DEFAULTS``, which
routes librdkafka's own log lines (``FAIL ... Connection refused`` every 50 ms
while a broker is down) to the Python logger ``librdkafka`` instead of stderr:
``ivm`` silences it unless ``-v`` (``ivm/processor/cli.py``), and reports a broker it
cannot reach, or cannot authenticate to, once, in one line (:func:`require_broker`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ivm.processor.kafka.clients import Kafka, admin, connection, consumer

#: Seconds :func:`require_broker` waits for a TCP connection and then for the broker's metadata.
PROBE_TIMEOUT = 5.0


class BrokerUnreachable(RuntimeError):
    """No Kafka broker answers at a bootstrap address; the message names the addresses and why."""


def require_broker(bootstrap: Kafka, timeout: float = PROBE_TIMEOUT) -> None:
    """Return if a Kafka broker answers a metadata request at ``bootstrap``; :class:`BrokerUnreachable` otherwise.

    A quick check before the long operations (whose Kafka timeouts are 30 s and
    more): each address is first connected to over TCP, so that a refused
    connection or an unknown host is reported at once and by name; then the
    broker must answer a metadata request within ``timeout`` seconds.

    >>> from ivm.processor.local.ports import free_port
    >>> require_broker(f"127.0.0.1:{free_port()}")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ivm.processor.kafka.topics.BrokerUnreachable: cannot reach the Kafka broker at 127.0.0.1:...: connection ...
    """
    from confluent_kafka import KafkaException

    kafka, bootstrap = bootstrap, connection(bootstrap).bootstrap
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    if not addresses:
        raise BrokerUnreachable("no Kafka bootstrap address given")
    reasons = {address: _tcp_reason(address, min(timeout, 3.0)) for address in addresses}
    failed = {address: reason for address, reason in reasons.items() if reason is not None}
    if len(failed) == len(addresses):
        local = all(split_address(a)[0] in ("127.0.0.1", "localhost", "::1") for a in addresses)
        hint = " (`ivm local kafka` runs a broker on 127.0.0.1:9092)" if local else ""
        if len(addresses) == 1:
            raise BrokerUnreachable(f"cannot reach the Kafka broker at {addresses[0]}: {failed[addresses[0]]}{hint}")
        each = "; ".join(f"{address}: {reason}" for address, reason in failed.items())
        raise BrokerUnreachable(f"cannot reach any Kafka broker of {bootstrap} ({each}){hint}")
    errors: list[Any] = []
    client = admin(kafka, {"error_cb": errors.append})
    deadline = time.monotonic() + timeout
    while True:  # short rounds: a failed authentication or TLS handshake is reported as soon as it happens
        try:
            client.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            return
        except KafkaException as err:
            last = err
        client.poll(0)  # serve error_cb, and hand librdkafka's log lines to the logger (shown with -v)
        cause = security_failure(errors, bootstrap)
        if cause is not None:
            raise BrokerUnreachable(cause) from None
        if time.monotonic() >= deadline:
            raise BrokerUnreachable(
                f"{bootstrap} accepts connections but no Kafka broker there answered within {timeout:.0f} s "
                f"({kafka_reason(last)}): is it a Kafka listener?"
            ) from None


def security_failure(errors: Sequence[Any], bootstrap: str) -> str | None:
    """One line naming why the client could not authenticate or complete the TLS handshake (librdkafka's
    ``_AUTHENTICATION`` / ``_SSL`` errors, and the ``_TRANSPORT`` error of a client certificate the broker
    refused, as ``error_cb`` got them), and the properties to check; ``None`` if none of ``errors`` is one
    of those."""
    from confluent_kafka import KafkaError

    for error in errors:
        code = error.code() if hasattr(error, "code") else None
        text = " ".join(str(error.str() if hasattr(error, "str") else error).split())
        if code == KafkaError._AUTHENTICATION:
            return (
                f"authentication to the Kafka broker at {bootstrap} failed: {text} "
                "(check [kafka.properties] sasl.mechanism, sasl.username and sasl.password)"
            )
        refused = "alert bad certificate" in text or "alert certificate required" in text
        if code == KafkaError._TRANSPORT and refused:  # TLS 1.3: the broker's refusal arrives at the first read
            return (
                f"TLS handshake with the Kafka broker at {bootstrap} failed: {text} (the broker requires a client "
                "certificate its CA signed: check [kafka.properties] ssl.certificate.location and ssl.key.location)"
            )
        if code == KafkaError._SSL:
            return (
                f"TLS handshake with the Kafka broker at {bootstrap} failed: {text} (check [kafka.properties] "
                "ssl.ca.location: the CA that signed the broker's certificate, and ssl.endpoint.identification."
                "algorithm)"
            )
    return None


def _tcp_reason(address: str, timeout: float) -> str | None:
    """Why a TCP connection to ``host:port`` fails, in words, or ``None`` if it succeeds."""
    host, port = split_address(address)
    if port is None:
        return f"no port in {address!r} (host:port)"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror:
        return f"unknown host {host!r}"
    except TimeoutError:
        return f"no answer within {timeout:.0f} s"
    except OSError as err:
        return (err.strerror or str(err)).lower()


def split_address(address: str) -> tuple[str, int | None]:
    """``(host, port)`` of ``host:port``, ``[v6]:port`` or ``PLAINTEXT://host:port``; port ``None`` if absent
    or not a number.

    >>> split_address("127.0.0.1:9092"), split_address("[::1]:9093"), split_address("PLAINTEXT://kafka:9092")
    (('127.0.0.1', 9092), ('::1', 9093), ('kafka', 9092))
    """
    text = address.split("://", 1)[-1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or (":" in host and not host.startswith("[")):
        return text.strip("[]"), None
    return host.strip("[]"), int(port)


def kafka_reason(err: BaseException) -> str:
    """The reason of a ``KafkaException`` in words: its ``KafkaError``'s text and code name."""
    error = err.args[0] if err.args else None
    if hasattr(error, "str") and hasattr(error, "name"):
        return f"{error.str()} ({error.name()})"
    return str(err)


def create_topics(
    bootstrap: Kafka,
    topics: Sequence[str],
    partitions: int = -1,
    config: dict[str, str] | None = None,
    replication_factor: int = -1,
) -> None:
    """Create the topics that do not exist yet; an existing topic is left as it is.

    ``partitions`` and ``replication_factor`` of ``-1`` take the cluster's defaults (``num.partitions``,
    ``default.replication.factor``; brokers 2.4 and newer), as a topic created by any other Kafka client
    would.  A creation the cluster refuses (a replication factor above its brokers, an unknown topic config)
    raises ``RuntimeError`` naming the topic and the broker's reason.
    """
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    existing = set(client.list_topics(timeout=30).topics)
    new = [
        NewTopic(t, num_partitions=partitions, replication_factor=replication_factor, config=config or {})
        for t in topics
        if t not in existing
    ]
    if not new:
        return
    for topic, future in client.create_topics(new, operation_timeout=30).items():
        try:
            future.result()
        except Exception as err:  # a concurrent creation is fine
            if "TOPIC_ALREADY_EXISTS" not in str(err):
                raise RuntimeError(f"creating topic {topic} failed: {kafka_reason(err)}") from err


def create_kind(bootstrap: Kafka, topics: Sequence[str], settings: Any, **own: str) -> None:
    """Create ``topics`` of one kind with its :class:`ivm.processor.config.TopicSettings` (``[topics.KIND]``)
    and the topic configs the processor sets itself, ``own`` (``cleanup.policy`` for compacted topics)."""
    create_topics(bootstrap, topics, settings.partitions, settings.config_dict(**own), settings.replication_factor)


def end_offsets(
    bootstrap: Kafka, topics: Sequence[str], isolation: str = "read_committed"
) -> dict[tuple[str, int], int]:
    """The end offset of every partition of ``topics`` as a reader with ``isolation`` sees it (the last
    stable offset with ``read_committed``: before the first transaction still open; else the high
    watermark)."""
    return {tp: high for tp, (_low, high) in watermarks(bootstrap, topics, isolation).items()}


def watermarks(
    bootstrap: Kafka, topics: Sequence[str], isolation: str = "read_committed"
) -> dict[tuple[str, int], tuple[int, int]]:
    """``(low, high)`` offsets of every partition of ``topics``: the first record still held (retention
    moves it up) and the end a reader with ``isolation`` sees (:func:`end_offsets`)."""
    from confluent_kafka import TopicPartition

    client = consumer(
        bootstrap, {"group.id": "ivm-end-offsets", "enable.auto.commit": False, "isolation.level": isolation}
    )
    try:
        metadata = client.list_topics(timeout=30)
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in topics:
            if topic not in metadata.topics:
                continue
            for partition in metadata.topics[topic].partitions:
                low, high = client.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                out[(topic, partition)] = (low, high)
        return out
    finally:
        client.close()


def partitions_of(bootstrap: Kafka, topics: Sequence[str]) -> dict[str, list[int]]:
    """The partition ids of each existing topic."""
    metadata = admin(bootstrap).list_topics(timeout=30)
    return {t: sorted(metadata.topics[t].partitions) for t in topics if t in metadata.topics}


class TopicReader:
    """A read_committed reader of every partition of a topic, from its first offset still held: its records
    up to the ends the topic had when the reader was made (:meth:`to_end`), then the ones committed later
    (:meth:`follow`)."""

    def __init__(self, bootstrap: Kafka, topic: str) -> None:
        from confluent_kafka import TopicPartition

        self.topic = topic
        self._marks = watermarks(bootstrap, [topic])
        self._consumer = consumer(
            bootstrap,
            {
                "group.id": "ivm-topic-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",  # from the first record held if retention moves it meanwhile
            },
        )
        self._consumer.assign([TopicPartition(t, p, low) for (t, p), (low, _high) in self._marks.items()])
        self._tp = TopicPartition

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._consumer.close()

    def to_end(self, timeout: float = 60) -> Iterator[tuple[bytes, bytes | None]]:
        """The records up to the end offsets the topic had when the reader was made."""
        for msg in self.messages(timeout):
            yield msg.key(), msg.value()

    def messages(self, timeout: float = 60) -> Iterator[Any]:
        """:meth:`to_end`'s records as the client's messages (with their partitions and offsets)."""
        remaining = {tp: high for tp, (low, high) in self._marks.items() if high > low}
        deadline = time.monotonic() + timeout
        while remaining:
            msg = self._consumer.poll(0.5)
            if msg is None or msg.error():
                for (t, p), high in list(remaining.items()):  # control markers end a partition by position
                    if self._consumer.position([self._tp(t, p)])[0].offset >= high:
                        del remaining[(t, p)]
                if remaining and time.monotonic() > deadline:
                    raise TimeoutError(f"could not read {self.topic} to its end")
                continue
            tp = (msg.topic(), msg.partition())
            if msg.offset() >= remaining.get(tp, 0) - 1:
                remaining.pop(tp, None)
            yield msg

    def follow(
        self, poll_timeout: float, idle_timeout: float | None, stop: Any
    ) -> Iterator[tuple[bytes, bytes | None]]:
        """The records committed from now on."""
        last = time.monotonic()
        while stop is None or not stop.is_set():
            msg = self._consumer.poll(poll_timeout)
            if msg is None or msg.error():
                if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                    return
                continue
            last = time.monotonic()
            yield msg.key(), msg.value()
