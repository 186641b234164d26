"""What committing a batch's input positions to the consumer group costs per batch.

The processor's transactional sink (:class:`ivm.processor.kafka.sink.TransactionalKafkaSink`) commits each batch's
outputs in one transaction; with a consumer group it also calls ``send_offsets_to_transaction`` once per
batch (the positions of every input partition).  This runs the sink alone against a local broker: batches
of ``--records`` output records, alternating a sink without and a sink with a group, and reports the
median and p90 of ``begin .. commit`` per batch for each, and the difference.

    .venv/bin/python bench/group_offsets.py                  # 6 rounds x 40 batches of 1000 records
    .venv/bin/python bench/group_offsets.py --partitions 24  # positions of 24 input partitions per batch
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ivm.processor.kafka.sink import TransactionalKafkaSink
from ivm.processor.kafka.topics import create_topics
from ivm.processor.local.kafka import KafkaBroker


def batches(sink: TransactionalKafkaSink, topic: str, n: int, records: int, partitions: int) -> list[float]:
    """Seconds of each of ``n`` batches: ``records`` records, the positions of ``partitions`` inputs."""
    value = b"x" * 40
    out = []
    for b in range(n):
        started = time.perf_counter()
        sink.begin()
        for i in range(records):
            sink.send(topic, f"{i}".encode(), value)
        sink.send_offsets({(f"input-{p % 3}", p // 3): (b + 1) * records for p in range(partitions)})
        sink.commit()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    broker = KafkaBroker.start(Path(tempfile.mkdtemp(prefix="ivm-group-offsets-")))
    try:
        create_topics(
            broker.bootstrap, ["out", "input-0", "input-1", "input-2"], partitions=max(1, args.partitions // 3)
        )
        sinks = {
            "without group": TransactionalKafkaSink(broker.bootstrap, "bench-plain"),
            "with group": TransactionalKafkaSink(broker.bootstrap, "bench-group", consumer_group="bench-group"),
        }
        for sink in sinks.values():  # warm-up: connections, the coordinators
            batches(sink, "out", 5, args.records, args.partitions)
        times: dict[str, list[float]] = {name: [] for name in sinks}
        for _ in range(args.rounds):
            for name, sink in sinks.items():
                times[name] += batches(sink, "out", args.batches, args.records, args.partitions)
        for name, ts in times.items():
            ts.sort()
            print(
                f"{name:14s} batches {len(ts):4d}  median {statistics.median(ts) * 1e3:7.2f} ms  "
                f"p90 {ts[int(0.9 * len(ts))] * 1e3:7.2f} ms"
            )
        delta = statistics.median(times["with group"]) - statistics.median(times["without group"])
        print(f"send_offsets_to_transaction: {delta * 1e3:+.2f} ms per batch (median difference)")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
