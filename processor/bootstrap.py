"""Bulk bootstrap: load an initial database from Parquet or CSV with Spark, then stream.

The files are read with Spark, their tuples applied as inserts through the
engines' preprocessing (``bulk_load`` where an engine has one: IVM^eps counts
statically in O(N^1.5)), and the result is committed as batch 0 with the
relation topics' *current* end offsets, together with a snapshot.  ``ivm run``
then recovers that state and continues from those offsets.
"""

from __future__ import annotations

import io
import logging
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from ivm.processor.codecs.avro import load_schema, schemas_dir
from ivm.processor.config import PipelineConfig
from ivm.processor.job import snapshot_location
from ivm.processor.kafka.sink import TransactionalKafkaSink
from ivm.processor.kafka.topics import create_kind, end_offsets
from ivm.processor.operations.metrics import Metrics
from ivm.processor.operations.progress import ProgressBar
from ivm.processor.pipeline import Pipeline
from ivm.processor.state.recovery import StateStore, read_committed_progress
from ivm.processor.state.relations import load_view
from ivm.updates import Update

log = logging.getLogger(__name__)
_CHUNK = 50_000  # tuples per progress step


def _bar_stream(progress: bool) -> TextIO:
    return sys.stderr if progress else io.StringIO()


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


def read_rows(spark, path: Path, attributes: list[str]) -> tuple[list[list[Any]], list[int] | None]:
    """The columns ``attributes`` (and ``mult``, if the file has one) of a CSV (with a header) or
    Parquet file or folder, read with Spark and handed over as Arrow."""
    text = str(path)
    if text.endswith(".csv"):
        frame = spark.read.option("header", True).option("inferSchema", True).csv(text)
    else:
        frame = spark.read.parquet(text)
    missing = [a for a in attributes if a not in frame.columns]
    if missing:
        raise BootstrapError(f"{path}: no columns {missing} (it has {frame.columns})")
    has_mult = "mult" in frame.columns
    table = frame.select(*attributes, *(["mult"] if has_mult else [])).toArrow()
    columns = [table.column(a).to_pylist() for a in attributes]
    return columns, table.column("mult").to_pylist() if has_mult else None


def bootstrap(config: PipelineConfig, files: Mapping[str, Path], spark=None, progress: bool = True) -> dict[str, Any]:
    """Load ``files`` (relation name -> CSV/Parquet path) as the initial database; returns the results.

    With ``progress`` a bar per relation (tuples converted) and per query (tuples preprocessed)
    goes to stderr.
    """
    from ivm.processor.local.spark import spark_session, stop_session

    unknown = set(files) - {r.name for r in config.relations}
    if unknown:
        raise BootstrapError(f"no configured relations {sorted(unknown)}")
    if not config.exactly_once:
        raise BootstrapError("bootstrap commits batch 0 with the topics' offsets: it needs exactly_once = true")
    relation_topics = [r.topic for r in config.relations]
    create_kind(config.kafka, relation_topics, config.topics.relations)  # [topics.KIND], as ivm run does
    create_kind(config.kafka, [config.progress_topic], config.topics.progress, **{"cleanup.policy": "compact"})
    if read_committed_progress(config.kafka, config.progress_topic) is not None:
        raise BootstrapError(f"pipeline {config.name!r} has committed batches already: bootstrap starts a new one")
    pipeline = Pipeline(config, TransactionalKafkaSink(config.kafka, f"ivm-{config.name}"), Metrics())
    codecs = {codec.relation: codec for codec in pipeline.codecs.values()}
    own = spark is None
    spark = spark or spark_session("ivm-bootstrap", config.spark_master, conf=config.spark_conf)
    width = max(len(r) for r in [*files, *pipeline.views])
    try:
        updates: list[Update] = []
        for relation, path in files.items():
            codec = codecs[relation]
            rel_config = next(r for r in config.relations if r.name == relation)
            schema_path = rel_config.schema if rel_config.schema.is_absolute() else schemas_dir() / rel_config.schema
            fields = {f["name"]: f["type"] for f in load_schema(schema_path)["fields"]}
            casts = [_AVRO_TO_PYTHON.get(fields[a], lambda v: v) for a in codec.attributes]
            if progress:
                print(f"reading {path} with Spark ...", file=sys.stderr, flush=True)
            columns, mults = read_rows(spark, Path(path), list(codec.attributes))
            n = len(columns[0]) if columns else 0
            with ProgressBar(f"load {relation:<{width}}", n, unit="tuples", stream=_bar_stream(progress)) as bar:
                for start in range(0, n, _CHUNK):
                    stop = min(start + _CHUNK, n)
                    cast_columns = [list(map(cast, col[start:stop])) for cast, col in zip(casts, columns, strict=True)]
                    chunk_mults = [int(m) for m in mults[start:stop]] if mults is not None else [1] * (stop - start)
                    rows = zip(*cast_columns, strict=True)
                    updates += (Update(relation, row, m) for row, m in zip(rows, chunk_mults, strict=True))
                    bar.advance(stop - start)
    finally:
        if own:
            stop_session(spark)
    # the stream continues from the topics' current ends; the loaded tuples are in no topic
    positions = end_offsets(config.kafka, relation_topics)
    store = pipeline.store
    for relation in codecs:
        mine = [u for u in updates if u.relation == relation]
        _kept, refused = store.admit(relation, [u.row for u in mine], [u.mult for u in mine], initial=True)
        if refused:
            j, _kind, reason = refused[0]
            raise BootstrapError(
                f"bulk data of {relation} refused by the input policy ({len(refused)} tuples), first {mine[j].row}: "
                f"{reason}"
            )
    for name, view in pipeline.views.items():
        mine = list(store.updates(sorted(view.query.relations)))
        started = time.perf_counter()
        if progress:
            print(f"preprocessing {name}: {len(mine):,} tuples ...", file=sys.stderr, flush=True)
        with ProgressBar(f"apply {name:<{width}}", len(mine), unit="tuples", stream=_bar_stream(progress)) as bar:
            load_view(view, mine, chunk=_CHUNK, on_chunk=bar.advance)
        log.info("query %s: preprocessing %d tuples took %.2fs", name, len(mine), time.perf_counter() - started)
    pipeline.positions.update(positions)
    pipeline.state.origin = dict(positions)
    pipeline.state.bootstrapped = True
    report = pipeline.process([], batch_id=0)
    StateStore(snapshot_location(config)).save(pipeline.state)
    return report.results
