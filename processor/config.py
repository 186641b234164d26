"""The pipeline configuration: one TOML file per pipeline (DESIGN §5), validated whole.

See ``config/demo.toml`` for a complete example.  A file is checked against a
declared schema (pydantic models with ``extra="forbid"`` and strict types, one
per table) and then as a whole (names, topics, windows, encodings, the
relations the queries use) before anything connects; every finding is one
line that names the key the way the file spells it::

    unknown key 'modle' in [queries.tri]; did you mean 'model'?
    [processor] exactly_once: expected a boolean, got the string "false"

All findings of a file are reported together (:class:`ConfigError`).  Relative
paths (a relation's ``schema``, ``[processor] state_dir``) are relative to the
configuration file's folder; :func:`load_config` returns absolute ones.  What
needs the schemas and the engines (a query's engine, eps, model) is checked by
:func:`ivm.processor.planning.plan_pipeline`, the same path ``ivm run`` takes.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ivm.policy import Policy

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import KafkaConnection


class ConfigError(ValueError):
    """The configuration is invalid: ``errors`` holds one line per finding, each naming its key.

    The message is those lines joined by newlines.
    """

    def __init__(self, errors: str | Sequence[str]) -> None:
        self.errors: list[str] = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True)
class RelationConfig:
    """A relation: its topic, Avro schema, encoding and sliding window.

    ``schema`` is absolute when it comes from :func:`load_config` (a relative
    path in the file is relative to the file's folder).  A relative ``schema``
    given in code, e.g. ``RelationConfig("R", "R", Path("relations/R.avsc"))``,
    is relative to the schemas folder (:func:`ivm.processor.codecs.avro.schemas_dir`);
    :meth:`schema_file` resolves both.
    """

    name: str
    topic: str
    schema: Path
    window_count: int | None = None  # a sliding window of the last N tuples
    window_seconds: float | None = None  # a sliding window of the last S seconds (record timestamps)
    window_group: str | None = None  # relations with the same group share one window (jointly FIFO)
    # "avro": plain Avro binary with schemas/; "confluent": wire format + registry; "avro-packed" and
    # "confluent-packed": the same, each record an array of many updates (ivm.processor.codecs.avro.PackedCodec)
    encoding: str = "avro"

    def schema_file(self) -> Path:
        """The absolute path of the relation's Avro schema."""
        from ivm.processor.codecs.avro import schemas_dir

        return self.schema if self.schema.is_absolute() else schemas_dir() / self.schema


@dataclass(frozen=True)
class QueryConfig:
    name: str
    query: str
    engine: str = "auto"
    eps: float | None = None
    shards: int | None = None  # None: the pipeline's default
    patterns: tuple[str, ...] = ()  # declared update patterns, e.g. ("R=insert-only", "R+S=fifo")
    model: str | None = None  # "linear_regression" or "chow_liu": published to <query>.model
    label: str | None = None  # the regression's label variable
    method: str = "closed_form"  # or "gradient_descent" (only when asked: it reports whether it converged)

    @property
    def model_topic(self) -> str:
        return f"{self.name}.model"

    @property
    def result_topic(self) -> str:
        return f"{self.name}.result"

    @property
    def delta_topic(self) -> str:
        return f"{self.name}.delta"


#: The kinds of topic the processor creates, as ``[topics.KIND]`` names them.
TOPIC_KINDS = ("relations", "outputs", "progress", "control", "dead_letters")

#: Kinds kept at one partition by construction, with the reason (``[topics.KIND] partitions`` must be 1).
SINGLE_PARTITION: dict[str, str] = {
    "progress": "the pipeline's progress records are one log keyed by its name, read to the last committed "
    "record at every start: they all land in one partition, so more partitions would only stay empty",
    "control": "the processor applies the commands in the order `ivm query` wrote them, and Kafka keeps an "
    "order within one partition only",
}

#: Topic configs the processor sets itself on a kind (``[topics.KIND.config]`` refuses them), with the reason.
OWNED_TOPIC_CONFIGS: dict[tuple[str, str], str] = {
    ("outputs", "cleanup.policy"): "the processor sets it per topic: compact for a keyed <query>.result (the "
    "topic holds the current result, one record per group), the broker's default for the others",
    ("progress", "cleanup.policy"): "the progress topic is compacted (the last record per pipeline is what a "
    "start reads)",
    ("control", "retention.ms"): "the control topic keeps every command (retention.ms = -1): a rebuild from "
    "the topics replays them with the updates",
    ("control", "cleanup.policy"): "the control topic keeps every command (cleanup.policy = delete with "
    "retention.ms = -1): a rebuild from the topics replays them with the updates",
}

#: Kafka's topic-level configs (Kafka 4.1, ``TopicConfig``): ``[topics.KIND.config]`` takes these names.
TOPIC_CONFIG_NAMES = (
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes",
    "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
)  # fmt: skip


@dataclass(frozen=True)
class TopicSettings:
    """How the processor creates one kind of topic when it does not exist yet (an existing topic is left as
    it is): ``-1`` partitions or replication factor take the cluster's defaults (``num.partitions``,
    ``default.replication.factor``; brokers 2.4 and newer), ``config`` holds topic configs such as
    ``min.insync.replicas``, added to the ones the processor sets itself."""

    partitions: int = -1
    replication_factor: int = -1
    config: tuple[tuple[str, str], ...] = ()

    def config_dict(self, **own: str) -> dict[str, str]:
        """The topic configs to create a topic with: these and the processor's own ``own``."""
        return {**dict(self.config), **own}


@dataclass(frozen=True)
class TopicsConfig:
    """``[topics]``: the settings of each kind of topic the processor creates.  The progress and control
    topics have one partition by construction (:data:`SINGLE_PARTITION`)."""

    relations: TopicSettings = TopicSettings()
    outputs: TopicSettings = TopicSettings()  # <query>.result, .delta, .model
    progress: TopicSettings = TopicSettings(partitions=1)
    control: TopicSettings = TopicSettings(partitions=1)
    dead_letters: TopicSettings = TopicSettings()


#: ``[kafka] isolation_level``: how the input's readers treat records of upstream transactions
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


@dataclass(frozen=True)
class PipelineConfig:
    bootstrap: str = "127.0.0.1:9092"
    dead_letter_topic: str = "ivm.dead-letter"
    schema_registry: str = ""  # the Confluent-compatible registry URL, for "confluent" encodings
    # how every reader of the input (Spark's source, recovery's replay, slice rebuilds, ivm subscribe) treats
    # records of upstream transactions: "read_committed" never applies an aborted or still open one
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    consumer_group: str = ""  # the group the input positions are committed to with each batch; empty: the name
    relations: tuple[RelationConfig, ...] = ()
    queries: tuple[QueryConfig, ...] = ()
    policy: Policy = field(default_factory=Policy)
    spark_master: str = "local[2]"
    max_offsets_per_trigger: int = 200_000
    trigger_ms: int = 200
    fetch_bytes: int = 32 << 20  # Spark's Kafka consumer: max.partition.fetch.bytes (Kafka's default is 1 MiB)
    starting_offsets: str = "earliest"
    metrics_port: int = 0  # 0: no metrics endpoint
    metrics_address: str = "127.0.0.1"  # 0.0.0.0 in a container
    name: str = "ivm"  # the pipeline: its transactional id, progress topic and state folder
    state_dir: str = ""  # snapshots; empty: <local_dir>/state/<name> (ivm.processor.local.stack.local_dir)
    snapshot_every: int = 50  # batches between snapshots (0: never)
    snapshot_location: str = ""  # a folder or a pyarrow.fs URL (s3://, hdfs://) for snapshots; empty: state_dir
    exactly_once: bool = True  # outputs in Kafka transactions, recovery from snapshot + replay
    shards: int = 1
    placement: str = "driver"  # where the state lives: "driver" or "executors" (ivm.processor.placement)
    topics: TopicsConfig = TopicsConfig()  # how the processor creates the topics it creates
    spark_conf: tuple[tuple[str, str], ...] = ()  # [spark.conf]: spark.* settings for the session
    # [kafka.properties]: client properties for every Kafka client (ivm.processor.kafka.clients), ${NAME} expanded
    # (repr=False: they hold secrets; ivm.processor.kafka.clients.masked shows them)
    kafka_properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # [kafka.schema_registry] besides its url: basic.auth.user.info, ssl.*
    # (ivm.processor.codecs.confluent.RegistryClient)
    schema_registry_properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.isolation_level not in ISOLATION_LEVELS:
            raise ConfigError(
                f"[kafka] isolation_level: expected one of {', '.join(ISOLATION_LEVELS)}, got {self.isolation_level!r}"
            )
        # a relation some query declares delete-only has its inserts refused by the input policy (003 App. C)
        object.__setattr__(self, "policy", self.policy.with_delete_only(_delete_only(self.queries)))

    @property
    def progress_topic(self) -> str:
        return f"{self.name}.progress"

    @property
    def kafka(self) -> KafkaConnection:
        """The brokers with ``[kafka.properties]``: what every Kafka client of the pipeline connects with."""
        from ivm.processor.kafka.clients import KafkaConnection

        return KafkaConnection(self.bootstrap, self.kafka_properties)

    @property
    def group_id(self) -> str:
        """The consumer group each batch commits its input positions to (``[kafka] consumer_group``, default
        the pipeline's name): the lag that ``kafka-consumer-groups`` and lag exporters show."""
        return self.consumer_group or self.name

    def relation(self, name: str) -> RelationConfig:
        for rel in self.relations:
            if rel.name == name:
                return rel
        raise KeyError(name)

    def with_overrides(self, **overrides: Any) -> PipelineConfig:
        """This configuration with the given fields replaced (``None``: keep), e.g. from the command line.

        A field that comes from a table of the file is validated as that key is
        (``shards=0`` raises ``ConfigError`` naming ``[processor] shards``).
        """
        given = {k: v for k, v in overrides.items() if v is not None}
        errors = []
        for key, value in given.items():
            if key in _FIELD_KEYS:
                section, name = _FIELD_KEYS[key]
                _validate(_SECTIONS[section], {name: value}, f"[{section}]", errors)
        if errors:
            raise ConfigError(errors)
        return replace(self, **given)


# --- the declared schema ---------------------------------------------------------------------------

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Keys the configuration no longer accepts, with the reason.
REMOVED_KEYS: dict[tuple[str, str], str] = {
    ("spark", "checkpoint"): "no longer accepted: a Spark checkpoint would override the committed positions "
    "the processor resumes from (its <name>.progress topic and state snapshots), silently losing or repeating "
    "updates; remove the key",
}


#: ``[spark.conf]`` settings the processor owns, with the reason (refused by name).  Others it sets by
#: default (spark.driver.memory, spark.sql.shuffle.partitions, spark.ui.enabled, spark.app.name, ...)
#: may be overridden there.
OWNED_SPARK_CONF: dict[str, str] = {
    "spark.master": "set by [spark] master (or ivm run --master; spark-submit's --master under spark-submit)",
    "spark.submit.deployMode": "the process that runs the pipeline is Spark's driver (client mode): it holds "
    "the Kafka transaction and, in the driver placement, the state",
    "spark.speculation": "must stay false (the processor sets it): a speculative second attempt of a task reads "
    "its Kafka partition again and, in the executors placement, sends its records to the shard hosts a second "
    "time: only cost, never a gain",
    "spark.sql.streaming.checkpointLocation": "a Spark checkpoint would override the committed positions the "
    "processor resumes from (<name>.progress and the snapshots), silently losing or repeating updates",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "the processor runs the stream on a temporary "
    "checkpoint it removes at the stop (the committed positions, not Spark's, decide where it resumes)",
    "spark.sql.streaming.stopTimeout": "the processor bounds a stop by it (5 s: a stop never waits on a Kafka "
    "fetch for long)",
    "spark.local.dir": "the processor gives each session a fresh scratch folder and removes it at the stop",
    "spark.jars": "the processor puts Spark's Kafka connector on it; add jars with spark.jars.packages or, under "
    "spark-submit, --jars",
    "spark.driver.extraJavaOptions": "the processor sets the driver JVM's logging and options there; "
    "IVM_SPARK_JAVA_OPTIONS replaces the JVM options",
    "spark.executor.extraJavaOptions": "the processor sets the executors' JVM options there; "
    "IVM_SPARK_JAVA_OPTIONS replaces them",
}


def _topic(value: str) -> str:
    """A Kafka topic name (or the stem of one): letters, digits, '.', '_', '-'; at most 249."""
    if not _TOPIC.fullmatch(value):
        raise ValueError(f"{json.dumps(value)} is not a Kafka topic name (letters, digits, '.', '_', '-')")
    return value


def _identifier(value: str) -> str:
    """A relation name as queries spell it: a letter or '_', then letters, digits or '_'."""
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError(f"{json.dumps(value)} is not a relation name (a letter or '_', then letters, digits, '_')")
    return value


def _nonempty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _port(text: str, where: str) -> None:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{where}: port {text!r} is not in 1..65535")


def _bootstrap(value: str) -> str:
    """Kafka bootstrap servers: ``host:port`` items separated by commas, ports in 1..65535."""
    for server in value.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host:
            raise ValueError(f"{json.dumps(server.strip())} is not host:port")
        _port(port, json.dumps(server.strip()))
    return value


def _registry(value: str) -> str:
    """The schema registry: empty, or an http(s) URL (port, if given, in 1..65535)."""
    if not value:
        return value
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"{json.dumps(value)} is not an http:// or https:// URL")
    try:
        url.port  # noqa: B018 -- raises on a port out of range
    except ValueError:
        raise ValueError(f"{json.dumps(value)}: port not in 1..65535") from None
    return value


def _group(value: str) -> str:
    """A consumer group id: empty (the pipeline's name) or printable text without surrounding blanks."""
    if value != value.strip() or not value.isprintable():
        raise ValueError(f"{json.dumps(value)} is not a consumer group name (printable, no surrounding blanks)")
    return value


def _engine(value: str) -> str:
    """``auto`` or a registered engine (:data:`ivm.engines.ENGINES`)."""
    from ivm.engines import ENGINES

    known = ["auto", *sorted(ENGINES)]
    if value not in known:
        raise ValueError(f"unknown engine {json.dumps(value)}{_suggest(value, known)}; known: {', '.join(known)}")
    return value


def _delete_only(queries: Sequence[QueryConfig]) -> frozenset[str]:
    """The relations some query declares ``delete-only``: the input policy refuses inserts into them."""
    from ivm.query.patterns import parse_patterns

    out: set[str] = set()
    for q in queries:
        for pattern in q.patterns:
            try:
                out |= parse_patterns([pattern]).deletion_only
            except ValueError:  # reported by the configuration's own checks
                continue
    return frozenset(out)


def _pattern(value: str) -> str:
    """An update pattern declaration: ``R=insert-only``, ``R=fifo``, ``R=delete-only``, ``R=arbitrary``,
    ``R+S=fifo``."""
    from ivm.query.patterns import parse_patterns

    parse_patterns([value])
    return value


def _count_or_default(value: int) -> int:
    """``-1`` (the cluster's default) or a count in 1..32767."""
    if value != -1 and not 1 <= value <= 32767:
        raise ValueError(f"expected -1 (the cluster's default) or an integer in 1..32767, got the integer {value}")
    return value


Topic = Annotated[str, AfterValidator(_topic)]
Count = Annotated[int, Field(ge=1)]


class _Table(BaseModel):
    """One table of the file: unknown keys refused, no coercion (no string for a boolean, ...)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ProcessorTable(_Table):
    """``[processor]``: the pipeline's name (transactional id, progress topic), state, shards."""

    name: Topic = "ivm"
    state_dir: str = ""
    snapshot_every: Annotated[int, Field(ge=0)] = 50
    snapshot_location: str = ""
    exactly_once: bool = True
    shards: Count = 1
    placement: Literal["driver", "executors"] = "driver"


class KafkaTable(_Table):
    """``[kafka]``: the broker, the dead-letter topic, the schema registry, how the input is read and the
    consumer group its positions are committed to.

    ``isolation_level`` is the one isolation level of every reader of the input: Spark's source
    (``kafka.isolation.level``), the replays of recovery and of slice rebuilds, ``ivm subscribe`` of a
    relation topic and ``ivm status``'s lag.  ``read_committed`` (the default) applies a record of an
    upstream transaction only once that transaction commits, never one it aborts: the live stream and
    every replay see the same input, so a restart gives the result an uninterrupted run gives.
    ``read_uncommitted`` applies whatever is written, aborted transactions included (for producers that
    use no transactions it is the same).  ``consumer_group`` (default: ``[processor] name``) is the group
    each batch's input positions are committed to, in the batch's own transaction.
    """

    bootstrap: Annotated[str, AfterValidator(_bootstrap)] = "127.0.0.1:9092"
    dead_letter_topic: Topic = "ivm.dead-letter"
    schema_registry: Annotated[str, AfterValidator(_registry)] = ""
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    consumer_group: Annotated[str, AfterValidator(_group)] = ""


class SparkTable(_Table):
    """``[spark]``: the master and the micro-batches' size and cadence."""

    master: Annotated[str, AfterValidator(_nonempty)] = "local[2]"
    max_offsets_per_trigger: Count = 200_000
    trigger_ms: Annotated[int, Field(ge=0)] = 200
    fetch_bytes: Count = 32 << 20
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    conf: dict[str, Any] = {}  # [spark.conf]: checked by _check_spark_conf


class TopicKindTable(_Table):
    """``[topics.KIND]``: how the processor creates that kind of topic (``-1``: the cluster's default)."""

    partitions: Annotated[int, AfterValidator(_count_or_default)] = -1
    replication_factor: Annotated[int, AfterValidator(_count_or_default)] = -1
    config: dict[str, Any] = {}  # [topics.KIND.config]: checked by _check_topics


class MetricsTable(_Table):
    """``[metrics]``: the /metrics endpoint (port 0: none)."""

    port: Annotated[int, Field(ge=0, le=65535)] = 0
    address: Annotated[str, AfterValidator(_nonempty)] = "127.0.0.1"


class PolicyTable(_Table):
    """``[policy]``: the input policy (:class:`ivm.policy.Policy`)."""

    negative: Literal["reject", "allow"] = "reject"
    duplicate: Literal["accumulate", "reject"] = "accumulate"


class RelationTable(_Table):
    """One ``[[relations]]`` entry."""

    name: Annotated[str, AfterValidator(_identifier)]
    topic: Topic | None = None  # default: the name
    schema_: str | None = Field(None, alias="schema")  # default: relations/<name>.avsc of the schemas folder
    encoding: Literal["avro", "confluent", "avro-packed", "confluent-packed"] = "avro"
    window_count: Count | None = None
    window_seconds: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None
    window_group: Annotated[str, AfterValidator(_nonempty)] | None = None


class QueryTable(_Table):
    """One ``[[queries]]`` entry."""

    name: Topic
    query: Annotated[str, AfterValidator(_nonempty)]
    engine: Annotated[str, AfterValidator(_engine)] = "auto"
    eps: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None
    shards: Count | None = None
    patterns: list[Annotated[str, AfterValidator(_pattern)]] = []
    model: Literal["linear_regression", "chow_liu"] | None = None
    label: str | None = None
    method: Literal["gradient_descent", "closed_form"] | None = None


_SECTIONS: dict[str, type[_Table]] = {
    "processor": ProcessorTable,
    "kafka": KafkaTable,
    "spark": SparkTable,
    "metrics": MetricsTable,
    "policy": PolicyTable,
}
_KINDS: dict[str, type[_Table]] = {kind: TopicKindTable for kind in TOPIC_KINDS}  # [topics.KIND]
_ARRAYS: dict[str, type[_Table]] = {"relations": RelationTable, "queries": QueryTable}

# PipelineConfig field -> (table, key) of the file, for dump_config and with_overrides.
_FIELD_KEYS: dict[str, tuple[str, str]] = {
    "name": ("processor", "name"),
    "state_dir": ("processor", "state_dir"),
    "snapshot_every": ("processor", "snapshot_every"),
    "snapshot_location": ("processor", "snapshot_location"),
    "exactly_once": ("processor", "exactly_once"),
    "shards": ("processor", "shards"),
    "placement": ("processor", "placement"),
    "bootstrap": ("kafka", "bootstrap"),
    "dead_letter_topic": ("kafka", "dead_letter_topic"),
    "schema_registry": ("kafka", "schema_registry"),
    "isolation_level": ("kafka", "isolation_level"),
    "consumer_group": ("kafka", "consumer_group"),
    "spark_master": ("spark", "master"),
    "max_offsets_per_trigger": ("spark", "max_offsets_per_trigger"),
    "trigger_ms": ("spark", "trigger_ms"),
    "fetch_bytes": ("spark", "fetch_bytes"),
    "starting_offsets": ("spark", "starting_offsets"),
    "metrics_port": ("metrics", "port"),
    "metrics_address": ("metrics", "address"),
}


# --- reading a file -------------------------------------------------------------------------------


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline configuration file; relative paths in it are relative to its folder."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"configuration file {path} is a directory") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    return parse_config(raw, base=path.resolve().parent)


def parse_config(raw: Mapping[str, Any], base: Path = Path(".")) -> PipelineConfig:
    """Validate a parsed TOML document whole; raise :class:`ConfigError` with every finding.

    Checks, each reported as one line naming its key: unknown keys (with the
    nearest valid key), types (strict), value ranges and choices (ports,
    ``starting_offsets``, ``encoding``, engine names, eps in [0, 1], update
    patterns), removed keys (``[spark] checkpoint``), at least one relation
    and one query, unique relation names, topics and query names, a window
    group only on windowed relations that share one window definition,
    ``confluent`` encodings only with ``[kafka] schema_registry``, ``label``
    and ``method`` only with ``model = "linear_regression"`` (which needs a
    label), an eps only for an engine that has one, the query text parses, and
    every relation a query or pattern names is configured (patterns: used by
    the query), ``[topics.KIND]`` (known kinds, ``-1`` or a count, one
    partition for progress and control, Kafka's topic config names but not
    those the processor sets, ``min.insync.replicas`` within the replicas) and
    ``[spark.conf]`` (``spark.*`` keys, none the processor owns, scalar
    values).  Relative paths resolve against ``base``.
    """
    base = Path(base).resolve()
    errors: list[str] = []
    known = [*_SECTIONS, *_ARRAYS, "topics"]
    for key in raw:
        if key not in known:
            errors.append(f"unknown key {key!r} at the top level{_suggest(key, known)}")
    tables: dict[str, _Part] = {}
    properties: dict[str, str] = {}
    registry: dict[str, str] = {}
    for key, model in _SECTIONS.items():
        value = raw.get(key, {})
        if not isinstance(value, dict):
            errors.append(f"[{key}]: expected a table, got {_describe(value)}")
            tables[key] = _Part(f"[{key}]", {}, None, set())
            continue
        if key == "kafka" and "properties" in value:
            value = dict(value)
            properties = _kafka_properties(value.pop("properties"), errors)
        if key == "kafka" and isinstance(value.get("schema_registry"), dict):
            value = dict(value)
            value["schema_registry"], registry = _registry_table(value["schema_registry"], errors)
        tables[key] = _validate(model, value, f"[{key}]", errors)
    entries: dict[str, list[_Part]] = {}
    for key, model in _ARRAYS.items():
        value = raw.get(key, [])
        entries[key] = []
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            errors.append(f"{key}: expected an array of tables ([[{key}]]), got {_describe(value)}")
            continue
        if not value:
            errors.append(f"no [[{key}]] configured: add at least one [[{key}]] table")
        for i, entry in enumerate(value):
            name = entry.get("name")
            where = f"[{key}.{name}]" if isinstance(name, str) and name else f"[{key}[{i}]]"
            entries[key].append(_validate(model, entry, where, errors))
    kinds = _validate_topics(raw.get("topics", {}), errors)
    errors += _check_whole(tables, entries, base)
    errors += _check_spark_conf(tables["spark"])
    if errors:
        raise ConfigError(errors)
    return replace(
        _build(tables, entries, base, kinds),
        kafka_properties=tuple(properties.items()),
        schema_registry_properties=tuple(registry.items()),
    )


def _validate_topics(value: Any, errors: list[str]) -> dict[str, _Part]:
    """``[topics]``: a table of ``[topics.KIND]`` tables, each validated and checked (:func:`_check_topics`)."""
    if not isinstance(value, dict):
        errors.append(f"[topics]: expected a table of [topics.KIND] tables, got {_describe(value)}")
        return {}
    kinds: dict[str, _Part] = {}
    for kind, table in value.items():
        if kind not in _KINDS:
            errors.append(
                f"unknown key {kind!r} in [topics]{_suggest(kind, list(_KINDS))} (kinds: {', '.join(_KINDS)})"
            )
            continue
        if not isinstance(table, dict):
            errors.append(f"[topics] {kind}: expected a table ([topics.{kind}]), got {_describe(table)}")
            continue
        kinds[kind] = part = _validate(_KINDS[kind], table, f"[topics.{kind}]", errors)
        errors += _check_topics(kind, part)
    return kinds


def _check_topics(kind: str, part: _Part) -> list[str]:
    """One ``[topics.KIND]``: one partition for the progress and control topics, Kafka's topic config names
    only (not those the processor sets itself), scalar values, ``min.insync.replicas`` within the replicas."""
    errors: list[str] = []
    t, where = part.table, part.where
    if t is None:
        return errors
    if part.ok("partitions") and "partitions" in part.raw and kind in SINGLE_PARTITION and t.partitions != 1:
        errors.append(f"{where} partitions: must be 1 for the {kind} topic ({SINGLE_PARTITION[kind]})")
    if not part.ok("config"):
        return errors
    for name, value in t.config.items():
        if (kind, name) in OWNED_TOPIC_CONFIGS:
            errors.append(f"[topics.{kind}.config] {name}: set by the processor: {OWNED_TOPIC_CONFIGS[(kind, name)]}")
        elif name not in TOPIC_CONFIG_NAMES:
            errors.append(
                f"unknown topic config {name!r} in [topics.{kind}.config]{_suggest(name, TOPIC_CONFIG_NAMES)} "
                "(Kafka's topic-level configs, such as min.insync.replicas, retention.ms, segment.bytes)"
            )
        elif _config_value(value) is None:
            expected = "expected a string, number or boolean"
            errors.append(f"[topics.{kind}.config] {name}: {expected}, got {_describe(value)}")
    isr = t.config.get("min.insync.replicas")
    replicas = t.replication_factor if part.ok("replication_factor") else -1
    if isinstance(isr, int | str) and str(isr).isdigit() and replicas != -1 and int(isr) > replicas:
        errors.append(
            f"[topics.{kind}.config] min.insync.replicas: {isr} is more than replication_factor = "
            f"{replicas}: every transactional write would fail (NOT_ENOUGH_REPLICAS)"
        )
    return errors


def _check_spark_conf(spark: _Part) -> list[str]:
    """``[spark.conf]``: ``spark.*`` keys only, none the processor owns (:data:`OWNED_SPARK_CONF`), scalar
    values."""
    if not spark.ok("conf"):
        return []
    errors: list[str] = []
    for key, value in spark.table.conf.items():
        if not key.startswith("spark."):
            errors.append(f"[spark.conf] {key}: not a Spark setting (the keys of [spark.conf] start with 'spark.')")
        elif key in OWNED_SPARK_CONF:
            errors.append(f"[spark.conf] {key}: owned by the processor: {OWNED_SPARK_CONF[key]}")
        elif _config_value(value) is None:
            errors.append(f"[spark.conf] {key}: expected a string, number or boolean, got {_describe(value)}")
    return errors


def shown(key: str, value: str) -> str:
    """A setting as ``ivm check`` and the logs print it: the value masked when the key names a secret.

    >>> shown("spark.executor.memory", "2g"), shown("spark.hadoop.fs.s3a.secret.key", "abc")
    ('spark.executor.memory=2g', 'spark.hadoop.fs.s3a.secret.key=****')
    """
    from ivm.processor.kafka.clients import is_secret

    return f"{key}={'****' if is_secret(key) else value}"


def _config_value(value: Any) -> str | None:
    """A TOML scalar as Kafka's and Spark's configurations spell it (``true``, ``2``, ``0.5``), or ``None``
    for a value that is not a scalar (an array, a table, a date)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return None


_ENV = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(value: str, where: str, errors: list[str], environ: Mapping[str, str] | None = None) -> str:
    """``value`` with each ``${NAME}`` replaced by the environment variable ``NAME`` (``$${`` is a literal ``${``).

    An unset variable, or a ``${`` that starts no ``${NAME}``, is a finding naming ``where`` (the key) and the
    variable, never the values: they are secrets.

    >>> expand_env("${USER_X}:$${USER_X}", "[kafka.properties] x", [], {"USER_X": "me"})
    'me:${USER_X}'
    >>> errors = []; _ = expand_env("${NOPE_X}", "[kafka.properties] sasl.password", errors, {}); errors
    ['[kafka.properties] sasl.password: environment variable ${NOPE_X} is not set']
    """
    import os

    env = os.environ if environ is None else environ
    missing: list[str] = []

    def one(match: re.Match[str]) -> str:
        if match[0] == "$${":
            return "\0{"  # a placeholder that no ${ can make: restored below
        name = match[1]
        if name not in env:
            missing.append(name)
            return ""
        return env[name].replace("${", "\0{")

    out = _ENV.sub(one, value)
    for name in dict.fromkeys(missing):
        errors.append(f"{where}: environment variable ${{{name}}} is not set")
    if "${" in out:
        errors.append(f"{where}: '${{' starts no ${{NAME}} (a variable's name: letters, digits, '_'; write $${{ for a "
                      "literal ${)")  # fmt: skip
    return out.replace("\0{", "${")


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A table's keys as dotted names: TOML reads ``sasl.password = "x"`` as ``{"sasl": {"password": "x"}}``.

    >>> _flatten({"sasl": {"password": "x", "mechanism": "PLAIN"}, "client.id": "c"})
    {'sasl.password': 'x', 'sasl.mechanism': 'PLAIN', 'client.id': 'c'}
    """
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


#: ``[kafka.schema_registry]``'s keys besides ``url``: confluent_kafka.schema_registry's client settings.
REGISTRY_KEYS = (
    "basic.auth.user.info",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
)


def _registry_table(value: Mapping[str, Any], errors: list[str]) -> tuple[Any, dict[str, str]]:
    """``[kafka.schema_registry]``: ``(url, the client's other settings)``, ``${NAME}`` expanded; the url is
    validated as ``[kafka] schema_registry`` is."""
    where = "[kafka.schema_registry]"
    flat = _flatten(value)
    out: dict[str, str] = {}
    url: Any = flat.pop("url", None)
    if url is None:
        errors.append(f"{where} url: required key missing (the registry's URL)")
        url = ""
    for key, item in flat.items():
        if key not in REGISTRY_KEYS:
            errors.append(f"unknown key {key!r} in {where}{_suggest(key, ['url', *REGISTRY_KEYS])}")
        elif not isinstance(item, str):
            errors.append(f"{where} {key}: expected a string, got {_describe(item)}")
        else:
            before = len(errors)
            expanded = expand_env(item, f"{where} {key}", errors)
            if len(errors) == before:  # an unset variable is the finding; its value is not checked further
                out[key] = expanded
    if isinstance(url, str):
        url = expand_env(url, f"{where} url", errors)
    info = out.get("basic.auth.user.info")
    if info is not None and ":" not in info:
        errors.append(f"{where} basic.auth.user.info: expected user:password (the value is not shown)")
    for key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
        if key in out and not Path(out[key]).is_file():
            errors.append(f"{where} {key}: {out[key]} is not a file (a PEM file is expected)")
    if "ssl.key.location" in out and "ssl.certificate.location" not in out:
        errors.append(f"{where} ssl.certificate.location: required with ssl.key.location")
    return url, out


def _kafka_properties(value: Any, errors: list[str]) -> dict[str, str]:
    """``[kafka.properties]`` with ``${NAME}`` expanded and checked
    (:func:`ivm.processor.kafka.clients.check_properties`)."""
    from ivm.processor.kafka.clients import check_properties

    where = "[kafka.properties]"
    if not isinstance(value, dict):
        errors.append(f"{where}: expected a table, got {_describe(value)}")
        return {}
    expanded: dict[str, Any] = {}
    for key, item in _flatten(value).items():
        expanded[key] = expand_env(item, f"{where} {key}", errors) if isinstance(item, str) else item
    found = check_properties(expanded, where)
    errors += found
    return {} if found else expanded


@dataclass(frozen=True)
class _Part:
    """One validated table: ``table`` is the model of its valid keys (``None`` if even those do not
    validate); ``bad`` are the keys with findings, which the checks across keys leave alone."""

    where: str
    raw: Mapping[str, Any]
    table: Any
    bad: set[str]

    def ok(self, *keys: str) -> bool:
        """The table validated, at least as far as ``keys`` go."""
        return self.table is not None and not self.bad.intersection(keys)


def _validate(model: type[_Table], value: Mapping[str, Any], where: str, errors: list[str]) -> _Part:
    """``value`` validated by ``model``; its findings, one line each, appended to ``errors``.

    An invalid table is validated again without its bad keys, so that the
    checks across keys still see the rest of it.
    """
    try:
        return _Part(where, value, model.model_validate(value), set())
    except ValidationError as err:
        found = err.errors(include_url=False)
        errors += [_render(e, model, where) for e in found]
        bad = {str(e["loc"][0]) for e in found if e["loc"]}
        try:
            rest = model.model_validate({k: v for k, v in value.items() if k not in bad})
        except ValidationError:
            rest = None
        return _Part(where, value, rest, bad)


def _render(error: Mapping[str, Any], model: type[_Table], where: str) -> str:
    """One pydantic error as a line naming the key as the file spells it."""
    loc = error["loc"]
    key = _key_path(loc)
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    section = where.strip("[]")
    if kind == "extra_forbidden":
        removed = REMOVED_KEYS.get((section, str(loc[0])))
        if removed:
            return f"{where} {key}: {removed}"
        keys = [f.alias or name for name, f in model.model_fields.items()]
        return f"unknown key {loc[0]!r} in {where}{_suggest(str(loc[0]), keys)}"
    if kind == "missing":
        return f"{where} {key}: required key missing"
    if kind == "value_error":
        return f"{where} {key}: {ctx.get('error', error['msg'])}"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        hint = _suggest(value, choices) if isinstance(value, str) else ""
        expected = " or ".join(json.dumps(c) for c in choices)
        return f"{where} {key}: expected {expected}, got {_describe(value)}{hint}"
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"{where} {key}: expected {_noun(limit)} {bounds[kind]} {limit:g}, got {_describe(value)}"
    if kind == "finite_number":
        return f"{where} {key}: expected a finite number, got {_describe(value)}"
    expected = _EXPECTED.get(kind)
    if expected:
        return f"{where} {key}: expected {expected}, got {_describe(value)}"
    return f"{where} {key}: {error['msg']}"


_EXPECTED = {
    "bool_type": "a boolean",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "list_type": "an array",
    "model_type": "a table",
    "dict_type": "a table",
}


def _key_path(loc: Sequence[str | int]) -> str:
    """``('patterns', 1)`` -> ``patterns[1]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _noun(value: Any) -> str:
    return "an integer" if isinstance(value, int) and not isinstance(value, bool) else "a number"


def _describe(value: Any) -> str:
    """A TOML value as the file spells it: ``the string "false"``, ``the boolean true``, ..."""
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the float {value!r}" if math.isfinite(value) else f"the float {value}"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    if isinstance(value, list):
        text = json.dumps(value, default=str)
        return f"the array {text if len(text) <= 40 else text[:37] + '...'}"
    if isinstance(value, dict):
        return "a table"
    return f"the {type(value).__name__} {value}"


def _suggest(word: str, choices: Sequence[str]) -> str:
    """``; did you mean 'x'?`` for the nearest choice (difflib), or nothing."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_whole(tables: Mapping[str, _Part], entries: Mapping[str, list[_Part]], base: Path) -> list[str]:
    """Findings across keys and tables; each check reads only keys that validated."""
    errors: list[str] = []
    kafka, processor = tables["kafka"], tables["processor"]
    relations = entries["relations"]
    queries = entries["queries"]
    # names any relation entry declares, valid or not: a query over it is not "unconfigured"
    declared = {r.raw["name"] for r in relations if isinstance(r.raw.get("name"), str)}

    owners: dict[str, str] = {}  # topic -> who writes or reads it

    def claim(topic: str, owner: str, where: str, key: str) -> None:
        if topic in owners:
            errors.append(f"{where} {key}: topic {topic!r} is already {owners[topic]}")
        else:
            owners[topic] = owner

    seen: set[str] = set()
    for r in relations:
        if not r.ok("name"):
            continue
        rel = r.table
        if rel.name in seen:
            errors.append(f"{r.where} name: relation {rel.name!r} is configured twice")
            continue
        seen.add(rel.name)
        if r.ok("topic"):
            claim(rel.topic or rel.name, f"the topic of relation {rel.name}", r.where, "topic")
    if kafka.ok("dead_letter_topic"):
        claim(kafka.table.dead_letter_topic, "the dead-letter topic", "[kafka]", "dead_letter_topic")
    if processor.ok("name", "exactly_once") and processor.table.exactly_once:
        claim(f"{processor.table.name}.progress", "the progress topic", "[processor]", "name")
    names: set[str] = set()
    for q in queries:
        if not q.ok("name"):
            continue
        if q.table.name in names:
            errors.append(f"{q.where} name: query {q.table.name!r} is configured twice")
            continue
        names.add(q.table.name)
        for suffix in ("result", "delta", "model"):
            claim(f"{q.table.name}.{suffix}", f"the {suffix} topic of query {q.table.name}", q.where, "name")

    windowed = ("window_count", "window_seconds", "window_group")
    unreadable: set[str] = set()  # relations whose schema file is not a relation schema: reported once
    for r in relations:
        rel = r.table
        confluent = r.ok("encoding") and rel.encoding in ("confluent", "confluent-packed")
        if confluent and kafka.ok("schema_registry") and not kafka.table.schema_registry:
            errors.append(f'{r.where} encoding: "{rel.encoding}" needs [kafka] schema_registry (the registry URL)')
        if r.ok(*windowed) and rel.window_count is not None and rel.window_seconds is not None:
            errors.append(f"{r.where} window_seconds: give window_count or window_seconds, not both")
        unwindowed = r.ok(*windowed) and rel.window_count is None and rel.window_seconds is None
        if unwindowed and rel.window_group is not None:
            errors.append(f"{r.where} window_group: only for a windowed relation (set window_count or window_seconds)")
        if r.ok("schema", "name"):
            path = _schema_path(rel, base)
            if not path.is_file():
                given = "" if rel.schema_ is not None else "no schema given and the default "
                errors.append(f"{r.where} schema: {given}schema file {path} does not exist")
            elif problem := _schema_problem(path):
                errors.append(f"{r.where} schema: {path} {problem}")
                unreadable.add(rel.name)
    groups: dict[str, Any] = {}
    for r in relations:
        rel = r.table
        if not r.ok("name", *windowed) or rel.window_group is None:
            continue
        if rel.window_count is None and rel.window_seconds is None:
            continue
        first = groups.setdefault(rel.window_group, rel)
        if (rel.window_count, rel.window_seconds) != (first.window_count, first.window_seconds):
            key = "window_count" if rel.window_count is not None else "window_seconds"
            errors.append(
                f"{r.where} {key}: window group {rel.window_group!r} is {_window(first)} (relation {first.name}); "
                f"relation {rel.name} has {_window(rel)}: one group shares one window"
            )

    attributes = _attributes(
        [r.table for r in relations if r.ok("name", "schema") and r.table.name not in unreadable], base
    )
    for q in queries:
        errors += _check_query(q, declared, attributes)
    return errors


def _schema_problem(path: Path) -> str | None:
    """Why the file at ``path`` is not a relation update schema (an Avro record with a ``mult``), or ``None``."""
    from ivm.processor.codecs.avro import RelationCodec

    try:
        schema = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        return f"cannot be read: {err}"
    except ValueError as err:
        return f"is not JSON: {err}"
    try:
        RelationCodec.from_schema(schema)
    except Exception as err:  # fastavro's SchemaParseException and friends, a missing field
        return f"is not a relation update schema (an Avro record with the attributes and a long 'mult'): {err}"
    return None


def _window(rel: Any) -> str:
    if rel.window_count is not None:
        return f"window_count = {rel.window_count}"
    return f"window_seconds = {rel.window_seconds}"


def _check_query(q: _Part, declared: set[str], attributes: Mapping[str, list[str]] | None) -> list[str]:
    """A query's text parses, names configured relations, and its options fit together."""
    from ivm.engines import ENGINES
    from ivm.query.parse import QuerySyntaxError, parse

    errors: list[str] = []
    t, where = q.table, q.where
    if t is None:
        return errors
    if q.ok("model", "label", "method"):
        if t.model != "linear_regression":
            for key in ("label", "method"):
                if getattr(t, key) is not None:
                    errors.append(f'{where} {key}: only used with model = "linear_regression"')
        elif t.label is None:
            errors.append(f'{where} label: required with model = "linear_regression" (a variable of the COVAR)')
    explicit = q.ok("eps", "engine") and t.eps is not None and t.engine != "auto"
    if explicit and "eps" not in _parameters(ENGINES[t.engine]):
        errors.append(f"{where} eps: engine {t.engine!r} has no eps (only IVM^eps engines take one)")
    if not q.ok("query"):
        return errors
    try:
        query = parse(t.query, attributes)
    except (QuerySyntaxError, ValueError) as err:
        return [*errors, f"{where} query: {err}"]
    missing = sorted(set(query.relations) - declared)
    if missing:
        names = ", ".join(missing)
        configured = ", ".join(sorted(declared)) or "none"
        errors.append(f"{where} query: uses {names} with no [[relations]] entry (configured: {configured})")
    if q.ok("patterns"):
        for i, pattern in enumerate(t.patterns):
            named = {n.strip() for n in pattern.split("=", 1)[0].split("+") if n.strip()}
            unused = sorted(named - set(query.relations))
            if unused:
                errors.append(
                    f"{where} patterns[{i}]: {json.dumps(pattern)} names {', '.join(unused)}, which the query "
                    f"does not use (it uses {', '.join(sorted(query.relations))})"
                )
    return errors


def _parameters(cls: type) -> Mapping[str, Any]:
    import inspect

    return inspect.signature(cls.__init__).parameters


def _attributes(relations: Sequence[RelationTable], base: Path) -> dict[str, list[str]] | None:
    """The attributes of the relations whose schema file reads (for SQL queries), or ``None`` if none does."""
    out: dict[str, list[str]] = {}
    for rel in relations:
        try:
            fields = json.loads(_schema_path(rel, base).read_text())["fields"]
            out[rel.name] = [f["name"] for f in fields if f["name"] != "mult"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out or None


def _schema_path(rel: RelationTable, base: Path) -> Path:
    """A relation's schema: absolute, relative to the file's folder, or the registered one by default."""
    if rel.schema_ is None:
        from ivm.processor.codecs.avro import schemas_dir

        return (schemas_dir() / "relations" / f"{rel.name}.avsc").resolve()
    return (base / rel.schema_).resolve()


def _build(
    tables: Mapping[str, _Part], entries: Mapping[str, list[_Part]], base: Path, kinds: Mapping[str, _Part]
) -> PipelineConfig:
    """The configuration of a document without findings."""
    defaults = TopicsConfig()
    topics = {
        kind: TopicSettings(
            part.table.partitions if "partitions" in part.raw else getattr(defaults, kind).partitions,
            part.table.replication_factor,
            tuple((k, _config_value(v) or "") for k, v in part.table.config.items()),
        )
        for kind, part in kinds.items()
    }
    proc, kafka, spark, metrics, policy = (tables[k].table for k in _SECTIONS)
    relations = tuple(
        RelationConfig(
            rel.name,
            rel.topic or rel.name,
            _schema_path(rel, base),
            rel.window_count,
            rel.window_seconds,
            rel.window_group,
            rel.encoding,
        )
        for rel in (r.table for r in entries["relations"])
    )
    queries = tuple(
        QueryConfig(
            q.name,
            q.query,
            q.engine,
            q.eps,
            q.shards,
            tuple(q.patterns),
            q.model,
            q.label,
            q.method or "closed_form",
        )
        for q in (e.table for e in entries["queries"])
    )
    return PipelineConfig(
        bootstrap=kafka.bootstrap,
        dead_letter_topic=kafka.dead_letter_topic,
        schema_registry=kafka.schema_registry,
        isolation_level=kafka.isolation_level,
        consumer_group=kafka.consumer_group,
        relations=relations,
        queries=queries,
        policy=Policy(policy.negative, policy.duplicate),
        spark_master=spark.master,
        max_offsets_per_trigger=spark.max_offsets_per_trigger,
        trigger_ms=spark.trigger_ms,
        fetch_bytes=spark.fetch_bytes,
        starting_offsets=spark.starting_offsets,
        metrics_port=metrics.port,
        metrics_address=metrics.address,
        name=proc.name,
        state_dir=str((base / proc.state_dir).resolve()) if proc.state_dir else "",
        snapshot_every=proc.snapshot_every,
        snapshot_location=_location(base, proc.snapshot_location),
        exactly_once=proc.exactly_once,
        shards=proc.shards,
        placement=proc.placement,
        topics=replace(defaults, **topics),
        spark_conf=tuple((k, _config_value(v) or "") for k, v in spark.conf.items()),
    )


# --- writing a file -------------------------------------------------------------------------------


def dump_config(config: PipelineConfig) -> str:
    """The TOML text of a configuration; ``parse_config`` reads it back unchanged.

    Paths are written absolute (a relative schema given in code is relative to
    the schemas folder, a relative state folder to the working directory), so
    the file means the same wherever it is saved.
    """

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        return json.dumps(str(v), ensure_ascii=False)

    def line(key: str, field_name: str) -> str:
        return f"{key} = {value(getattr(config, field_name))}"

    out: list[str] = []
    by_table: dict[str, list[str]] = {}
    for field_name, (table, key) in _FIELD_KEYS.items():
        if field_name == "state_dir" and config.state_dir:
            by_table.setdefault(table, []).append(f"state_dir = {value(Path(config.state_dir).absolute())}")
            continue
        if field_name == "snapshot_location" and config.snapshot_location:
            where = _location(Path.cwd(), config.snapshot_location)
            by_table.setdefault(table, []).append(f"snapshot_location = {value(where)}")
            continue
        by_table.setdefault(table, []).append(line(key, field_name))
    by_table["policy"] = [
        f"negative = {value(config.policy.negative)}",
        f"duplicate = {value(config.policy.duplicate)}",
    ]
    for table in _SECTIONS:
        out += [f"[{table}]", *by_table[table], ""]
        if table == "spark" and config.spark_conf:
            out += ["[spark.conf]", *(f"{json.dumps(k)} = {value(v)}" for k, v in config.spark_conf), ""]
    defaults = TopicsConfig()
    for kind in TOPIC_KINDS:
        settings = getattr(config.topics, kind)
        if settings == getattr(defaults, kind):
            continue
        out += [f"[topics.{kind}]", f"partitions = {settings.partitions}"]
        out += [f"replication_factor = {settings.replication_factor}", ""]
        if settings.config:
            out += [f"[topics.{kind}.config]", *(f"{json.dumps(k)} = {value(v)}" for k, v in settings.config), ""]
    # written as given (secrets too: keep such a file as a secret, or write ${NAME} in it by hand)
    if config.kafka_properties:
        out += ["[kafka.properties]", *(f"{value(k)} = {value(v)}" for k, v in config.kafka_properties), ""]
    if config.schema_registry_properties:
        out = [line for line in out if not line.startswith("schema_registry = ")]
        out += ["[kafka.schema_registry]", f"url = {value(config.schema_registry)}"]
        out += [*(f"{value(k)} = {value(v)}" for k, v in config.schema_registry_properties), ""]
    for rel in config.relations:
        out += ["[[relations]]", f"name = {value(rel.name)}", f"topic = {value(rel.topic)}"]
        out.append(f"schema = {value(rel.schema_file())}")
        out.append(f"encoding = {value(rel.encoding)}")
        if rel.window_count is not None:
            out.append(f"window_count = {rel.window_count}")
        if rel.window_seconds is not None:
            out.append(f"window_seconds = {value(rel.window_seconds)}")
        if rel.window_group is not None:
            out.append(f"window_group = {value(rel.window_group)}")
        out.append("")
    for q in config.queries:
        out += ["[[queries]]", f"name = {value(q.name)}", f"query = {value(q.query)}", f"engine = {value(q.engine)}"]
        if q.eps is not None:
            out.append(f"eps = {value(q.eps)}")
        if q.shards is not None:
            out.append(f"shards = {q.shards}")
        if q.patterns:
            out.append("patterns = [" + ", ".join(value(p) for p in q.patterns) + "]")
        if q.model is not None:
            out.append(f"model = {value(q.model)}")
        if q.model == "linear_regression":
            if q.label is not None:
                out.append(f"label = {value(q.label)}")
            out.append(f"method = {value(q.method)}")
        out.append("")
    return "\n".join(out)


__all__ = [
    "REMOVED_KEYS",
    "ConfigError",
    "PipelineConfig",
    "QueryConfig",
    "RelationConfig",
    "TopicSettings",
    "TopicsConfig",
    "dump_config",
    "load_config",
    "parse_config",
]


def _location(base: Path, location: str) -> str:
    """A snapshot location as given if it is a URL (``s3://…``), else a path resolved against ``base``.

    >>> _location(Path("/etc/ivm"), "s3://bucket/state"), _location(Path("/etc/ivm"), "state")
    ('s3://bucket/state', '/etc/ivm/state')
    """
    if not location or "://" in location:
        return location
    return str((base / location).resolve())
