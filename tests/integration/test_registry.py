"""The Confluent wire format against a real Schema Registry (Apicurio, ccompat API)."""

from __future__ import annotations

import copy
import io
import uuid
from collections.abc import Iterator
from typing import Any

import fastavro
import pytest

from ivm.processor.codecs.avro import DecodeError, key_schema_of, load_schema, schemas_dir
from ivm.processor.codecs.confluent import (
    RegistryClient,
    SchemaNotFoundError,
    WireCodec,
    frame,
    key_subject,
    unframe,
    value_subject,
)
from ivm.processor.local.registry import SchemaRegistry

pytestmark = pytest.mark.integration


@pytest.fixture
def client(schema_registry: SchemaRegistry) -> RegistryClient:
    return RegistryClient(schema_registry.url)


@pytest.fixture
def topic() -> str:
    """A topic (hence subjects) of each test's own on the shared registry."""
    return f"t{uuid.uuid4().hex[:8]}.R"


def r_schema() -> dict[str, Any]:
    return load_schema(schemas_dir() / "relations" / "R.avsc")


def avro_body(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def test_registry_serves_the_ccompat_api(schema_registry: SchemaRegistry, client: RegistryClient) -> None:
    assert schema_registry.url.startswith("http://127.0.0.1:")
    assert schema_registry.url.endswith("/apis/ccompat/v7")
    assert schema_registry.proc.poll() is None
    assert isinstance(client.subjects(), list)


def test_register_is_idempotent_and_fetch_by_id(client: RegistryClient, topic: str) -> None:
    schema = r_schema()
    first = client.register(value_subject(topic), schema)
    again = client.register(value_subject(topic), schema)
    assert first == again
    fresh = RegistryClient(client.url)  # no cache: asks the registry
    fetched = fresh.schema(first)
    assert fetched.schema_type == "AVRO"
    assert fastavro.schema.to_parsing_canonical_form(fetched.avro()) == fastavro.schema.to_parsing_canonical_form(
        schema
    )
    assert fresh.schema(first) is fetched  # cached
    schema_id, version, _text = client.latest(value_subject(topic))
    assert (schema_id, version) == (first, 1)
    assert value_subject(topic) in client.subjects()


def test_round_trip_through_the_registry(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    updates = [((1, 2), 1), ((-5, 2**40), -3), ((0, 0), 7)]
    for row, mult in updates:
        key, value = codec.encode(row, mult)
        key_id, value_id = codec.register()
        assert unframe(key)[0] == key_id and unframe(value)[0] == value_id
        assert codec.decode(value) == (row, mult)
        assert codec.decode_key(key) == row
    assert {key_subject(topic), value_subject(topic)} <= set(client.subjects())
    # a second codec (another process) decodes by asking the registry
    reader = WireCodec.for_relation("R", RegistryClient(client.url), topic)
    _key, value = codec.encode((3, 4), -1)
    assert reader.decode(value) == ((3, 4), -1)


def test_unknown_schema_id_is_a_decode_error(client: RegistryClient, topic: str) -> None:
    with pytest.raises(SchemaNotFoundError):
        client.schema(987_654_321)
    codec = WireCodec.for_relation("R", client, topic)
    body = avro_body(r_schema(), {"A": 1, "B": 2, "mult": 1})
    with pytest.raises(DecodeError, match="unknown schema id 987654321"):
        codec.decode(frame(987_654_321, body))


def test_evolution_extra_field_with_default_and_int_promotion(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    codec.register()
    evolved = copy.deepcopy(r_schema())
    evolved["fields"] = [
        {"name": "A", "type": "int"},  # int -> long promotion
        {"name": "note", "type": "string", "default": ""},  # an extra field the relation does not read
        {"name": "B", "type": "long"},
        {"name": "mult", "type": "int"},  # int -> long promotion
    ]
    evolved_id = client.register(value_subject(topic), evolved)
    assert evolved_id != codec.register()[1]
    body = avro_body(evolved, {"A": 7, "note": "from a newer producer", "B": 2**33, "mult": -2})
    assert codec.decode(frame(evolved_id, body)) == ((7, 2**33), -2)
    # the old writer schema still decodes
    _key, value = codec.encode((1, 1), 1)
    assert codec.decode(value) == ((1, 1), 1)


def test_schemas_that_cannot_carry_the_relation(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    subject = f"{topic}-other-value"
    s_id = client.register(subject, load_schema(schemas_dir() / "relations" / "S.avsc"))
    body = avro_body(load_schema(schemas_dir() / "relations" / "S.avsc"), {"B": 1, "C": 2, "mult": 1})
    with pytest.raises(DecodeError, match=r"expects \['A', 'B'\]: missing \['A'\]"):
        codec.decode(frame(s_id, body))
    no_mult = {"type": "record", "name": "R", "namespace": "ivm.relations", "fields": [{"name": "A", "type": "long"}]}
    no_mult_id = client.register(f"{topic}-nomult-value", no_mult)
    with pytest.raises(DecodeError, match="has no 'mult' field"):
        codec.decode(frame(no_mult_id, avro_body(no_mult, {"A": 1})))
    array = {"type": "array", "items": "long"}
    array_id = client.register(f"{topic}-array-value", array)
    with pytest.raises(DecodeError, match="is not an Avro record"):
        codec.decode(frame(array_id, avro_body(array, [1, 2])))  # type: ignore[arg-type]
    wrong_type = copy.deepcopy(r_schema())
    wrong_type["fields"][0]["type"] = "string"
    wrong_id = client.register(f"{topic}-wrongtype-value", wrong_type)
    with pytest.raises(DecodeError, match="attribute 'A' is a string"):
        codec.decode(frame(wrong_id, avro_body(wrong_type, {"A": "1", "B": 2, "mult": 1})))


def test_malformed_body_and_zero_mult(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    _key, value = codec.encode((1, 2), 1)
    with pytest.raises(DecodeError, match="malformed Avro"):
        codec.decode(value[:-2])
    with pytest.raises(DecodeError, match="trailing bytes"):
        codec.decode(value + b"\x00")
    _, value_id = codec.register()
    with pytest.raises(DecodeError, match="multiplicity 0"):
        codec.decode(frame(value_id, avro_body(r_schema(), {"A": 1, "B": 2, "mult": 0})))


def test_resolution_rules_of_avro_apply(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    renamed = copy.deepcopy(r_schema())
    renamed["name"] = "Other"
    renamed_id = client.register(f"{topic}-renamed-value", renamed)
    with pytest.raises(DecodeError, match="needs the same name or an alias"):
        codec.decode(frame(renamed_id, avro_body(renamed, {"A": 1, "B": 2, "mult": 1})))
    other_namespace = copy.deepcopy(r_schema())
    other_namespace["namespace"] = "com.example"  # Avro matches records by their unqualified name
    other_id = client.register(f"{topic}-ns-value", other_namespace)
    assert codec.decode(frame(other_id, avro_body(other_namespace, {"A": 1, "B": 2, "mult": 1}))) == ((1, 2), 1)
    nullable = copy.deepcopy(r_schema())
    nullable["fields"][1]["type"] = ["null", "long"]
    nullable_id = client.register(f"{topic}-nullable-value", nullable)
    assert codec.decode(frame(nullable_id, avro_body(nullable, {"A": 1, "B": 2, "mult": 1}))) == ((1, 2), 1)
    with pytest.raises(DecodeError, match="cannot be resolved"):
        codec.decode(frame(nullable_id, avro_body(nullable, {"A": 1, "B": None, "mult": 1})))


def test_a_json_schema_is_not_an_avro_update(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    json_id = client.register(
        f"{topic}-json-value",
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
        schema_type="JSON",
    )
    assert client.schema(json_id).schema_type == "JSON"
    with pytest.raises(DecodeError, match="is a JSON schema, not Avro"):
        codec.decode(frame(json_id, b"{}"))


def test_wire_format_through_a_kafka_topic(kafka, client: RegistryClient, topic_prefix: str) -> None:
    """Keys keep every update of a tuple in one partition; values decode after the trip through the broker."""
    from confluent_kafka import Consumer, Producer

    from ivm.processor.kafka.clients import CLIENT_DEFAULTS
    from ivm.processor.kafka.topics import create_topics

    topic = f"{topic_prefix}R"
    create_topics(kafka.bootstrap, [topic], partitions=3)
    codec = WireCodec.for_relation("R", client, topic)
    updates = [((i % 4, i % 5), i + 1 if i % 3 else -(i + 1)) for i in range(60)]  # tuples recur
    producer = Producer({"bootstrap.servers": kafka.bootstrap, **CLIENT_DEFAULTS})
    for row, mult in updates:
        key, value = codec.encode(row, mult)
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": f"{topic}.test",
            "auto.offset.reset": "earliest",
            **CLIENT_DEFAULTS,
        }
    )
    consumer.subscribe([topic])
    reader = WireCodec.for_relation("R", RegistryClient(client.url), topic)
    got: list[tuple[int, tuple, tuple, int]] = []
    try:
        while len(got) < len(updates):
            message = consumer.poll(30)
            assert message is not None, f"only {len(got)} of {len(updates)} messages arrived"
            assert message.error() is None, message.error()
            row, mult = reader.decode(message.value())
            got.append((message.partition(), reader.decode_key(message.key()), row, mult))
    finally:
        consumer.close()
    assert sorted((row, mult) for _p, _k, row, mult in got) == sorted(updates)
    assert all(key == row for _p, key, row, _m in got)
    partition_of: dict[tuple, int] = {}
    for partition, key, _row, _mult in got:
        assert partition_of.setdefault(key, partition) == partition
    assert len(set(partition_of.values())) > 1  # the keys spread over the partitions
    for key in partition_of:  # every tuple's updates arrive in the order they were produced
        assert [m for _p, k, _r, m in got if k == key] == [m for row, m in updates if row == key]


# --- registration optional: ivm produce --no-register --------------------------------------------------


def test_no_register_uses_the_latest_registered_schema(client: RegistryClient, topic: str) -> None:
    from ivm.processor.codecs.confluent import RegistryError

    unregistered = WireCodec.for_relation("R", client, topic, register=False)
    with pytest.raises(RegistryError, match=f"subject {topic}-key has no registered schema"):
        unregistered.encode((1, 2), 1)
    assert client.subjects().count(value_subject(topic)) == 0  # nothing was registered by trying
    key_id = client.register(key_subject(topic), key_schema_of(r_schema()))  # as another producer would
    value_id = client.register(value_subject(topic), r_schema())
    codec = WireCodec.for_relation("R", RegistryClient(client.url), topic, register=False)
    key, value = codec.encode((1, 2), 1)
    assert unframe(value)[0] == value_id and unframe(key)[0] == key_id
    assert WireCodec.for_relation("R", client, topic).decode(value) == ((1, 2), 1)
    # a newer, different latest schema: refused by name (records written with it are not what R reads)
    evolved = copy.deepcopy(r_schema())
    evolved["fields"].insert(0, {"name": "note", "type": "string", "default": ""})
    client.register(value_subject(topic), evolved)
    with pytest.raises(RegistryError, match=rf"subject {topic}-value: its latest schema \(id \d+, version 2\) is not "):
        WireCodec.for_relation("R", RegistryClient(client.url), topic, register=False).register()


# --- basic authentication and TLS -----------------------------------------------------------------------
# Apicurio's own authentication needs an OpenID Connect server (Keycloak); as deployments often do, a
# reverse proxy in front of it asks for the password and speaks TLS (a certificate of a CA made here).


@pytest.fixture(scope="module")
def guarded(schema_registry: SchemaRegistry, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The registry behind HTTPS with basic authentication: its url, user info, the CA and another CA."""
    import base64
    import ssl
    import threading
    import urllib.error
    import urllib.request
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.integration.pki import make_pki

    pki = make_pki(tmp_path_factory.mktemp("registry-pki"))
    user_info = f"registry-user:pw-{uuid.uuid4().hex[:10]}"
    expected = "Basic " + base64.b64encode(user_info.encode()).decode()
    upstream = schema_registry.url.split("/apis/", 1)[0]

    class Handler(BaseHTTPRequestHandler):
        def forward(self) -> None:
            if self.headers.get("Authorization") != expected:
                self.reply(401, b'{"error_code": 401, "message": "Unauthorized"}', "application/json")
                return
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k in ("Content-Type", "Accept")}
            request = urllib.request.Request(upstream + self.path, data=data, method=self.command, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    self.reply(response.status, response.read(), response.headers.get("Content-Type"))
            except urllib.error.HTTPError as err:
                self.reply(err.code, err.read(), err.headers.get("Content-Type"))

        def reply(self, status: int, body: bytes, content_type: str | None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type or "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = forward

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["broker"], pki["key"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{server.server_address[1]}/apis/ccompat/v7"
    yield {"url": url, "user_info": user_info, "ca": pki["ca"], "other_ca": pki["other-ca"]}
    server.shutdown()


def test_registry_behind_basic_auth_and_tls(guarded: dict[str, Any], topic: str) -> None:
    from ivm.processor.codecs.confluent import RegistryError

    good = RegistryClient(guarded["url"], properties={"basic.auth.user.info": guarded["user_info"],
                                                     "ssl.ca.location": str(guarded["ca"])})  # fmt: skip
    writer = WireCodec.for_relation("R", good, topic)
    _key, value = writer.encode((3, 4), 2)
    reader = WireCodec.for_relation("R", RegistryClient(guarded["url"], properties=good.properties), topic)
    assert reader.decode(value) == ((3, 4), 2)
    assert value_subject(topic) in good.subjects()
    password = guarded["user_info"].split(":", 1)[1]
    wrong = RegistryClient(guarded["url"], properties={"basic.auth.user.info": "registry-user:wrong",
                                                      "ssl.ca.location": str(guarded["ca"])})  # fmt: skip
    with pytest.raises(RegistryError, match=r"HTTP 401: Unauthorized \(check \[kafka.schema_registry\] basic") as err:
        wrong.subjects()
    assert err.value.status == 401 and "wrong" not in str(err.value) and password not in str(err.value)
    untrusted = RegistryClient(guarded["url"], properties={"basic.auth.user.info": guarded["user_info"],
                                                          "ssl.ca.location": str(guarded["other_ca"])})  # fmt: skip
    with pytest.raises(RegistryError, match=r"cannot be reached: .*certificate verify failed.*ssl\.ca\.location"):
        untrusted.subjects()
    anonymous = RegistryClient(guarded["url"], properties={"ssl.ca.location": str(guarded["ca"])})
    with pytest.raises(RegistryError, match="HTTP 401"):
        anonymous.schema(1)


def test_ivm_produce_through_the_guarded_registry_and_no_register(
    kafka, guarded: dict[str, Any], tmp_path, topic_prefix: str
) -> None:
    import os
    import subprocess
    import sys

    from ivm.processor.local.stack import project_root

    config = tmp_path / "pipeline.toml"
    config.write_text(f"""
[kafka]
bootstrap = "{kafka.bootstrap}"

[kafka.schema_registry]
url = "{guarded["url"]}"
basic.auth.user.info = "${{IVM_TEST_REGISTRY_AUTH}}"
ssl.ca.location = "{guarded["ca"]}"

[[relations]]
name = "R"
topic = "{topic_prefix}R"
encoding = "confluent"

[[queries]]
name = "{topic_prefix}q"
query = "Q() :- R(a,b)"
""")
    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n2 3\n")
    env = {**os.environ, "IVM_TEST_REGISTRY_AUTH": guarded["user_info"]}

    def produce(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ivm.processor.cli", "produce", str(edges), "-r", "R", "-c",
                               str(config), *extra], capture_output=True, text=True, env=env, timeout=300,
                              cwd=project_root())  # fmt: skip

    refused = produce("--no-register")
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"ivm produce: subject {topic_prefix}R-key has no registered schema: register relation R's schema "
        "(produce without --no-register) or ask the registry's owner to"
    ]
    first = produce()
    assert first.returncode == 0, first.stderr
    again = produce("--no-register")
    assert again.returncode == 0, again.stderr
    assert "produced 2 updates" in again.stdout
    check = subprocess.run([sys.executable, "-m", "ivm.processor.cli", "check", "-c", str(config)], capture_output=True,
                           text=True, env=env, timeout=300, cwd=project_root())  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert "  schema registry basic.auth.user.info = '********'" in check.stdout
    assert guarded["user_info"] not in check.stdout
