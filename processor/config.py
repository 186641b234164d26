"""The pipeline configuration: one TOML file per pipeline (DESIGN §5).

See ``config/demo.toml`` for a complete example.  Every error names the key
and what was expected.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ivm.policy import Policy


class ConfigError(ValueError):
    """The configuration file is invalid; the message names the key."""


@dataclass(frozen=True)
class RelationConfig:
    name: str
    topic: str
    schema: Path
    window_count: int | None = None  # a sliding window of the last N tuples
    window_seconds: float | None = None  # a sliding window of the last S seconds (record timestamps)
    window_group: str | None = None  # relations with the same group share one window (jointly FIFO)
    encoding: str = "avro"  # "avro": plain Avro binary with schemas/; "confluent": wire format + registry


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
    method: str = "gradient_descent"  # or "closed_form"

    @property
    def model_topic(self) -> str:
        return f"{self.name}.model"

    @property
    def result_topic(self) -> str:
        return f"{self.name}.result"

    @property
    def delta_topic(self) -> str:
        return f"{self.name}.delta"


@dataclass(frozen=True)
class PipelineConfig:
    bootstrap: str = "127.0.0.1:9092"
    dead_letter_topic: str = "ivm.dead-letter"
    schema_registry: str = ""  # the Confluent-compatible registry URL, for "confluent" encodings
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
    checkpoint: str = ""  # empty: a fresh temporary checkpoint per run
    name: str = "ivm"  # the pipeline: its transactional id, progress topic and state folder
    state_dir: str = ""  # snapshots; empty: .local/state/<name>
    snapshot_every: int = 50  # batches between snapshots (0: never)
    exactly_once: bool = True  # outputs in Kafka transactions, recovery from snapshot + replay
    shards: int = 1

    @property
    def progress_topic(self) -> str:
        return f"{self.name}.progress"

    def relation(self, name: str) -> RelationConfig:
        for rel in self.relations:
            if rel.name == name:
                return rel
        raise KeyError(name)

    def with_overrides(self, **overrides: Any) -> PipelineConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline configuration file."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    return parse_config(raw, base=path.parent)


def parse_config(raw: dict[str, Any], base: Path = Path(".")) -> PipelineConfig:
    known = {"processor", "kafka", "spark", "metrics", "policy", "relations", "queries"}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"unknown top-level keys {sorted(unknown)}; known: {sorted(known)}")
    kafka = _table(raw, "kafka")
    spark = _table(raw, "spark")
    metrics = _table(raw, "metrics")
    policy_raw = _table(raw, "policy")
    proc = _table(raw, "processor")
    relations = []
    for i, rel in enumerate(raw.get("relations", [])):
        name = _str(rel, "name", f"relations[{i}]")
        schema = Path(_str(rel, "schema", f"relations[{i}]", default=f"relations/{name}.avsc"))
        seconds = rel.get("window_seconds")
        if seconds is not None and (not isinstance(seconds, int | float) or seconds <= 0):
            raise ConfigError(f"relations[{i}].window_seconds must be a positive number, got {seconds!r}")
        count = _positive_int(rel, "window_count", f"relations[{i}]", default=None)
        if count is not None and seconds is not None:
            raise ConfigError(f"relations[{i}]: give window_count or window_seconds, not both")
        group = rel.get("window_group")
        relations.append(
            RelationConfig(name, _str(rel, "topic", f"relations[{i}]", default=name), schema, count, seconds, group)
        )
    if not relations:
        raise ConfigError("no [[relations]] configured")
    queries = []
    for i, q in enumerate(raw.get("queries", [])):
        eps = q.get("eps")
        if eps is not None and not (isinstance(eps, int | float) and 0 <= eps <= 1):
            raise ConfigError(f"queries[{i}].eps must be a number in [0, 1], got {eps!r}")
        queries.append(
            QueryConfig(
                _str(q, "name", f"queries[{i}]"),
                _str(q, "query", f"queries[{i}]"),
                _str(q, "engine", f"queries[{i}]", default="auto"),
                eps,
                _positive_int(q, "shards", f"queries[{i}]", default=None),
                tuple(_str_list(q, "patterns", f"queries[{i}]")),
                _model(q, f"queries[{i}]"),
                q.get("label"),
                _str(q, "method", f"queries[{i}]", default="gradient_descent"),
            )
        )
    if not queries:
        raise ConfigError("no [[queries]] configured")
    names = [q.name for q in queries]
    if len(set(names)) != len(names):
        raise ConfigError(f"query names must be unique, got {names}")
    try:
        policy = Policy(**policy_raw)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"[policy]: {err}") from None
    return PipelineConfig(
        bootstrap=_str(kafka, "bootstrap", "kafka", default="127.0.0.1:9092"),
        dead_letter_topic=_str(kafka, "dead_letter_topic", "kafka", default="ivm.dead-letter"),
        schema_registry=_str(kafka, "schema_registry", "kafka", default=""),
        relations=tuple(relations),
        queries=tuple(queries),
        policy=policy,
        spark_master=_str(spark, "master", "spark", default="local[2]"),
        max_offsets_per_trigger=int(spark.get("max_offsets_per_trigger", 200_000)),
        trigger_ms=int(spark.get("trigger_ms", 200)),
        fetch_bytes=_positive_int(spark, "fetch_bytes", "spark", default=32 << 20),
        starting_offsets=_str(spark, "starting_offsets", "spark", default="earliest"),
        checkpoint=_str(spark, "checkpoint", "spark", default=""),
        metrics_port=int(metrics.get("port", 0)),
        metrics_address=_str(metrics, "address", "metrics", default="127.0.0.1"),
        name=_str(proc, "name", "processor", default="ivm"),
        state_dir=_str(proc, "state_dir", "processor", default=""),
        snapshot_every=_positive_int(proc, "snapshot_every", "processor", default=50, zero=True),
        exactly_once=bool(proc.get("exactly_once", True)),
        shards=_positive_int(proc, "shards", "processor", default=1),
    )


def _positive_int(table: dict[str, Any], key: str, where: str, default: int | None, zero: bool = False):
    value = table.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if zero else 1):
        raise ConfigError(f"{where}.{key} must be an integer >= {0 if zero else 1}, got {value!r}")
    return value


def _str_list(table: dict[str, Any], key: str, where: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}.{key} must be a list of strings, got {value!r}")
    return value


def _model(table: dict[str, Any], where: str) -> str | None:
    model = table.get("model")
    if model not in (None, "linear_regression", "chow_liu"):
        raise ConfigError(f"{where}.model must be 'linear_regression' or 'chow_liu', got {model!r}")
    if model == "linear_regression" and not isinstance(table.get("label"), str):
        raise ConfigError(f"{where}: a linear_regression model needs a label (a variable of the COVAR aggregate)")
    return model


def _table(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{key}] must be a table")
    return value


def _str(table: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = table.get(key, default)
    if value is None:
        raise ConfigError(f"{where}.{key} is required")
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key} must be a string, got {value!r}")
    return value


def dump_config(config: PipelineConfig) -> str:
    """The TOML text of a configuration; ``parse_config`` reads it back unchanged."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [
        "[processor]",
        f"name = {value(config.name)}",
        f"state_dir = {value(config.state_dir)}",
        f"snapshot_every = {config.snapshot_every}",
        f"exactly_once = {value(config.exactly_once)}",
        f"shards = {config.shards}",
        "",
        "[kafka]",
        f"bootstrap = {value(config.bootstrap)}",
        f"dead_letter_topic = {value(config.dead_letter_topic)}",
        f"schema_registry = {value(config.schema_registry)}",
        "",
        "[spark]",
        f"master = {value(config.spark_master)}",
        f"max_offsets_per_trigger = {config.max_offsets_per_trigger}",
        f"trigger_ms = {config.trigger_ms}",
        f"fetch_bytes = {config.fetch_bytes}",
        f"starting_offsets = {value(config.starting_offsets)}",
        f"checkpoint = {value(config.checkpoint)}",
        "",
        "[metrics]",
        f"port = {config.metrics_port}",
        f"address = {value(config.metrics_address)}",
        "",
        "[policy]",
        f"negative = {value(config.policy.negative)}",
        f"duplicate = {value(config.policy.duplicate)}",
    ]
    for rel in config.relations:
        lines += ["", "[[relations]]", f"name = {value(rel.name)}", f"topic = {value(rel.topic)}"]
        lines.append(f"schema = {value(str(rel.schema))}")
        lines.append(f"encoding = {value(rel.encoding)}")
        if rel.window_count is not None:
            lines.append(f"window_count = {rel.window_count}")
        if rel.window_seconds is not None:
            lines.append(f"window_seconds = {rel.window_seconds}")
        if rel.window_group is not None:
            lines.append(f"window_group = {value(rel.window_group)}")
    for q in config.queries:
        lines += ["", "[[queries]]", f"name = {value(q.name)}", f"query = {value(q.query)}"]
        lines.append(f"engine = {value(q.engine)}")
        if q.eps is not None:
            lines.append(f"eps = {q.eps}")
        if q.shards is not None:
            lines.append(f"shards = {q.shards}")
        if q.patterns:
            lines.append("patterns = [" + ", ".join(value(p) for p in q.patterns) + "]")
        if q.model is not None:
            lines.append(f"model = {value(q.model)}")
        if q.label is not None:
            lines.append(f"label = {value(q.label)}")
        lines.append(f"method = {value(q.method)}")
    return "\n".join(lines) + "\n"
