"""Where an end-to-end update's CPU goes: the processor draining a backlog, beside its two floors.

One broker, one Spark session (``local[2]``) and one backlog of updates (the facebook triangle
stream or the q-hierarchical one of ``bench/e2e.py``), produced beforehand; then, on the same
topics, in this order:

- ``spark-count``: Spark's own batch read of the topics, ``spark.read.format("kafka")...load().count()``
  (no Python touches a record): the JVM CPU per record;
- ``librdkafka``: a ``confluent_kafka`` consumer reading every record in this process (the
  processor's own process, no Spark): the process CPU per record;
- ``drain @m``: the processor (``run_job``, driver placement, exactly once) draining the backlog from
  the earliest offsets with ``max_offsets_per_trigger = m``, for each ``--max-offsets m``: the JVM's and
  this process's CPU per update from the end of the first batch to the last (steady state: the first
  batch's JIT warm-up and the job's start left out), and the batches it took.  With two or more ``m``
  the CPU is fitted as ``fixed × batches + per_record × records`` (least squares): the per-batch fixed
  cost against the per-record cost;
- ``--jfr``: Java Flight Recorder (``jcmd JFR.start settings=profile``) on Spark's JVM during the drain
  at the first ``m``: the hottest top frames of its execution samples, and the hottest Spark/Kafka
  frames anywhere in the stacks (inclusive).

CPU is user + system seconds from ``/proc`` (the JVM, the broker) and ``time.process_time()`` (this
process: every thread, librdkafka's too), never wall clock: the machine is shared, the CPU a record
costs is not.  ``--pack N``: the backlog in packed records of N updates (``encoding = "avro-packed"``):
the drain rate of packed records (updates per CPU second and per wall second, and the wall rate).

    .venv/bin/python bench/e2e_floor.py -n 200000 --max-offsets 20000 --max-offsets 100000 --jfr
    .venv/bin/python bench/e2e_floor.py -n 500000 --pack 500 --max-offsets 2000
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e import CODECS, WORKLOADS, cpu_seconds, pipeline_config, spark_jvm_pids, updates_for

from ivm.processor.codecs.avro import PackedCodec
from ivm.processor.job import run_job
from ivm.processor.kafka.topics import create_topics
from ivm.processor.local.kafka import KafkaBroker
from ivm.processor.local.spark import spark_session

OUT = Path(__file__).resolve().parent / "out"


def produce_backlog(bootstrap: str, topics: dict[str, str], updates, pack: int) -> int:
    """Write ``updates`` to the relation topics (one-update records, or packed ones of ``pack``); the records."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "batch.size": 1 << 20, "queue.buffering.max.messages": 2_000_000})  # fmt: skip
    messages = []
    if pack > 1:
        per: dict[str, list] = collections.defaultdict(list)
        for rel, row, mult in updates:
            per[rel].append((row, mult))
        for rel, items in per.items():
            codec = PackedCodec(CODECS[rel])
            chunks = [items[i : i + pack] for i in range(0, len(items), pack)]
            messages += [(topics[rel], None, codec.encode_many(chunk)) for chunk in chunks]
    else:
        messages = [(topics[rel], *CODECS[rel].encode(row, m)) for rel, row, m in updates]
    for topic, key, value in messages:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("undelivered messages")
    return len(messages)


def spark_count(spark, bootstrap: str, topics: list[str], jvms: list[int]) -> tuple[int, float]:
    """Spark's batch read of ``topics``, counted: (records, JVM CPU seconds)."""
    before = sum(map(cpu_seconds, jvms))
    n = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .count()
    )
    return n, sum(map(cpu_seconds, jvms)) - before


def librdkafka_read(bootstrap: str, topics: list[str], total: int) -> tuple[int, float]:
    """Every record of ``topics`` through a confluent_kafka consumer here: (records, process CPU seconds)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"floor-{random.randrange(10**9)}",
                         "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                         "max.partition.fetch.bytes": 32 << 20})  # fmt: skip
    consumer.assign([TopicPartition(t, 0, 0) for t in topics])
    before = time.process_time()
    n = 0
    while n < total:
        for msg in consumer.consume(10_000, 5.0):
            if msg.error() is None:
                n += 1
    cpu = time.process_time() - before
    consumer.close()
    return n, cpu


def jfr_top(path: Path, top: int = 15) -> dict[str, list[tuple[str, float]]]:
    """The hottest top frames (self) and Spark/Kafka frames (inclusive) of a JFR file's execution samples."""
    text = subprocess.run(["jfr", "print", "--events", "jdk.ExecutionSample", str(path)],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    self_counts: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    samples = 0
    frame = re.compile(r"^\s+([\w$.<>/]+)\(.*line:")
    for event in text.split("jdk.ExecutionSample")[1:]:
        frames = [m.group(1) for line in event.splitlines() if (m := frame.match(line))]
        if not frames:
            continue
        samples += 1
        self_counts[frames[0]] += 1
        for name in set(frames):
            if name.startswith(("org.apache.spark", "org.apache.kafka")):
                inclusive[name] += 1
    share = lambda c: [(k, v / samples) for k, v in c.most_common(top)]  # noqa: E731
    return {"samples": samples, "self": share(self_counts), "inclusive": share(inclusive)}  # type: ignore[dict-item]


def drain(broker, spark, workload: str, prefix: str, records: int, updates: int, max_offsets: int, pack: int,
          jfr: Path | None) -> dict[str, Any]:  # fmt: skip
    """The processor draining the backlog at ``max_offsets``: CPU per update after its first batch."""
    query, relations = WORKLOADS[workload]
    config = pipeline_config(broker.bootstrap, prefix, Path(tempfile.mkdtemp()), query=query, relations=relations,
                             snapshot_every=1000, max_offsets_per_trigger=max_offsets)  # fmt: skip
    config = replace(config, name=f"{prefix}pipe{max_offsets}")
    if pack > 1:
        config = replace(config, relations=tuple(replace(r, encoding="avro-packed") for r in config.relations))
    jvms = [pid for pid in spark_jvm_pids() if pid != broker.proc.pid]  # the broker is a java child too
    marks: list[tuple[float, float, float, float, int, int]] = []  # wall, jvm, python, broker, records, updates
    done = threading.Event()
    seen = [0, 0]

    def on_batch(report) -> None:
        seen[0] += report.records
        seen[1] += sum(report.applied.values())
        marks.append((time.time(), sum(map(cpu_seconds, jvms)), time.process_time(), cpu_seconds(broker.proc.pid),
                      seen[0], seen[1]))  # fmt: skip
        if len(marks) == 1 and jfr is not None:
            subprocess.run(["jcmd", str(jvms[0]), "JFR.start", "name=e2e", "settings=profile"], capture_output=True)
        if seen[0] >= records:
            done.set()

    stop = threading.Event()
    job = threading.Thread(target=run_job, kwargs={"config": config, "stop": stop, "spark": spark,
                                                   "on_batch": on_batch}, daemon=True)  # fmt: skip
    job.start()
    if not done.wait(1800):
        stop.set()
        raise RuntimeError(f"drain at {max_offsets}: {seen[0]} of {records} records after 30 minutes")
    profile = None
    if jfr is not None:
        subprocess.run(["jcmd", str(jvms[0]), "JFR.dump", "name=e2e", f"filename={jfr}"], capture_output=True)
        subprocess.run(["jcmd", str(jvms[0]), "JFR.stop", "name=e2e"], capture_output=True)
        profile = jfr_top(jfr)
    stop.set()
    job.join(120)
    first, last = marks[0], marks[-1]
    n_rec, n_upd = last[4] - first[4], last[5] - first[5]
    return {
        "max_offsets": max_offsets, "batches": len(marks) - 1, "records": n_rec, "updates": n_upd,
        "wall_rate": n_upd / (last[0] - first[0]),
        "jvm_us": (last[1] - first[1]) * 1e6 / n_upd, "python_us": (last[2] - first[2]) * 1e6 / n_upd,
        "broker_us": (last[3] - first[3]) * 1e6 / n_upd,
        "jvm_s": last[1] - first[1], "python_s": last[2] - first[2], "profile": profile,
        "load": os.getloadavg()[0],
    }  # fmt: skip


def fit(runs: list[dict[str, Any]], key: str) -> tuple[float, float] | None:
    """``cpu = fixed × batches + per_record × records`` by least squares over the runs: (fixed ms, per-record µs)."""
    if len({r["batches"] for r in runs}) < 2:
        return None
    import numpy as np

    a = np.array([[r["batches"], r["records"]] for r in runs], dtype=float)
    b = np.array([r[key] for r in runs])
    (fixed, per), *_ = np.linalg.lstsq(a, b, rcond=None)
    return fixed * 1e3, per * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=200_000, help="updates in the backlog")
    parser.add_argument("--workload", choices=list(WORKLOADS), default="triangle")
    parser.add_argument("--max-offsets", type=int, action="append", help="maxOffsetsPerTrigger values (drains)")
    parser.add_argument("--pack", type=int, default=1, help="updates per record (>1: avro-packed)")
    parser.add_argument("--jfr", action="store_true", help="profile Spark's JVM during the first drain")
    args = parser.parse_args()
    updates = updates_for(args.workload, args.n)
    rows: dict[str, Any] = {"workload": args.workload, "updates": len(updates), "pack": args.pack}
    OUT.mkdir(parents=True, exist_ok=True)
    with KafkaBroker.start() as broker:
        spark = spark_session("ivm-floor", "local[2]")
        jvms = [pid for pid in spark_jvm_pids() if pid != broker.proc.pid]  # Spark's JVM: not the broker's
        prefix = f"f{random.randrange(10**8)}."
        _, relations = WORKLOADS[args.workload]
        topics = {r: f"{prefix}{r}" for r in relations}
        create_topics(broker.bootstrap, list(topics.values()))
        records = produce_backlog(broker.bootstrap, topics, updates, args.pack)
        rows["records"] = records
        spark_count(spark, broker.bootstrap, list(topics.values()), jvms)  # warm-up: JIT, not reported
        broker_before = cpu_seconds(broker.proc.pid)
        n, jvm = spark_count(spark, broker.bootstrap, list(topics.values()), jvms)
        assert n == records, (n, records)
        rows["spark_count_us_per_record"] = jvm * 1e6 / n
        rows["spark_count_broker_us_per_record"] = (cpu_seconds(broker.proc.pid) - broker_before) * 1e6 / n
        n, cpu = librdkafka_read(broker.bootstrap, list(topics.values()), records)
        rows["librdkafka_us_per_record"] = cpu * 1e6 / n
        print(f"{args.workload}: {len(updates):,} updates in {records:,} records; floors per record: "
              f"spark count {rows['spark_count_us_per_record']:.2f} µs JVM (broker "
              f"{rows['spark_count_broker_us_per_record']:.2f}), librdkafka "
              f"{rows['librdkafka_us_per_record']:.2f} µs process CPU (load {os.getloadavg()[0]:.1f})",
              flush=True)  # fmt: skip
        runs = []
        for i, m in enumerate(args.max_offsets or [20_000, 100_000]):
            jfr = OUT / f"e2e-floor-{m}.jfr" if args.jfr and i == 0 else None
            run = drain(broker, spark, args.workload, prefix, records, len(updates), m, args.pack, jfr)
            runs.append(run)
            print(f"drain @{m:,}: {run['batches']} batches, {run['updates']:,} updates in {run['records']:,} records "
                  f"(after the first batch): {run['wall_rate']:,.0f} updates/s wall; CPU µs per update: JVM "
                  f"{run['jvm_us']:.2f}, Python {run['python_us']:.2f}, broker {run['broker_us']:.2f}; per record: "
                  f"JVM {run['jvm_s'] * 1e6 / run['records']:.2f} (load {run['load']:.1f})", flush=True)  # fmt: skip
            if run["profile"]:
                print(f"  JFR: {run['profile']['samples']} execution samples; hottest top frames:")
                for name, share in run["profile"]["self"]:
                    print(f"    {share:6.1%}  {name}")
                print("  hottest Spark/Kafka frames (inclusive):")
                for name, share in run["profile"]["inclusive"]:
                    print(f"    {share:6.1%}  {name}")
        rows["drains"] = runs
        for key in ("jvm_s", "python_s"):
            got = fit(runs, key)
            if got is not None:
                rows[f"fit_{key}"] = got
                print(f"fit {key[:-2]}: {got[0]:.1f} ms per batch + {got[1]:.2f} µs per record", flush=True)
        spark.stop()
    (OUT / f"e2e-floor-{args.workload}-pack{args.pack}.json").write_text(json.dumps(rows, indent=2, default=str))


if __name__ == "__main__":
    main()
