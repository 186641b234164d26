"""The Spark Structured Streaming job (DESIGN §5): a thin adapter around :class:`Pipeline`.

Spark's own Kafka source reads the relation topics; each micro-batch is
collected to the driver, in offset order per partition, and handed to the
pipeline, which decodes, applies and publishes.  The engines' state lives in
the driver: one shard, the default on one machine.

Restart semantics of this first version: the job starts from the earliest
offsets with a fresh checkpoint and rebuilds the state by replaying the
relation topics (the topics are the log of the Z-relations).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from processor.config import PipelineConfig
from processor.local.spark import spark_session
from processor.metrics import Metrics
from processor.pipeline import BatchReport, Pipeline, Record
from processor.sink import KafkaSink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def run_job(
    config: PipelineConfig,
    *,
    stop: threading.Event | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
    metrics: Metrics | None = None,
    spark: SparkSession | None = None,
) -> None:
    """Run the streaming job until ``stop`` is set (or forever).

    A ``spark`` session given by the caller is left running; otherwise the job
    starts its own and stops it at the end.
    """
    metrics = metrics or Metrics()
    if config.metrics_port:
        port = metrics.serve(config.metrics_port, config.metrics_address)
        log.info("metrics on http://127.0.0.1:%d/metrics", port)
    pipeline = Pipeline(config, KafkaSink(config.bootstrap), metrics)
    own_session = spark is None
    if spark is None:
        spark = spark_session("ivm-processor", config.spark_master)
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.bootstrap)
        .option("subscribe", ",".join(pipeline.topics))
        .option("startingOffsets", config.starting_offsets)
        .option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
        .option("failOnDataLoss", "true")
        .load()
        .selectExpr("topic", "partition", "offset", "key", "value", "CAST(timestamp AS LONG) * 1000 AS ts")
    )

    def process(batch, batch_id: int) -> None:
        rows = batch.collect()
        # Spark hands binary columns over as bytearray; the Kafka client wants bytes.
        records = [
            Record(r[0], r[1], r[2], None if r[3] is None else bytes(r[3]), None if r[4] is None else bytes(r[4]), r[5])
            for r in rows
        ]
        report = pipeline.process(batch_id, records)
        log.info(
            "batch %d: %d records, %s applied, %d dead letters, %.3fs",
            batch_id, report.records, report.applied, report.dead_letters, report.seconds,
        )  # fmt: skip
        if on_batch is not None:
            on_batch(report)

    writer = stream.writeStream.foreachBatch(process).trigger(processingTime=f"{config.trigger_ms} milliseconds")
    if config.checkpoint:
        writer = writer.option("checkpointLocation", config.checkpoint)
    query = writer.start()
    try:
        while query.isActive:
            if stop is not None and stop.wait(0.5):
                break
            if stop is None:
                query.awaitTermination(1)
        if query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {query.exception()}")
    finally:
        query.stop()
        if own_session:
            spark.stop()
