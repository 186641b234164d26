"""The IVM^eps triangle partitions and views in the compiled state (``ivm/engines/first_order/_triangle_kernel.pyx``).

IVM^eps (Kara et al., ICDT'19) keeps each relation of the triangle as a
heavy/light partition on its first variable with threshold ``N^eps``
(Definition 6) and three views ``V[i](x_i, x_{i+2}) = Σ K_i^h·K_{i+1}^l``
(Figure 2); an update costs O(N^max(eps,1-eps)) amortized (Theorem 3).  The
compiled state :class:`~ivm.engines.first_order._triangle_kernel.TriangleFirstOrder`
holds them in C when it is partitioned:

- per slot the forward index ``x -> ids of y`` and backward index ``y -> ids
  of x`` of both parts together (the first-order tables), a heavy flag per key
  (the domain partition: all tuples of a key in one part) and the backward
  index of the heavy part alone, ``K^h(·, y)``; ``K^l(·, y)`` is the rest of
  the backward index;
- the multiplicities other than 1 aside, per slot;
- per view an open-addressing map ``(u, w) -> 128-bit value``.

ApplyUpdate (Figure 3, generic form of the digest's §2.5), OnUpdate with the
minor rebalancing (Figure 4) and the major rebalancing (strict repartition,
views recomputed: Proposition 8 step 4) run in C with the same cost bounds as
the Python reference (:mod:`.triangle`); a batch is one call, which returns to
the engine only for what the engine decides (a major rebalancing's new
cutoffs, the adaptive engine's skew tests, a multiplicity the state does not
store).  The first-order tables are shared: the adaptive engine enters and
leaves the partitioned mode on the same state, by a major rebalancing, with
no copy.  The self-join triangle (Appendix B) uses one slot and one view of a
state built with ``selfjoin=True``.

This module holds the read interface: :class:`CompactPart` reads one slot like
a :class:`~ivm.engines.ivm_eps.partition.HeavyLightPartition` and
:class:`CompactView` one view like the reference's dict of dicts, so that
``stats()``, the §7.3 invariant checker, the metrics and the tests read the
compiled state like the Python one; :func:`python_partitions` copies it into
Python partitions (a multiplicity the state does not store moves the engine
there, exactly).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Set
from typing import Any

from ivm.engines.ivm_eps.partition import HeavyLightPartition, cutoffs

try:  # the compiled state and its event codes, present when pip install compiled the kernel
    from ivm.engines.first_order._triangle_kernel import (
        EV_BLOCKED,
        EV_CHECK,
        EV_DONE,
        EV_HIT,
        EV_MAJOR,
        LIMIT,
        TriangleFirstOrder,
    )
except ImportError:  # no compiler at install time: the engines keep Python partitions
    TriangleFirstOrder = None  # type: ignore[assignment,misc]
    LIMIT = 0
    EV_DONE, EV_MAJOR, EV_HIT, EV_CHECK, EV_BLOCKED = 0, 1, 2, 3, 4

#: the values of ``implementation`` (as :data:`ivm.engines.first_order.engine.IMPLEMENTATIONS`)
IMPLEMENTATIONS = ("auto", "compiled", "python")

View = dict[object, dict[object, int]]

__all__ = [
    "EV_BLOCKED",
    "EV_CHECK",
    "EV_DONE",
    "EV_HIT",
    "EV_MAJOR",
    "IMPLEMENTATIONS",
    "LIMIT",
    "CompactGroups",
    "CompactListing",
    "CompactPart",
    "CompactTops",
    "CompactView",
    "PartIndex",
    "compact_parts",
    "compact_views",
    "new_partitioned_state",
    "python_partitions",
    "uses_compact_partitions",
    "view_entries",
]


def uses_compact_partitions(implementation: str) -> bool:
    """Whether ``implementation`` keeps the partitions and views in the compiled state, O(1).

    The same decision as the first-order slots' (:func:`ivm.engines.first_order.engine.uses_compact`:
    one kernel holds both): ``"python"`` never (the reference); ``"compiled"`` always (an
    ImportError when the kernel is not built); ``"auto"`` when it is built.
    """
    from ivm.engines.first_order.engine import uses_compact  # here: first_order imports this package

    return uses_compact(implementation)


def new_partitioned_state(
    occurrences: Mapping[str, Sequence[tuple[int, bool]]], eps: Sequence[float], selfjoin: bool = False
) -> Any:
    """An empty partitioned state: per slot its eps and the cutoffs of N = 1 (Definition 7's empty start).

    ``selfjoin``: the one-relation triangle of Appendix B (slot 0 and view 0 only).  O(1).
    """
    state = TriangleFirstOrder(occurrences, selfjoin)
    state.set_partitioned(True)
    for i, e in enumerate(eps):
        state.set_eps(i, e)
        state.set_cutoffs(i, *cutoffs(1, e))
    state.set_threshold_base(1)
    return state


class PartIndex(Mapping[object, dict[object, int]]):
    """One index of one part of a compiled slot, read-only: ``hf``/``lf`` (``x -> {y: m}``) or
    ``hb``/``lb`` (``y -> {x: m}``).

    ``len`` of a forward index is O(1); a lookup builds the row or column, O(degree); iteration
    is O(ids), a backward one O(|K|).  For introspection, not for the update path.
    """

    __slots__ = ("forward", "heavy", "slot", "state")

    def __init__(self, state: Any, slot: int, heavy: bool, forward: bool) -> None:
        self.state, self.slot, self.heavy, self.forward = state, slot, heavy, forward

    def __getitem__(self, key: object) -> dict[object, int]:
        if self.forward:
            row = self.state.part_row(self.slot, self.heavy, key)
        else:
            row = self.state.part_column(self.slot, self.heavy, key)
        if row is None:
            raise KeyError(key)
        return row  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        if self.forward:
            return bool(self.state.degree(self.slot, True, key)) and self.state.is_heavy(self.slot, key) == self.heavy
        return self.state.part_column(self.slot, self.heavy, key) is not None

    def __iter__(self) -> Iterator[object]:
        if self.forward:
            return iter(self.state.part_keys(self.slot, self.heavy))
        return iter(self.state.column_keys(self.slot, self.heavy))

    def __len__(self) -> int:
        if not self.forward:
            return len(self.state.column_keys(self.slot, self.heavy))
        heavy = self.state.hkeys(self.slot)
        return heavy if self.heavy else self.state.nkeys(self.slot, True) - heavy  # type: ignore[no-any-return]


class CompactPart(HeavyLightPartition):
    """Slot ``slot`` of a partitioned compiled state, with the read interface of
    :class:`~ivm.engines.ivm_eps.partition.HeavyLightPartition` (Definition 6).

    ``eps`` is the slot's exponent, read as a plain attribute (the engines read it per
    batch) and written through to the state; ``strict``/``up``/``down`` are its
    cutoffs; ``hf``/``hb``/``lf``/``lb`` are :class:`PartIndex` views; sizes,
    ``nonunit``, :meth:`get` and :meth:`routes_heavy` are O(1).  Writes go through
    the state (``apply_partitioned``, ``major``): :meth:`add` and
    :meth:`strict_partition` refuse, so that no code path updates a part without
    its views.
    """

    __slots__ = ("slot", "state")

    def __init__(self, state: Any, slot: int) -> None:  # no super().__init__: the part lives in the state
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "slot", slot)
        object.__setattr__(self, "eps", state.eps(slot))

    def __setattr__(self, name: str, value: Any) -> None:
        """``eps`` is written to the state too (the state routes by it); the other attributes are fixed."""
        if name != "eps":
            raise AttributeError(f"{name} of a compiled part is read-only")
        self.state.set_eps(self.slot, value)
        object.__setattr__(self, "eps", float(value))

    @property  # type: ignore[override]
    def strict(self) -> int:
        return self.state.cutoffs(self.slot)[0]  # type: ignore[no-any-return]

    @property  # type: ignore[override]
    def up(self) -> int:
        return self.state.cutoffs(self.slot)[1]  # type: ignore[no-any-return]

    @property  # type: ignore[override]
    def down(self) -> int:
        return self.state.cutoffs(self.slot)[2]  # type: ignore[no-any-return]

    @property  # type: ignore[override]
    def hf(self) -> PartIndex:  # type: ignore[override]
        return PartIndex(self.state, self.slot, True, True)

    @property  # type: ignore[override]
    def hb(self) -> PartIndex:  # type: ignore[override]
        return PartIndex(self.state, self.slot, True, False)

    @property  # type: ignore[override]
    def lf(self) -> PartIndex:  # type: ignore[override]
        return PartIndex(self.state, self.slot, False, True)

    @property  # type: ignore[override]
    def lb(self) -> PartIndex:  # type: ignore[override]
        return PartIndex(self.state, self.slot, False, False)

    @property  # type: ignore[override]
    def hsize(self) -> int:
        return self.state.hsize(self.slot)  # type: ignore[no-any-return]

    @property  # type: ignore[override]
    def lsize(self) -> int:
        return self.state.size(self.slot) - self.state.hsize(self.slot)  # type: ignore[no-any-return]

    @property  # type: ignore[override]
    def nonunit(self) -> int:
        return self.state.nonunit(self.slot)  # type: ignore[no-any-return]

    @property
    def size(self) -> int:
        return self.state.size(self.slot)  # type: ignore[no-any-return]

    def set_threshold(self, n: int) -> None:
        """The cutoffs of threshold base ``n`` (:func:`~ivm.engines.ivm_eps.partition.cutoffs`), O(1)."""
        self.state.set_cutoffs(self.slot, *cutoffs(n, self.eps))

    def routes_heavy(self, x: object) -> bool:
        """OnUpdate's routing test (Figure 4): ``x ∈ π_X K_h or eps = 0``; O(1)."""
        return bool(self.state.is_heavy(self.slot, x)) or self.eps == 0.0

    def degree(self, x: object) -> int:
        """``|K(x, ·)|`` (the key's part holds all of it), O(1)."""
        return self.state.degree(self.slot, True, x)  # type: ignore[no-any-return]

    def max_degrees(self) -> tuple[int, int]:
        """``(largest heavy degree, largest light degree)``, O(ids) in C."""
        return self.state.max_degrees(self.slot)  # type: ignore[no-any-return]

    def add(self, heavy: bool, x: object, y: object, m: int) -> int:
        raise TypeError("a compiled part changes through its state, which keeps the views (apply_partitioned)")

    def strict_partition(self, n: int) -> None:
        raise TypeError("a compiled part is repartitioned by its state's major rebalancing (major)")

    def get(self, x: object, y: object) -> int:
        """``K(x, y)`` over both parts; O(1)."""
        return self.state.get(self.slot, x, y)  # type: ignore[no-any-return]

    def items(self) -> Iterator[tuple[object, object, int]]:
        """All tuples ``(x, y, m)`` of both parts, O(|K|)."""
        return iter(self.state.items(self.slot))

    def __reduce__(self) -> tuple[Any, ...]:
        return CompactPart, (self.state, self.slot)


class CompactView(Mapping[object, dict[object, int]]):
    """View ``index`` of a partitioned compiled state as ``{u: {w: value}}``, read-only.

    Every read builds the rows from the C map, O(entries) (introspection: the
    invariant checker and tests); :meth:`entries` is O(1) and :meth:`lookup` O(1).
    """

    __slots__ = ("index", "state")

    def __init__(self, state: Any, index: int) -> None:
        self.state, self.index = state, index

    def _rows(self) -> View:
        return self.state.view_dict(self.index)  # type: ignore[no-any-return]

    def __getitem__(self, key: object) -> dict[object, int]:
        return self._rows()[key]

    def __iter__(self) -> Iterator[object]:
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())

    def entries(self) -> int:
        """The number of ``(u, w)`` entries, O(1)."""
        return self.state.view_size(self.index)  # type: ignore[no-any-return]

    def lookup(self, u: object, w: object) -> int:
        """``V(u, w)``, O(1)."""
        return self.state.view_get(self.index, u, w)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return CompactView, (self.state, self.index)


class CompactListing(Mapping[tuple[object, object, object], int]):
    """The listing's Q^L (Figure 12: the hhh and lll triangles) of a compiled state as ``{(u0, u1, u2): m}``,
    read-only; every read builds it from C, O(|Q^L|) (introspection)."""

    __slots__ = ("state",)

    def __init__(self, state: Any) -> None:
        self.state = state

    def _items(self) -> dict[tuple[object, object, object], int]:
        return self.state.listing_dict()  # type: ignore[no-any-return]

    def __getitem__(self, key: tuple[object, object, object]) -> int:
        return self._items()[key]

    def __iter__(self) -> Iterator[tuple[object, object, object]]:
        return iter(self._items())

    def __len__(self) -> int:
        return self.state.listing_sizes()[0]  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return CompactListing, (self.state,)


class CompactGroups(Mapping[tuple[object, object], dict[object, int]]):
    """The groups of the listing view ``W[index]`` of a compiled state, ``{(x_i, x_{i+2}): {x_{i+1}: w}}``,
    read-only, built from C on every read (introspection)."""

    __slots__ = ("index", "state")

    def __init__(self, state: Any, index: int) -> None:
        self.state, self.index = state, index

    def _groups(self) -> dict[tuple[object, object], dict[object, int]]:
        return self.state.groups_dict(self.index)  # type: ignore[no-any-return]

    def __getitem__(self, key: tuple[object, object]) -> dict[object, int]:
        return self._groups()[key]

    def __iter__(self) -> Iterator[tuple[object, object]]:
        return iter(self._groups())

    def __len__(self) -> int:
        return len(self._groups())

    def __reduce__(self) -> tuple[Any, ...]:
        return CompactGroups, (self.state, self.index)


class CompactTops(Set[tuple[object, object]]):
    """The top view ``F[index]`` (the pairs with a group and a closing tuple) of a compiled state, read-only."""

    __slots__ = ("index", "state")

    def __init__(self, state: Any, index: int) -> None:
        self.state, self.index = state, index

    def __contains__(self, key: object) -> bool:
        return key in self.state.tops_set(self.index)

    def __iter__(self) -> Iterator[tuple[object, object]]:
        return iter(self.state.tops_set(self.index))

    def __len__(self) -> int:
        return len(self.state.tops_set(self.index))

    def __reduce__(self) -> tuple[Any, ...]:
        return CompactTops, (self.state, self.index)


def compact_parts(state: Any) -> tuple[CompactPart, CompactPart, CompactPart]:
    """The three slots of a partitioned state as :class:`CompactPart` values, O(1)."""
    return CompactPart(state, 0), CompactPart(state, 1), CompactPart(state, 2)


def compact_views(state: Any) -> tuple[CompactView, CompactView, CompactView]:
    """The three views of a partitioned state as :class:`CompactView` values, O(1)."""
    return CompactView(state, 0), CompactView(state, 1), CompactView(state, 2)


def view_entries(view: Mapping[object, Mapping[object, int]]) -> int:
    """Entries of a view: O(1) for a :class:`CompactView`, O(rows) for a dict of dicts."""
    if isinstance(view, CompactView):
        return view.entries()
    return sum(len(row) for row in view.values())


def python_partitions(state: Any, slots: int = 3) -> tuple[list[HeavyLightPartition], list[View]]:
    """The partitions and views of a partitioned compiled state as Python values (the reference's
    layout): each tuple in the part its key is in, the cutoffs and eps kept.  O(|D| + view entries)."""
    parts = []
    for i in range(slots):
        eps = state.eps(i)
        part = HeavyLightPartition(eps)
        part.strict, part.up, part.down = state.cutoffs(i)
        for x, y, m in state.items(i):
            heavy = state.is_heavy(i, x)
            fwd, bwd = (part.hf, part.hb) if heavy else (part.lf, part.lb)
            fwd.setdefault(x, {})[y] = m
            bwd.setdefault(y, {})[x] = m
            if heavy:
                part.hsize += 1
            else:
                part.lsize += 1
            if m != 1:
                part.nonunit += 1
        parts.append(part)
    return parts, [state.view_dict(i) for i in range(slots)]
