"""The pipeline's base relations: every relation's current contents, and the input policy.

Each relation of a pipeline is a Z-relation (DESIGN §4): a map from tuples to
non-zero multiplicities.  :class:`RelationStore` keeps that map for every
configured relation: the sum of every update the pipeline has accepted, the
tuples a bulk bootstrap loaded included (they are in no topic).  It is the one
place where the input :class:`~ivm.policy.Policy` is enforced, once per update
and per relation, whatever the number of queries reading it; the views then
apply exactly the accepted updates.  So

- an update is either applied to every query over its relation or rejected
  once (one dead letter, one reason);
- a query added to the pipeline, or changed, is built from the relations'
  contents (:func:`load_view`), never from a partial history;
- the contents are saved with every snapshot (``ivm.processor.state.recovery``).

Cost: one hash lookup and one store per accepted update, O(1) expected; the
space of one dictionary entry per distinct tuple (the row tuples themselves are
shared with the engines).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ivm.policy import Policy
from ivm.updates import Row, Update

try:
    from ivm.processor.state import _admit_kernel
except ImportError:  # the extension is optional: the Python loop admits then
    _admit_kernel = None  # type: ignore[assignment]

Contents = dict[Row, int]
ADMIT_IMPLEMENTATIONS = ("auto", "compiled", "python")


class RelationStore:
    """Per relation, its tuples and their multiplicities (a Z-relation), checked by ``policy``.

    ``contents`` (relation name -> tuple -> multiplicity) is held, not copied: the pipeline's
    state owns it and snapshots it.

    >>> store = RelationStore.empty(["R"], Policy())
    >>> store.admit("R", [(1, 2), (1, 2), (3, 4)], [1, -1, -1])
    ([0, 1], [(2, 'absent_delete', 'delete of an absent tuple (multiplicity 0, update -1)')])
    >>> store.contents["R"]
    {}
    """

    def __init__(self, contents: dict[str, Contents], policy: Policy) -> None:
        self.policy = policy
        self.contents = contents

    @classmethod
    def empty(cls, relations: Iterable[str], policy: Policy) -> RelationStore:
        return cls({name: {} for name in relations}, policy)

    def __len__(self) -> int:
        """The number of distinct tuples over all relations."""
        return sum(map(len, self.contents.values()))

    def admit(
        self,
        relation: str,
        rows: Sequence[Row | None],
        mults: Sequence[int],
        skip: Mapping[int, Any] | None = None,
        initial: bool = False,
        implementation: str = "auto",
    ) -> tuple[list[int], list[tuple[int, str, str]]]:
        """Apply the updates ``rows[j] ↦ mults[j]`` of ``relation`` in order, skipping the indices in
        ``skip``; returns the indices applied and ``(index, kind, reason)`` for each one the policy
        refused (the contents do not change for those).  ``initial``: the initial database (the
        bootstrap), which may insert into relations declared delete-only.

        Each update is checked against the contents the batch's earlier updates left, so a tuple
        inserted and deleted in one batch is judged as the stream had it.  ``implementation``:
        ``"compiled"`` the C loop (``ivm/processor/state/_admit_kernel.pyx``; ``ImportError`` if not built),
        ``"python"`` :meth:`admit_each`, ``"auto"`` the C loop when built.  Both give the same
        result, contents and contents order.  O(1) expected per update: one lookup, one store.
        """
        if implementation not in ADMIT_IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {ADMIT_IMPLEMENTATIONS}, got {implementation!r}")
        if implementation == "compiled" and _admit_kernel is None:
            raise ImportError("ivm.processor.state._admit_kernel is not built (pip install -e .)")
        if _admit_kernel is None or implementation == "python":
            return self.admit_each(relation, rows, mults, skip, initial)
        policy = self.policy.initial() if initial else self.policy
        kept, refused = _admit_kernel.admit(
            self.contents[relation],
            rows if type(rows) is list else list(rows),
            mults if type(mults) is list else list(mults),
            sorted(skip) if skip else [],
            policy.negative == "reject",
            policy.duplicate == "reject",
            policy.refuses_insert(relation),
        )
        return kept, [(j, *policy.check(before, mults[j], relation)) for j, before in refused]  # type: ignore[misc]

    def admit_each(
        self,
        relation: str,
        rows: Sequence[Row | None],
        mults: Sequence[int],
        skip: Mapping[int, Any] | None = None,
        initial: bool = False,
    ) -> tuple[list[int], list[tuple[int, str, str]]]:
        """:meth:`admit` one update at a time (the reference): each update is checked against the
        contents the earlier ones left; O(1) expected per update."""
        contents = self.contents[relation]
        get = contents.get
        policy = self.policy.initial() if initial else self.policy
        reject_negative = policy.negative == "reject"
        reject_duplicate = policy.duplicate == "reject"
        inserts_refused = policy.refuses_insert(relation)  # declared delete-only (003 App. C)
        kept: list[int] = []
        refused: list[tuple[int, str, str]] = []
        for j, row in enumerate(rows):
            if skip and j in skip:
                continue
            mult = mults[j]
            before = get(row, 0)  # type: ignore[arg-type]
            after = before + mult
            if (
                (reject_negative and after < 0)
                or (reject_duplicate and mult > 0 and after > 1)
                or not mult
                or (inserts_refused and mult > 0)
            ):
                kind, reason = policy.check(before, mult, relation)  # type: ignore[misc]
                refused.append((j, kind, reason))
                continue
            if after:
                contents[row] = after  # type: ignore[index]
            else:
                del contents[row]  # type: ignore[arg-type]
            kept.append(j)
        return kept, refused

    def admit_one(self, relation: str, row: Row, mult: int) -> tuple[str, str] | None:
        """:meth:`admit` for one update: ``None`` if applied, else ``(kind, reason)``."""
        _kept, refused = self.admit(relation, (row,), (mult,))
        return refused[0][1:] if refused else None

    def apply(self, update: Update) -> None:
        """Apply an update the runtime generated (a window's expiration): it must fit the contents."""
        relation, row, mult = update
        contents = self.contents[relation]
        after = contents.get(row, 0) + mult
        if after < 0 and self.policy.negative == "reject":
            raise RuntimeError(f"generated update {update} takes {relation} below zero: the window and store disagree")
        if after:
            contents[row] = after
        else:
            contents.pop(row, None)

    def updates(self, relations: Iterable[str]) -> Iterator[Update]:
        """The contents of ``relations`` as inserts (``Update(relation, row, multiplicity)``), in the order
        the tuples arrived."""
        for relation in relations:
            for row, mult in self.contents[relation].items():
                yield Update(relation, row, mult)

    def count(self, relations: Iterable[str]) -> int:
        return sum(len(self.contents[r]) for r in relations)


def load_view(view: Any, updates: Sequence[Update], chunk: int = 50_000, on_chunk: Any = None) -> None:
    """Load ``updates`` (a database given as inserts) into a fresh ``view``.

    Engines with a static preprocessing (``bulk_load``, e.g. IVM^eps's O(N^1.5) count) use it when
    every multiplicity is positive; the others take the updates in chunks.  Used by the bootstrap
    and by the rebuild of a query that is new or changed over existing state.
    """
    bulk = getattr(view.engine, "bulk_load", None)
    if bulk is not None and not hasattr(view, "shards") and all(u.mult > 0 for u in updates):
        bulk(list(updates))
        if on_chunk is not None:
            on_chunk(len(updates))
        return
    load = getattr(view, "load", view.apply)  # the initial database: delete-only relations admit it
    for start in range(0, len(updates), chunk):
        part = updates[start : start + chunk]
        outcome = load(part)
        if outcome.rejected:
            first = outcome.rejected[0]
            raise RuntimeError(f"{len(outcome.rejected)} tuples of the relations refused by the view; first: {first}")
        if on_chunk is not None:
            on_chunk(len(part))


def fingerprint(description: Mapping[str, Any]) -> str:
    """A short stable digest of a JSON-ready description (what a piece of state was built from).

    >>> fingerprint({"b": 1, "a": [2]}) == fingerprint({"a": [2], "b": 1})
    True
    """
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
