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

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ivm.processor.config import PipelineConfig
from ivm.processor.control import control_topic
from ivm.processor.pipeline import RecordBatch, relation_codecs
from ivm.processor.placement.driver import PartitionSummary
from ivm.processor.placement.routing import Placement


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
            summary = PartitionSummary(tp[0], tp[1], batch.offset[rows[-1]], len(rows), min(stamps, default=0))
            out.summaries.append(summary)
            codec = self.codecs.get(tp[0])
            if codec is None or tp[0] == self.control_topic:
                out.rows.setdefault(0, []).extend(rows)
                continue
            if getattr(codec, "packed", False):
                updates = self._split_packed(codec, batch, rows, out)
                out.summaries[-1] = dataclasses.replace(summary, updates=updates)
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

    def _split_packed(self, codec: Any, batch: RecordBatch, rows: list[int], out: Routed) -> int:
        """Route packed records (``encoding = "avro-packed"``): a record goes, whole, to every slice holding one
        of its updates, and to slice 0 if one of them is not an update (or the record is not a packed record);
        each slice keeps its own updates and knows which of them it is primary for
        (``SlicePipeline._select_packed``), so no copy is quiet as a whole.  Returns the updates in them."""
        flat = codec.decode_many([batch.value[i] for i in rows])
        errors = flat.errors
        good = [j for j in range(len(flat.rows)) if j not in errors] if errors else range(len(flat.rows))
        many = self.placement.slices_of_many(codec.relation, [flat.rows[j] for j in good]) if good else []
        targets: list[set[int]] = [set() for _ in rows]
        source = flat.source
        for j in errors:
            targets[source[j]].add(0)
        for j, slices in zip(good, many, strict=True):
            targets[source[j]].update(slices)
        for r, i in enumerate(rows):
            for s in sorted(targets[r]):
                out.rows.setdefault(s, []).append(i)
        return len(flat.rows)
