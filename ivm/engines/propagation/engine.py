"""The propagation engine: semijoin/projection views over the tree the patterns allow
(Hu & Wang, PODS'25; [25] Wang et al. VLDB'23; 003 §3–§4).

For a self-join-free free-connex CQ the engine keeps the views of
:mod:`ivm.engines.propagation.views` over the join tree
:func:`~ivm.engines.propagation.planning.choose_tree` picks for the *current*
update patterns, and a :class:`~ivm.patterns.PatternMonitor` that checks every
effective update against those patterns in O(1) (003 §4).

Guarantees (data complexity, expected with hashing; 003 §2):

- q-hierarchical: O(1) expected per update (hash lookups);
- MixDetect true (insert-only: every free-connex query, Cor 1.6; FIFO:
  weak-q-hierarchical queries, Lemma 3.8; mixed: Lemma 4.16): O(1) amortized;
- deletion-only after the prefix: O(1) amortized (App. C);
- otherwise O(λ) amortized ≤ O(N) (Lemma 1.4);

always with O(1)-delay enumeration of the distinct answers.

Correctness never depends on the patterns: the views handle inserts and
deletes on any valid tree (FILTER and EXTENDER children are ordinary child
edges that the planner placed under an anchor).  When an update violates a
pattern the plan relies on, the monitor reports it *before* the update is
applied; the engine re-plans with the downgraded σ and, if the tree changes,
rebuilds the views from the live tuples (O(|D|), at most O(m + m²) times over
a stream, so O(1) amortized), logs and counts the event, and
:attr:`PropagationEngine.plan` (and ``View.explain()``) report the new
guarantee.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ivm.engines.base import Engine
from ivm.engines.memory import state_memory
from ivm.engines.propagation.delta import AnswerDelta
from ivm.engines.propagation.planning import TreePlan, choose_tree
from ivm.engines.propagation.views import SemijoinViews
from ivm.patterns.monitor import PatternEvent, PatternMonitor
from ivm.query.free_connex import free_connex
from ivm.query.join_tree import JoinTree, validate_join_tree
from ivm.query.model import Query
from ivm.query.patterns import UpdatePatterns, parse_patterns
from ivm.updates import Row, Update


class PropagationEngine(Engine):
    """Semijoin/projection views over a pattern-compatible free-connex join tree.

    Parameters
    ----------
    query:
        A self-join-free, free-connex CQ with the COUNT aggregate (answer
        multiplicities over Z-relations; the paper's set semantics is the
        presence of tuples).
    patterns:
        Declared update patterns (``["PART=insert-only", "PS+SUPP=fifo"]``, a
        mapping, or :class:`UpdatePatterns`); verified by the monitors.
    infer:
        Infer the patterns of relations not declared, optimistically (start at
        insert-only / jointly FIFO, downgrade on violation).  Default: ``True``
        when nothing is declared, else ``False`` (undeclared means arbitrary).
    deletion_only:
        ``True`` (all relations) or the relations that only delete after
        :meth:`end_prefix` (App. C).
    tree:
        Pin this join tree (validated) instead of planning; monitors still run
        and report, but nothing is rebuilt.  For experiments such as Ex. 2.8.
    on_event:
        Called with each :class:`~ivm.patterns.PatternEvent`.

    Notes
    -----
    ``answer()`` is O(1); ``answers()`` yields the distinct answers with O(1)
    delay; ``enumerate()`` adds Z-multiplicities (memoized subtree weights,
    O(N) once per call, then O(1) per answer); ``result()`` is the bag count
    for a Boolean query, else ``{answer: multiplicity}``.  ``drain_delta()``
    gives the answer changes since the previous drain by the delta rule over
    the batch's net input changes (:mod:`~ivm.engines.propagation.delta`):
    O(|ΔD| + its factorized delta join) per call, independent of N and |Q(D)|;
    the first call lists the whole result (O(N)) and starts tracking.
    """

    name = "propagation"

    def __init__(
        self,
        query: Query,
        patterns: UpdatePatterns | Mapping[str, str] | Iterable[str] | None = None,
        infer: bool | None = None,
        deletion_only: bool | Iterable[str] = False,
        tree: JoinTree | None = None,
        on_event: Callable[[PatternEvent], None] | None = None,
    ) -> None:
        super().__init__(query)
        relations = list(query.relations)
        if deletion_only is True:
            deletion_only = relations
        elif deletion_only is False:
            deletion_only = []
        declared = parse_patterns(patterns)  # type: ignore[arg-type]
        deletion_only = [*deletion_only, *(r for r in relations if declared.deletes_only(r))]
        self.monitor = PatternMonitor(
            relations,
            patterns,  # type: ignore[arg-type]
            infer=(patterns is None) if infer is None else infer,
            deletion_only=list(deletion_only),
            on_event=on_event,
        )
        self._atoms_of = {a.relation: i for i, a in enumerate(query.atoms)}
        self._base: dict[str, dict[Row, int]] = {r: {} for r in relations}
        self._pinned = tree is not None
        if tree is not None:
            problems = validate_join_tree(tree, query)
            if problems:
                raise ValueError(f"invalid join tree: {'; '.join(problems)}")
            self.plan = TreePlan(tree, "pinned", False, "O(λ) amortized (pinned tree)", "a pinned tree")
        else:
            self.plan = self._choose()
        self.views = SemijoinViews(query, self.plan.tree)
        self.rebuilds = 0
        self.plan_changes: list[tuple[int, str, str]] = []  # (update number, old kind, new kind)
        self._updates = 0
        self._retired_work = 0
        self.delta = AnswerDelta(query)

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        aggregate = getattr(query, "aggregate", None)
        if aggregate is not None and aggregate.kind != "count":
            return f"the propagation engine maintains COUNT (answers and multiplicities), not {aggregate}"
        if not query.self_join_free:
            return "the propagation engine needs a self-join-free query (Hu & Wang §1.1)"
        fc = free_connex(query)
        if not fc:
            return f"{fc.reason} (no constant-delay maintenance even for insert-only updates, Thm 1.7)"
        return None

    # -- the patterns and the plan ---------------------------------------------------------

    @property
    def patterns(self) -> UpdatePatterns:
        """The current σ (declared levels, minus what the monitors have downgraded)."""
        return self.monitor.patterns()

    def _deletion_only(self) -> bool:
        return all(self.monitor.deletion_only(r) for r in self.query.relations)

    def _choose(self) -> TreePlan:
        return choose_tree(self.query, self.monitor.patterns(), self._deletion_only())

    def end_prefix(self) -> None:
        """The initial database (the insert-only prefix, 003 §1.2) is loaded; deletion-only
        relations are held to it from now on, and the plan may change."""
        self.monitor.end_prefix()
        self._replan()

    def _replan(self) -> None:
        if self._pinned:
            return
        new = self._choose()
        if new.tree != self.plan.tree:
            self.plan_changes.append((self._updates, self.plan.kind, new.kind))
            self.plan = new
            self._rebuild()
        else:
            self.plan = new

    def _rebuild(self) -> None:
        """Rebuild the views on the current tree from the live tuples: O(|D|)."""
        self._retired_work += self.views.work
        views = SemijoinViews(self.query, self.plan.tree)
        for relation, rows in self._base.items():
            atom = self._atoms_of[relation]
            matches = self.query.atoms[atom].matches
            for row, m in rows.items():
                if matches(row):
                    views.update(atom, row, m)
        self.views = views
        self.rebuilds += 1

    # -- updates --------------------------------------------------------------------------------

    @classmethod
    def runtime_choices(cls, query: Query) -> list[dict[str, str]]:
        """The join tree: re-planned when a monitored update pattern is violated (003 §4)."""
        return [
            {
                "choice": "the join tree (and with it the guarantee)",
                "statistic": "each relation's observed update pattern: insert-only, FIFO (jointly with others), "
                "or arbitrary, checked in O(1) per update by the pattern monitors",
                "rule": "the plan relies on the declared (or optimistically inferred) patterns; the first update "
                "that violates one downgrades it, and the tree is re-planned for the downgraded patterns and "
                "rebuilt from the live tuples when it changes (O(|D|), at most O(m + m²) times per stream)",
            }
        ]

    def apply(self, updates: Sequence[Update]) -> None:
        base = self._base
        atoms = self._atoms_of
        observe = self.monitor.observe
        record = self.delta.record if self.delta.tracking else None
        for relation, row, m in updates:
            if not m:
                continue
            rel = base.get(relation)
            if rel is None:
                raise KeyError(f"relation {relation!r} does not occur in {self.query}")
            self._updates += 1
            old = rel.get(row, 0)
            new = old + m
            # an effective update (presence flips): check the patterns before applying it
            if (not old or not new) and observe(relation, row, not old):
                self._replan()
            if new:
                rel[row] = new
            else:
                del rel[row]
            atom = atoms[relation]
            if self.query.atoms[atom].matches(row):
                self.views.update(atom, row, m)
            if record is not None:
                record(relation, row, m, old)

    # -- reading ------------------------------------------------------------------------------

    def answer(self) -> bool:
        """The Boolean answer: is the result non-empty?  O(1)."""
        return self.views.nonempty()

    def answers(self) -> Iterator[Row]:
        """The distinct answers (head order) with O(1) delay (003 §3.1)."""
        return self.views.answers()

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        return self.views.enumerate()

    def result(self) -> Any:
        if not self.query.free:
            return sum(m for _, m in self.views.enumerate())
        return dict(self.views.enumerate())

    def drain_delta(self) -> list[tuple[Row, int]]:
        """Changes of the answer multiset since the previous call, as ``(answer, ±multiplicity)``.

        The first call returns the whole current result (O(N + |Q(D)|)) and starts tracking;
        later calls cost O(|ΔD| + the factorized delta join of ΔD) for the net input changes ΔD
        since the previous call (:class:`~ivm.engines.propagation.delta.AnswerDelta`), whatever
        the size of the database or of the result.
        """
        if not self.delta.tracking:
            self.delta.start(self._base)
            return list(self.views.enumerate())
        out = self.delta.drain(self._base)
        legacy = self.__dict__.pop("_legacy_last", None)
        if legacy is not None:  # restored from a snapshot of the diffing version: diff once more
            now = dict(self.views.enumerate())
            out = [(r, m - legacy.get(r, 0)) for r, m in now.items() if m != legacy.get(r, 0)]
            out += [(r, -m) for r, m in legacy.items() if r not in now]
        return out

    def multiplicity(self, relation: str, row: Row) -> int:
        return self._base[relation].get(row, 0)

    def flips(self, relation: str) -> tuple[int, int]:
        """(on, off) V_s status flips of ``relation``'s tuples on the current tree (Ex. 2.8)."""
        return self.views.flips(self._atoms_of[relation])

    def guarantee(self) -> dict[str, Any]:
        """The current plan in words: kind, update bound, whether it is constant time, why."""
        return {
            "kind": self.plan.kind,
            "update": self.plan.update,
            "delay": "O(1)",
            "constant_time": self.plan.constant_time,
            "why": self.plan.reason,
            "tree": self.plan.tree.render(self.query),
            "patterns": self.patterns.describe(self.query.relations),
        }

    def stats(self) -> dict[str, int | float]:
        out: dict[str, int | float] = {
            "updates_applied": self._updates,
            "work": self._retired_work + self.views.work,
            "rebuilds": self.rebuilds,
            "plan_changes": len(self.plan_changes),
            "constant_time": int(self.plan.constant_time),
            "tree_height": self.plan.tree.height,
            "base_tuples": sum(len(r) for r in self._base.values()),
            "delta_work": self.delta.work,
        }
        out.update(self.views.sizes())
        out.update(self.monitor.stats())
        for relation, atom in self._atoms_of.items():
            on, off = self.views.flips(atom)
            out[f"flips.{relation}"] = on + off
        out.update(state_memory(self, int(out["base_tuples"])))
        return out

    def __getstate__(self) -> dict[str, Any]:
        # The views are rebuilt from the base relations on restore (linear preprocessing).
        state = dict(self.__dict__)
        state["_retired_work"] = self._retired_work + self.views.work
        del state["views"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        tracking, last = state.pop("_tracking", False), state.pop("_last", None)
        self.__dict__.update(state)
        if "delta" not in state:  # a snapshot of the version that diffed enumerations
            self.delta = AnswerDelta(self.query)
            if tracking:
                self.delta.start(self._base)
                self._legacy_last = last or {}
        self.views = SemijoinViews(self.query, self.plan.tree)
        rebuilds = self.rebuilds
        self._rebuild()
        self.rebuilds = rebuilds
        self._retired_work = state["_retired_work"]
        self.views.work = 0  # the work counter survives; the flip counters restart
