"""Every Kafka client of the processor and of the ``ivm`` commands, configured from one place.

A pipeline's ``[kafka.properties]`` table holds the client properties of its
cluster (security, timeouts), in Kafka's own names and as strings.  They apply
to every client the processor and every ``ivm`` command opens: librdkafka's
producers, consumers and admin clients (:func:`producer`, :func:`consumer`,
:func:`admin`, all built by :func:`librdkafka_config`) and Spark's Kafka source
(:func:`spark_kafka_options`, with its ``kafka.`` prefix).  No other module
constructs a client (``tests/unit/test_kafka_clients.py`` checks the source),
so a new client cannot forget the properties.

The contract (one list, :data:`ACCEPTED`; anything else is refused by name):

- names both clients spell alike pass to both unchanged: ``security.protocol``
  (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``), ``sasl.mechanism``
  (``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``; librdkafka's spelling
  ``sasl.mechanisms`` is taken as the same key), ``client.id``,
  ``ssl.key.password``, the reconnect/backoff/timeout settings listed;
- librdkafka's names that the Java client spells differently are translated
  for Spark: ``sasl.username`` + ``sasl.password`` become the Java
  ``sasl.jaas.config`` (``PlainLoginModule`` for ``PLAIN``,
  ``ScramLoginModule`` for ``SCRAM-*``); ``ssl.ca.location`` (a PEM file)
  becomes ``ssl.truststore.type = PEM`` + ``ssl.truststore.location``;
  ``ssl.certificate.location`` + ``ssl.key.location`` (PEM files, mutual TLS)
  become ``ssl.keystore.type = PEM`` with the files' contents in
  ``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``;
  ``ssl.endpoint.identification.algorithm = "none"`` becomes the Java ``""``;
- the Java name ``sasl.jaas.config`` is passed to Spark verbatim; it is taken
  only for the ``PlainLoginModule`` / ``ScramLoginModule`` with a
  ``username`` and ``password``, which librdkafka gets as ``sasl.username`` /
  ``sasl.password`` (any other login module cannot reach librdkafka: refused);
- refused by name: what one side cannot take (Java trust/key stores such as
  JKS, ``ssl.truststore.*`` / ``ssl.keystore.*``: librdkafka reads PEM; the
  mechanisms ``GSSAPI``, ``OAUTHBEARER``, ``AWS_MSK_IAM``, which need a
  ticket or a token provider on both sides), and what the processor owns
  (``bootstrap.servers``, ``group.id``, ``transactional.id``,
  ``isolation.level``, ``enable.idempotence``, ... : :data:`OWNED`).

Properties are secrets in part: :func:`masked` shows them with the values of
:func:`is_secret` names hidden, and :class:`KafkaConnection` never prints them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The logger librdkafka's log lines go to (served when a client polls); silenced by ``ivm`` unless ``-v``.
KAFKA_LOGGER = logging.getLogger("librdkafka")

# librdkafka logs connection churn at info level; errors only, and to a Python logger rather than stderr.
CLIENT_DEFAULTS: dict[str, Any] = {"log_level": 3, "log.connection.close": False, "logger": KAFKA_LOGGER}

MASK = "********"

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: Properties both clients spell alike, passed to both unchanged (their values: strings of digits or text).
COMMON: dict[str, str] = {
    "client.id": "text",
    "ssl.key.password": "text",
    "socket.connection.setup.timeout.ms": "ms",
    "connections.max.idle.ms": "ms",
    "reconnect.backoff.ms": "ms",
    "reconnect.backoff.max.ms": "ms",
    "retry.backoff.ms": "ms",
    "metadata.max.age.ms": "ms",
}

#: Every accepted name of ``[kafka.properties]``.
ACCEPTED: tuple[str, ...] = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
    *COMMON,
)

#: Properties the processor sets itself, with why; refused by name in ``[kafka.properties]``.
OWNED: dict[str, str] = {
    "bootstrap.servers": "the brokers are [kafka] bootstrap",
    "group.id": "the processor names its consumer groups",
    "transactional.id": "the processor's transactions use ivm-<[processor] name>",
    "transaction.timeout.ms": "the processor sets its transactions' timeout",
    "isolation.level": "the processor reads committed input",
    "enable.idempotence": "the processor's producers are idempotent",
    "acks": "idempotent producers need acks=all",
    "enable.auto.commit": "the processor commits positions in its own transactions",
    "auto.offset.reset": "the start is [spark] starting_offsets",
    "partitioner": "the processor chooses the partitioner",
    "key.serializer": "the processor encodes records itself",
    "value.serializer": "the processor encodes records itself",
    "key.deserializer": "the processor decodes records itself",
    "value.deserializer": "the processor decodes records itself",
    "max.partition.fetch.bytes": "set with [spark] fetch_bytes",
    "fetch.max.bytes": "set with [spark] fetch_bytes",
}

#: Java-only names with what to write instead (librdkafka cannot take them).
JAVA_ONLY: dict[str, str] = {
    "ssl.truststore.location": "librdkafka reads no Java trust store: give the CA as a PEM file in ssl.ca.location",
    "ssl.truststore.type": "librdkafka reads no Java trust store: give the CA as a PEM file in ssl.ca.location",
    "ssl.truststore.password": "librdkafka reads no Java trust store: give the CA as a PEM file in ssl.ca.location",
    "ssl.truststore.certificates": "give the CA as a PEM file in ssl.ca.location",
    "ssl.keystore.location": "give the client certificate and key as PEM files in ssl.certificate.location and "
    "ssl.key.location",
    "ssl.keystore.type": "give the client certificate and key as PEM files in ssl.certificate.location and "
    "ssl.key.location",
    "ssl.keystore.password": "give the client certificate and key as PEM files in ssl.certificate.location and "
    "ssl.key.location (an encrypted key's password in ssl.key.password)",
    "ssl.keystore.certificate.chain": "give the client certificate as a PEM file in ssl.certificate.location",
    "ssl.keystore.key": "give the client key as a PEM file in ssl.key.location",
    "sasl.login.callback.handler.class": "a Java class cannot configure librdkafka",
    "sasl.client.callback.handler.class": "a Java class cannot configure librdkafka",
}

_REFUSED_MECHANISMS = {
    "GSSAPI": "Kerberos needs a ticket set up on every host for both clients",
    "OAUTHBEARER": "OAuth needs a token provider for both clients",
    "AWS_MSK_IAM": "IAM needs AWS's Java login module and a librdkafka token provider; use MSK's SASL/SCRAM",
}

#: names whose values are secrets, for every setting the processor prints (``[kafka.properties]``, the
#: registry's, ``[spark.conf]``, ``[topics.KIND.config]``: ``ivm.processor.config.shown``)
_SECRET = re.compile(r"password|secret|token|credential|jaas|user\.info|(^|[._])key$", re.IGNORECASE)


def is_secret(name: str) -> bool:
    """Whether a property's value is a secret (masked by :func:`masked`, never logged).

    >>> [n for n in ("sasl.password", "sasl.jaas.config", "basic.auth.user.info", "ssl.keystore.key",
    ...              "ssl.key.password", "ssl.key.location", "sasl.username") if is_secret(n)]
    ['sasl.password', 'sasl.jaas.config', 'basic.auth.user.info', 'ssl.keystore.key', 'ssl.key.password']
    """
    return bool(_SECRET.search(name))


def masked(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` with every secret value replaced by ``********``."""
    return {k: (MASK if is_secret(k) else v) for k, v in properties.items()}


@dataclass(frozen=True)
class KafkaConnection:
    """The brokers and the validated client properties (:func:`check_properties`) of one pipeline.

    ``str()`` is the bootstrap servers (for messages); ``repr()`` masks secrets.
    """

    bootstrap: str
    properties: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return self.bootstrap

    def __repr__(self) -> str:
        return f"KafkaConnection({self.bootstrap!r}, {masked(dict(self.properties))!r})"

    def with_bootstrap(self, bootstrap: str | None) -> KafkaConnection:
        """The same properties towards other brokers (``--bootstrap-server``); ``None``: these."""
        return self if not bootstrap else KafkaConnection(bootstrap, self.properties)


#: A connection, or bare bootstrap servers (no properties: a plaintext cluster).
Kafka = KafkaConnection | str


def connection(kafka: Kafka) -> KafkaConnection:
    """``kafka`` as a :class:`KafkaConnection` (bare bootstrap servers: no properties)."""
    return kafka if isinstance(kafka, KafkaConnection) else KafkaConnection(kafka)


# --- validation --------------------------------------------------------------------------------------


def check_properties(properties: Mapping[str, Any], where: str = "[kafka.properties]") -> list[str]:
    """The findings of a ``[kafka.properties]`` table, one line each naming its key (empty: valid).

    Values must be strings (after ``${NAME}`` expansion, :func:`ivm.processor.config.expand_env`).
    """
    errors: list[str] = []
    strings: dict[str, str] = {}
    for key, value in properties.items():
        if key in OWNED:
            errors.append(f"{where} {key}: set by the processor ({OWNED[key]}); remove the key")
        elif key in JAVA_ONLY:
            errors.append(f"{where} {key}: {JAVA_ONLY[key]}")
        elif key not in ACCEPTED:
            errors.append(f"unknown Kafka client property {key!r} in {where}{_suggest(key)}; accepted: "
                          f"{', '.join(ACCEPTED)}")  # fmt: skip
        elif not isinstance(value, str):
            errors.append(f"{where} {key}: expected a string (Kafka property values are strings), got {value!r}")
        else:
            strings[key] = value
    if "sasl.mechanism" in properties and "sasl.mechanisms" in properties:
        errors.append(f"{where} sasl.mechanisms: the same key as sasl.mechanism; give one")
    for key, kind in COMMON.items():
        if kind == "ms" and key in strings and not strings[key].isdigit():
            errors.append(f"{where} {key}: expected milliseconds (a string of digits), got {strings[key]!r}")
    protocol = strings.get("security.protocol", "PLAINTEXT").upper()
    if "security.protocol" in strings and protocol not in PROTOCOLS:
        errors.append(f"{where} security.protocol: expected one of {', '.join(PROTOCOLS)}, "
                      f"got {strings['security.protocol']!r}")  # fmt: skip
    sasl = protocol.startswith("SASL_")
    mech_key = "sasl.mechanisms" if "sasl.mechanisms" in strings else "sasl.mechanism"
    mechanism = strings.get(mech_key, "").upper()
    if mech_key in strings and mechanism not in MECHANISMS:
        why = _REFUSED_MECHANISMS.get(mechanism, f"expected one of {', '.join(MECHANISMS)}")
        errors.append(f"{where} {mech_key}: {strings[mech_key]!r} is not supported ({why})")
    sasl_keys = [k for k in strings if k.startswith("sasl.")]
    if sasl_keys and not sasl:
        errors.append(f"{where} {sasl_keys[0]}: SASL settings need security.protocol SASL_SSL or SASL_PLAINTEXT "
                      f"(it is {protocol})")  # fmt: skip
    if sasl:
        if mech_key not in strings:
            errors.append(f"{where} sasl.mechanism: required with security.protocol {protocol} "
                          f"({', '.join(MECHANISMS)})")  # fmt: skip
        jaas = strings.get("sasl.jaas.config")
        if jaas is not None:
            if "sasl.username" in strings or "sasl.password" in strings:
                errors.append(f"{where} sasl.jaas.config: give sasl.jaas.config or sasl.username/sasl.password, "
                              "not both")  # fmt: skip
            else:
                problem = _jaas_problem(jaas, mechanism)
                if problem:
                    errors.append(f"{where} sasl.jaas.config: {problem}")
        else:
            for key in ("sasl.username", "sasl.password"):
                if key not in strings:
                    errors.append(f"{where} {key}: required with security.protocol {protocol} "
                                  "(or give sasl.jaas.config)")  # fmt: skip
    ssl = protocol in ("SSL", "SASL_SSL")
    ssl_keys = [k for k in strings if k.startswith("ssl.")]
    if ssl_keys and not ssl:
        errors.append(f"{where} {ssl_keys[0]}: TLS settings need security.protocol SSL or SASL_SSL (it is {protocol})")
    for key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
        if key in strings and not Path(strings[key]).is_file():
            errors.append(f"{where} {key}: {strings[key]} is not a file (a PEM file is expected)")
    if ("ssl.certificate.location" in strings) != ("ssl.key.location" in strings):
        given, missing = (
            ("ssl.certificate.location", "ssl.key.location")
            if "ssl.certificate.location" in strings
            else ("ssl.key.location", "ssl.certificate.location")
        )
        errors.append(f"{where} {missing}: required with {given} (a client certificate needs its key)")
    algorithm = strings.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.lower() not in ("https", "none", ""):
        errors.append(f'{where} ssl.endpoint.identification.algorithm: expected "https" or "none", got {algorithm!r}')
    return errors


_JAAS = re.compile(
    r"\s*org\.apache\.kafka\.common\.security\.(?P<module>plain\.PlainLoginModule|scram\.ScramLoginModule)"
    r"\s+required\s+(?P<options>.*?)\s*;\s*",
    re.DOTALL,
)
_JAAS_OPTION = re.compile(r'\s*([A-Za-z_.]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _jaas_options(jaas: str) -> tuple[str, dict[str, str]] | None:
    """``(login module, options)`` of a PLAIN or SCRAM ``sasl.jaas.config``, or ``None``."""
    match = _JAAS.fullmatch(jaas)
    if match is None:
        return None
    options: dict[str, str] = {}
    rest = match["options"]
    while rest.strip():
        option = _JAAS_OPTION.match(rest)
        if option is None:
            return None
        options[option[1]] = re.sub(r"\\(.)", r"\1", option[2])
        rest = rest[option.end() :]
    return match["module"], options


def _jaas_problem(jaas: str, mechanism: str) -> str | None:
    """Why librdkafka cannot take this ``sasl.jaas.config`` (never quoting it: it holds a password), or ``None``."""
    parsed = _jaas_options(jaas)
    if parsed is None:
        return (
            "only org.apache.kafka.common.security.plain.PlainLoginModule or scram.ScramLoginModule required "
            'username="..." password="..."; are taken (librdkafka takes no other login module)'
        )
    module, options = parsed
    missing = [k for k in ("username", "password") if k not in options]
    if missing:
        return f"the login module has no {' and no '.join(missing)} option"
    expected = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    if mechanism in MECHANISMS and module != expected:
        return f"sasl.mechanism {mechanism} needs the {expected.split('.')[1]}, not the {module.split('.')[1]}"
    return None


def _suggest(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, [*ACCEPTED, *OWNED, *JAVA_ONLY], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


# --- the two sides ----------------------------------------------------------------------------------


def librdkafka_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Validated ``[kafka.properties]`` in librdkafka's names."""
    out: dict[str, str] = {}
    for key, value in properties.items():
        if key == "security.protocol":
            out[key] = value.upper()
        elif key in ("sasl.mechanism", "sasl.mechanisms"):
            out["sasl.mechanism"] = value.upper()
        elif key == "sasl.jaas.config":
            parsed = _jaas_options(value)
            assert parsed is not None, "check_properties refuses it"
            out["sasl.username"], out["sasl.password"] = parsed[1]["username"], parsed[1]["password"]
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = value.lower() or "none"
        else:
            out[key] = value
    return out


def java_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Validated ``[kafka.properties]`` in the Java client's names (Spark's source adds ``kafka.``)."""
    out: dict[str, str] = {}
    mechanism = (properties.get("sasl.mechanism") or properties.get("sasl.mechanisms") or "").upper()
    for key, value in properties.items():
        if key == "security.protocol":
            out[key] = value.upper()
        elif key in ("sasl.mechanism", "sasl.mechanisms"):
            out["sasl.mechanism"] = value.upper()
        elif key in ("sasl.username", "sasl.password"):
            continue  # below
        elif key == "ssl.ca.location":
            out["ssl.truststore.type"] = "PEM"
            out["ssl.truststore.location"] = value
        elif key == "ssl.certificate.location":
            out["ssl.keystore.type"] = "PEM"
            out["ssl.keystore.certificate.chain"] = Path(value).read_text()
        elif key == "ssl.key.location":
            out["ssl.keystore.key"] = Path(value).read_text()
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = "" if value.lower() in ("none", "") else value.lower()
        else:
            out[key] = value
    if "sasl.username" in properties:
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        out["sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.{module} required "
            f'username="{_jaas_quote(properties["sasl.username"])}" '
            f'password="{_jaas_quote(properties.get("sasl.password", ""))}";'
        )
    return out


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def librdkafka_config(kafka: Kafka, role: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A librdkafka client's configuration: the brokers, :data:`CLIENT_DEFAULTS`, the pipeline's
    ``[kafka.properties]`` and the ``role``'s own settings (``group.id``, ``transactional.id``, ...).

    A role setting may not replace a property of the pipeline (those are security and connection
    settings; the roles set what the processor owns).
    """
    conn = connection(kafka)
    props = librdkafka_properties(dict(conn.properties))
    role = dict(role or {})
    clash = sorted(set(props) & set(role))
    if clash:
        raise ValueError(f"client settings {', '.join(clash)} are both [kafka.properties] and the processor's own")
    return {"bootstrap.servers": conn.bootstrap, **CLIENT_DEFAULTS, **props, **role}


def spark_kafka_options(kafka: Kafka) -> dict[str, str]:
    """The options of Spark's Kafka source for the brokers and ``[kafka.properties]`` (``kafka.``-prefixed)."""
    conn = connection(kafka)
    java = java_properties(dict(conn.properties))
    return {"kafka.bootstrap.servers": conn.bootstrap, **{f"kafka.{k}": v for k, v in java.items()}}


def producer(kafka: Kafka, role: Mapping[str, Any] | None = None) -> Any:
    """A librdkafka producer (:func:`librdkafka_config`)."""
    from confluent_kafka import Producer

    return Producer(librdkafka_config(kafka, role))


def consumer(kafka: Kafka, role: Mapping[str, Any] | None = None) -> Any:
    """A librdkafka consumer (:func:`librdkafka_config`)."""
    from confluent_kafka import Consumer

    return Consumer(librdkafka_config(kafka, role))


def admin(kafka: Kafka, role: Mapping[str, Any] | None = None) -> Any:
    """A librdkafka admin client (:func:`librdkafka_config`)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(librdkafka_config(kafka, role))


__all__ = [
    "ACCEPTED",
    "CLIENT_DEFAULTS",
    "OWNED",
    "Kafka",
    "KafkaConnection",
    "admin",
    "check_properties",
    "connection",
    "consumer",
    "is_secret",
    "java_properties",
    "librdkafka_config",
    "librdkafka_properties",
    "masked",
    "producer",
    "spark_kafka_options",
]
