"""The demo: the triangle count of the facebook graph, maintained under inserts and deletes.

It starts a local Kafka broker and the processor (Spark in local mode), streams
every undirected edge into R, S and T in both directions (6 updates an edge),
then deletes a seeded random half of the edges, printing the live count as the
processor publishes it.  After the inserts the count is 6 × 1,612,010 =
9,672,060 (the published triangle count of SNAP ego-Facebook); after the
deletes it is checked against an independent recount of the remaining graph.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from ivm.kernels import installed_kernels, summary
from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.data import FACEBOOK_TRIANGLES
from ivm.processor.kafka.produce import UpdateProducer, edge_updates, read_edges, sample
from ivm.processor.kafka.subscribe import follow, reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.local.stack import ProcessorProcess, local_dir, start_broker
from ivm.resources import example_config

RELATIONS = ("R", "S", "T")


def count_triangles(edges: Iterable[tuple[int, int]]) -> int:
    """Triangles of an undirected simple graph, by the node-iterator over ordered neighbours.

    Independent of the engines: each triangle u < v < w is found once, from its
    edge (u, v), as the common neighbours of u and v above v.

    >>> count_triangles([(1, 2), (2, 3), (3, 1), (3, 4)])
    1
    """
    higher: dict[int, set[int]] = defaultdict(set)
    for u, v in edges:
        if u != v:
            a, b = min(u, v), max(u, v)
            higher[a].add(b)
    total = 0
    for above in higher.values():
        for v in above:
            total += len(above & higher.get(v, set()))
    return total


class LiveCount:
    """Follows ``<query>.result`` in a thread, printing each new value."""

    def __init__(self, bootstrap: str, topic: str, quiet: bool = False) -> None:
        self.latest: dict | None = None
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self.quiet = quiet
        self._thread = threading.Thread(target=self._run, args=(bootstrap, topic), daemon=True)
        self._thread.start()

    def _run(self, bootstrap: str, topic: str) -> None:
        for record in follow(bootstrap, topic, poll_timeout=0.5, stop=self._stop):
            if not self.quiet and (self.latest is None or record["value"] != self.latest["value"]):
                print(f"  batch {record['batch_id']:>4}: triangle count = {int(record['value']):>12,}", flush=True)
            with self.changed:
                self.latest = record
                self.changed.notify_all()

    def wait_for(self, offsets: dict[tuple[str, int], int], timeout: float, alive=lambda: True) -> dict:
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.latest is None or not reflects(self.latest, offsets):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no result reflecting offsets {offsets} within {timeout:.0f}s")
                if not alive():
                    raise RuntimeError("the processor exited")
                self.changed.wait(1.0)
            return self.latest

    def stop(self) -> None:
        """Close the consumer (before the broker goes away)."""
        self._stop.set()
        self._thread.join(10)


def run_demo(
    edges_path: Path,
    *,
    delete_fraction: float = 0.5,
    seed: int = 42,
    timeout: float = 900,
    expected_triangles: int | None = FACEBOOK_TRIANGLES,
) -> bool:
    """Run the demo end to end; True when both checks hold.

    Raises :class:`ivm.processor.kafka.produce.InputError` for an edge file that does not parse, before starting
    anything.
    """
    t0 = time.monotonic()
    edges = list(read_edges(edges_path))  # a bad file stops the demo before anything starts
    print(summary(installed_kernels()), flush=True)  # the processor's log says it too (ivm run)
    print("starting a local Kafka broker (KRaft) ...", flush=True)
    broker = start_broker("demo")
    processor = None
    live = None
    try:
        bootstrap = broker.bootstrap
        print(f"  broker on {bootstrap} (log: {broker.log_path})", flush=True)
        create_topics(bootstrap, [*RELATIONS, "triangle.result", "ivm.dead-letter"])
        log = broker.workdir / "processor.log"
        processor = ProcessorProcess(
            example_config(),
            bootstrap,
            log,
            extra=["--state-dir", str(broker.workdir / "state")],
        )
        print(
            f"starting the processor (Spark local mode; metrics on :{processor.metrics_port}, log: {log}) ...",
            flush=True,
        )
        live = LiveCount(bootstrap, "triangle.result")
        producer = UpdateProducer(bootstrap, load_relation_codecs())

        print(f"insert phase: {len(edges):,} edges x 6 = {6 * len(edges):,} updates", flush=True)
        producer.send_all(edge_updates(edges, RELATIONS, +1, both_directions=True))
        producer.flush()
        after_inserts = live.wait_for(end_offsets(bootstrap, RELATIONS), timeout, processor.alive)
        count = int(after_inserts["value"])
        expected = 6 * (expected_triangles if expected_triangles is not None else count_triangles(edges))
        ok_inserts = count == expected
        print(
            f"after inserts: count = {count:,}; expected 6 x {expected // 6:,} = {expected:,} "
            f"[{'OK' if ok_inserts else 'MISMATCH'}]  ({time.monotonic() - t0:.0f}s)",
            flush=True,
        )

        deleted = sample(edges, delete_fraction, seed)
        print(f"delete phase: a seeded random {delete_fraction:.0%} of the edges, {len(deleted):,} edges "
              f"x 6 = {6 * len(deleted):,} updates", flush=True)  # fmt: skip
        producer.send_all(edge_updates(deleted, RELATIONS, -1, both_directions=True))
        producer.flush()
        del producer  # its client would keep reconnecting once the broker is gone
        after_deletes = live.wait_for(end_offsets(bootstrap, RELATIONS), timeout, processor.alive)
        count = int(after_deletes["value"])
        gone = set(deleted)
        recount = count_triangles(e for e in edges if e not in gone)
        ok_deletes = count == 6 * recount
        print(
            f"after deletes: count = {count:,}; independent recount of the remaining graph: "
            f"6 x {recount:,} = {6 * recount:,} [{'OK' if ok_deletes else 'MISMATCH'}]  "
            f"({time.monotonic() - t0:.0f}s)",
            flush=True,
        )
        return ok_inserts and ok_deletes
    except Exception:
        if processor is not None:
            print("processor log (last lines):\n" + processor.tail(), flush=True)
        raise
    finally:
        if live is not None:
            live.stop()
        if processor is not None:
            processor.stop()
        broker.stop()
        print(f"stopped the processor and the broker; logs under {local_dir()}", flush=True)
