"""End-to-end throughput and latency of the processor, and where the time goes.

For the triangle count (the facebook edge stream) and a q-hierarchical count
(``Q() :- R(a,b), S(a,c)`` on a random stream), at 1 and 4 shards:

- ``e2e``: updates produced to a local KRaft broker, the Spark job running
  (exactly once: transactions and snapshots on), throughput from the first
  produce to the committed result that reflects the last update;
- ``latency``: updates produced at a fixed rate (``--rate``), p50/p99 of the
  time from each update's produce to the commit of the result reflecting it;
- the stages alone on the same updates, in this process: Avro decoding,
  the engine (``view.apply``), and the pipeline without Kafka or Spark
  (decode + engine + output encoding).

    .venv/bin/python bench/e2e.py            # 2e5 updates per run
    .venv/bin/python bench/e2e.py --quick    # 3e4 updates per run

Prints a table and saves bench/out/e2e.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import ivm
from ivm.policy import Policy
from processor.codec import load_relation_codecs
from processor.config import PipelineConfig, QueryConfig, RelationConfig
from processor.job import run_job
from processor.local.kafka import KafkaBroker
from processor.local.spark import spark_session
from processor.pipeline import Pipeline, Record
from processor.produce import UpdateProducer, read_edges
from processor.subscribe import follow, reflects
from processor.topics import create_topics, end_offsets

ROOT = Path(__file__).resolve().parents[1]
FACEBOOK = ROOT.parent / "shared" / "data" / "graphs" / "facebook_combined.edges"
OUT = ROOT / "bench" / "out"
CODECS = load_relation_codecs()
WORKLOADS = {
    "triangle": ("Q() :- R(a,b), S(b,c), T(c,a)", "RST"),
    "q-hierarchical": ("Q() :- R(a,b), S(a,c)", "RS"),
}


def pipeline_config(bootstrap: str, prefix: str, state_dir: Path, query: str, relations: str, **overrides):
    return PipelineConfig(
        bootstrap=bootstrap,
        dead_letter_topic=f"{prefix}dead-letter",
        relations=tuple(RelationConfig(r, f"{prefix}{r}", Path(f"relations/{r}.avsc")) for r in relations),
        queries=(QueryConfig(f"{prefix}q", query, "auto"),),
        policy=Policy(),
        name=f"{prefix}pipe",
        state_dir=str(state_dir),
        **overrides,
    )


def updates_for(workload: str, n: int) -> list[tuple[str, tuple[int, int], int]]:
    if workload == "triangle":
        out = []
        for u, v in read_edges(FACEBOOK):
            for rel in "RST":
                out += [(rel, (u, v), 1), (rel, (v, u), 1)]
            if len(out) >= n:
                break
        return out[:n]
    rng = random.Random(1)
    return [(rng.choice("RS"), (rng.randrange(10_000), rng.randrange(1_000_000)), 1) for _ in range(n)]


class NullSink:
    def begin(self) -> None: ...
    def send(self, topic, key, value) -> None: ...
    def commit(self) -> None: ...


def stages(workload: str, updates) -> dict[str, float]:
    query, relations = WORKLOADS[workload]
    encoded = [(rel, CODECS[rel].encode(row, m)[1]) for rel, row, m in updates]
    t = time.perf_counter()
    for rel, value in encoded:
        CODECS[rel].decode(value)
    decode = len(encoded) / (time.perf_counter() - t)
    view = ivm.maintain(query)
    t = time.perf_counter()
    view.apply(updates)
    engine = len(updates) / (time.perf_counter() - t)
    config = pipeline_config("unused:1", "", Path(tempfile.mkdtemp()), query=query, relations=relations)
    pipeline = Pipeline(config, NullSink())
    records = [Record(rel, 0, i, None, value) for i, (rel, value) in enumerate(encoded)]
    t = time.perf_counter()
    for i in range(0, len(records), 10_000):
        pipeline.process(records[i : i + 10_000])
    return {"decode": decode, "engine": engine, "pipeline": len(records) / (time.perf_counter() - t),
            "engine_name": view.engine.name}  # fmt: skip


def e2e(broker, spark, workload: str, updates, shards: int, rate: float | None) -> dict[str, float]:
    query, relations = WORKLOADS[workload]
    prefix = f"b{random.randrange(10**8)}."
    config = pipeline_config(
        broker.bootstrap, prefix, Path(tempfile.mkdtemp()), query=query, relations=relations,
        shards=shards, max_offsets_per_trigger=100_000, trigger_ms=50, snapshot_every=1000,
    )  # fmt: skip
    topics = {r: f"{prefix}{r}" for r in relations}
    create_topics(broker.bootstrap, list(topics.values()))
    stop = threading.Event()
    job = threading.Thread(target=run_job, kwargs={"config": config, "stop": stop, "spark": spark}, daemon=True)
    job.start()
    time.sleep(8)  # the stream starts; measure from the first produce
    producer = UpdateProducer(broker.bootstrap, CODECS, topics)
    sent_at: dict[str, list[float]] = {t: [] for t in topics.values()}
    started = time.time()
    for i, (rel, row, m) in enumerate(updates):
        if rate is not None:
            due = started + i / rate
            while time.time() < due:
                time.sleep(0.0005)
        producer.send_raw(topics[rel], *CODECS[rel].encode(row, m))
        sent_at[topics[rel]].append(time.time())
    producer.flush()
    final = end_offsets(broker.bootstrap, list(topics.values()))
    latencies: list[float] = []
    done = dict.fromkeys(topics.values(), 0)
    last = None
    for record in follow(broker.bootstrap, config.queries[0].result_topic, idle_timeout=120):
        committed = record["timestamp_ms"].timestamp()  # fastavro reads timestamp-millis as a datetime
        for o in record["offsets"]:
            for s in sent_at.get(o["topic"], [])[done.get(o["topic"], 0) : o["offset"]]:
                latencies.append(committed - s)
            done[o["topic"]] = max(done.get(o["topic"], 0), o["offset"])
        if reflects(record, final):
            last = committed
            break
    stop.set()
    job.join(60)
    assert last is not None, "the job did not reflect every update"
    latencies.sort()
    return {
        "throughput": len(updates) / (last - started),
        "p50": statistics.median(latencies),
        "p99": latencies[int(0.99 * (len(latencies) - 1))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("-n", type=int, default=None, help="updates per run")
    args = parser.parse_args()
    n = args.n or (30_000 if args.quick else 200_000)
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    with KafkaBroker.start() as broker:
        spark = spark_session("ivm-bench", "local[2]")
        for workload in WORKLOADS:
            updates = updates_for(workload, n)
            alone = stages(workload, updates)
            for shards in (1, 4):
                full = e2e(broker, spark, workload, updates, shards, rate=None)
                paced = e2e(broker, spark, workload, updates[: n // 2], shards, rate=full["throughput"] / 2)
                rows.append({"workload": workload, "shards": shards, "n": len(updates), **alone,
                             "e2e": full["throughput"], "rate": full["throughput"] / 2,
                             "p50": paced["p50"], "p99": paced["p99"]})  # fmt: skip
                r = rows[-1]
                print(
                    f"{workload:<15} shards={shards} n={r['n']:,} engine={r['engine_name']}: "
                    f"e2e {r['e2e']:>9,.0f}/s | at {r['rate']:,.0f}/s p50 {r['p50']:.2f}s p99 {r['p99']:.2f}s | "
                    f"alone: decode {r['decode']:>9,.0f}/s engine {r['engine']:>9,.0f}/s "
                    f"pipeline {r['pipeline']:>9,.0f}/s",
                    flush=True,
                )
        spark.stop()
    (OUT / "e2e.json").write_text(json.dumps(rows, indent=2))
    print("\n| workload | shards | e2e updates/s | p50 / p99 at half rate | decode/s | engine/s | pipeline/s |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['shards']} | {r['e2e']:,.0f} | {r['p50']:.2f} s / {r['p99']:.2f} s | "
              f"{r['decode']:,.0f} | {r['engine']:,.0f} | {r['pipeline']:,.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
