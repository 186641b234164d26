"""Where the state lives: the driver vs shard hosts on Spark's executors (``[processor] placement``).

For the triangle count (the facebook edge stream) and a q-hierarchical count
(``Q() :- R(a,b), S(a,c)`` on a random stream), the topics are filled with
``-n`` updates first; then ``ivm``'s job runs (exactly once: transactions on) in
a fresh process per cell until its committed result reflects every update:

- ``driver``: today's placement, Spark ``local[2]``;
- ``executors``: the state in shard hosts, on ``local-cluster[2,1,1024]`` (two
  executor JVMs of one core) or ``local-cluster[1,2,2048]`` (one of two cores),
  with 1 to 8 shards (slices).

Per cell: throughput over all batches and over the batches after the first (the
first starts the executors' Python workers and the shard hosts), per-batch time
p50/p99 (from the batch's start on the driver to its commit), and peak memory:
the driver's Python process and the shard hosts (VmHWM).  Then the fixed cost of
a batch per placement: the median batch time of a run of batches of 100 updates.

``--memory`` instead runs the q-hierarchical count at 1e5, 1e6 and 1e7 tuples of
state in both placements: the driver's peak RSS against the state size.

    .venv/bin/python bench/placement.py            # 4e5 updates per cell
    .venv/bin/python bench/placement.py --quick    # 1e5 updates per cell, fewer cells
    .venv/bin/python bench/placement.py --memory   # driver memory vs state size

Prints tables and saves bench/out/placement.json (and placement-memory.json).  One run on this
2-core machine: every process of the cell (broker, JVMs, Python workers, shard hosts) shares the
two cores, so the executors' placement pays for its extra processes and copies here; it is the
cluster's placement.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "out"
WORKLOADS = {
    "triangle": ("Q() :- R(a,b), S(b,c), T(c,a)", "RST"),
    "q-hierarchical": ("Q() :- R(a,b), S(a,c)", "RS"),
}
CELLS = [  # (placement, master, shards)
    ("driver", "local[2]", 1),
    ("driver", "local[2]", 4),
    ("executors", "local-cluster[2,1,1024]", 1),
    ("executors", "local-cluster[2,1,1024]", 2),
    ("executors", "local-cluster[2,1,1024]", 4),
    ("executors", "local-cluster[2,1,1024]", 8),
    ("executors", "local-cluster[1,2,2048]", 4),
]
QUICK_CELLS = [CELLS[0], CELLS[2], CELLS[4]]


def updates_for(workload: str, n: int) -> list[tuple[str, tuple[int, int], int]]:
    if workload == "triangle":
        from ivm.processor.data import sample_graph
        from ivm.processor.kafka.produce import read_edges

        out: list[tuple[str, tuple[int, int], int]] = []
        while len(out) < n:  # the graph again, shifted, if n asks for more than it has
            shift = len(out) // 529_404 * 4039
            for u, v in read_edges(sample_graph()):
                for rel in "RST":
                    out += [(rel, (u + shift, v + shift), 1), (rel, (v + shift, u + shift), 1)]
                if len(out) >= n:
                    break
        return out[:n]
    rng = random.Random(1)
    return [(rng.choice("RS"), (rng.randrange(n // 10 + 1), rng.randrange(1 << 40)), 1) for _ in range(n)]


def produce(bootstrap: str, topics: dict[str, str], updates) -> None:
    from confluent_kafka import Producer

    from ivm.processor.codecs.avro import load_relation_codecs

    codecs = load_relation_codecs()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 2_000_000})  # fmt: skip
    for rel, row, mult in updates:
        key, value = codecs[rel].encode(row, mult)
        while True:
            try:
                producer.produce(topics[rel], value, key)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("undelivered messages")


def produce_updates(bootstrap: str, topics: dict[str, str], workload: str, n: int) -> None:
    produce(bootstrap, topics, updates_for(workload, n))


def hosts_hwm(tmp: Path) -> int:
    """Peak RSS (bytes) summed over the shard hosts running under ``tmp``, and how many there are."""
    total = count = 0
    for folder in (tmp / "ivm-hosts").glob("*"):
        try:
            pid = int((folder / "host.txt").read_text().split()[2])
            status = Path(f"/proc/{pid}/status").read_text()
        except (OSError, IndexError, ValueError):
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) * 1024
                count += 1
    return total, count


def _rss() -> int:
    """This process's resident memory now (bytes)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def run_cell(bootstrap: str, workload: str, placement: str, master: str, shards: int, n: int, batch: int) -> dict:
    from ivm.policy import Policy
    from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
    from ivm.processor.job import run_job
    from ivm.processor.kafka.topics import create_topics

    query, relations = WORKLOADS[workload]
    prefix = f"p{random.randrange(10**8)}."
    topics = {r: f"{prefix}{r}" for r in relations}
    create_topics(bootstrap, list(topics.values()))
    # in a process of its own: this process is the driver, whose peak memory the cell reports
    context = multiprocessing.get_context("spawn")
    producer = context.Process(target=produce_updates, args=(bootstrap, topics, workload, n))
    producer.start()
    producer.join()
    if producer.exitcode:
        raise RuntimeError(f"the producer failed with exit code {producer.exitcode}")
    tmp = Path(os.environ["TMPDIR"])
    config = PipelineConfig(
        bootstrap=bootstrap, dead_letter_topic=f"{prefix}dead", policy=Policy(),
        relations=tuple(RelationConfig(r, topics[r], Path(f"relations/{r}.avsc")) for r in relations),
        queries=(QueryConfig(f"{prefix}q", query, "auto"),), name=f"{prefix}pipe", state_dir=str(tmp / "state"),
        spark_master=master, shards=shards, placement=placement, max_offsets_per_trigger=batch, trigger_ms=100,
        snapshot_every=1000,
    )  # fmt: skip
    reports: list[tuple[float, int, float]] = []  # (commit time, records, seconds)
    hwm = [0, 0]  # the hosts' summed peak, and how many there were

    def on_batch(report) -> None:
        reports.append((time.perf_counter(), report.records, report.seconds))
        peak, count = hosts_hwm(tmp)
        hwm[0], hwm[1] = max(hwm[0], peak), max(hwm[1], count)
        if sum(r[1] for r in reports) >= n:
            stop.set()

    stop = threading.Event()
    job = threading.Thread(target=run_job, kwargs={"config": config, "stop": stop, "on_batch": on_batch}, daemon=True)
    job.start()
    deadline = time.monotonic() + 3600
    while not stop.is_set():
        if time.monotonic() > deadline or not job.is_alive():
            raise RuntimeError(f"the job did not apply {n} updates (applied {sum(r[1] for r in reports)})")
        time.sleep(0.2)
    job.join(120)
    work = [r for r in reports if r[1] > 0]
    first_start = work[0][0] - work[0][2]
    seconds = sorted(r[2] for r in work)
    after_first = work[1:]
    steady = (
        sum(r[1] for r in after_first) / (after_first[-1][0] - work[0][0]) if len(after_first) >= 1 else float("nan")
    )
    return {
        "workload": workload, "placement": placement, "master": master, "shards": shards, "n": n, "batch": batch,
        "batches": len(work), "throughput": n / (work[-1][0] - first_start), "steady": steady,
        "p50": statistics.median(seconds), "p99": seconds[int(0.99 * (len(seconds) - 1))],
        "driver_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "hosts_peak": hwm[0],
        "driver_rss": _rss(), "hosts": hwm[1],
    }  # fmt: skip


def spawn(bootstrap: str, **kwargs) -> dict:
    """Run one cell in a fresh Python process with a temporary folder of its own."""
    tmp = tempfile.mkdtemp(prefix="ivm-bench-placement-")
    env = {**os.environ, "TMPDIR": tmp}
    out = subprocess.run(
        [sys.executable, __file__, "--cell", json.dumps({"bootstrap": bootstrap, **kwargs})],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    subprocess.run(["rm", "-rf", tmp], check=False)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"cell {kwargs} failed:\n{out.stderr[-3000:]}")


def table(rows: list[dict], baseline: dict[str, float]) -> str:
    head = "| workload | placement | master | shards | updates/s | after batch 0 | vs driver | batch p50 | p99 " \
           "| driver peak | hosts peak |"  # fmt: skip
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        ratio = r["steady"] / baseline[r["workload"]]
        lines.append(
            f"| {r['workload']} | {r['placement']} | {r['master']} | {r['shards']} | {r['throughput']:,.0f} "
            f"| {r['steady']:,.0f} | {ratio:.2f}x | {r['p50']:.2f} s | {r['p99']:.2f} s "
            f"| {r['driver_peak'] / 2**20:,.0f} MB | {r['hosts_peak'] / 2**20:,.0f} MB |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], name: str, memory: bool = False) -> None:
    """``bench/out/<name>.png``: throughput per cell, or the driver's and the hosts' peak memory against
    the state size (``memory``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(10, 4.5))
    if memory:
        for placement, style in (("driver", "-o"), ("executors", "-s")):
            sel = [r for r in rows if r["placement"] == placement]
            ax.plot([r["n"] for r in sel], [r["driver_peak"] / 2**20 for r in sel], style, label=f"{placement}: driver")
            if placement == "executors":
                ax.plot([r["n"] for r in sel], [r["hosts_peak"] / 2**20 for r in sel], ":s", label="executors: hosts")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("state (tuples)")
        ax.set_ylabel("peak RSS (MB)")
        ax.set_title("Driver memory against state size (q-hierarchical count)")
    else:
        labels = [f"{r['workload']}\n{r['placement']} {r['master'].split('[')[0]} x{r['shards']}" for r in rows]
        ax.bar(range(len(rows)), [r["steady"] for r in rows], color=["C0" if r["placement"] == "driver" else "C1"
                                                                       for r in rows])  # fmt: skip
        ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=45, ha="right")
        ax.set_ylabel("updates/s after the first batch")
        ax.set_title("End-to-end throughput: state in the driver (blue) or on the executors (orange)")
    if memory:
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--memory", action="store_true", help="driver memory against state size")
    parser.add_argument("-n", type=int, help="updates per cell (default 4e5; --quick 1e5)")
    parser.add_argument("--batch", type=int, help="maxOffsetsPerTrigger (default 50,000; --quick 10,000)")
    parser.add_argument("--workload", choices=list(WORKLOADS), action="append")
    args = parser.parse_args()
    if args.cell:
        spec = json.loads(args.cell)
        print(json.dumps(run_cell(**spec)), flush=True)
        return
    from ivm.processor.local.kafka import KafkaBroker

    OUT.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker.start(Path(tempfile.mkdtemp(prefix="ivm-bench-kafka-")))
    try:
        if args.memory:
            rows = []
            for n in (10**5, 10**6, 10**7):
                for placement, master, shards in (CELLS[0], CELLS[4]):
                    row = spawn(broker.bootstrap, workload="q-hierarchical", placement=placement, master=master,
                                shards=shards, n=n, batch=200_000)  # fmt: skip
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            (OUT / "placement-memory.json").write_text(json.dumps(rows, indent=1))
            plot(rows, "placement-memory", memory=True)
            print("| state tuples | placement | driver peak | driver at the end | hosts peak (hosts) | updates/s |")
            print("|---|---|---:|---:|---:|---:|")
            for r in rows:
                print(f"| {r['n']:,} | {r['placement']} | {r['driver_peak'] / 2**20:,.0f} MB "
                      f"| {r['driver_rss'] / 2**20:,.0f} MB | {r['hosts_peak'] / 2**20:,.0f} MB ({r['hosts']}) "
                      f"| {r['throughput']:,.0f} |")  # fmt: skip
            return
        n = args.n or (10**5 if args.quick else 4 * 10**5)
        batch = args.batch or (10_000 if args.quick else 50_000)
        rows = []
        for workload in args.workload or list(WORKLOADS):
            for placement, master, shards in QUICK_CELLS if args.quick else CELLS:
                row = spawn(broker.bootstrap, workload=workload, placement=placement, master=master, shards=shards,
                            n=n, batch=batch)  # fmt: skip
                print(json.dumps(row), flush=True)
                rows.append(row)
        fixed = []
        for placement, master, shards in (CELLS[0], CELLS[4]):
            row = spawn(broker.bootstrap, workload="q-hierarchical", placement=placement, master=master,
                        shards=shards, n=3_000, batch=100)  # fmt: skip
            print(json.dumps(row), flush=True)
            fixed.append(row)
        baseline = {r["workload"]: r["steady"] for r in rows if r["placement"] == "driver" and r["shards"] == 1}
        (OUT / "placement.json").write_text(json.dumps({"cells": rows, "fixed": fixed}, indent=1))
        print(table(rows, baseline))
        plot(rows, "placement")
        print("\nfixed cost of a batch (median time of batches of 100 updates):")
        for r in fixed:
            print(f"  {r['placement']} on {r['master']}, {r['shards']} shards: {r['p50']:.3f} s")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
