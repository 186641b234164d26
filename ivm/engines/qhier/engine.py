"""Conjunctive queries under updates for q-hierarchical queries (Berkholz et al., PODS'17).

Theorem 3.2: a q-hierarchical conjunctive query is maintained with O(1) time
per single-tuple update, O(1) count and Boolean answer, and constant-delay
enumeration of its answers, each after linear preprocessing (all bounds are
data complexity: the factor is poly(|φ|), independent of the database).
Hash maps make the bounds *expected* O(1).

The data structure (002 §3, §6 of the paper): one :class:`~ivm.query.qtree.QTree`
per connected component; for every node v an *item* ``[v, α, a]`` per value
combination of ``path[v]`` that some tuple supports.  Items form a trie (an
item's children for child node u are a hash map keyed by u's value).  Each
item keeps

- ``support``: how many present tuples pass through it (garbage-collected at 0),
- ``mults``: the multiplicity of the tuple of each atom represented at v,
- ``weight``: the number of satisfying valuations of its subtree, Lemma 6.3
  ``weight = Π_ψ mult_ψ · Π_u sum_u``, with ``sum_u`` the sum of its u-children's weights,
- for free v, the *local factor* ``lw = Π_ψ mult_ψ · Π_{bound u} sum_u`` (the
  part of an answer's multiplicity contributed by this item), the *free weight*
  ``fw = [lw ≠ 0] · Π_{free u} fsum_u`` (Lemma 6.4: the number of distinct
  answers below), and for every free child u the doubly linked *fit-list*
  ``L_u`` of the children with ``fw > 0`` with ``fsum_u`` their total.

Relations are Z-relations (DESIGN §4): multiplicities are the leaf factors, so
a weight is the Z-count of valuations and an answer's multiplicity is the
product of the ``lw`` of its free items.  With 0/1 multiplicities this is
exactly the paper's set semantics.  An update touches only the items on one
root path per atom occurrence, bottom-up, so it costs O(|φ|²) whatever the
database size.

Batches.  An update costs O(|φ|²) whether or not its tuple occurs again in the
same batch, so a batch with many repeats (a hot tuple inserted and deleted, a
counter bumped) is first consolidated into a Z-set, one update per tuple with
the summed multiplicity (:func:`ivm.updates.consolidate`; the same state, since
only the final multiplicities matter).  Whether that pays depends on the data:
folding costs a pass over the batch, so the engine folds a batch only when its
duplicate rate (:func:`ivm.updates.duplicate_rate`, one C-level pass) is at
least :data:`CONSOLIDATE_AT`, the crossover measured by ``bench/choices.py``;
:meth:`QHierEngine.choice` reports the last decision.

Answer deltas (for ``<query>.delta``) come from the update path: an update of
an atom occurrence changes the local factor of exactly one free item (the
deepest free item on its path), so the answers whose multiplicity changes are
the answers through that item, enumerated with constant delay with the path
pinned; a Boolean component changes a global factor.  Tracking starts at the
first :meth:`QHierEngine.drain_delta` call (whose answer is the whole current
result, the change since the empty start); until then updates cost O(1) and
afterwards O(1 + number of answers whose multiplicity changes).

Implementations.  This module's item objects are the reference
(``implementation="python"``); :mod:`ivm.engines.qhier.compact` keeps the same
structure in typed arrays of a compiled kernel (``"compact"``, the default
``"auto"`` when built), with no per-tuple Python object for the cyclic
collector to walk.  ``stats()["bytes_per_tuple"]`` reports either one's state.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from ivm.engines.base import Engine
from ivm.engines.qhier import registry
from ivm.query.model import Query
from ivm.query.q_hierarchical import q_hierarchical
from ivm.query.qtree import QTree, canonical_qtrees
from ivm.updates import Row, Update, consolidate, duplicate_rate

Semantics = Literal["bag", "set"]
Consolidation = Literal["auto", "always", "never"]
Implementation = Literal["auto", "compact", "python"]

#: the values of ``implementation``: "python" is this module's reference code path, "compact" the typed-array
#: state of :mod:`ivm.engines.qhier.compact` (needs the compiled kernel), "auto" the compact one when built
IMPLEMENTATIONS: tuple[str, ...] = ("auto", "compact", "python")

#: fold a batch into a Z-set first when at least this fraction of its updates repeat a tuple of the
#: batch (measured crossover, bench/choices.py: below it the extra pass costs more than it saves)
CONSOLIDATE_AT = 0.25
#: batches shorter than this are applied as they come (too few repeats to pay for the test)
CONSOLIDATE_MIN_BATCH = 16


def consolidates(updates: Sequence[Update], mode: Consolidation = "auto") -> tuple[bool, float | None]:
    """Whether :class:`QHierEngine` folds ``updates`` into a Z-set first, and the batch's duplicate rate.

    ``auto`` folds batches of at least :data:`CONSOLIDATE_MIN_BATCH` updates whose
    duplicate rate is at least :data:`CONSOLIDATE_AT`; O(|batch|) expected.  The
    rate is ``None`` when it was not needed (a short batch, or a fixed ``mode``).

    >>> hot = [("R", (1, 2), 1), ("R", (1, 2), -1)] * 10
    >>> consolidates(hot), consolidates(hot[:4]), consolidates([("R", (i, 0), 1) for i in range(20)])
    ((True, 0.95), (False, None), (False, 0.0))
    """
    if mode != "auto":
        return mode == "always", None
    if len(updates) < CONSOLIDATE_MIN_BATCH:
        return False, None
    rate = duplicate_rate(updates)
    return rate >= CONSOLIDATE_AT, rate


class StaleEnumeration(RuntimeError):
    """An enumeration was resumed after the view changed (002 §9.2: fail fast, restart)."""


class _Item:
    """An item ``[v, α, a]`` of node v (002 §3); see the module docstring for the fields."""

    __slots__ = (
        "fsums",
        "fw",
        "heads",
        "kids",
        "lw",
        "mults",
        "next",
        "parent",
        "prev",
        "sums",
        "support",
        "val",
        "weight",
    )

    def __init__(self, node: _Node | None, val: Any, parent: _Item | None) -> None:
        self.val = val
        self.parent = parent
        self.support = 0
        self.weight = 0
        self.lw = 0
        self.fw = 0
        self.prev: _Item | None = None
        self.next: _Item | None = None
        if node is None:  # the sentinel above a component's root ("start list")
            self.mults: list[int] | None = None
            self.sums: list[int] | None = [0]
            self.fsums: list[int] | None = [0]
            self.heads: list[_Item | None] | None = [None]
            self.kids: list[dict[Any, _Item]] | None = [{}]
            return
        self.mults = [0] * node.n_atoms if node.n_atoms else None
        n = len(node.children)
        if n:
            self.sums = [0] * n
            self.kids = [{} for _ in range(n)]
            self.fsums = [0] * n if node.free else None
            self.heads = [None] * n if node.free else None
        else:
            self.sums = self.kids = self.fsums = self.heads = None


class _Node:
    """A q-tree node of one component, with its position among its parent's children."""

    __slots__ = ("bound_slots", "children", "fpos", "free", "free_slots", "n_atoms", "slot", "var")

    def __init__(self, var: str, free: bool, slot: int, n_atoms: int) -> None:
        self.var = var
        self.free = free
        self.slot = slot
        self.n_atoms = n_atoms
        self.children: list[_Node] = []
        self.bound_slots: tuple[int, ...] = ()
        self.free_slots: tuple[int, ...] = ()
        self.fpos = -1  # position among all free nodes (document order), -1 if bound


class _Component:
    __slots__ = ("free", "index", "nodes", "sentinel")

    def __init__(self, index: int, nodes: list[_Node], free: bool) -> None:
        self.index = index
        self.nodes = nodes
        self.free = free
        self.sentinel = _Item(None, None, None)


class _Occurrence:
    """One atom occurrence: where its tuples go in the q-tree and which ones it selects."""

    __slots__ = ("comp", "consts", "equal", "free_depth", "path", "positions", "slot")

    def __init__(
        self,
        comp: _Component,
        path: tuple[_Node, ...],
        positions: tuple[int, ...],
        equal: tuple[tuple[int, int], ...],
        consts: tuple[tuple[int, Any], ...],
        slot: int,
    ) -> None:
        self.comp = comp
        self.path = path
        self.positions = positions
        self.equal = equal
        self.consts = consts
        self.slot = slot
        self.free_depth = max((k for k, n in enumerate(path) if n.free), default=-1)


class QHierEngine(Engine):
    """q-hierarchical CQs: O(1) update, count and answer, constant-delay enumeration (Thm 3.2).

    Parameters
    ----------
    query:
        A conjunctive query with the COUNT aggregate.  Under ``semantics="bag"``
        (the default; Z-relations, DESIGN §4) it must be q-hierarchical itself;
        otherwise the engine refuses it with the witness of Def. 3.1.
    semantics:
        ``"set"`` reads every relation as the set of tuples with positive
        multiplicity and maintains the *set* of answers (multiplicity 1 each),
        evaluated on the homomorphic core (Thm 3.4/3.5 upper bounds: a query
        whose core is q-hierarchical is easy under set semantics).
    consolidate:
        ``"auto"`` (default: fold a batch into a Z-set when its duplicate rate
        reaches :data:`CONSOLIDATE_AT`, see :func:`consolidates`), ``"always"``
        or ``"never"``.  The result is the same either way.
    implementation:
        ``"auto"`` (default): the compact state of
        :class:`~ivm.engines.qhier.compact.QHierCompactEngine` (items as rows of
        typed arrays the cyclic collector never walks, 35-55 bytes per integer
        tuple instead of ~400) when its kernel is compiled, else this class;
        ``"compact"`` requires the kernel; ``"python"`` is this class, the
        reference.  Same results, deltas, snapshots and bounds either way.

    Notes
    -----
    ``count()`` is the number of distinct answers, ``answer()`` the Boolean
    answer, ``bag_count()`` the sum of all answer multiplicities (all O(1));
    ``multiplicity_of(row)`` and ``contains(row)`` take O(|free|);
    ``enumerate()`` has O(|free|) delay, outputs in head order and fails fast
    with :class:`StaleEnumeration` once an update has been applied since it
    started.
    """

    name = "qhier"
    implementation: str = "python"
    _fallback: str | None = None
    _measured: tuple[int, int, int] = (0, -1, 0)

    def __new__(cls, *args: Any, **kwargs: Any) -> QHierEngine:
        """Pick the implementation: ``QHierEngine(query, implementation=...)`` may build a compact engine.

        ``"python"`` is this class (the reference), ``"compact"`` the typed-array
        state of :class:`~ivm.engines.qhier.compact.QHierCompactEngine` (an
        :class:`ImportError` when its kernel is not compiled), ``"auto"`` (the
        default) the compact one when the kernel is built, else the reference.
        """
        if cls is QHierEngine and (args or "query" in kwargs):
            implementation = args[3] if len(args) > 3 else kwargs.get("implementation", "auto")
            if implementation not in IMPLEMENTATIONS:
                raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
            if implementation != "python":
                compact, available = registry.implementation("compact")
                if implementation == "compact" or available():
                    return super().__new__(compact)
        return super().__new__(cls)

    def __init__(
        self,
        query: Query,
        semantics: Semantics = "bag",
        consolidate: Consolidation = "auto",
        implementation: Implementation = "auto",
    ) -> None:
        if semantics not in ("bag", "set"):
            raise ValueError(f"semantics must be 'bag' or 'set', got {semantics!r}")
        if consolidate not in ("auto", "always", "never"):
            raise ValueError(f"consolidate must be 'auto', 'always' or 'never', got {consolidate!r}")
        self.consolidate: Consolidation = consolidate
        self._folded: list[Any] = [0, 0, None]  # batches folded, updates saved, duplicate rate of the last batch
        reason = self._refusal(query, semantics)
        if reason:
            from ivm.engines.base import EngineRefused

            raise EngineRefused(f"engine {self.name!r} cannot maintain {query}: {reason}")
        self.query = query
        self.semantics: Semantics = semantics
        self.evaluated = _core(query) if semantics == "set" else query
        self._base: dict[str, dict[Row, int]] = {rel: {} for rel in query.relations}
        self._tracking = False
        self._delta: dict[Row, int] = {}
        self._build()

    # -- planning ---------------------------------------------------------------------------

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        return cls._refusal(query, "bag")

    @classmethod
    def _refusal(cls, query: Query, semantics: Semantics) -> str | None:
        aggregate = getattr(query, "aggregate", None)
        if aggregate is not None and aggregate.kind != "count":
            return f"the qhier engine maintains COUNT (answer multiplicities), not {aggregate}"
        verdict = q_hierarchical(query)
        if verdict:
            return None
        if semantics == "set":
            core = _core(query)
            if q_hierarchical(core):
                return None
            return f"{verdict.reason}; its core {core} is not q-hierarchical either"
        return verdict.reason

    def _build(self) -> None:
        forest = canonical_qtrees(self.evaluated)
        atoms = self.evaluated.atoms
        self._components: list[_Component] = []
        self._free_nodes: list[tuple[_Node, int, _Component]] = []  # (node, parent fpos or -1, comp)
        self._occurrences: dict[str, list[_Occurrence]] = {rel: [] for rel in self.query.relations}
        self._nullary: dict[str, int] = {}  # relation -> number of nullary occurrences
        for index, tree in enumerate(forest.trees):
            self._components.append(self._build_component(index, tree, atoms))
        for i in forest.nullary:
            rel = atoms[i].relation
            self._nullary[rel] = self._nullary.get(rel, 0) + 1
        fpos = {node.var: node.fpos for node, _, _ in self._free_nodes}
        self._head = tuple(fpos[v] for v in self.query.free)
        self._version = 0
        self._updates = 0
        self._items = 0

    def _build_component(self, index: int, tree: QTree, atoms: Sequence[Any]) -> _Component:
        free = set(tree.free)
        nodes: dict[str, _Node] = {}
        slot_in_node: dict[int, int] = {}
        for var in tree.nodes:
            parent = tree.parent[var]
            slot = tree.children[parent].index(var) if parent is not None else 0
            reps = tree.represented[var]
            for k, i in enumerate(reps):
                slot_in_node[i] = k
            node = _Node(var, var in free, slot, len(reps))
            nodes[var] = node
            if parent is not None:
                nodes[parent].children.append(node)
        for node in nodes.values():
            node.bound_slots = tuple(c.slot for c in node.children if not c.free)
            node.free_slots = tuple(c.slot for c in node.children if c.free)
        comp = _Component(index, [nodes[v] for v in tree.nodes], bool(free))
        for var in tree.free:
            node = nodes[var]
            node.fpos = len(self._free_nodes)
            parent = tree.parent[var]
            self._free_nodes.append((node, nodes[parent].fpos if parent is not None else -1, comp))
        for i in tree.atoms:
            atom = atoms[i]
            deepest = next(v for v in tree.nodes if i in tree.represented[v])
            path = tuple(nodes[v] for v in tree.path(deepest))
            first = {}
            for pos, term in enumerate(atom.terms):
                first.setdefault(term, pos)
            equal = tuple((first[t], pos) for pos, t in enumerate(atom.terms) if first[t] != pos)
            consts = tuple(getattr(atom, "constants", ()))
            positions = tuple(first[n.var] for n in path)
            occ = _Occurrence(comp, path, positions, equal, consts, slot_in_node[i])
            self._occurrences[atom.relation].append(occ)
        return comp

    # -- updates (§6.4) ---------------------------------------------------------------------

    def apply(self, updates: Sequence[Update]) -> None:
        """Apply a batch; each update costs O(|φ|²), independent of the data.

        The batch is folded into a Z-set first when :func:`consolidates` says so
        (O(|batch|) expected; the resulting state is the same).
        """
        if len(updates) > 1:
            fold, rate = consolidates(updates, self.consolidate)
            folded = self._folded
            folded[2] = rate
            if fold:
                given = len(updates) - sum(1 for u in updates if not u[2])
                updates = consolidate(updates)
                folded[0] += 1
                folded[1] += given - len(updates)
                self._count_folded(given - len(updates))
        self._apply(updates)

    def _count_folded(self, saved: int) -> None:
        """``updates_applied`` counts the updates given, the ones a fold saved included."""
        self._updates += saved

    def _apply(self, updates: Sequence[Update]) -> None:
        base = self._base
        occurrences = self._occurrences
        set_mode = self.semantics == "set"
        for relation, row, m in updates:
            if not m:
                continue
            rel = base.get(relation)
            if rel is None:
                raise KeyError(f"relation {relation!r} does not occur in {self.query}")
            nullary = self._tracking and relation in self._nullary
            if nullary:
                factor_before = self._global_factor()
            old = rel.get(row, 0)
            new = old + m
            if new:
                rel[row] = new
            else:
                del rel[row]
            self._updates += 1
            if set_mode:
                old, new = int(old > 0), int(new > 0)
                if old == new:
                    continue
            self._version += 1
            for occ in occurrences[relation]:
                self._update_occurrence(occ, row, old, new)
            if nullary:
                self._emit({}, -1, (1, 1), (factor_before, self._global_factor()))

    def _update_occurrence(self, occ: _Occurrence, row: Row, old: int, new: int) -> None:
        for p, q in occ.equal:
            if row[p] != row[q]:
                return
        for p, c in occ.consts:
            if row[p] != c:
                return
        support = 1 if old == 0 else (-1 if new == 0 else 0)
        path = occ.path
        depth = len(path)
        items: list[_Item] = []
        parent = occ.comp.sentinel
        for k in range(depth):
            node = path[k]
            val = row[occ.positions[k]]
            kids = parent.kids[node.slot]  # type: ignore[index]
            item = kids.get(val)
            if item is None:
                item = kids[val] = _Item(node, val, parent)
                self._items += 1
            item.support += support
            items.append(item)
            parent = item
        items[-1].mults[occ.slot] = new  # type: ignore[index]

        comp = occ.comp
        watch = occ.free_depth if self._tracking and comp.free else -2
        lw_change: tuple[int, int] | None = None
        bool_before = comp.sentinel.sums[0]  # type: ignore[index]
        for k in range(depth - 1, -1, -1):
            item, node = items[k], path[k]
            parent = item.parent  # type: ignore[assignment]
            slot = node.slot
            local = 1
            if item.mults is not None:
                for x in item.mults:
                    local *= x
            weight = local
            if item.sums is not None:
                for x in item.sums:
                    weight *= x
            changed = weight != item.weight
            if changed:
                parent.sums[slot] += weight - item.weight  # type: ignore[index]
                item.weight = weight
            if node.free:
                for b in node.bound_slots:
                    local *= item.sums[b]  # type: ignore[index]
                fw = 0
                if local:
                    fw = 1
                    for b in node.free_slots:
                        fw *= item.fsums[b]  # type: ignore[index]
                old_fw = item.fw
                if k == watch and local != item.lw:
                    lw_change = (item.lw, local)
                if local != item.lw:
                    item.lw = local
                    changed = True
                if fw != old_fw:
                    changed = True
                    item.fw = fw
                    heads = parent.heads  # type: ignore[assignment]
                    if old_fw == 0:  # link at the head of the parent's fit-list
                        head = heads[slot]  # type: ignore[index]
                        item.prev = None
                        item.next = head
                        if head is not None:
                            head.prev = item
                        heads[slot] = item  # type: ignore[index]
                    elif fw == 0:  # unlink
                        if item.prev is not None:
                            item.prev.next = item.next
                        else:
                            heads[slot] = item.next  # type: ignore[index]
                        if item.next is not None:
                            item.next.prev = item.prev
                        item.prev = item.next = None
                    parent.fsums[slot] += fw - old_fw  # type: ignore[index]
            if not changed:
                break  # nothing above depends on an unchanged item
        for k in range(depth - 1, -1, -1):  # garbage-collect unsupported items bottom-up
            item = items[k]
            if item.support:
                break
            del item.parent.kids[path[k].slot][item.val]  # type: ignore[union-attr,index]
            self._items -= 1

        if lw_change is not None:
            factor = self._global_factor()
            if factor:
                pinned = {path[k].fpos: items[k] for k in range(occ.free_depth + 1)}
                self._emit(pinned, path[occ.free_depth].fpos, lw_change, (factor, factor))
        elif self._tracking and not comp.free:
            bool_after = comp.sentinel.sums[0]  # type: ignore[index]
            if bool_after != bool_before:
                others = self._global_factor(skip=comp)
                if others:
                    self._emit({}, -1, (1, 1), (others * bool_before, others * bool_after))

    # -- answers (§6.5, Algorithm 1) ----------------------------------------------------------

    def _global_factor(self, skip: _Component | None = None) -> int:
        """Π of the Boolean components' weights and the nullary atoms' multiplicities."""
        factor = 1
        for comp in self._components:
            if not comp.free and comp is not skip:
                factor *= comp.sentinel.sums[0]  # type: ignore[index]
        for rel, count in self._nullary.items():
            m = self._base[rel].get((), 0)
            if self.semantics == "set":
                m = int(m > 0)
            factor *= m**count
        return factor

    def bag_count(self) -> int:
        """The sum of all answer multiplicities (the number of satisfying valuations); O(1)."""
        total = self._global_factor()
        for comp in self._components:
            if comp.free:
                total *= comp.sentinel.sums[0]  # type: ignore[index]
        return total

    def count(self) -> int:
        """The number of distinct answers ``|φ(D)|`` (start free-weights, §6.5); O(1)."""
        if not self._global_factor():
            return 0
        total = 1
        for comp in self._components:
            if comp.free:
                total *= comp.sentinel.fsums[0]  # type: ignore[index]
        return total

    def answer(self) -> bool:
        """The Boolean answer: is ``φ(D)`` non-empty?  O(1)."""
        return self.count() > 0

    def result(self) -> Any:
        """The COUNT aggregate: an ``int`` for a Boolean query, else ``{answer: multiplicity}``.

        For a Boolean query this is O(1) (the bag count; 0/1 under set
        semantics); with free variables the dict costs O(|φ(D)|) to build.
        """
        if not self.query.free:
            return self.bag_count() if self.semantics == "bag" else int(self.answer())
        return dict(self.enumerate())

    def multiplicity_of(self, row: Row) -> int:
        """The multiplicity of answer ``row`` (head order); 0 if it is no answer.  O(|free|)."""
        if len(row) != len(self._head):
            return 0
        value = [None] * len(self._free_nodes)
        for pos, v in zip(self._head, row, strict=True):
            value[pos] = v
        found: list[_Item] = []
        mult = self._global_factor()
        for j, (node, parent_pos, comp) in enumerate(self._free_nodes):
            if not mult:
                return 0
            parent = comp.sentinel if parent_pos < 0 else found[parent_pos]
            item = parent.kids[node.slot].get(value[j])  # type: ignore[index]
            if item is None:
                return 0
            found.append(item)
            mult *= item.lw
        if self.semantics == "set":
            return int(mult != 0)
        return mult

    def contains(self, row: Row) -> bool:
        """Membership test ``row ∈ φ(D)`` (002 §5 [derived]); O(|free|)."""
        return self.multiplicity_of(row) != 0

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        """The answers in head order with their multiplicities; O(|free|) delay (Lemma 6.2).

        The iterator raises :class:`StaleEnumeration` when resumed after an update.
        """
        version = self._version
        factor = self._global_factor()
        head = self._head
        set_mode = self.semantics == "set"

        def run() -> Iterator[tuple[Row, int]]:
            if not factor:
                return
            for cur in self._odometer({}):
                if self._version != version:
                    raise StaleEnumeration("the view was updated since this enumeration started; restart it")
                mult = factor
                for item in cur:
                    mult *= item.lw
                yield tuple(cur[j].val for j in head), (1 if set_mode else mult)
                if self._version != version:
                    raise StaleEnumeration("the view was updated since this enumeration started; restart it")

        return run()

    def _odometer(self, pinned: dict[int, _Item]) -> Iterator[list[_Item]]:
        """Algorithm 1 over the free nodes in document order; ``pinned`` positions are fixed.

        Yields the same list object, advanced in place (the caller must not keep it).
        """
        free_nodes = self._free_nodes
        m = len(free_nodes)
        if m == 0:
            yield []
            return
        cur: list[_Item] = [None] * m  # type: ignore[list-item]
        fixed = [j in pinned for j in range(m)]

        def first(j: int) -> _Item | None:
            if fixed[j]:
                return pinned[j]
            node, parent_pos, comp = free_nodes[j]
            parent = comp.sentinel if parent_pos < 0 else cur[parent_pos]
            return parent.heads[node.slot]  # type: ignore[index]

        for j in range(m):
            item = first(j)
            if item is None:  # only below a pinned (possibly unfit) item, or an empty component
                return
            cur[j] = item
        while True:
            yield cur
            j = m - 1
            while j >= 0 and (fixed[j] or cur[j].next is None):
                j -= 1
            if j < 0:
                return
            cur[j] = cur[j].next  # type: ignore[assignment]
            for k in range(j + 1, m):
                item = first(k)
                if item is None:  # cannot happen for fit parents; guards pinned parents
                    return
                cur[k] = item

    # -- answer deltas --------------------------------------------------------------------------

    def drain_delta(self) -> list[tuple[Row, int]]:
        """The changes to the answer multiset since the last call, as ``(answer, ±multiplicity)``.

        The first call returns the whole current result (the change since the
        empty start) and switches tracking on; from then on every update adds
        the delta of the answers through its path, in O(1 + |changed answers|).
        Under set semantics the changes are +1 (new answer) and -1 (lost answer).
        """
        if not self._tracking:
            self._tracking = True
            self._delta = {}
            return list(self.enumerate())
        out = list(self._delta.items())
        self._delta = {}
        return out

    def _add_delta(self, row: Row, d: int) -> None:
        total = self._delta.get(row, 0) + d
        if total:
            self._delta[row] = total
        else:
            self._delta.pop(row, None)

    def _emit(
        self,
        pinned: dict[int, _Item],
        changed: int,
        local: tuple[int, int],
        factor: tuple[int, int],
    ) -> None:
        """Record the delta of the answers through the ``pinned`` items.

        An answer's multiplicity is ``G · Π_j lw(item_j)`` (global factor times
        the local factors of its free items).  The update moved the local factor
        at free position ``changed`` from ``local[0]`` to ``local[1]`` (``changed
        = -1``: none) and ``G`` from ``factor[0]`` to ``factor[1]``; every other
        factor is unchanged, so the answers whose multiplicity changed are
        enumerated from the current structure with the update path pinned.
        """
        set_mode = self.semantics == "set"
        g0, g1 = factor
        for j, item in pinned.items():
            if j != changed and not item.lw:
                return
        head = self._head
        for cur in self._odometer(pinned):
            rest = 1
            for j, item in enumerate(cur):
                if j != changed:
                    rest *= item.lw
            before = g0 * rest * local[0]
            after = g1 * rest * local[1]
            d = int(after != 0) - int(before != 0) if set_mode else after - before
            if d:
                self._add_delta(tuple(cur[j].val for j in head), d)

    # -- protocol -------------------------------------------------------------------------------

    def multiplicity(self, relation: str, row: Row) -> int:
        return self._base[relation].get(row, 0)

    @classmethod
    def runtime_choices(cls, query: Query) -> list[dict[str, str]]:
        """Batch folding: decided per batch from its duplicate rate (:func:`consolidates`)."""
        return [
            {
                "choice": "fold each batch into a Z-set (one update per tuple) before applying it",
                "statistic": "the batch's duplicate rate: the share of its updates that repeat a (relation, tuple) "
                "pair of the same batch (one C-level pass)",
                "rule": f"fold batches of at least {CONSOLIDATE_MIN_BATCH} updates whose duplicate rate is at least "
                f"{CONSOLIDATE_AT:.0%}, apply the others update by update (the measured crossover, "
                "bench/choices.py); same result either way",
            }
        ]

    def choice(self) -> dict[str, Any]:
        """The run-time choice of this engine (shown by ``View.explain()["choice"]``): batch folding."""
        folded, mode = self._folded, self.consolidate
        rule = (
            f"a batch of at least {CONSOLIDATE_MIN_BATCH} updates is folded into a Z-set (one update per tuple) "
            f"when at least {CONSOLIDATE_AT:.0%} of its updates repeat a tuple of the batch"
            if mode == "auto"
            else f"consolidate={mode!r} was requested"
        )
        return {
            "implementation": self.implementation if self._fallback is None else f"python ({self._fallback})",
            "consolidate": mode,
            "rule": rule,
            "last_duplicate_rate": None if folded[2] is None else round(folded[2], 4),
            "batches_folded": folded[0],
            "updates_saved": folded[1],
        }

    def state_bytes(self) -> int:
        """Bytes of the state: base relations and the item trie (``sys.getsizeof``, deep); O(N).

        Every object is counted once: the row tuples, their non-shared values and
        the multiplicities in the base relations; each item with its lists, its
        child dicts and its local numbers (item values are the rows' objects).
        """
        size = sys.getsizeof
        small = range(-5, 257)  # CPython's shared small ints cost nothing per tuple

        def num(x: Any) -> int:
            return 0 if type(x) is int and x in small else size(x)

        total = size(self._base) + size(self._delta)
        for rows in self._base.values():
            total += size(rows)
            for row, m in rows.items():
                total += size(row) + num(m) + sum(num(v) for v in row)
        stack = [comp.sentinel for comp in self._components]
        while stack:
            item = stack.pop()
            total += size(item)
            for field in (item.mults, item.sums, item.fsums, item.heads):
                if field is not None:
                    total += size(field) + sum(num(x) for x in field if isinstance(x, int))
            total += num(item.support) + num(item.weight) + num(item.lw) + num(item.fw)
            if item.kids is not None:
                total += size(item.kids)
                for kids in item.kids:
                    total += size(kids)
                    stack.extend(kids.values())
        return total

    def _bytes_per_tuple(self, tuples: int) -> tuple[int, float]:
        """(state bytes, bytes per base tuple), re-measured once the state changed by 1/8 since the last
        measurement (the walk is O(N), so stats() stays amortized O(1) per update)."""
        at_updates, at_items, state = self._measured
        if abs(self._updates - at_updates) + abs(self._items - at_items) > max(256, self._items // 8) or at_items < 0:
            state = self.state_bytes()
            self._measured = (self._updates, self._items, state)
        return state, (state / tuples if tuples else 0.0)

    def stats(self) -> dict[str, int | float]:
        folded = self._folded
        tuples = sum(len(r) for r in self._base.values())
        state, per_tuple = self._bytes_per_tuple(tuples)
        return {
            "batches_folded": folded[0],
            "updates_folded": folded[1],
            "updates_applied": self._updates,
            "items": self._items,
            "components": len(self._components),
            "answers": self.count(),
            "bag_count": self.bag_count(),
            "base_tuples": tuples,
            "delta_pending": len(self._delta),
            "state_bytes": state,
            "bytes_per_tuple": per_tuple,
        }

    def __getstate__(self) -> dict[str, Any]:
        # The item trie is rebuilt from the base relations (linear preprocessing, Thm 3.2):
        # pickling its linked lists would recurse once per list element.
        return {
            "query": self.query,
            "semantics": self.semantics,
            "base": self._base,
            "tracking": self._tracking,
            "delta": self._delta,
            "updates": self._updates,
            "consolidate": self.consolidate,
            "folded": list(self._folded),
        }

    @classmethod
    def restore(cls, blob: bytes, implementation: Implementation | None = None) -> Engine:
        """Read a :meth:`snapshot` back; ``implementation`` converts it (a Python snapshot into the compact
        state or back), otherwise it comes back as the implementation that took it.  O(N)."""
        engine = super().restore(blob)
        if implementation is None or (implementation == "auto" and engine.implementation == "compact"):
            return engine
        assert isinstance(engine, QHierEngine)
        state = engine.__getstate__()
        target = QHierEngine.__new__(QHierEngine, engine.query, implementation=implementation)
        target.__setstate__(state)
        return target

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "relations" in state:  # a snapshot of the compact implementation
            state = registry.python_state(state)
        self.query = state["query"]
        self.semantics = state["semantics"]
        self.evaluated = _core(self.query) if self.semantics == "set" else self.query
        self._base = {rel: {} for rel in self.query.relations}
        self._tracking = False
        self._delta = {}
        self.consolidate = state.get("consolidate", "auto")
        self._build()
        self._apply([Update(rel, row, m) for rel, rows in state["base"].items() for row, m in rows.items()])
        self._tracking = state["tracking"]
        self._delta = dict(state["delta"])
        self._updates = state["updates"]
        self._folded = list(state.get("folded", [0, 0, None]))


def _core(query: Query) -> Query:
    """The homomorphic core with the free variables fixed (Chandra–Merlin; 002 §2).

    Under set semantics ``φ(D) = core(φ)(D)``, so the core is what the engine
    evaluates; it is q-hierarchical whenever φ is (subqueries are).
    """
    from ivm.query.core import core

    return core(query).query
