"""``ivm check -c CONFIG``: validate a pipeline configuration whole and print what ``ivm run`` would run.

The file is validated by its declared schema (:mod:`ivm.processor.config`) and
planned without connecting to anything (:func:`ivm.processor.planning.plan_pipeline`,
the path ``ivm run`` takes before it connects).  Exit 0 with the validated
pipeline printed, or 2 with every finding on its own line.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: `ivm --help` loads every command module, and pydantic is an extra's
    from ivm.processor.config import ConfigError, PipelineConfig, TopicSettings
    from ivm.processor.planning import PipelinePlan


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "check",
        help="validate a pipeline configuration and show what ivm run would maintain",
        description="Validate a pipeline configuration (every key, type and cross-reference; the relation schemas; "
        "each query's engine, eps, patterns and model) without connecting to anything, and print the relations, "
        "queries with their engine and guarantee, output topics, and which compiled kernels load. Exit 2 with one line "
        "per finding.",
    )
    p.add_argument("--config", "-c", required=True, help="pipeline configuration (TOML)")
    return p


def validate(config: PipelineConfig, command: str) -> PipelinePlan | None:
    """The pipeline's plan, or ``None`` after printing each finding as ``ivm COMMAND: line`` to stderr."""
    from ivm.processor.config import ConfigError
    from ivm.processor.planning import plan_pipeline

    try:
        return plan_pipeline(config)
    except ConfigError as err:
        report(err, command)
        return None


def report(err: ConfigError, command: str) -> None:
    """Each finding on its own line of stderr, prefixed ``ivm COMMAND: ``."""
    for line in err.errors:
        print(f"ivm {command}: {line}", file=sys.stderr)


def describe(plan: PipelinePlan) -> list[str]:
    """The validated pipeline in words: relations, queries (engine, guarantee, patterns), output topics."""
    from ivm.processor.config import TOPIC_KINDS, shown

    c = plan.config
    lines = [
        f"pipeline {c.name}: "
        + (f"exactly once (progress topic {c.progress_topic})" if c.exactly_once else "at least once")
        + (f", a snapshot every {c.snapshot_every} batches" if c.exactly_once and c.snapshot_every else "")
        + f", {c.shards} shard{'s' if c.shards != 1 else ''} per query by default",
        f"kafka: {c.bootstrap}" + (f", schema registry {c.schema_registry}" if c.schema_registry else ""),
        *_properties(c),
        f"input: isolation.level={c.isolation_level}, positions committed to consumer group {c.group_id!r} per batch",
        f"spark: {c.spark_master}, at most {c.max_offsets_per_trigger} records per batch every {c.trigger_ms} ms, "
        f"from the {c.starting_offsets} offsets when nothing is committed",
        f"policy: negative={c.policy.negative}, duplicate={c.policy.duplicate}",
        *(["spark.conf: " + ", ".join(shown(k, v) for k, v in c.spark_conf)] if c.spark_conf else []),
        "topics the processor creates (when missing; -1: the cluster's default):",
        *(f"  {kind:<12} {_settings(getattr(c.topics, kind))}" for kind in TOPIC_KINDS),
        "",
        "relations:",
    ]
    for r in plan.relations:
        rel = r.config
        lines.append(f"  {rel.name}({', '.join(r.attributes)})")
        lines.append(f"    topic:    {rel.topic}")
        lines.append(f"    schema:   {r.schema_file}")
        lines.append(f"    encoding: {rel.encoding}")
        lines.append(f"    window:   {r.window or 'none'}")
    lines += ["", "queries:"]
    outputs: list[str] = []
    for q in plan.queries:
        g = q.guarantee
        declared = ", ".join(q.config.patterns) or "none declared"
        lines.append(f"  {q.config.name}: {q.query}")
        lines.append(
            f"    engine:    {q.engine}" + (f" ({q.config.engine} requested)" if q.config.engine != "auto" else "")
        )
        lines.append(f"    guarantee: update {g['update']}; delay {g['delay']}; space {g['space']}")
        lines.append(f"    patterns:  {declared} (planned with: {_patterns(q.explain['patterns'])})")
        if q.config.model:
            lines.append(f"    model:     {q.config.model}" + (f", label {q.config.label}" if q.config.label else ""))
        outputs += q.output_topics
    outputs.append(c.dead_letter_topic)
    if c.exactly_once:
        outputs.append(c.progress_topic)
    lines += ["", "output topics: " + ", ".join(outputs)]
    return lines


def _settings(t: TopicSettings) -> str:
    """``partitions 3, replication factor 3, min.insync.replicas=2``."""
    from ivm.processor.config import shown

    configs = "".join(f", {shown(k, v)}" for k, v in t.config)
    return f"partitions {t.partitions}, replication factor {t.replication_factor}{configs}"


def _properties(c: PipelineConfig) -> list[str]:
    """``[kafka.properties]`` as every client gets them and ``[kafka.schema_registry]``'s settings, secret
    values masked (``********``)."""
    from ivm.processor.kafka.clients import masked

    properties = masked(dict(c.kafka_properties))
    lines = [f"  {key} = {value!r}" for key, value in properties.items()]
    registry = masked(dict(c.schema_registry_properties))
    return lines + [f"  schema registry {key} = {value!r}" for key, value in registry.items()]


def _patterns(described: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in described.items())


def run(args: argparse.Namespace) -> int:
    from ivm.processor.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as err:
        report(err, "check")
        return 2
    plan = validate(config, "check")
    if plan is None:
        return 2
    from ivm.kernels import installed_kernels, summary

    print("\n".join([*describe(plan), "", summary(installed_kernels())]))
    return 0
