"""Classical first-order IVM for the triangle count.

IVM^eps §1.1 (baselines): store R, S, T and Q; a single-tuple update
``δR = {(a,b) ↦ m}`` changes the count by ``m · Σ_c S(b,c)·T(c,a)``, computed
by intersecting the two C-lists of ``b`` and ``a``.  Iterating the smaller of
the two lists, an update costs O(min(deg_S(b), deg_T(a))) ⊆ O(|D|) time;
space is O(|D|).  It is IVM^eps at eps ∈ {0, 1} (Theorem 3 special case).

The three atoms of the query are kept as three *slots* in cycle order
``(u0,u1), (u1,u2), (u2,u0)``, each an
:class:`~ivm.engines.ivm_eps.partition.AllLightPartition` (the partition at
eps = 1: key sets in both directions, multiplicities other than 1 aside).  A
relation that occurs in several atoms (the self-join ``E(a,b),E(b,c),E(c,a)``)
feeds each of its slots in turn; by the telescoping delta rule
``Q(E1',E2',E3') - Q(E1,E2,E3) = δ1 + δ2 + δ3`` with δi evaluated on the
slots already updated, this is exact.

The delta rule is written once, in :func:`apply_first_order_python` (the
reference); the adaptive IVM^eps engine (:mod:`ivm.engines.ivm_eps.adaptive`)
runs the same loop while no relation is partitioned.  The same loop compiled
with Cython (``ivm/engines/first_order/_first_order_kernel.pyx``, built by ``pip install``)
runs over the same dicts and sets without per-update interpretation;
:func:`first_order_kernel` picks one by name (``"auto"``: the compiled loop when
it is built, else the Python one) and :func:`apply_first_order` is the ``"auto"``
choice.

The compact state (``ivm/engines/first_order/_triangle_kernel.pyx``,
:class:`TriangleFirstOrder`) goes further: the three slots live in C tables
of dense integer ids (no Python set or int object per stored tuple) and a
batch is applied by one compiled call, still O(min(deg)) per update.
:func:`compact_slots` builds it and :class:`CompactSlot` exposes each of its
slots with the read interface of :class:`AllLightPartition`, so the adaptive
engine's switches, ``stats()``, the invariant checker and snapshots read it
like the key-set slots.  ``implementation="compiled"`` (and ``"auto"`` when it
is built) stores the slots compactly; ``"python"`` keeps the dicts of sets and
the reference loop.  An update the compact state cannot represent (a
multiplicity beyond ``LIMIT`` in magnitude, or not an int) moves the state to
Python slots, where the loop of :func:`first_order_kernel` continues exactly.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ivm.engines.base import Engine
from ivm.engines.ivm_eps.partition import AllLightPartition, HeavyLightPartition
from ivm.engines.memory import state_memory
from ivm.query.model import Query
from ivm.query.triangle import TriangleShape, triangle_shape
from ivm.updates import Row, Update

NEXT = (1, 2, 0)
PREV = (2, 0, 1)

#: per relation, one entry per slot it feeds, in cycle order: ``(i, flipped, lf_i, lb_i,
#: other_i, lf_{i+1}, lb_{i+2}, other_{i+1}, other_{i+2})`` (the indexes an update reads and writes)
Plan = dict[str, list[tuple[Any, ...]]]
#: a key that reached the degree cutoff: (slot, key, degree)
Hit = tuple[int, object, int]
#: the work counter the first-order loops update in place: ``[E, r, W]``, the excess E of the
#: first-order work over the partitioned estimate r per update, and the total work W of the epoch
WORK = ("excess", "rate", "spent")


def work_exceeded(excess: int, size: int) -> bool:
    """The promotion test of the work rule: the excess ``E`` has reached the buy cost ``L = |D|``.

    ``E > 0`` as well, so that an empty database never promotes.  O(1); the three
    first-order loops apply exactly this test after each update.

    >>> work_exceeded(0, 0), work_exceeded(5, 5), work_exceeded(4, 5)
    (False, True, False)
    """
    return excess > 0 and excess >= size


def first_order_plan(slots: Sequence[AllLightPartition], occurrences: Mapping[str, Sequence[tuple[int, bool]]]) -> Plan:
    """The indexes each relation's updates touch, resolved once per set of slots (see :data:`Plan`)."""
    plan: Plan = {}
    for relation, occs in occurrences.items():
        plan[relation] = [
            (
                i,
                flipped,
                slots[i].lf,
                slots[i].lb,
                slots[i].other,
                slots[NEXT[i]].lf,
                slots[PREV[i]].lb,
                slots[NEXT[i]].other,
                slots[PREV[i]].other,
            )
            for i, flipped in occs
        ]
    return plan


def apply_first_order_python(
    slots: Sequence[AllLightPartition],
    plan: Plan,
    updates: Sequence[Any],
    start: int,
    count: int,
    lo: int = -1,
    hi: int = sys.maxsize,
    hot: int = sys.maxsize,
    intern: dict[int, int] | None = None,
    work: list[int] | None = None,
) -> tuple[int, int, int, Hit | None]:
    """First-order IVM (IVM^eps §1.1) of ``updates[start:]``, in order, on the key-set slots.

    For ``δK_i = {(x, y) ↦ m}`` with ``j = i+1``, ``k = i+2`` the count changes by
    ``m · Σ_z K_j(y,z)·K_k(z,x)``: ``m·|lf_j[y] ∩ lb_k[x]|`` when neither slot
    stores a multiplicity other than 1 (set semantics), else the sum of products
    over the same intersection; both iterate the smaller set, **O(min(deg_j(y),
    deg_k(x)))** per update, then K_i changes in O(1).

    Stops after the update that makes ``|D|`` (the total over the slots) reach
    ``hi`` or fall below ``lo``, or a key reach degree ``hot`` in its slot, so
    that the caller can act between two updates (the adaptive engine's size
    invariant and skew test).  Returns ``(index of the next update, count,
    non-zero updates applied, (slot, key, degree) of a key that reached hot or
    None)``; the slots' sizes are written back.

    ``intern`` (optional) maps each int value to the one object of that value
    the slots store: a new tuple's ints are replaced by it (equal values, so the
    state is the same), and set probes then find their hits by identity instead
    of comparing two int objects.  The caller bounds it (it may be cleared at any time).

    ``work`` (optional) is the adaptive engine's work counter ``[E, r, W]``
    (:data:`WORK`, the ski-rental rule of :mod:`ivm.engines.ivm_eps.adaptive`):
    each non-zero update adds its first-order work ``w`` (the smaller of the two
    rows its intersections walk, ``min(|lf_j[y]|, |lb_k[x]|)`` summed over the
    slots the relation feeds, 0 where a row is missing) to ``W`` and sets the
    excess ``E := max(0, E + w - r)``; the loop also stops after the update that
    makes ``E ≥ |D|`` with ``E > 0`` (:func:`work_exceeded`).  O(1) more per update.
    """
    track = work is not None
    excess, rate, spent = (work[0], work[1], work[2]) if work is not None else (0, 0, 0)
    sizes = [s.lsize for s in slots]
    size = sum(sizes)
    applied = 0
    hit: Hit | None = None
    halt = False
    stop = len(updates)
    nxt = stop
    for k in range(start, stop):
        relation, row, m = updates[k]
        if not m:
            continue  # m = 0 is a no-op (digest §8 item 3)
        w = 0
        for i, flipped, f, b, o, out_f, into_b, out_o, into_o in plan[relation]:
            if flipped:
                y, x = row
            else:
                x, y = row
            # δQ = m · Σ_z K_j(y, z) · K_k(z, x)
            out = out_f.get(y)
            if out is not None:
                into = into_b.get(x)
                if into is not None:
                    if track:
                        w += min(len(out), len(into))
                    if out_o or into_o:
                        delta = 0
                        for z in out & into:
                            delta += out_o.get((y, z), 1) * into_o.get((z, x), 1)
                        count += m * delta
                    else:
                        count += m * len(out & into)
            # K_i(x, y) += m
            r = f.get(x)
            if r is not None and y in r:
                old = o.get((x, y), 1) if o else 1
                new = old + m
                if not new:
                    r.remove(y)
                    if not r:
                        del f[x]
                    c = b[y]
                    c.remove(x)
                    if not c:
                        del b[y]
                    if old != 1:
                        del o[(x, y)]
                    sizes[i] -= 1
                    size -= 1
                    if size < lo:
                        halt = True
                elif new == 1:
                    del o[(x, y)]
                else:
                    o[(x, y)] = new
            else:  # a new tuple
                if intern is not None:
                    if type(x) is int:
                        x = intern.setdefault(x, x)
                    if type(y) is int:
                        y = intern.setdefault(y, y)
                if r is None:
                    r = f[x] = {y}
                else:
                    r.add(y)
                c = b.get(y)
                if c is None:
                    b[y] = {x}
                else:
                    c.add(x)
                if m != 1:
                    o[(x, y)] = m
                sizes[i] += 1
                size += 1
                if size >= hi:
                    halt = True
                if len(r) >= hot:
                    hit, halt = (i, x, len(r)), True
        applied += 1
        if track:
            spent += w
            excess = max(0, excess + w - rate)
            if work_exceeded(excess, size):
                halt = True
        if halt:
            nxt = k + 1
            break
    for slot, n in zip(slots, sizes, strict=True):
        slot.lsize = n
    if work is not None:
        work[0], work[2] = excess, spent
    return (nxt if stop > start else start), count, applied, hit


#: the signature of :func:`apply_first_order_python` and of its compiled twin
Kernel = Callable[..., tuple[int, int, int, Hit | None]]

try:  # the Cython build of the same loop (IVM^eps App. A.1), present when pip install compiled it
    from ivm.engines.first_order._first_order_kernel import apply_first_order as apply_first_order_compiled
except ImportError:  # no compiler at install time: the Python loop is used
    apply_first_order_compiled: Kernel | None = None  # type: ignore[no-redef]

#: the values of ``implementation`` that :func:`first_order_kernel` accepts
IMPLEMENTATIONS = ("auto", "compiled", "python")


def first_order_kernel(implementation: str = "auto") -> Kernel:
    """The first-order loop by name; every choice costs O(min(deg)) per update (IVM^eps App. A.1).

    ``"python"`` is :func:`apply_first_order_python` (the reference),
    ``"compiled"`` its Cython build (an error when it was not built) and
    ``"auto"`` the compiled loop when it was built, else the Python one.

    >>> first_order_kernel("python") is apply_first_order_python
    True
    """
    if implementation == "python":
        return apply_first_order_python
    if implementation == "compiled":
        if apply_first_order_compiled is None:
            raise ImportError("ivm.engines.first_order._first_order_kernel is not built (pip install -e . compiles it)")
        return apply_first_order_compiled
    if implementation == "auto":
        return apply_first_order_compiled or apply_first_order_python
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")


#: the first-order loop ``implementation="auto"`` runs
apply_first_order: Kernel = first_order_kernel("auto")

try:  # the compact C state of the three slots (IVM^eps App. A.1), present when pip install compiled it
    from ivm.engines.first_order._triangle_kernel import LIMIT, TriangleFirstOrder
except ImportError:  # no compiler at install time: the slots stay Python dicts of sets
    TriangleFirstOrder = None  # type: ignore[assignment,misc]
    LIMIT = 0


def uses_compact(implementation: str) -> bool:
    """Whether ``implementation`` stores the slots in the compact C state (:class:`TriangleFirstOrder`).

    ``"python"``: never; ``"compiled"``: always (an ImportError when it is not
    built); ``"auto"``: when it is built.  O(1).
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    if implementation == "python":
        return False
    if TriangleFirstOrder is None:
        if implementation == "compiled":
            raise ImportError("ivm.engines.first_order._triangle_kernel is not built (pip install -e . compiles it)")
        return False
    return True


class KeySets(Mapping[object, set[object]]):
    """Read-only ``{key: set of neighbours}`` of one direction of a compact slot (``lf``/``lb``).

    ``len`` is O(1); a lookup builds the key's set, O(degree); iteration is
    O(ids).  For introspection (``stats()``, the invariant checker, tests), not
    for the update path.
    """

    __slots__ = ("forward", "slot", "state")

    def __init__(self, state: Any, slot: int, forward: bool) -> None:
        self.state, self.slot, self.forward = state, slot, forward

    def __getitem__(self, key: object) -> set[object]:
        row = self.state.row(self.slot, self.forward, key)
        if row is None:
            raise KeyError(key)
        return row

    def __contains__(self, key: object) -> bool:
        return bool(self.state.degree(self.slot, self.forward, key))

    def __iter__(self) -> Iterator[object]:
        return iter(self.state.keys(self.slot, self.forward))

    def __len__(self) -> int:
        return self.state.nkeys(self.slot, self.forward)


def compact_memory(slots: Sequence[Any], tuples: int | float) -> dict[str, int | float]:
    """``state_bytes`` and ``bytes_per_tuple`` of slots on the compact state (``{}`` for Python slots).

    The C tables, the int map and the value table of :class:`TriangleFirstOrder` (its
    ``state_bytes``; a partitioned state's heavy indexes and views included); tuples are
    the stored tuples of the three slots.  O(ids).
    """
    state = getattr(slots[0], "state", None) if slots else None
    if state is None:
        return {}
    total = state.state_bytes()
    return {"state_bytes": total, "bytes_per_tuple": round(total / tuples, 1) if tuples else 0.0}


class CompactSlot(AllLightPartition):
    """Slot ``i`` of a :class:`TriangleFirstOrder`, with the read interface of :class:`AllLightPartition`.

    The partition at eps = 1 (IVM^eps App. A.1): every key light, no heavy
    part.  ``get`` is O(1); ``lf``/``lb`` are :class:`KeySets` views; ``other``
    and ``items()`` are built on demand, O(|K|); :meth:`to_heavy_light` is O(|K|)
    (the adaptive engine's promotion).  Writes go through the state.
    """

    __slots__ = ("slot", "state")

    def __init__(self, state: Any, slot: int) -> None:  # no super().__init__: the slots live in the state
        self.state = state
        self.slot = slot
        self.eps = 1.0
        self.hf = {}
        self.hb = {}
        self.hsize = 0

    @property  # type: ignore[override]
    def lsize(self) -> int:
        return self.state.size(self.slot)

    @property  # type: ignore[override]
    def lf(self) -> KeySets:  # type: ignore[override]
        return KeySets(self.state, self.slot, True)

    @property  # type: ignore[override]
    def lb(self) -> KeySets:  # type: ignore[override]
        return KeySets(self.state, self.slot, False)

    @property  # type: ignore[override]
    def other(self) -> dict[tuple[object, object], int]:  # type: ignore[override]
        return self.state.other(self.slot)

    @property
    def nonunit(self) -> int:
        return self.state.nonunit(self.slot)

    def add(self, x: object, y: object, m: int) -> int:
        return self.state.add(self.slot, x, y, m)

    def get(self, x: object, y: object) -> int:
        return self.state.get(self.slot, x, y)

    def items(self) -> Iterator[tuple[object, object, int]]:
        return iter(self.state.items(self.slot))

    def max_degree(self) -> int:
        """The largest forward degree, O(ids) in C."""
        return self.state.max_degree(self.slot)

    def to_heavy_light(self) -> HeavyLightPartition:
        part = HeavyLightPartition(1.0)
        for x, y, m in self.state.items(self.slot):
            part.lf.setdefault(x, {})[y] = m
            part.lb.setdefault(y, {})[x] = m
        part.lsize = self.lsize
        part.nonunit = self.nonunit
        return part

    def to_key_sets(self) -> AllLightPartition:
        """The same relation as Python key sets (:class:`AllLightPartition`), O(|K|)."""
        out = AllLightPartition()
        for x, y, m in self.state.items(self.slot):
            out.add(x, y, m)
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return CompactSlot, (self.state, self.slot)


def compact_slots(
    occurrences: Mapping[str, Sequence[tuple[int, bool]]],
    parts: Sequence[AllLightPartition | HeavyLightPartition] | None = None,
) -> tuple[CompactSlot, CompactSlot, CompactSlot] | None:
    """Three :class:`CompactSlot` over a new :class:`TriangleFirstOrder`, loaded from ``parts`` if given.

    O(|D|).  None when the state is not built or a multiplicity of ``parts``
    exceeds its ``LIMIT`` (the caller keeps Python slots).
    """
    if TriangleFirstOrder is None:
        return None
    state = TriangleFirstOrder(occurrences)
    try:
        for i, part in enumerate(parts or ()):
            for x, y, m in part.items():
                state.add(i, x, y, m)
    except OverflowError:
        return None
    return CompactSlot(state, 0), CompactSlot(state, 1), CompactSlot(state, 2)


def key_set_slots(parts: Sequence[AllLightPartition]) -> tuple[AllLightPartition, AllLightPartition, AllLightPartition]:
    """The slots as Python key sets (compact slots converted, O(|D|)); others returned as they are."""
    a, b, c = (p.to_key_sets() if isinstance(p, CompactSlot) else p for p in parts)
    return a, b, c


class FirstOrderIVM(Engine):
    """First-order delta queries for the triangle count (IVM^eps §1.1): O(min degree) per update.

    >>> from ivm.query.parse import parse
    >>> e = FirstOrderIVM(parse("Q() :- R(a,b), S(b,c), T(c,a)"))
    >>> e.apply([("R", (1, 2), 2), ("S", (2, 3), 1), ("T", (3, 1), 1), ("T", (3, 1), 1)])
    >>> e.result(), e.multiplicity("R", (1, 2))
    (4, 2)
    """

    name = "first_order"

    def __init__(self, query: Query, implementation: str = "python") -> None:
        """``implementation`` picks the state and loop (:func:`uses_compact`): ``"compiled"`` the
        compact C state, ``"auto"`` it when built; the default stays the Python reference, the
        plain-Python baseline that the benchmarks measure ``auto`` against."""
        super().__init__(query)
        compact = uses_compact(implementation)  # validates the name; "compiled" needs the extension
        self.implementation = implementation
        shape = triangle_shape(query)
        assert isinstance(shape, TriangleShape)
        self.shape = shape
        # relation -> [(slot index, flipped)] in cycle order
        self._occurrences: dict[str, list[tuple[int, bool]]] = {}
        for i, edge in enumerate(shape.edges):
            self._occurrences.setdefault(edge.relation, []).append((i, edge.flipped))
        slots = compact_slots(self._occurrences) if compact else None
        self._slots: tuple[AllLightPartition, ...] = slots or (
            AllLightPartition(),
            AllLightPartition(),
            AllLightPartition(),
        )
        self._plan = None if slots else first_order_plan(self._slots, self._occurrences)
        self._count = 0
        self._updates = 0

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        shape = triangle_shape(query)
        return shape if isinstance(shape, str) else None

    def apply(self, updates: Sequence[Update]) -> None:
        """Apply the updates in order: one compiled call over the compact state, else one call of
        the Python-slot loop (:func:`first_order_kernel`); O(min(deg)) per update either way."""
        if not isinstance(updates, list | tuple):
            updates = list(updates)
        implementation = getattr(self, "implementation", "python")  # older snapshots: none set
        slot = self._slots[0]
        start = 0
        if isinstance(slot, CompactSlot):
            if implementation == "python":  # the choice was changed on a compact engine
                self._to_key_sets()
            else:
                start, self._count, applied, _, blocked = slot.state.apply(updates, 0, self._count)
                self._updates += applied
                if not blocked:
                    return
                self._to_key_sets()  # a multiplicity the compact state does not store
        kernel = first_order_kernel("python" if implementation == "python" else "auto")
        _, self._count, applied, _ = kernel(self._slots, self._plan, updates, start, self._count)
        self._updates += applied

    def _to_key_sets(self) -> None:
        """Move the compact slots to Python key sets (O(|D|)); the loop over them continues."""
        self._slots = key_set_slots(self._slots)
        self._plan = first_order_plan(self._slots, self._occurrences)

    def result(self) -> int:
        return self._count

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        if self._count:
            yield (), self._count

    def multiplicity(self, relation: str, row: Row) -> int:
        """``relation(row)`` in O(1)."""
        i, flipped = self._occurrences[relation][0]
        x, y = (row[1], row[0]) if flipped else row
        return self._slots[i].get(x, y)

    def stats(self) -> dict[str, int | float]:
        out: dict[str, int | float] = {
            "result": self._count,
            "updates_applied": self._updates,
            "state_tuples": sum(s.lsize for s in self._slots),
        }
        out.update(compact_memory(self._slots, out["state_tuples"]) or state_memory(self, int(out["state_tuples"])))
        return out
