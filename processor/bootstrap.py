"""Bulk bootstrap: load an initial database from Parquet or CSV with Spark, then stream.

The files are read with Spark, their tuples applied as inserts through the
engines' preprocessing (``bulk_load`` where an engine has one: IVM^eps counts
statically in O(N^1.5)), and the result is committed as batch 0 with the
relation topics' *current* end offsets, together with a snapshot.  ``ivm run``
then recovers that state and continues from those offsets.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ivm.updates import Update
from processor.codec import load_schema, schemas_dir
from processor.config import PipelineConfig
from processor.job import state_dir
from processor.metrics import Metrics
from processor.pipeline import Pipeline
from processor.recovery import StateStore, read_committed_progress
from processor.sink import TransactionalKafkaSink
from processor.topics import create_topics, end_offsets

log = logging.getLogger(__name__)

_AVRO_TO_PYTHON: dict[str, Callable[[Any], Any]] = {
    "long": int,
    "int": int,
    "double": float,
    "float": float,
    "string": str,
    "boolean": bool,
}


class BootstrapError(RuntimeError):
    """The bootstrap cannot run (the message says why); nothing was committed."""


def read_rows(spark, path: Path, attributes: list[str]) -> Iterator[tuple[Any, ...]]:
    """The rows of a CSV (with a header) or Parquet file or folder, as attribute tuples."""
    text = str(path)
    if text.endswith(".csv"):
        frame = spark.read.option("header", True).option("inferSchema", True).csv(text)
    else:
        frame = spark.read.parquet(text)
    missing = [a for a in attributes if a not in frame.columns]
    if missing:
        raise BootstrapError(f"{path}: no columns {missing} (it has {frame.columns})")
    columns = list(attributes) + (["mult"] if "mult" in frame.columns else [])
    for row in frame.select(*columns).toLocalIterator():
        yield tuple(row)


def _progress(relation: str, n: int, started: float, done: bool = False) -> None:
    rate = n / max(time.monotonic() - started, 1e-9)
    end = "\n" if done else ""
    print(f"\r  {relation}: {n:>12,} tuples  ({rate:,.0f}/s)", end=end, file=sys.stderr, flush=True)


def bootstrap(config: PipelineConfig, files: Mapping[str, Path], spark=None, progress: bool = True) -> dict[str, Any]:
    """Load ``files`` (relation name -> CSV/Parquet path) as the initial database; returns the results."""
    from processor.local.spark import spark_session

    unknown = set(files) - {r.name for r in config.relations}
    if unknown:
        raise BootstrapError(f"no configured relations {sorted(unknown)}")
    if not config.exactly_once:
        raise BootstrapError("bootstrap commits batch 0 with the topics' offsets: it needs exactly_once = true")
    relation_topics = [r.topic for r in config.relations]
    create_topics(config.bootstrap, relation_topics)
    create_topics(config.bootstrap, [config.progress_topic], config={"cleanup.policy": "compact"})
    if read_committed_progress(config.bootstrap, config.progress_topic) is not None:
        raise BootstrapError(f"pipeline {config.name!r} has committed batches already: bootstrap starts a new one")
    pipeline = Pipeline(config, TransactionalKafkaSink(config.bootstrap, f"ivm-{config.name}"), Metrics())
    codecs = {codec.relation: codec for codec in pipeline.codecs.values()}
    own = spark is None
    spark = spark or spark_session("ivm-bootstrap", config.spark_master)
    try:
        updates: list[Update] = []
        for relation, path in files.items():
            codec = codecs[relation]
            rel_config = next(r for r in config.relations if r.name == relation)
            schema_path = rel_config.schema if rel_config.schema.is_absolute() else schemas_dir() / rel_config.schema
            fields = {f["name"]: f["type"] for f in load_schema(schema_path)["fields"]}
            casts = [_AVRO_TO_PYTHON.get(fields[a], lambda v: v) for a in codec.attributes]
            started, n = time.monotonic(), 0
            for row in read_rows(spark, Path(path), list(codec.attributes)):
                values = tuple(cast(v) for cast, v in zip(casts, row, strict=False))
                mult = int(row[len(codec.attributes)]) if len(row) > len(codec.attributes) else 1
                updates.append(Update(relation, values, mult))
                n += 1
                if progress and n % 50_000 == 0:
                    _progress(relation, n, started)
            if progress:
                _progress(relation, n, started, done=True)
    finally:
        if own:
            spark.stop()
    # the stream continues from the topics' current ends
    positions = end_offsets(config.bootstrap, relation_topics)
    for name, view in pipeline.views.items():
        mine = [u for u in updates if u.relation in view.query.relations]
        bulk = getattr(view.engine, "bulk_load", None)
        if bulk is not None and not hasattr(view, "shards") and config.policy.negative == "reject":
            negative = [u for u in mine if u.mult < 0]
            if negative:
                raise BootstrapError(f"bulk data of {negative[0].relation} has a negative multiplicity: {negative[0]}")
            started = time.perf_counter()
            bulk(mine)
        else:
            started = time.perf_counter()
            outcome = view.apply(mine)
            if outcome.rejected:
                first = outcome.rejected[0]
                raise BootstrapError(f"bulk data rejected ({len(outcome.rejected)} tuples), first: {first.reason}")
        log.info("query %s: preprocessing %d tuples took %.2fs", name, len(mine), time.perf_counter() - started)
    pipeline.positions.update(positions)
    report = pipeline.process([], batch_id=0)
    StateStore(state_dir(config)).save(pipeline.state, list(pipeline.views))
    return report.results
