"""One planning path for ``ivm explain``, ``ivm check`` and ``ivm run``.

``build_view`` turns one configured query into its maintained view, exactly as
the running pipeline does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ivm
from ivm.patterns.windows import Windows
from ivm.policy import Policy
from processor.config import PipelineConfig, QueryConfig


def build_view(
    config: PipelineConfig,
    q: QueryConfig,
    schema_of: Mapping[str, Sequence[str]],
    windows: Windows | None,
    policy: Policy,
) -> Any:
    """The maintained view of query ``q`` over relations with attributes ``schema_of``.

    Raises ``ivm.query.parse.QuerySyntaxError``, ``EngineRefused`` or ``ValueError``
    (unknown relation, eps out of range, ...) exactly as ``ivm.maintain`` does.
    """
    query = ivm.parse(q.query, schema_of)
    missing = set(query.relations) - set(schema_of)
    if missing:
        raise ValueError(f"query {q.name!r} uses relations {sorted(missing)} with no configured topic")
    patterns = list(q.patterns)
    if windows is not None:  # a window makes its relations (jointly) FIFO
        patterns += [p for p in windows.patterns() if set(p.split("=")[0].split("+")) <= set(query.relations)]
    options: dict[str, Any] = {"eps": q.eps} if q.eps is not None else {}
    engine = q.engine
    if q.model == "chow_liu":
        engine = "fivm" if engine == "auto" else engine
        options["options"] = {"categorical": query.aggregate.variables}
    return ivm.maintain(
        query,
        engine=engine,
        policy=policy,
        shards=q.shards or config.shards,
        patterns=patterns or None,
        **options,
    )
