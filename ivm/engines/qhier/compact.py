"""Compact state for the q-hierarchical engine: typed arrays the cyclic collector never walks.

The same algorithm as :class:`ivm.engines.qhier.engine.QHierEngine` (Berkholz et al.,
PODS'17, Thm 3.2: O(1) expected time per single-tuple update, O(1) count and
Boolean answer, O(|free|) = constant enumeration delay; 002 §3, §6), with the
item trie and the base relations kept by the compiled kernel
``ivm/engines/qhier/_qhier_kernel.pyx`` as rows of C arrays: int ids instead of object
references, free lists for deleted rows, and value→item maps that are hash
indexes of 32-bit row ids (a leaf's rows are the slots of its hash table
itself).  Nothing in the state is a Python object per tuple, so the cyclic
garbage collector's cost no longer grows with the state (with the reference,
67% of the update time at 4·10^5 tuples was generation-2 collections walking
the items), and the state takes about 40-75 bytes per integer tuple instead
of about 400 (``stats()["bytes_per_tuple"]``).

``QHierEngine(query, implementation="auto")`` builds this engine when the kernel
is compiled (``pip install -e .`` builds it; without a C compiler "auto" falls
back to the Python reference and "compact" raises :class:`ImportError`).  The
plan (q-trees, atom occurrences, free nodes in document order) is the
reference's; only the state differs.  Two documented differences, both about
value identity, not answers: values are int64 codes, so a ``bool`` or an
integral ``float`` comes back as the ``int`` it equals (the reference returns
the first object it saw), and an int64 overflow of a weight or multiplicity
moves the engine onto the Python reference for the rest of its life
(:meth:`QHierCompactEngine.choice` says so), with the same result.

Snapshots carry the base relations as int64 arrays plus the distinct non-int
values (:meth:`QHierCompactEngine.__getstate__`); they restore without the
kernel too (into the Python reference), and :meth:`QHierEngine.restore` with
``implementation=`` converts either way.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import Any

from ivm.engines.qhier import registry
from ivm.engines.qhier.engine import (
    Consolidation,
    Implementation,
    QHierEngine,
    Semantics,
    StaleEnumeration,
    _core,
)
from ivm.engines.qhier.registry import python_state
from ivm.query.model import Query
from ivm.updates import Row, Update

try:
    from ivm.engines.qhier import _qhier_kernel as _kernel
except ImportError:  # pragma: no cover - the extension is optional
    _kernel = None


def compact_available() -> bool:
    """Whether the compiled kernel is built (``pip install -e .`` compiles it)."""
    return _kernel is not None


class QHierCompactEngine(QHierEngine):
    """q-hierarchical CQs over compact array state (Thm 3.2: O(1) update, constant delay).

    Built through ``QHierEngine(query, implementation="compact")`` (or
    ``"auto"``); same parameters, results and protocol as the reference.
    State: per q-tree node one pool of item rows (parent id, value code,
    support, weight, multiplicities, children sums; ``lw``, ``fw`` and fit-list
    links for free nodes; ``fsum`` and list heads for their children), per
    relation a table of rows and multiplicities (or, under bag semantics, for a
    relation with one plain occurrence, the trie alone), each with a hash index
    of row ids and 32-bit hashes (a leaf node's rows are the slots of its hash
    table); rows grow by x1.5, indexes by x2, deleted rows are reused.
    """

    def __init__(
        self,
        query: Query,
        semantics: Semantics = "bag",
        consolidate: Consolidation = "auto",
        implementation: Implementation = "compact",
    ) -> None:
        if _kernel is None:
            raise ImportError("ivm.engines.qhier._qhier_kernel is not built (pip install -e . compiles it)")
        super().__init__(query, semantics, consolidate, implementation="python")
        self.implementation = "compact"
        self._make_kernel(None)

    def _make_kernel(self, values: list[Any] | None) -> None:
        """Translate the reference's plan (``_build``) into kernel pools and occurrences; O(|φ|)."""
        assert _kernel is not None
        self._fallback: str | None = None
        pools: list[Any] = []
        sentinels: list[Any] = []
        pool_of: dict[int, int] = {}
        sentinel_of: dict[int, int] = {}
        for comp in self._components:
            sentinel = _kernel.Pool(0, 1, False, True, 0, -1, (), ())
            sentinel.make_root()
            sentinel_of[comp.index] = len(pools)
            pools.append(sentinel)
            sentinels.append(sentinel)
            for node in comp.nodes:
                pool_of[id(node)] = len(pools)
                lists = node.free and bool(node.children)
                pools.append(
                    _kernel.Pool(
                        node.n_atoms,
                        len(node.children),
                        node.free,
                        lists,
                        node.slot,
                        node.fpos,
                        node.bound_slots,
                        node.free_slots,
                    )
                )
        for comp in self._components:  # a free leaf's pool relinks its fit-lists' heads in the parent's rows
            pools[pool_of[id(comp.nodes[0])]].set_parent(pools[sentinel_of[comp.index]])
            for node in comp.nodes:
                for child in node.children:
                    pools[pool_of[id(child)]].set_parent(pools[pool_of[id(node)]])
        free_nodes = []
        for node, parent_pos, comp in self._free_nodes:
            parent_pool = sentinel_of[comp.index] if parent_pos < 0 else pool_of[id(self._free_nodes[parent_pos][0])]
            free_nodes.append((pool_of[id(node)], parent_pos, parent_pool))
        arity: dict[str, int] = {}
        for atom in self.query.atoms:
            arity.setdefault(atom.relation, atom.arity)
        names = list(self.query.relations)
        relations = [_kernel.Relation(name, arity[name]) for name in names]
        nullary = [(names.index(rel), count) for rel, count in self._nullary.items()]
        kernel = _kernel.Kernel(
            pools,
            sentinels,
            [comp.free for comp in self._components],
            relations,
            [],
            free_nodes,
            self._head,
            nullary,
            self.semantics == "set",
            StaleEnumeration,
        )
        if values:
            kernel.load_values(values)
        occurrences: list[list[Any]] = []
        for ri, name in enumerate(names):
            occurrences.append(
                [
                    _kernel.Occurrence(
                        ri,
                        [pools[pool_of[id(node)]] for node in occ.path],
                        pools[sentinel_of[occ.comp.index]],
                        occ.positions,
                        occ.equal,
                        [(p, kernel.encode_value(c)) for p, c in occ.consts],
                        occ.slot,
                        occ.free_depth,
                        occ.comp.index,
                        occ.comp.free,
                    )
                    for occ in self._occurrences[name]
                ]
            )
        kernel.occurrences = occurrences
        kernel.link_virtual()
        self._kernel = kernel
        self._names = names
        # The reference's inspection interface (comp.sentinel.kids/heads/..., see _ItemView) over the pools.
        self._views: dict[tuple[int, int], _ItemView] = {}
        self._pools = pools
        self._children: dict[int, list[Any]] = {sentinel_of[c.index]: c.nodes[:1] for c in self._components}
        self._pool_of = pool_of
        for comp in self._components:
            for node in comp.nodes:
                self._children[pool_of[id(node)]] = node.children
            comp.sentinel = self._view(sentinel_of[comp.index], 0)  # type: ignore[assignment]

    def _view(self, pool: int, row: int) -> _ItemView:
        key = (pool, row)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = _ItemView(self, pool, row)
        return view

    @property
    def _base(self) -> dict[str, dict[Row, int]]:  # type: ignore[override]
        """The base relations decoded into the reference's ``{relation: {row: multiplicity}}``; O(N)."""
        return {name: self._kernel.decode_rows(i) for i, name in enumerate(self._names)}

    @_base.setter
    def _base(self, value: Any) -> None:
        pass  # the kernel holds the base relations (the reference's constructor assigns an empty dict)

    # -- updates -------------------------------------------------------------------------------

    def _count_folded(self, saved: int) -> None:
        self._kernel.updates += saved  # the kernel keeps updates_applied

    def _apply(self, updates: Sequence[Update]) -> None:
        assert _kernel is not None
        try:
            self._kernel.apply(updates)
        except _kernel.KernelOverflow as exc:
            rest = list(updates)[exc.index :]
            self._become_python("an int64 weight or multiplicity overflowed")
            QHierEngine._apply(self, rest)

    def _become_python(self, reason: str) -> None:
        """Continue on the Python reference from the same state (base relations, deltas, counters); O(N)."""
        state = self._python_state()
        self._kernel.version += 1  # open enumerations of the kernel's state are stale from here on
        self.__class__ = QHierEngine  # type: ignore[assignment]
        del self._kernel
        QHierEngine.__setstate__(self, state)
        self._fallback = reason

    def _python_state(self) -> dict[str, Any]:
        k = self._kernel
        return {
            "query": self.query,
            "semantics": self.semantics,
            "base": {name: k.decode_rows(i) for i, name in enumerate(self._names)},
            "tracking": k.tracking,
            "delta": dict(k.delta),
            "updates": k.updates,
            "consolidate": self.consolidate,
            "folded": list(self._folded),
        }

    # -- answers ---------------------------------------------------------------------------------

    def bag_count(self) -> int:
        """The sum of all answer multiplicities; O(1)."""
        return self._kernel.bag_count()

    def count(self) -> int:
        """The number of distinct answers (start free-weights, §6.5); O(1)."""
        return self._kernel.count()

    def multiplicity_of(self, row: Row) -> int:
        """The multiplicity of answer ``row`` (head order), 0 if it is no answer; O(|free|) expected."""
        return self._kernel.multiplicity_of(tuple(row))

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        """The answers with their multiplicities, O(|free|) delay (Lemma 6.2, Algorithm 1 in the kernel).

        Raises :class:`~ivm.engines.qhier.engine.StaleEnumeration` when resumed after an update.
        """
        return self._kernel.cursor()

    def drain_delta(self) -> list[tuple[Row, int]]:
        """The changes to the answer multiset since the last call (see :meth:`QHierEngine.drain_delta`)."""
        k = self._kernel
        if not k.tracking:
            k.tracking = True
            k.delta = {}
            return list(self.enumerate())
        out = list(k.delta.items())
        k.delta = {}
        return out

    def multiplicity(self, relation: str, row: Row) -> int:
        return self._kernel.multiplicity(relation, row)

    # -- protocol --------------------------------------------------------------------------------

    def state_bytes(self) -> int:
        """Allocated bytes of the state: every table's arrays and index, the interned values; O(|φ|)."""
        return self._kernel.nbytes() + sys.getsizeof(self._kernel.delta)

    def stats(self) -> dict[str, int | float]:
        k = self._kernel
        folded = self._folded
        tuples = sum(len(r) for r in k.relations)
        state = self.state_bytes()
        return {
            "batches_folded": folded[0],
            "updates_folded": folded[1],
            "updates_applied": k.updates,
            "items": k.items,
            "components": len(self._components),
            "answers": self.count(),
            "bag_count": self.bag_count(),
            "base_tuples": tuples,
            "delta_pending": len(k.delta),
            "state_bytes": state,
            "bytes_per_tuple": state / tuples if tuples else 0.0,
        }

    def choice(self) -> dict[str, Any]:
        out = super().choice()
        out["implementation"] = "compact"
        return out

    def __getstate__(self) -> dict[str, Any]:
        # The base relations as int64 arrays; the items are rebuilt from them (linear preprocessing, Thm 3.2).
        k = self._kernel
        return {
            "implementation": "compact",
            "query": self.query,
            "semantics": self.semantics,
            "values": list(k.values),
            "relations": [(name, k.relations[i].arity, *k.export_relation(i)) for i, name in enumerate(self._names)],
            "tracking": k.tracking,
            "delta": dict(k.delta),
            "updates": k.updates,
            "consolidate": self.consolidate,
            "folded": list(self._folded),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        if _kernel is None:  # no compiler here: restore into the reference
            self.__class__ = QHierEngine  # type: ignore[assignment]
            QHierEngine.__setstate__(self, state)
            return
        self.query = state["query"]
        self.semantics = state["semantics"]
        self.consolidate = state.get("consolidate", "auto")
        self._folded = list(state.get("folded", [0, 0, None]))
        self.implementation = "compact"
        self.evaluated = _core(self.query) if self.semantics == "set" else self.query
        self._tracking = False
        self._delta = {}
        self._build()
        k: Any
        if "relations" in state:
            self._make_kernel(state["values"])
            k = self._kernel
            try:
                for i, (_name, _arity, codes, mults) in enumerate(state["relations"]):
                    k.apply_codes(i, codes, mults)
            except _kernel.KernelOverflow:
                self.__class__ = QHierEngine  # type: ignore[assignment]
                del self._kernel
                QHierEngine.__setstate__(self, python_state(state))
                self._fallback = "an int64 weight or multiplicity overflowed"
                return
        else:  # a snapshot of the Python reference
            self._make_kernel(None)
            k = self._kernel
            self._apply([Update(rel, row, m) for rel, rows in state["base"].items() for row, m in rows.items()])
        if self._fallback is None:  # restored without an overflow
            k = self._kernel
            k.tracking = state["tracking"]
            k.delta = dict(state["delta"])
            k.updates = state["updates"]
        else:
            self._tracking = state["tracking"]
            self._delta = dict(state["delta"])
            self._updates = state["updates"]


class _ItemView:
    """Item ``row`` of a pool, read through the reference's :class:`~ivm.engines.qhier._Item` field names.

    For inspection only (the structural invariants of 002 §9.5-9.6 are checked
    on both implementations by the same code); ``kids`` scans the child pool,
    O(its rows).  Views are cached per (pool, row), so identities compare.
    """

    def __init__(self, engine: QHierCompactEngine, pool: int, row: int) -> None:
        self._engine = engine
        self._pool = pool
        self._row = row

    def _fields(self) -> tuple[Any, ...]:
        return self._engine._pools[self._pool].item(self._row)

    def _child_pools(self) -> list[tuple[int, int]]:
        nodes = self._engine._children[self._pool]
        return [(node.slot, self._engine._pool_of[id(node)]) for node in nodes]

    @property
    def val(self) -> Any:
        return self._engine._kernel.decode_value(self._fields()[1])

    @property
    def support(self) -> int:
        return self._fields()[2]

    @property
    def weight(self) -> int:
        return self._fields()[3]

    @property
    def lw(self) -> int:
        return self._fields()[4]

    @property
    def fw(self) -> int:
        return self._fields()[5]

    @property
    def next(self) -> _ItemView | None:
        nxt = self._fields()[7]
        return None if nxt < 0 else self._engine._view(self._pool, nxt)

    @property
    def mults(self) -> list[int] | None:
        return self._fields()[8] or None

    @property
    def sums(self) -> list[int] | None:
        return self._fields()[9] or None

    @property
    def fsums(self) -> list[int] | None:
        return self._fields()[10]

    @property
    def heads(self) -> list[_ItemView | None] | None:
        heads = self._fields()[11]
        if heads is None:
            return None
        out: list[_ItemView | None] = [None] * len(heads)
        for slot, pool in self._child_pools():
            if heads[slot] >= 0:
                out[slot] = self._engine._view(pool, heads[slot])
        return out

    @property
    def kids(self) -> list[dict[Any, _ItemView]] | None:
        children = self._child_pools()
        if not children:
            return None
        out: list[dict[Any, _ItemView]] = [{} for _ in children]
        decode = self._engine._kernel.decode_value
        for slot, pool in children:
            rows = self._engine._pools[pool]
            out[slot] = {decode(rows.item(r)[1]): self._engine._view(pool, r) for r in rows.children(self._row)}
        return out


registry.register("compact", QHierCompactEngine, compact_available)
