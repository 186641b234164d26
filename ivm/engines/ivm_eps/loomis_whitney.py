"""IVM^eps for Loomis-Whitney count queries of any degree ``n ≥ 3`` (IVM^eps Appendix F, Theorem 25).

A Loomis-Whitney (LW) query of degree ``n`` has ``n`` variables ``A_1..A_n`` and ``n``
atoms; atom ``R_i`` is over every variable but ``A_{i-1}`` (indices mod ``n``):

    Q() = Σ_{a_1..a_n} R_1(a_1..a_{n-1}) · R_2(a_2..a_n) · ... · R_n(a_n, a_1..a_{n-2})

Degree 3 is the triangle count.  Theorem 25: O(|D|^{1+max(min(eps,1-eps), 1/(n-1))})
preprocessing, **O(|D|^max(eps,1-eps)) amortized update time**, O(1) answer time and
O(|D|^{1+min(eps,1-eps)}) space; Proposition 26: no O(|D|^{1/2-γ}) amortized update
with O(|D|^{1-γ}) answer time unless the OMv conjecture fails.

Reading the query.  Any atom order, variable names and column order are accepted:
the variables are put in a cyclic order ``x_0..x_{n-1}`` (order of first occurrence),
and *slot* ``i`` (the paper's ``R_{i+1}``) is the atom that misses ``x_{i-1}``; its rows
are stored in the cyclic column order ``(x_i, x_{i+1}, ..., x_{i+n-2})`` and it is
partitioned on its first column ``x_i`` (F.1: "partitions each relation R_i on A_i").
A relation named in several atoms (a self-join) keeps one copy per atom, and an
update to it is applied to each copy in turn (Appendix B, "trivial option": by
telescoping each step is an exact single-tuple update of a distinct relation).
Constants, repeated variables and private variables make a query that is not LW:
refused by name.

State (F.1): ``N`` with ``⌊N/4⌋ ≤ |D| < N``; each slot a heavy/light partition on its
first column with threshold ``N^eps`` (:class:`LWPartition`, a
:class:`~ivm.engines.ivm_eps.partition.HeavyLightPartition` over ``(key, rest of the
row)`` with one extra index per further column); the count ``Q``; and one auxiliary
view per slot,

    V_i(x_i..x_{i+n-2}) = Σ_{x_{i-1}} R_{i+1}^h · R_{i+2}^h ⋯ R_{i+n-2}^h · R_{i-1}^l

over ``R_i``'s schema: the heavy parts of all relations but ``R_i`` and ``R_{i-1}``,
and the light part of ``R_{i-1}``.  **Deviation from the printed text.**  F.1 prints
``V_i = Σ R_{i+1}^h · R_{i+2}^l ⋯ R_{i-1}^l`` (every part but the first light); its
case 2 of δQ, however, reads ``V_1`` for ``u_2 = … = u_{n-1} = h, u_n = l``, i.e.
``R_2^h ⋯ R_{n-1}^h · R_n^l``, which is the view above.  The two agree for ``n = 3``
(the triangle's ``V_RS, V_ST, V_TR``).  For ``n ≥ 4`` the printed view only covers
deltas that case 4 already computes in O(N^eps) (a light middle part), while case 2
would have to sum over every light ``A_n``-value of ``R_n`` (Θ(N) on data such as
``R_2 = {(x,y,i)}``, ``R_3 = {(y,i,z)}``, ``R_4 = {(i,z,x)}``, ``i < N``).  The view above
has the same size bound as the printed one, ``|V_i| ≤ min(|R_{i+1}^h|·(3/2)N^eps,
|R_{i-1}^l|·2N^{1-eps})``: a tuple of ``R_{i+1}^h`` fixes every variable but ``x_i``,
which ranges over the ``< (3/2)N^eps`` tuples of the light key ``x_{i-1}`` of
``R_{i-1}^l``; a tuple of ``R_{i-1}^l`` fixes every variable but ``x_{i-2}``, a heavy
key of ``R_{i-2}`` (``R_{i-2} = R_{i+1}`` when ``n = 3``).

Single-tuple update ``δR_i^r = {t ↦ m}`` (F.1 proof): ``t`` fixes every variable but
``f = x_{i-1}``; the middle slots ``R_{i+1}..R_{i+n-2}`` have their key fixed by ``t``
(so one part each), and ``R_{i-1}`` is keyed by ``f``.  With ``L_j = R_j(t, ·)`` the
list of ``f``-values of slot ``j``:

- δQ: all middle parts heavy: ``Σ_f Π L_j · R_{i-1}^h`` over ≤ 2N^{1-eps} heavy keys
  (case 1) plus ``V_i(t)`` (case 2, O(1)); some middle part light: iterate its
  < (3/2)N^eps values (cases 3, 4).  O(N^max(eps,1-eps)).
- ``r = h``: ``R_i^h`` occurs in ``V_k`` for ``k ∉ {i, i+1}``; each δV_k contains the
  light list of slot ``k-1`` (a middle slot): O(N^eps) each.
- ``r = l``: ``R_i^l`` occurs in ``V_{i+1}`` only; δV_{i+1} ranges over the heavy
  keys of ``R_{i-1}``: O(N^{1-eps}).

Every delta iterates the smallest of its lists and looks the others up, and reads
only the other slots, so it uses pre-update values.  OnUpdate (Figure 4) then keeps
``⌊N/4⌋ ≤ |D| < N`` by major rebalancing (``N := 2N`` or ``⌊N/2⌋ - 1``, strict
repartition, views recomputed, Q unchanged) or restores the loose partition of the
updated key by minor rebalancing (light key at ``(3/2)N^eps`` → heavy, heavy key
below ``N^eps/2`` → light).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from ivm.engines.base import Engine
from ivm.engines.ivm_eps.partition import HeavyLightPartition, Index, resized
from ivm.engines.ivm_eps.triangle import view_add as index_row_add  # ``index[rest][value] += m``, zeros dropped
from ivm.engines.memory import state_memory
from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (used by the doctests)
from ivm.updates import Row, Update

Tuple = tuple[Any, ...]
View = dict[Tuple, int]
#: a middle slot's list of ``f``-values: ``(slot j, {f: m} or None, is the key heavy?)``
MidList = tuple[int, dict[Any, int] | None, bool]


def view_add(view: View, entry: Tuple, m: int) -> None:
    """``V(entry) += m``, removing the entry when it becomes zero (digest §8 item 2)."""
    new = view.get(entry, 0) + m
    if new:
        view[entry] = new
    else:
        view.pop(entry, None)


def product_sum(lists: Sequence[dict[Any, int]]) -> int:
    """``Σ_f Π_l lists[l][f]``, iterating the smallest list and looking ``f`` up in the others.

    O(n · min size) (the iterate-the-smaller rule of the digest §2.4, for ``n-1`` lists).

    >>> product_sum([{1: 2, 2: 3}, {2: 5, 7: 1}])
    15
    """
    first = min(lists, key=len)
    others = [other.get for other in lists if other is not first]
    total = 0
    for f, w in first.items():
        for get in others:
            v = get(f)
            if not v:
                break
            w *= v
        else:
            total += w
    return total


class LWPartition(HeavyLightPartition):
    """One slot of an LW query partitioned on its first column (F.1, Definition 6).

    A row ``t = (t_0, ..., t_{a-1})`` of arity ``a = n - 1`` is stored in the parent
    :class:`HeavyLightPartition` as the pair ``(t_0, t[1:])``: ``hf``/``lf`` map a key to
    its rows (the degree is ``len(hf[x])``) and ``hb``/``lb`` are the index on every
    column but 0.  ``hpos[p-1]``/``lpos[p-1]`` (``1 ≤ p < a``) index every column but
    ``p``: ``t[:p] + t[p+1:] -> {t_p: m}``.  So for any row with one unknown column the
    values of that column are one dict lookup away (IVM^eps §1.1 computation model).
    Each update costs O(a); a strict repartition O(a·|K|).
    """

    __slots__ = ("arity", "hpos", "lpos")

    def __init__(self, eps: float, arity: int) -> None:
        super().__init__(eps)
        self.arity = arity
        self.hpos: list[Index] = [{} for _ in range(arity - 1)]
        self.lpos: list[Index] = [{} for _ in range(arity - 1)]

    def index(self, heavy: bool, p: int) -> Index:
        """The index on every column but ``p`` of one part: ``rest -> {t_p: m}``."""
        if p == 0:
            return self.hb if heavy else self.lb
        return (self.hpos if heavy else self.lpos)[p - 1]

    def add_row(self, heavy: bool, t: Tuple, m: int) -> int:
        """``K_r(t) += m``; returns the change in distinct tuples (+1, 0, -1); O(arity)."""
        delta = self.add(heavy, t[0], t[1:], m)
        for p, index in enumerate(self.hpos if heavy else self.lpos, start=1):
            index_row_add(index, t[:p] + t[p + 1 :], t[p], m)
        return delta

    def get_row(self, t: Tuple) -> int:
        """``K(t)`` over both parts; O(1)."""
        return self.get(t[0], t[1:])

    def rows(self, heavy: bool) -> Iterator[tuple[Tuple, int]]:
        """The rows ``(t, m)`` of one part."""
        for x, row in (self.hf if heavy else self.lf).items():
            for y, m in row.items():
                yield (x, *y), m

    def items_rows(self) -> Iterator[tuple[Tuple, int]]:
        """Every row ``(t, m)`` of both parts."""
        yield from self.rows(True)
        yield from self.rows(False)

    def strict_partition(self, n: int) -> None:
        """Strict repartition with ``θ = n^eps`` (heavy ``≥ θ``, light ``< θ``), indexes rebuilt; O(a·|K|)."""
        super().strict_partition(n)
        self.hpos = [{} for _ in range(self.arity - 1)]
        self.lpos = [{} for _ in range(self.arity - 1)]
        for heavy in (True, False):
            indexes = self.hpos if heavy else self.lpos
            for t, m in self.rows(heavy):
                for p, index in enumerate(indexes, start=1):
                    index_row_add(index, t[:p] + t[p + 1 :], t[p], m)


def lw_order(query: Query) -> tuple[tuple[str, ...], tuple[int, ...]] | str:
    """The cyclic variable order ``x_0..x_{n-1}`` and, per slot ``i``, the atom that misses ``x_{i-1}``.

    Returns the reason when ``query``'s body is not a Loomis-Whitney query.

    >>> lw_order(parse("Q() :- R4(a,b,c), R1(b,c,d), R3(d,a,b), R2(c,d,a)"))
    (('a', 'b', 'c', 'd'), (0, 1, 3, 2))
    """
    atoms = query.atoms
    n = len(atoms)
    if query.has_selections:
        shown = next(str(a) for a in atoms if a.constants)
        return f"atom {shown} has constants: a Loomis-Whitney query has none (each atom is a plain relation)"
    for atom in atoms:
        if len(set(atom.terms)) != len(atom.terms):
            return f"atom {atom} has a repeated variable: not a Loomis-Whitney query"
    if n < 3:
        return f"a Loomis-Whitney query has degree n ≥ 3 (n atoms over n variables); this one has {n} atoms"
    variables = query.variable_order()
    occurrences = {v: sum(v in a.terms for a in atoms) for v in variables}
    private = [v for v, c in occurrences.items() if c == 1]
    if private:
        return (
            f"private variable {private[0]} (in one atom only): not a Loomis-Whitney query, "
            "where every variable is in all atoms but one"
        )
    if len(variables) != n:
        return f"a Loomis-Whitney query of degree {n} has {n} variables, this one has {len(variables)}"
    missing: dict[str, int] = {}
    for k, atom in enumerate(atoms):
        if len(atom.terms) != n - 1:
            return f"atom {atom} has arity {len(atom.terms)}, not n - 1 = {n - 1}: not a Loomis-Whitney query"
        (absent,) = set(variables) - atom.variables
        if absent in missing:
            return f"variable {absent} is missing from two atoms: not a Loomis-Whitney query"
        missing[absent] = k
    order = tuple(variables)
    return order, tuple(missing[order[(i - 1) % n]] for i in range(n))


class IVMEpsLW(Engine):
    """IVM^eps for Loomis-Whitney counts of degree ``n ≥ 3`` (Appendix F, Theorem 25).

    **O(|D|^max(eps,1-eps)) amortized update time** (O(n²·N^max) per single-tuple update
    plus amortized rebalancing), O(1) answer time, O(|D|^{1+min(eps,1-eps)}) space,
    O(|D|^{1+max(min(eps,1-eps), 1/(n-1))}) preprocessing (:meth:`bulk_load`).
    ``eps = 1`` is first-order IVM (no heavy keys, every view empty), ``eps = 0`` has
    no light part.  See the module docstring for the views and the update procedure.

    >>> from ivm.query.parse import parse
    >>> e = IVMEpsLW(parse("Q() :- R1(b,c,d), R2(a,c,d), R3(a,b,d), R4(a,b,c)"), eps=0.5)
    >>> e.apply([("R1", (2, 3, 4), 1), ("R2", (1, 3, 4), 2), ("R3", (1, 2, 4), 1), ("R4", (1, 2, 3), 3)])
    >>> e.result(), list(e.enumerate()), e.stats()["degree"]
    (6, [((), 6)], 4)
    """

    name = "ivm_eps_lw"

    def __init__(self, query: Query, eps: float = 0.5) -> None:
        super().__init__(query)
        eps = self._check_eps(eps)
        shape = lw_order(query)
        assert not isinstance(shape, str)
        self.variables, slot_atoms = shape
        n = len(self.variables)
        self.n = n
        self.eps = eps
        self.slot_atoms = slot_atoms
        self.slots = tuple(LWPartition(eps, n - 1) for _ in range(n))
        self.views: tuple[View, ...] = tuple({} for _ in range(n))
        # relation -> [(slot, getter of the slot's cyclic column order from a base row)]
        self.occurrences: dict[str, list[tuple[int, itemgetter]]] = {}
        for i, k in enumerate(slot_atoms):
            atom = query.atoms[k]
            columns = [atom.terms.index(self.variables[(i + q) % n]) for q in range(n - 1)]
            self.occurrences.setdefault(atom.relation, []).append((i, itemgetter(*columns)))
        for entries in self.occurrences.values():
            entries.sort()
        # the views V_k that contain R_i^h: every k but i and i+1
        self.heavy_targets = tuple(tuple((i + d) % n for d in range(2, n)) for i in range(n))
        self.N = 1  # threshold base, ⌊N/4⌋ ≤ |D| < N (Definition 7)
        self.size = 0  # |D|: distinct tuples over all slots
        self.count = 0  # Q
        self.strict = True  # is the partition strict (just after preprocessing / a major rebalancing)?
        self.updates_applied = 0
        self.major_rebalances = 0
        self.minor_rebalances = 0
        self.minor_to_heavy = 0  # minor rebalancings that moved a light key to the heavy part
        self.tuples_moved = 0

    @staticmethod
    def _check_eps(eps: float) -> float:
        value = float(eps)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"eps must lie in [0, 1], got {eps}")
        return value

    # -- refusal and guarantees -------------------------------------------------------

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        if query.free:
            return f"a Loomis-Whitney count has no free variables; this query has ({', '.join(query.free)})"
        if query.aggregate.kind != "count":
            return f"IVM^eps for Loomis-Whitney queries maintains COUNT(*), not {query.aggregate}"
        if query.having:
            return "IVM^eps for Loomis-Whitney queries has no HAVING"
        shape = lw_order(query)
        return shape if isinstance(shape, str) else None

    @classmethod
    def guarantee(cls, query: Query, eps: float = 0.5) -> dict[str, str]:
        """Theorem 25's bounds for ``query``'s degree at this ``eps`` (N = Θ(|D|)).

        >>> g = IVMEpsLW.guarantee(parse("Q() :- R(a,b,c), S(b,c,d), T(c,d,a), U(d,a,b)"), 0.5)
        >>> g["update"], g["space"], g["preprocessing"]
        ('O(N^0.5) amortized', 'O(N^1.5)', 'O(N^1.5)')
        >>> IVMEpsLW.guarantee(parse("Q() :- R(a,b,c), S(b,c,d), T(c,d,a), U(d,a,b)"), 0.0)["preprocessing"]
        'O(N^1.33333)'
        """
        reason = cls.refuses(query)
        if reason:
            raise ValueError(reason)
        n = len(query.atoms)
        eps = cls._check_eps(eps)
        hi, lo = max(eps, 1 - eps), min(eps, 1 - eps)
        update = "O(N) amortized" if hi == 1 else f"O(N^{hi:g}) amortized"
        space = "O(N)" if lo == 0 else f"O(N^{1 + lo:g})"
        pre = f"O(N^{1 + max(lo, 1 / (n - 1)):g})"
        return {
            "class": f"Loomis-Whitney of degree {n}",
            "update": update,
            "answer": "O(1)",
            "space": space,
            "preprocessing": pre,
            "lower_bound": "Prop. 26: no O(N^{1/2-γ}) amortized update with O(N^{1-γ}) answer time unless OMv fails",
        }

    # -- the engine protocol ----------------------------------------------------------

    def apply(self, updates: Sequence[Update | tuple[str, Row, int]]) -> None:
        """Apply the updates one at a time, in order (OnUpdate, Figure 4); each copy of a
        self-joined relation in turn (Appendix B)."""
        occurrences = self.occurrences
        on_update = self.on_update
        for relation, row, m in updates:
            if not m:
                continue  # m = 0 is a no-op (digest §8 item 3)
            slots = occurrences.get(relation)
            if slots is None:
                raise KeyError(f"relation {relation!r} is not in {self.query}")
            if len(row) != self.n - 1:
                raise ValueError(f"{relation} has arity {self.n - 1}, got row {row!r}")
            for i, columns in slots:
                on_update(i, columns(row), m)
            self.updates_applied += 1

    def result(self) -> int:
        return self.count

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        if self.count:
            yield (), self.count

    def multiplicity(self, relation: str, row: Row) -> int:
        i, columns = self.occurrences[relation][0]
        return self.slots[i].get_row(columns(row))

    def stats(self) -> dict[str, int | float]:
        slots, n = self.slots, self.n
        out: dict[str, int | float] = {
            "result": self.count,
            "updates_applied": self.updates_applied,
            "degree": n,
            "eps": self.eps,
            "state_tuples": self.size,
            "threshold_base": self.N,
            "threshold": float(self.N) ** self.eps,
            "heavy_keys": sum(len(p.hf) for p in slots),
            "light_keys": sum(len(p.lf) for p in slots),
            "heavy_tuples": sum(p.hsize for p in slots),
            "light_tuples": sum(p.lsize for p in slots),
            "view_entries": sum(len(v) for v in self.views),
            "major_rebalances": self.major_rebalances,
            "minor_rebalances": self.minor_rebalances,
            "minor_to_heavy": self.minor_to_heavy,
            "minor_to_light": self.minor_rebalances - self.minor_to_heavy,
            "tuples_moved": self.tuples_moved,
            "partitioned_relations": n,
        }
        for i in range(n):
            out[f"heavy_keys_R{i + 1}"] = len(slots[i].hf)
            out[f"view_entries_V{i + 1}"] = len(self.views[i])
        out.update(state_memory(self, self.size))
        return out

    def describe(self) -> dict[str, Any]:
        """The cyclic order, each slot's atom and partition variable, the views, the guarantee."""
        n, xs, atoms = self.n, self.variables, self.query.atoms

        def part(j: int, u: str) -> str:
            return f"{atoms[self.slot_atoms[j]].relation}^{u}"

        views = []
        for i in range(n):
            factors = [part((i + d) % n, "h") for d in range(1, n - 1)] + [part((i - 1) % n, "l")]
            schema = ", ".join(xs[(i + q) % n] for q in range(n - 1))
            views.append(f"V{i + 1}({schema}) = Σ_{xs[(i - 1) % n]} {' · '.join(factors)}")
        return {
            "degree": n,
            "variables": list(xs),
            "relations": [
                {
                    "R": i + 1,
                    "atom": str(atoms[self.slot_atoms[i]]),
                    "partitioned_on": xs[i],
                    "misses": xs[(i - 1) % n],
                }
                for i in range(n)
            ],
            "views": views,
            "eps": self.eps,
            "guarantee": self.guarantee(self.query, self.eps),
        }

    # -- OnUpdate and the deltas (F.1, Figure 4) ---------------------------------------

    def on_update(self, i: int, t: Tuple, m: int) -> None:
        """OnUpdate (Figure 4) for ``δR_i = {t ↦ m}`` (``t`` in slot ``i``'s column order)."""
        part = self.slots[i]
        x = t[0]
        heavy = x in part.hf or part.eps == 0.0
        self.apply_update(i, heavy, t, m)
        self.strict = False
        n = resized(self.size, self.N)
        if n is not None:
            self.N = n
            self.rebalance_major()
        elif part.crossed(x, heavy):
            self.rebalance_minor(i, x, to_heavy=not heavy)

    def lists(self, i: int, t: Tuple) -> tuple[list[MidList], dict[Any, int] | None, dict[Any, int] | None]:
        """The lists of ``f = x_{i-1}``-values that join ``t`` in the other slots; O(n).

        Middle slot ``j = i+d`` (``1 ≤ d ≤ n-2``) has its key ``t[d]`` fixed, so its
        rows are in one part; the column of ``f`` is ``n-1-d`` and the rest of its row
        is ``t[d:] + t[:d-1]``.  Slot ``i-1`` is keyed by ``f``: its heavy and light
        lists are read from the index on every column but 0, at ``t[:-1]``.
        """
        n, slots = self.n, self.slots
        mids: list[MidList] = []
        for d in range(1, n - 1):
            j = (i + d) % n
            part = slots[j]
            key = t[d]
            rest = t[d:] + t[: d - 1]
            if key in part.hf:
                mids.append((j, part.index(True, n - 1 - d).get(rest), True))
            elif key in part.lf:
                mids.append((j, part.index(False, n - 1 - d).get(rest), False))
            else:
                mids.append((j, None, True))
        last = slots[(i - 1) % n]
        rest = t[:-1]
        return mids, last.hb.get(rest), last.lb.get(rest)

    def delta_q(self, i: int, t: Tuple, mids: list[MidList], lh: dict | None, ll: dict | None) -> int:
        """``Σ_f Π_{j≠i} R_j(t, f)`` over the skew-aware views (F.1, cases 1-4); O(N^max(eps,1-eps)).

        All middle parts heavy: the heavy keys of ``R_{i-1}`` (case 1, ≤ 2N^{1-eps}) plus
        ``V_i(t)`` (case 2, O(1)).  Some middle part light: every list is iterated from
        the smallest, which is that light list (< (3/2)N^eps; cases 3 and 4).
        """
        lists = []
        all_heavy = True
        for _, lst, heavy in mids:
            if not lst:
                return 0
            lists.append(lst)
            all_heavy = all_heavy and heavy
        total = 0
        if all_heavy:
            total = self.views[i].get(t, 0)
            if lh:
                total += product_sum([*lists, lh])
            return total
        if lh:
            total = product_sum([*lists, lh])
        if ll:
            total += product_sum([*lists, ll])
        return total

    def view_delta(
        self, k: int, i: int, t: Tuple, m: int, mids: list[MidList], lh: dict | None, ll: dict | None
    ) -> None:
        """``V_k += m · Σ_f Π_{j ∉ {i,k}} R_j^{u_j}(t, f)`` with ``u_{k-1} = l`` and ``u_j = h`` otherwise.

        The caller has routed ``t`` to the part of ``R_i`` that ``V_k`` contains.  The
        smallest list is iterated: for ``r = h`` (``k ∉ {i, i+1}``) it is at most the
        light list of the middle slot ``k-1`` (< (3/2)N^eps), for ``r = l`` (``k = i+1``)
        at most the heavy keys of ``R_{i-1}`` (≤ 2N^{1-eps}).
        """
        n = self.n
        light_slot = (k - 1) % n
        lists = []
        for j, lst, heavy in mids:
            if j == k:
                continue
            if not lst or heavy == (j == light_slot):
                return
            lists.append(lst)
        if k != (i - 1) % n:  # R_{i-1} is in the product, with its heavy part (k-1 ≠ i-1)
            if not lh:
                return
            lists.append(lh)
        first = min(lists, key=len)
        others = [other.get for other in lists if other is not first]
        view = self.views[k]
        s0 = (k - i) % n
        head, tail = t[s0:], t[: s0 - 1]
        for f, w in first.items():
            for get in others:
                v = get(f)
                if not v:
                    break
                w *= v
            else:
                view_add(view, (*head, f, *tail), m * w)

    def apply_update(self, i: int, heavy: bool, t: Tuple, m: int, count: bool = True) -> None:
        """ApplyUpdate (F.1) of ``δR_i^r = {t ↦ m}``: δQ, the views containing ``R_i^r``, then the part.

        All deltas read only the other slots (pre-update values).  O(n²·N^max(eps,1-eps)),
        i.e. O(N^max) for a fixed query.  ``count=False`` skips δQ (minor rebalancing,
        whose moves leave Q unchanged).
        """
        mids, lh, ll = self.lists(i, t)
        if count:
            self.count += m * self.delta_q(i, t, mids, lh, ll)
        if heavy:
            for k in self.heavy_targets[i]:
                self.view_delta(k, i, t, m, mids, lh, ll)
        else:
            self.view_delta((i + 1) % self.n, i, t, m, mids, lh, ll)
        self.size += self.slots[i].add_row(heavy, t, m)

    # -- rebalancing (Figure 4, F.1 "as in the triangle case") --------------------------

    def rebalance_major(self) -> None:
        """MajorRebalancing: strict repartition with the new ``N^eps``, every ``V_k`` recomputed.

        Q is unchanged.  Cost O(|D|^{1+min(eps,1-eps)}) (:meth:`recompute_views`),
        amortized O(|D|^min) over the ≥ N/4 updates between two major rebalancings.
        """
        for part in self.slots:
            part.strict_partition(self.N)
        self.recompute_views()
        self.strict = True
        self.major_rebalances += 1

    def recompute_views(self) -> None:
        """Every ``V_k`` from the current parts (F.1, preprocessing of the views).

        ``V_k`` is linear in ``R_{k+1}^h`` and in ``R_{k-1}^l``, so it is the sum of
        :meth:`view_delta` over the rows of either: over ``R_{k+1}^h`` each costs
        < (3/2)N^eps (the light list of slot ``k-1``), over ``R_{k-1}^l`` each ≤ the heavy
        keys of slot ``k-2``.  The cheaper is taken: O(N^{1+min(eps,1-eps)}).
        """
        n, slots = self.n, self.slots
        self.views = tuple({} for _ in range(n))
        for k in range(n):
            over_heavy = slots[(k + 1) % n].hsize * slots[(k - 1) % n].up
            over_light = slots[(k - 1) % n].lsize * max(1, len(slots[(k - 2) % n].hf))
            if over_heavy <= over_light:
                i, heavy = (k + 1) % n, True
            else:
                i, heavy = (k - 1) % n, False
            for t, m in slots[i].rows(heavy):
                mids, lh, ll = self.lists(i, t)
                self.view_delta(k, i, t, m, mids, lh, ll)

    def rebalance_minor(self, i: int, x: Any, to_heavy: bool) -> None:
        """MinorRebalancing: move every row of key ``x`` of slot ``i`` to the other part.

        Fewer than ``(3/2)N^eps + 1`` rows, each a delete and an insert of cost O(N^max)
        with δQ skipped (net zero): O(N^{eps+max}), amortized O(N^max) over the
        Ω(N^eps) updates to ``x`` since it last changed part (§4.1).
        """
        part = self.slots[i]
        source = part.lf if to_heavy else part.hf
        moved = list(source[x].items())  # iterate over a snapshot
        for rest, m in moved:
            t = (x, *rest)
            self.apply_update(i, not to_heavy, t, -m, count=False)
            self.apply_update(i, to_heavy, t, m, count=False)
        self.minor_rebalances += 1
        self.minor_to_heavy += to_heavy
        self.tuples_moved += len(moved)

    # -- the adaptive wrapper's protocol ------------------------------------------------

    def max_degree(self) -> int:
        """The largest degree of a partition key over all slots; O(#keys)."""
        return max((len(row) for p in self.slots for fwd in (p.hf, p.lf) for row in fwd.values()), default=0)

    def set_eps(self, eps: float) -> None:
        """Set the exponent and run a major rebalancing (strict repartition with the current N,
        views recomputed); the result is unchanged.  O(|D|^{1+min(eps,1-eps)})."""
        self.eps = self._check_eps(eps)
        for part in self.slots:
            part.eps = self.eps
        self.rebalance_major()

    # -- preprocessing (F.1 proof of Theorem 25) ----------------------------------------

    def bulk_load(self, updates: Iterable[Update | tuple[str, Row, int]]) -> None:
        """Preprocessing: load a whole database into an empty engine.

        ``N = 2|D| + 1``, every slot strictly partitioned with ``θ = N^eps``, the views
        computed (:meth:`recompute_views`, O(N^{1+min(eps,1-eps)})), and Q as
        ``Σ_{t ∈ R_1} R_1(t) · δ(t)`` with :meth:`delta_q`, each lists' intersection
        iterated from its smallest list: a generic join whose last step is worst-case
        optimal, O(N^{n/(n-1)}) (the FAQ-width of Q is n/(n-1)).  In all
        O(|D|^{1+max(min(eps,1-eps), 1/(n-1))}) (Theorem 25).  A non-empty engine falls
        back to :meth:`apply`.
        """
        if self.size:
            self.apply(list(updates))
            return
        n = self.n
        slot_rows: list[dict[Tuple, int]] = [{} for _ in range(n)]
        applied = 0
        for relation, row, m in updates:
            slots = self.occurrences.get(relation)
            if slots is None:
                raise KeyError(f"relation {relation!r} is not in {self.query}")
            if len(row) != n - 1:
                raise ValueError(f"{relation} has arity {n - 1}, got row {row!r}")
            for i, columns in slots:
                t = columns(row)
                slot_rows[i][t] = slot_rows[i].get(t, 0) + m
            applied += 1
        total = 0
        for i, rows in enumerate(slot_rows):
            for t, m in rows.items():
                if m:
                    self.slots[i].add_row(False, t, m)
                    total += 1
        self.size = total
        self.N = 2 * total + 1
        for part in self.slots:
            part.strict_partition(self.N)
        self.recompute_views()
        count = 0
        for t, m in self.slots[0].items_rows():
            mids, lh, ll = self.lists(0, t)
            count += m * self.delta_q(0, t, mids, lh, ll)
        self.count = count
        self.updates_applied += applied
        self.strict = True


if __name__ == "__main__":  # pragma: no cover
    import doctest

    doctest.testmod()
