"""``[kafka.properties]``: parsed, ``${NAME}`` expanded, refused by name, masked, and applied to every client.

Every Kafka client of ``processor/`` is made by :mod:`ivm.processor.kafka.clients` (checked on the source), so the
properties reach librdkafka's producers, consumers and admin clients and, translated to the Java names, Spark's
Kafka source.
"""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ivm.processor.config import ConfigError, dump_config, expand_env, parse_config
from ivm.processor.kafka.clients import (
    KafkaConnection,
    is_secret,
    java_properties,
    librdkafka_config,
    masked,
    spark_kafka_options,
)

ROOT = Path(__file__).resolve().parents[2]
TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"


def raw(properties: dict | None = None, **kafka) -> dict:
    table = {"bootstrap": "broker:9093", **kafka}
    if properties is not None:
        table["properties"] = properties
    return {
        "kafka": table,
        "relations": [{"name": "R"}, {"name": "S"}, {"name": "T"}],
        "queries": [{"name": "tri", "query": TRIANGLE}],
    }


def errors_of(document: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(document)
    return info.value.errors


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return path


def scram(ca: Path, **extra: str) -> dict:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "${IVM_TEST_KAFKA_PASSWORD}",
        "ssl.ca.location": str(ca),
        **extra,
    }


# --- parsing ----------------------------------------------------------------------------------------


def test_properties_from_toml_with_dotted_names_and_env(monkeypatch, ca: Path) -> None:
    monkeypatch.setenv("IVM_TEST_KAFKA_PASSWORD", "s3cr3t")
    text = f"""
[kafka]
bootstrap = "broker:9093"

[kafka.properties]
security.protocol = "SASL_SSL"
sasl.mechanism = "SCRAM-SHA-512"
sasl.username = "alice"
"sasl.password" = "${{IVM_TEST_KAFKA_PASSWORD}}"
ssl.ca.location = "{ca}"

[[relations]]
name = "R"
[[relations]]
name = "S"
[[relations]]
name = "T"
[[queries]]
name = "tri"
query = "{TRIANGLE}"
"""
    config = parse_config(tomllib.loads(text))
    assert dict(config.kafka_properties) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "s3cr3t",
        "ssl.ca.location": str(ca),
    }
    assert config.kafka.bootstrap == "broker:9093"
    # --bootstrap-server keeps the properties
    assert config.with_overrides(bootstrap="other:9093").kafka == KafkaConnection("other:9093", config.kafka_properties)
    # dump_config writes them back (a file read again means the same)
    again = parse_config(tomllib.loads(dump_config(config)))
    assert again.kafka_properties == config.kafka_properties


def test_unset_variable_is_a_finding_naming_key_and_variable(monkeypatch, ca: Path) -> None:
    monkeypatch.delenv("IVM_TEST_KAFKA_PASSWORD", raising=False)
    assert errors_of(raw(scram(ca))) == [
        "[kafka.properties] sasl.password: environment variable ${IVM_TEST_KAFKA_PASSWORD} is not set"
    ]


def test_expand_env_escapes_and_malformed() -> None:
    env = {"A": "1", "B": "x${A}"}
    assert expand_env("${A}-${B}-$${A}", "k", [], env) == "1-x${A}-${A}"  # no second round of expansion
    errors: list[str] = []
    expand_env("${1A} ${A", "[kafka.properties] client.id", errors, env)
    assert errors == [
        "[kafka.properties] client.id: '${' starts no ${NAME} (a variable's name: letters, digits, '_'; "
        "write $${ for a literal ${)"
    ]


@pytest.mark.parametrize(
    ("key", "value", "finding"),
    [
        ("bootstrap.servers", "x:1", "[kafka.properties] bootstrap.servers: set by the processor (the brokers are "
         "[kafka] bootstrap); remove the key"),
        ("isolation.level", "read_uncommitted", "[kafka.properties] isolation.level: set by the processor"),
        ("transactional.id", "t", "[kafka.properties] transactional.id: set by the processor"),
        ("enable.idempotence", "false", "[kafka.properties] enable.idempotence: set by the processor"),
        ("group.id", "g", "[kafka.properties] group.id: set by the processor"),
        ("ssl.truststore.location", "/x.jks", "[kafka.properties] ssl.truststore.location: librdkafka reads no Java "
         "trust store: give the CA as a PEM file in ssl.ca.location"),
        ("ssl.keystore.location", "/x.p12", "[kafka.properties] ssl.keystore.location: give the client certificate"),
        ("sasl.pasword", "x", "unknown Kafka client property 'sasl.pasword' in [kafka.properties]; did you mean "
         "'sasl.password'?"),
        ("reconnect.backoff.ms", "soon", "[kafka.properties] reconnect.backoff.ms: expected milliseconds"),
    ],
)  # fmt: skip
def test_refused_by_name(key: str, value: str, finding: str) -> None:
    found = errors_of(raw({"security.protocol": "SSL", key: value}))
    assert any(line.startswith(finding) for line in found), found


def test_values_are_strings() -> None:
    found = errors_of(raw({"reconnect.backoff.ms": 100}))
    assert found == ["[kafka.properties] reconnect.backoff.ms: expected a string (Kafka property values are "
                     "strings), got 100"]  # fmt: skip


def test_consistency_findings(tmp_path: Path, ca: Path) -> None:
    assert "[kafka.properties] sasl.username: SASL settings need security.protocol SASL_SSL or SASL_PLAINTEXT " \
           "(it is PLAINTEXT)" in errors_of(raw({"sasl.username": "u"}))  # fmt: skip
    found = errors_of(raw({"security.protocol": "SASL_SSL"}))
    assert found == [
        "[kafka.properties] sasl.mechanism: required with security.protocol SASL_SSL (PLAIN, SCRAM-SHA-256, "
        "SCRAM-SHA-512)",
        "[kafka.properties] sasl.username: required with security.protocol SASL_SSL (or give sasl.jaas.config)",
        "[kafka.properties] sasl.password: required with security.protocol SASL_SSL (or give sasl.jaas.config)",
    ]
    found = errors_of(raw({"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"}))
    assert found[0].startswith("[kafka.properties] sasl.mechanism: 'AWS_MSK_IAM' is not supported (IAM needs")
    found = errors_of(raw({"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "none.pem")}))
    assert found == [f"[kafka.properties] ssl.ca.location: {tmp_path / 'none.pem'} is not a file (a PEM file is "
                     "expected)"]  # fmt: skip
    found = errors_of(raw({"security.protocol": "SSL", "ssl.certificate.location": str(ca)}))
    assert found == ["[kafka.properties] ssl.key.location: required with ssl.certificate.location (a client "
                     "certificate needs its key)"]  # fmt: skip
    found = errors_of(raw({"security.protocol": "SSLL"}))
    assert found == ["[kafka.properties] security.protocol: expected one of PLAINTEXT, SSL, SASL_PLAINTEXT, "
                     "SASL_SSL, got 'SSLL'"]  # fmt: skip


def test_jaas_config_taken_for_plain_and_scram_only(monkeypatch) -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="KEY" password="SE\\"CRET";'
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}
    config = parse_config(raw(props))
    rd = librdkafka_config(config.kafka)
    assert (rd["sasl.username"], rd["sasl.password"]) == ("KEY", 'SE"CRET')
    assert "sasl.jaas.config" not in rd
    assert spark_kafka_options(config.kafka)["kafka.sasl.jaas.config"] == jaas  # verbatim
    oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    found = errors_of(raw({**props, "sasl.jaas.config": oauth}))
    assert len(found) == 1 and found[0].startswith("[kafka.properties] sasl.jaas.config: only ")
    assert "OAuthBearer" not in found[0]  # the value is never quoted: it may hold a password
    found = errors_of(raw({**props, "sasl.mechanism": "SCRAM-SHA-256"}))
    assert found == ["[kafka.properties] sasl.jaas.config: sasl.mechanism SCRAM-SHA-256 needs the "
                     "ScramLoginModule, not the PlainLoginModule"]  # fmt: skip
    found = errors_of(raw({**props, "sasl.password": "x"}))
    assert found == ["[kafka.properties] sasl.jaas.config: give sasl.jaas.config or sasl.username/sasl.password, "
                     "not both"]  # fmt: skip


# --- the two sides ----------------------------------------------------------------------------------


def test_librdkafka_and_spark_get_the_same_settings(monkeypatch, ca: Path) -> None:
    monkeypatch.setenv("IVM_TEST_KAFKA_PASSWORD", 'p"w\\d')
    config = parse_config(raw(scram(ca, **{"ssl.endpoint.identification.algorithm": "none", "client.id": "me"})))
    rd = librdkafka_config(config.kafka, {"group.id": "g"})
    assert {k: v for k, v in rd.items() if k not in ("logger", "log_level", "log.connection.close")} == {
        "bootstrap.servers": "broker:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": 'p"w\\d',
        "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "none",
        "client.id": "me",
        "group.id": "g",
    }
    assert spark_kafka_options(config.kafka) == {
        "kafka.bootstrap.servers": "broker:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="p\\"w\\\\d";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca),
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.client.id": "me",
    }


def test_client_certificates_for_java_are_pem_contents(tmp_path: Path, ca: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("CERT")
    key.write_text("KEY")
    props = {"security.protocol": "SSL", "ssl.ca.location": str(ca), "ssl.certificate.location": str(cert),
             "ssl.key.location": str(key), "ssl.key.password": "kp"}  # fmt: skip
    java = java_properties(props)
    assert java == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": "CERT",
        "ssl.keystore.key": "KEY",
        "ssl.key.password": "kp",
    }


def test_a_role_cannot_replace_a_pipeline_property(ca: Path) -> None:
    conn = KafkaConnection("b:1", (("client.id", "mine"),))
    with pytest.raises(ValueError, match=r"client\.id"):
        librdkafka_config(conn, {"client.id": "other"})


# --- secrets ----------------------------------------------------------------------------------------


def test_secrets_masked_in_repr_str_and_pickled_form_is_usable(monkeypatch, ca: Path) -> None:
    monkeypatch.setenv("IVM_TEST_KAFKA_PASSWORD", "s3cr3t-value")
    config = parse_config(raw(scram(ca)))
    assert "s3cr3t-value" not in repr(config.kafka) and "s3cr3t-value" not in str(config.kafka)
    assert "s3cr3t-value" not in repr(config) and "s3cr3t-value" not in str(config)  # a logged configuration
    assert str(config.kafka) == "broker:9093"
    assert "********" in repr(config.kafka)
    assert pickle.loads(pickle.dumps(config)).kafka == config.kafka  # shipped to Spark's executors
    assert masked({"sasl.password": "x", "sasl.username": "u", "basic.auth.user.info": "u:p"}) == {
        "sasl.password": "********",
        "sasl.username": "u",
        "basic.auth.user.info": "********",
    }
    assert is_secret("ssl.key.password") and is_secret("sasl.jaas.config") and not is_secret("ssl.key.location")


def test_ivm_check_prints_properties_masked(tmp_path: Path, ca: Path) -> None:
    (tmp_path / "p.toml").write_text(
        f"""
[kafka]
bootstrap = "broker:9093"
[kafka.properties]
security.protocol = "SASL_SSL"
sasl.mechanism = "SCRAM-SHA-512"
sasl.username = "alice"
sasl.password = "${{IVM_TEST_KAFKA_PASSWORD}}"
ssl.ca.location = "{ca}"
[[relations]]
name = "R"
[[relations]]
name = "S"
[[relations]]
name = "T"
[[queries]]
name = "tri"
query = "{TRIANGLE}"
"""
    )
    ivm = [sys.executable, "-m", "ivm.processor.cli", "check", "-c", str(tmp_path / "p.toml")]
    env = {"IVM_TEST_KAFKA_PASSWORD": "s3cr3t-value", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(ivm, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "s3cr3t-value" not in done.stdout + done.stderr
    assert "  sasl.password = '********'" in done.stdout
    assert "  sasl.username = 'alice'" in done.stdout
    unset = subprocess.run(ivm, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd=ROOT, timeout=120)
    assert unset.returncode == 2
    assert unset.stderr.strip() == (
        "ivm check: [kafka.properties] sasl.password: environment variable ${IVM_TEST_KAFKA_PASSWORD} is not set"
    )


# --- every client goes through ivm.processor.kafka.clients ----------------------------------------------


def test_no_module_makes_a_kafka_client_of_its_own() -> None:
    """A Producer, Consumer or AdminClient constructed outside ivm/processor/kafka/clients.py would miss
    [kafka.properties]: none is."""
    offenders = []
    for path in sorted((ROOT / "processor").rglob("*.py")):
        if path.name == "kafka_clients.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in ("Producer", "Consumer", "AdminClient", "SerializingProducer", "DeserializingConsumer"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}(...)")
    assert offenders == []


def test_spark_source_takes_the_options() -> None:
    """The live stream's readStream takes spark_kafka_options (no bare kafka.bootstrap.servers)."""
    job = (ROOT / "processor" / "job.py").read_text()
    assert ".options(**spark_kafka_options(config.kafka))" in job
    assert '"kafka.bootstrap.servers"' not in job


# --- the schema registry's settings -----------------------------------------------------------------


def test_registry_table_with_basic_auth_and_tls(monkeypatch, ca: Path) -> None:
    monkeypatch.setenv("IVM_TEST_REGISTRY_AUTH", "reg-user:reg-secret")
    document = raw(
        schema_registry={
            "url": "https://registry.example:8081",
            "basic.auth.user.info": "${IVM_TEST_REGISTRY_AUTH}",
            "ssl": {"ca": {"location": str(ca)}},  # TOML's reading of a bare ssl.ca.location
        }
    )
    config = parse_config(document)
    assert config.schema_registry == "https://registry.example:8081"
    assert dict(config.schema_registry_properties) == {
        "basic.auth.user.info": "reg-user:reg-secret",
        "ssl.ca.location": str(ca),
    }
    from ivm.processor.codecs.confluent import registry_client

    client = registry_client(config)
    assert client.properties == dict(config.schema_registry_properties)
    assert "reg-secret" not in repr(client) and "********" in repr(client)
    again = parse_config(tomllib.loads(dump_config(config)))
    assert (again.schema_registry, again.schema_registry_properties) == (
        config.schema_registry,
        config.schema_registry_properties,
    )
    # the plain form still works
    assert parse_config(raw(schema_registry="http://127.0.0.1:8081")).schema_registry_properties == ()


def test_registry_table_findings(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("IVM_TEST_REGISTRY_AUTH", raising=False)
    found = errors_of(raw(schema_registry={"basic.auth.user.info": "${IVM_TEST_REGISTRY_AUTH}", "ssl.ca": "x"}))
    assert found == [
        "[kafka.schema_registry] url: required key missing (the registry's URL)",
        "[kafka.schema_registry] basic.auth.user.info: environment variable ${IVM_TEST_REGISTRY_AUTH} is not set",
        "unknown key 'ssl.ca' in [kafka.schema_registry]",
    ]
    found = errors_of(raw(schema_registry={"url": "http://r:1", "basic.auth.user.info": "no-colon"}))
    assert found == ["[kafka.schema_registry] basic.auth.user.info: expected user:password (the value is not shown)"]
    found = errors_of(raw(schema_registry={"url": "ftp://x", "ssl.ca.location": str(tmp_path / "no.pem")}))
    assert found == [
        f"[kafka.schema_registry] ssl.ca.location: {tmp_path / 'no.pem'} is not a file (a PEM file is expected)",
        '[kafka] schema_registry: "ftp://x" is not an http:// or https:// URL',
    ]


def test_a_plaintext_pipeline_configures_its_clients_as_before() -> None:
    """No [kafka.properties]: Spark's source gets only the brokers and librdkafka the defaults and the role's
    settings, exactly what the processor set before (the hot path's clients are unchanged)."""
    config = parse_config(raw())
    assert spark_kafka_options(config.kafka) == {"kafka.bootstrap.servers": "broker:9093"}
    rd = librdkafka_config(config.kafka, {"enable.idempotence": True, "linger.ms": 5})
    assert {k: v for k, v in rd.items() if k != "logger"} == {
        "bootstrap.servers": "broker:9093",
        "log_level": 3,
        "log.connection.close": False,
        "enable.idempotence": True,
        "linger.ms": 5,
    }
