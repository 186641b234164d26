"""A micro-batch split into the slices' requests: the routing step that runs on the executors.

:func:`split` decodes the fresh records of a batch (those at or after the
committed positions), sends each record to every slice holding its tuple
(``routing.py``), marks the copies whose dead letters another slice reports,
and summarizes every input partition (records, last offset, oldest time) for
the driver's positions and counts.  In Spark it runs inside ``mapInArrow`` on
the executors (``spark.py``); the tests call it directly.  O(records · slices
per tuple) plus the decoding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from processor.config import PipelineConfig
from processor.control import control_topic
from processor.pipeline import RecordBatch, relation_codecs
from processor.placement.driver import PartitionSummary
from processor.placement.routing import Placement


@dataclass
class Routed:
    """A batch's records per slice (row indices into the batch, in batch order), the copies that are
    not their tuple's primary, and the partitions' summaries."""

    rows: dict[int, list[int]] = field(default_factory=dict)
    quiet: dict[int, set[int]] = field(default_factory=dict)
    summaries: list[PartitionSummary] = field(default_factory=list)


class Router:
    """Decodes and routes batches of one pipeline configuration (built once per process)."""

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.codecs, _schemas = relation_codecs(config)
        schema_of = {codec.relation: list(codec.attributes) for codec in self.codecs.values()}
        self.placement = Placement(config, schema_of)
        self.control_topic = control_topic(config)

    def split(self, batch: RecordBatch, positions: Mapping[tuple[str, int], int]) -> Routed:
        """Route the records of ``batch`` not before ``positions`` (module docstring)."""
        out = Routed()
        slices_of_many = self.placement.slices_of_many
        for tp, rows in batch.runs():
            start = positions.get(tp, 0)
            rows = [i for i in rows if batch.offset[i] >= start]
            if not rows:
                continue
            stamps = [t for t in (batch.timestamp_ms[i] for i in rows) if t > 0]
            out.summaries.append(
                PartitionSummary(tp[0], tp[1], batch.offset[rows[-1]], len(rows), min(stamps, default=0))
            )
            codec = self.codecs.get(tp[0])
            if codec is None or tp[0] == self.control_topic:
                out.rows.setdefault(0, []).extend(rows)
                continue
            decoded, _mults, errors = codec.decode_many([batch.value[i] for i in rows])
            relation = codec.relation
            good = [j for j in range(len(rows)) if j not in errors] if errors else range(len(rows))
            many = slices_of_many(relation, [decoded[j] for j in good])  # type: ignore[misc]
            where: list[list[int] | None] = [None] * len(rows)
            for j, targets in zip(good, many, strict=True):
                where[j] = targets
            for j, i in enumerate(rows):
                targets = where[j]
                if targets is None:  # undecodable: slice 0 dead-letters it
                    out.rows.setdefault(0, []).append(i)
                    continue
                for k, s in enumerate(targets):
                    out.rows.setdefault(s, []).append(i)
                    if k:
                        out.quiet.setdefault(s, set()).add(i)
        return out
