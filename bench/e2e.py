"""End-to-end throughput and latency of the processor, and where the time goes.

For the triangle count (the facebook edge stream, 529,404 updates at most) and
a q-hierarchical count (``Q() :- R(a,b), S(a,c)`` on a random stream), at 1
and 4 shards:

- ``e2e``: a separate producer process sends the (pre-encoded) updates to a
  local KRaft broker as fast as its client goes while the Spark job runs
  (exactly once: transactions and snapshots on); throughput from the first
  produce to the commit of the result that reflects the last update;
- ``p50/p99``: the same at half that rate, the time from each update's
  produce to the commit of the result reflecting it;
- CPU microseconds per update of each process during the e2e run: the
  producer, the broker, Spark's JVM (Kafka source, Arrow hand-over) and the
  processor's Python (decoding, engine, outputs): where the time goes;
- the stages alone on the same updates, in this process: Avro decoding as
  the pipeline decodes (``decode_many`` per relation, 5·10^4 records a call),
  the engine (``view.apply``), and the pipeline without Kafka or Spark
  (decode + input policy + engine + output encoding, ``Pipeline.process`` on
  batches of 5·10^4 records).

Before the measured runs of a workload one unmeasured run warms the JVMs (a
processor runs for long; its first seconds run Spark's and Kafka's code
interpreted).

    .venv/bin/python bench/e2e.py            # 1e6 updates per run (facebook: all 529,404)
    .venv/bin/python bench/e2e.py --quick    # 2e5 updates per run
    .venv/bin/python bench/e2e.py --quick --executors   # the state in shard hosts on local-cluster[2,1,1024]

Prints a table and saves bench/out/e2e.json, with the 1-minute load average after the stages and
after each cell (other jobs on the machine change every column).  ``E2E_LOG=1`` logs every batch.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import random
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import ivm
from ivm.policy import Policy
from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.data import sample_graph
from ivm.processor.job import run_job
from ivm.processor.kafka.produce import read_edges
from ivm.processor.kafka.subscribe import follow, reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.local.kafka import KafkaBroker
from ivm.processor.local.spark import spark_session
from ivm.processor.pipeline import Pipeline, Record, RecordBatch
from ivm.processor.state.relations import RelationStore

ROOT = Path(__file__).resolve().parents[1]
FACEBOOK = sample_graph()
OUT = ROOT / "bench" / "out"
SPARK: dict[str, Any] = {}  # micro-batch settings given on the command line (default: the configuration's)
CODECS = load_relation_codecs()
MASTER = ["local[2]"]  # --executors: the master of placement = "executors" runs
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
    per_relation: dict[str, list[bytes]] = {}
    for rel, value in encoded:
        per_relation.setdefault(rel, []).append(value)
    decoded = []
    t = time.perf_counter()
    for rel, values in per_relation.items():  # as the pipeline decodes: a partition's run at a time
        for i in range(0, len(values), 50_000):
            decoded.append((rel, *CODECS[rel].decode_many(values[i : i + 50_000])))
    decode = len(encoded) / (time.perf_counter() - t)
    store = RelationStore.empty(relations, Policy())
    t = time.perf_counter()
    for rel, rows, mults, errors in decoded:  # the relations' contents under the input policy
        store.admit(rel, rows, mults, errors)
    policy = len(encoded) / (time.perf_counter() - t)
    view = ivm.maintain(query)
    t = time.perf_counter()
    view.apply(updates)
    engine = len(updates) / (time.perf_counter() - t)
    config = pipeline_config("unused:1", "", Path(tempfile.mkdtemp()), query=query, relations=relations)
    pipeline = Pipeline(config, NullSink())
    offsets: dict[str, int] = {}
    records = []
    for rel, value in encoded:
        offsets[rel] = offsets.get(rel, -1) + 1
        records.append(Record(rel, 0, offsets[rel], None, value))
    size = 50_000
    # as Spark hands a micro-batch over: each partition's records together, in offset order
    chunks = [RecordBatch.of(sorted(records[i : i + size])) for i in range(0, len(records), size)]
    t = time.perf_counter()
    for chunk in chunks:
        pipeline.process(chunk)
    return {"decode": decode, "policy": policy, "engine": engine,
            "pipeline": len(records) / (time.perf_counter() - t), "engine_name": view.engine.name}  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spark_jvm_pids() -> list[int]:
    """The Java processes started by this one (Spark's driver JVM)."""
    out, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        for task in Path(f"/proc/{pid}/task").iterdir():
            children = (task / "children").read_text().split() if (task / "children").exists() else []
            for child in map(int, children):
                todo.append(child)
                if Path(f"/proc/{child}/comm").read_text().strip() == "java":
                    out.append(child)
    return out


def produce_worker(bootstrap: str, messages, rate: float | None, start, conn) -> None:
    """A separate producer process: send pre-encoded ``(topic, key, value)`` messages when ``start`` is
    set (at ``rate`` per second, or as fast as the client goes); report the start time and each send time."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "batch.size": 1 << 20, "queue.buffering.max.messages": 2_000_000,
    })  # fmt: skip
    start.wait()
    started = time.time()
    stamps = []
    for i, (topic, key, value) in enumerate(messages):
        if rate is not None:
            due = started + i / rate
            while time.time() < due:
                time.sleep(0.0005)
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.01)
        stamps.append(time.time())
    if producer.flush(120):
        raise RuntimeError("undelivered messages")
    conn.send((started, stamps, time.process_time()))


def e2e(broker, spark, workload: str, updates, shards: int, rate: float | None) -> dict[str, float]:
    """Produce ``updates`` from another process while the job runs; throughput and latencies."""
    query, relations = WORKLOADS[workload]
    prefix = f"b{random.randrange(10**8)}."
    config = pipeline_config(
        broker.bootstrap, prefix, Path(tempfile.mkdtemp()), query=query, relations=relations,
        shards=shards, snapshot_every=1000, **SPARK,
    )  # fmt: skip
    if spark is None:  # the job starts its own session (placement = "executors" on a multi-process master)
        config = replace(config, spark_master=MASTER[0], placement="executors")
    topics = {r: f"{prefix}{r}" for r in relations}
    create_topics(broker.bootstrap, list(topics.values()))
    messages = [(topics[rel], *CODECS[rel].encode(row, m)) for rel, row, m in updates]
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    receive, send = context.Pipe(duplex=False)
    producer = context.Process(target=produce_worker, args=(broker.bootstrap, messages, rate, start, send))
    producer.start()
    stop = threading.Event()
    job = threading.Thread(target=run_job, kwargs={"config": config, "stop": stop, "spark": spark}, daemon=True)
    job.start()
    time.sleep(8 if spark is not None else 30)  # the stream starts; measure from the first produce
    jvms = [pid for pid in spark_jvm_pids() if pid != broker.proc.pid]  # the broker's JVM is a child too
    cpu_before = {"broker": cpu_seconds(broker.proc.pid), "spark": sum(map(cpu_seconds, jvms)),
                  "python": time.process_time()}  # fmt: skip
    start.set()
    started, stamps, producer_cpu = receive.recv()
    producer.join()
    sent_at: dict[str, list[float]] = {t: [] for t in topics.values()}
    for (topic, _, _), stamp in zip(messages, stamps, strict=True):
        sent_at[topic].append(stamp)
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
    cpu = {"producer": producer_cpu, "broker": cpu_seconds(broker.proc.pid) - cpu_before["broker"],
           "spark": sum(map(cpu_seconds, jvms)) - cpu_before["spark"],
           "python": time.process_time() - cpu_before["python"]}  # fmt: skip
    stop.set()
    job.join(60)
    assert last is not None, "the job did not reflect every update"
    latencies.sort()
    return {
        "throughput": len(updates) / (last - started),
        "produce": len(updates) / (stamps[-1] - started),
        "p50": statistics.median(latencies),
        "p99": latencies[int(0.99 * (len(latencies) - 1))],
        **{f"cpu_{k}": v * 1e6 / len(updates) for k, v in cpu.items()},  # CPU µs per update
    }


def main() -> None:
    logging.basicConfig(level=logging.INFO if os.environ.get("E2E_LOG") else logging.WARNING)
    if os.environ.get("E2E_LOG"):
        logging.getLogger("ivm.processor.job").setLevel(logging.DEBUG)  # each Spark hand-over too
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("-n", type=int, default=None, help="updates per run")
    parser.add_argument("--max-offsets", type=int, help="maxOffsetsPerTrigger (default: the configuration's)")
    parser.add_argument("--trigger-ms", type=int, help="trigger interval (default: the configuration's)")
    parser.add_argument("--workload", choices=list(WORKLOADS), action="append", help="only these workloads")
    parser.add_argument("--shards", type=int, action="append", help="only these shard counts (default 1 and 4)")
    parser.add_argument("--repeat", type=int, default=3, help="full-speed runs per cell; the median is reported")
    parser.add_argument(
        "--executors", metavar="MASTER", nargs="?", const="local-cluster[2,1,1024]",
        help="placement = executors on this master (default local-cluster[2,1,1024]): every run starts its own "
        "Spark (no warm-up carries over); the Python CPU column is then the driver's only",
    )  # fmt: skip
    args = parser.parse_args()
    if args.max_offsets:
        SPARK["max_offsets_per_trigger"] = args.max_offsets
    if args.trigger_ms:
        SPARK["trigger_ms"] = args.trigger_ms
    n = args.n or (200_000 if args.quick else 1_000_000)
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    with KafkaBroker.start() as broker:
        if args.executors:
            MASTER[0] = args.executors
        spark = None if args.executors else spark_session("ivm-bench", "local[2]")
        for workload in args.workload or WORKLOADS:
            updates = updates_for(workload, n)
            alone = stages(workload, updates)
            alone_load = os.getloadavg()[0]
            us = {k: 1e6 / alone[k] for k in ("decode", "policy", "engine", "pipeline")}
            print(f"{workload:<15} alone (load {alone_load:.2f}): decode {alone['decode']:,.0f}/s "
                  f"policy {alone['policy']:,.0f}/s engine {alone['engine']:,.0f}/s pipeline "
                  f"{alone['pipeline']:,.0f}/s; µs per update: decode {us['decode']:.2f}, policy "
                  f"{us['policy']:.2f}, engine {us['engine']:.2f} (alone, one measurement each) and the whole "
                  f"pipeline {us['pipeline']:.2f}", flush=True)  # fmt: skip
            # a long-running processor runs JIT-compiled: one unmeasured run warms the JVMs (Spark, broker)
            warm = e2e(broker, spark, workload, updates[:200_000], 1, rate=None)
            print(f"{workload:<15} warm-up run: {warm['throughput']:,.0f}/s (not reported)", flush=True)
            for shards in args.shards or (1, 4):
                runs = sorted((e2e(broker, spark, workload, updates, shards, rate=None) for _ in range(args.repeat)),
                              key=lambda run: run["throughput"])  # fmt: skip
                full = runs[len(runs) // 2]
                paced = e2e(broker, spark, workload, updates[: n // 2], shards, rate=full["throughput"] / 2)
                rows.append({"workload": workload, "shards": shards, "n": len(updates), **alone,
                             "load": os.getloadavg()[0], "stage_load": alone_load,
                             "e2e": full["throughput"], "e2e_min": runs[0]["throughput"],
                             "e2e_max": runs[-1]["throughput"], "produce": full["produce"],
                             "rate": full["throughput"] / 2,
                             "p50": paced["p50"], "p99": paced["p99"],
                             **{k: v for k, v in full.items() if k.startswith("cpu_")}})  # fmt: skip
                r = rows[-1]
                print(
                    f"{workload:<15} shards={shards} n={r['n']:,} engine={r['engine_name']}: "
                    f"e2e {r['e2e']:>9,.0f}/s (median of {args.repeat}: {r['e2e_min']:,.0f}-{r['e2e_max']:,.0f}; "
                    f"produced at {r['produce']:,.0f}/s) | "
                    f"at {r['rate']:,.0f}/s p50 {r['p50']:.2f}s p99 {r['p99']:.2f}s | "
                    f"alone: decode {r['decode']:>9,.0f}/s engine {r['engine']:>9,.0f}/s "
                    f"pipeline {r['pipeline']:>9,.0f}/s | CPU µs/update: producer {r['cpu_producer']:.1f} "
                    f"broker {r['cpu_broker']:.1f} spark {r['cpu_spark']:.1f} python {r['cpu_python']:.1f} | "
                    f"load {r['load']:.2f}",
                    flush=True,
                )
        if spark is not None:
            spark.stop()
    (OUT / ("e2e-executors.json" if args.executors else "e2e.json")).write_text(json.dumps(rows, indent=2))
    print(f"\nmedian of {args.repeat} full-speed runs (min-max); p50/p99 from one run at half the median rate")
    print("\n| workload | shards | e2e updates/s | p50 / p99 at half rate | decode/s | policy/s | engine/s "
          "| pipeline/s | CPU µs/update: producer / broker / Spark JVM / processor (Python) "
          "| load (stages / e2e) |")  # fmt: skip
    print("|---|---:|---:|---|---:|---:|---:|---:|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['shards']} | {r['e2e']:,.0f} ({r['e2e_min']:,.0f}-{r['e2e_max']:,.0f}) | "
              f"{r['p50']:.2f} s / {r['p99']:.2f} s | "
              f"{r['decode']:,.0f} | {r['policy']:,.0f} | {r['engine']:,.0f} | {r['pipeline']:,.0f} | "
              f"{r['cpu_producer']:.1f} / {r['cpu_broker']:.1f} / {r['cpu_spark']:.1f} / "
              f"{r['cpu_python']:.1f} | {r['stage_load']:.1f} / {r['load']:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
