"""The processor's Prometheus metrics (prometheus-client).

Names follow the Prometheus conventions: a ``ivm_`` prefix, base units,
``_total`` for counters.  The monitoring issue extends this set; dashboards
and alert rules in ``monitoring/`` use these names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    """All metrics of one processor, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.updates_applied = Counter(
            "ivm_updates_applied_total",
            "Updates applied to a query's state",
            ["query", "relation"],
            registry=r,
        )
        self.updates_rejected = Counter(
            "ivm_updates_rejected_total",
            "Inputs rejected to the dead-letter topic",
            ["query", "relation", "reason"],
            registry=r,
        )
        self.batch_duration = Histogram(
            "ivm_batch_duration_seconds",
            "Time to decode, apply and publish one micro-batch",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.batch_size = Histogram(
            "ivm_batch_records",
            "Input records per micro-batch",
            buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000),
            registry=r,
        )
        self.result_value = Gauge(
            "ivm_result_value", "Current scalar result of a query (counts)", ["query"], registry=r
        )
        self.batches = Counter("ivm_batches_total", "Micro-batches processed", registry=r)
        self.dead_letters = Counter(
            "ivm_dead_letters_total", "Messages written to the dead-letter topic", ["topic"], registry=r
        )
        self.engine_stat = Gauge(
            "ivm_engine_stat", "Engine internals as reported by Engine.stats()", ["query", "engine", "stat"],
            registry=r,
        )  # fmt: skip
        self.last_batch_id = Gauge("ivm_last_batch_id", "Id of the last processed micro-batch", registry=r)
        self.recovery_seconds = Gauge(
            "ivm_recovery_seconds", "Time the last start took to restore the snapshot and replay", registry=r
        )
        self.replayed_records = Counter(
            "ivm_replayed_records_total", "Input records applied again during recovery", registry=r
        )
        self.snapshot_seconds = Histogram(
            "ivm_snapshot_seconds",
            "Time to write one state snapshot",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60),
            registry=r,
        )
        self.snapshot_bytes = Gauge("ivm_snapshot_bytes", "Size of the last state snapshot", registry=r)

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Expose ``/metrics`` on ``addr:port``; returns the bound port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server.server_port
