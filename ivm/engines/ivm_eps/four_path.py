"""IVM^eps for the 4-path count ``Q() = Σ R(a)·S(a,b)·T(b,c)·U(c)`` (IVM^eps Appendix G, Theorem 27).

Theorem 27: O(|D|^{1+min(eps,1-eps)}) preprocessing, **O(|D|^max(eps,1-eps))
amortized update time**, O(1) answer time and O(|D|^{1+min(eps,1-eps)}) space
(the end of G.3's proof prints ``1+max``; the theorem and Figure 14 say ``1+min``).
Proposition 28: at eps = 1/2 the update time is optimal unless OMv fails.

State (App. G.1):

- R and U are not partitioned.
- S is partitioned on **both** of its variables (Definition 17, a *refined*
  partition): the part ``S_{s_A s_B}`` holds the tuples whose A-value has status
  ``s_A`` and whose B-value has status ``s_B``, the status of a value being heavy
  or light by its degree in the whole of S with threshold ``θ = N^eps``.  T is
  partitioned likewise on B and C into ``T_{t_B t_C}``.  A value's status is one
  per variable: all tuples of an A-value share ``s_A`` (read from the part
  indexes: ``α`` is heavy on A iff ``α ∈ π_A S_hl ∪ π_A S_hh``).
- Q is one number, the sum of the 16 skew-aware views
  ``Q_{s_A s_B t_B t_C} = Σ R(a)·S_{s_A s_B}(a,b)·T_{t_B t_C}(b,c)·U(c)``,
  none of which is materialized.
- The auxiliary views of Figure 14 (17 with the instantiations of ``s_A``, ``t_B``,
  ``t_C``): ``V_{RS_ll}``, ``V_{RS_lh}``, ``V_{RS_hh}``, ``V_{S_ll T_lh}``,
  ``V_{S_hl T_ll}``, ``V_{S_hl T_lh}``, ``V_{S_hl T_hh}``, ``V_{S_hh T_lh}``,
  ``V_{T_ll U}``, ``V_{T_hl U}``, ``V_{T_hh U}``, the indicator projections
  ``V_{T_h} = ∃_B T_hl`` and ``V_{S_h} = ∃_B S_lh`` (Definition 29),
  ``V_{RS_hl T_hl}``, ``V_{RS_ll T_lh}``, ``V_{S_lh T_lh U}`` and ``V_{S_hl T_ll U}``.
  The two indicator projections are the key sets of the B-indexes of ``T_hl`` and
  ``S_lh`` (membership O(1), keys enumerable, as in the computation model of §1.1),
  so they are always exact; the views defined through them are set or cleared
  when a B-value enters or leaves them.

The update procedures are Figure 15 (δR) and Figure 16 (δS); those for U and T are
"analogous" (G.4).  They are implemented once, on a *side* (:class:`_Side`) that
names the relations and views as Figures 15/16 do; the mirror side reads the
query backwards (``R ↔ U``, ``S(a,b) ↔ T(b,c)`` transposed, ``a ↔ c``), under
which Figure 14 maps onto itself: ``V_{RS_ll} ↔ V_{T_ll U}``,
``V_{RS_{s_A h}} ↔ V_{T_{h t_C} U}``, ``V_{S_ll T_lh} ↔ V_{S_hl T_ll}``,
``V_{S_hl T_lh} ↔ V_{S_hl T_lh}``, ``V_{S_hl T_hh} ↔ V_{S_hh T_lh}``,
``V_{T_h} ↔ V_{S_h}``, ``V_{RS_hl T_hl} ↔ V_{S_lh T_lh U}`` and
``V_{RS_ll T_lh} ↔ V_{S_hl T_ll U}``.  So δU is Figure 15 and δT is Figure 16 on
the mirror side.  Differences from the printed figures (all checked against a
brute force by the tests):

- Figure 16 omits two maintenance steps: an update to ``S_hl`` at ``(α, β)``
  changes ``V_{RS_hl T_hl}(β)`` by ``R(α)·m·V_{T_h}(β)`` (O(1)), and a B-value
  ``β`` entering ``π_B S_lh`` sets ``V_{S_lh T_lh U}(β) = Σ_c T_lh(β,c)·U(c)``
  (O(N^min): ``T_lh`` is light on B and heavy on C), leaving it clears the entry.
  Line 13 writes the indicator as ``V_{S_h}(β) += δS_lh``; it is kept 0/1 here.
- Lines 3 and 6 of Figure 16 and line 18 read ``V_{T_ll U}(β)`` and
  ``V_{T_hh U}(β)`` instead of iterating ``T_ll(β,·)`` / ``T_hh(β,·)``: O(1).
- Every ``Σ_b`` of two maps iterates the smaller one (never worse than the paper).

OnUpdate (Figure 4, adapted to refined partitions as Figure 10 of App. D.6):
route the update to the part given by the statuses of its two values (a value
new to the relation is light, or heavy when eps = 0), apply it, then keep the
size invariant ``⌊N/4⌋ ≤ |D| < N`` by **major rebalancing** (``N := 2N`` or
``N := ⌊N/2⌋ - 1``, strict repartition of S and T, views recomputed in
O(N^{1+min(eps,1-eps)}), G.5) or restore the loose partition of each of the two
values of the updated tuple by **minor rebalancing** (Figure 11: a light value
whose degree reaches ``3/2·N^eps`` moves to heavy, a heavy value whose degree
falls below ``1/2·N^eps`` moves to light; every tuple of the value is deleted from
its part and inserted into the other, each move an update of Figure 16 without
δQ, whose net change is zero).  ``|D| = |R| + |S| + |T| + |U|`` counts distinct
stored tuples.

Query forms accepted: four atoms whose join variables form the path
``R(a), S(a,b), T(b,c), U(c)`` (any atom order, any variable and relation names).
Variables private to one atom are aggregated away: an atom's stored relation is
``Σ_{private} K`` keyed by its join variables, updated in O(1) per base update
(App. G, "extended by non-join variables").  Atoms with constants or repeated
variables first filter the row (:meth:`~ivm.query.model.Atom.matches`).  A
relation in several atoms (a self-join) keeps one copy per atom, and an update
to it is applied to each copy in turn: each step is an exact single-tuple update
of a distinct relation (App. B, "trivial option").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ivm.engines.base import Engine
from ivm.engines.ivm_eps.partition import Index, cutoffs, entry_add, index_add, resized
from ivm.engines.memory import state_memory
from ivm.query.model import Atom, Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.updates import Row, Update

__all__ = ["FLIP", "HH", "HL", "LH", "LL", "PART_NAMES", "IVMEps4Path", "PathRoles", "RefinedPartition", "path_roles"]

#: part index ``2·[x heavy] + [y heavy]`` of a relation partitioned on its two variables (x, y)
LL, LH, HL, HH = 0, 1, 2, 3
PART_NAMES = ("ll", "lh", "hl", "hh")
#: the part index of the transposed relation ``K^t(y, x)``: ``(s_x, s_y) -> (s_y, s_x)``
FLIP = (LL, HL, LH, HH)


# -- the query shape -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathRoles:
    """Atom indices of the roles R, S, T, U and the join variables a, b, c of a 4-path count."""

    atoms: tuple[int, int, int, int]
    variables: tuple[str, str, str]


def path_roles(query: Query) -> PathRoles | str:
    """The roles of a 4-path count, or the reason ``query`` is not one.

    Read on the join variables (those in at least two atoms): two *ends* joining on
    one variable each, two *middles* joining on two, linked as a path ``a - b - c``.

    >>> path_roles(parse("Q() :- R(a), S(a,b), T(b,c), U(c)"))
    PathRoles(atoms=(0, 1, 2, 3), variables=('a', 'b', 'c'))
    >>> path_roles(parse("Q() :- T(y,z), U(z,w), S(x,y), R(x)"))  # the first end in query order plays R
    PathRoles(atoms=(1, 0, 2, 3), variables=('z', 'y', 'x'))
    >>> path_roles(parse("Q() :- R(a,b), S(b,c), T(c,a)"))
    'a 4-path count has four atoms, this one has 3'
    """
    if len(query.atoms) != 4:
        return f"a 4-path count has four atoms, this one has {len(query.atoms)}"
    occurs: dict[str, int] = {}
    for atom in query.atoms:
        for v in atom.variables:
            occurs[v] = occurs.get(v, 0) + 1
    joins = [frozenset(v for v in atom.variables if occurs[v] > 1) for atom in query.atoms]
    not_path = "the join variables do not form a path R(a), S(a,b), T(b,c), U(c)"
    ends = [i for i, j in enumerate(joins) if len(j) == 1]
    middles = [i for i, j in enumerate(joins) if len(j) == 2]
    if len(ends) != 2 or len(middles) != 2 or any(occurs[v] != 2 for j in joins for v in j):
        return not_path
    r, u = ends
    (a,) = joins[r]
    (c,) = joins[u]
    s = next((i for i in middles if a in joins[i]), None)
    t = next((i for i in middles if i != s), None)
    if s is None or t is None or a == c or c not in joins[t] or a in joins[t]:
        return not_path
    (b,) = joins[s] - {a}
    if joins[t] != frozenset({b, c}):
        return not_path
    return PathRoles((r, s, t, u), (a, b, c))


# -- refined partitions (Definition 17) ------------------------------------------------------------


class RefinedPartition:
    """A binary relation ``K(x, y)`` partitioned on both of its variables (Definition 17).

    ``f``/``b`` index the whole relation forward (``x -> {y: m}``) and backward
    (``y -> {x: m}``): the degree of a value is ``len(f[x])`` or ``len(b[y])`` in O(1).
    ``pf[i]``/``pb[i]`` index part ``i`` (:data:`LL` .. :data:`HH`) the same way.
    The status of a value is read from the parts: ``x`` is heavy iff it has tuples
    in ``K_hl`` or ``K_hh``.  Only non-zero entries are stored; the part dicts keep
    their identity forever (repartitioning refills them), so a transposed view
    (:class:`_Transposed`) stays valid.
    """

    __slots__ = ("b", "down", "eps", "f", "pb", "pf", "strict", "up")

    def __init__(self, eps: float) -> None:
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"eps must lie in [0, 1], got {eps}")
        self.eps = eps
        self.f: Index = {}
        self.b: Index = {}
        self.pf: list[Index] = [{}, {}, {}, {}]
        self.pb: list[Index] = [{}, {}, {}, {}]
        self.strict, self.up, self.down = cutoffs(1, eps)

    def set_threshold(self, n: int) -> None:
        """The integer cutoffs of ``θ = n^eps`` (strict ``≥ θ``, up ``≥ 3θ/2``, down ``< θ/2``)."""
        self.strict, self.up, self.down = cutoffs(n, self.eps)

    def strict_partition(self, n: int) -> None:
        """Repartition strictly with ``θ = n^eps`` in O(|K|): heavy iff degree ``≥ θ``, per variable."""
        self.set_threshold(n)
        strict = self.strict
        heavy_y = {y for y, col in self.b.items() if len(col) >= strict}
        for i in range(4):
            self.pf[i].clear()
            self.pb[i].clear()
        for x, row in self.f.items():
            hx = 2 if len(row) >= strict else 0
            for y, m in row.items():
                i = hx + (y in heavy_y)
                index_add(self.pf[i], self.pb[i], x, y, m)


class _Transposed:
    """``K^t(y, x)`` over the same dicts as a :class:`RefinedPartition` ``K(x, y)`` (no copy)."""

    __slots__ = ("b", "f", "pb", "pf", "src")

    def __init__(self, src: RefinedPartition) -> None:
        self.src = src
        self.f = src.b
        self.b = src.f
        self.pf = [src.pb[FLIP[i]] for i in range(4)]
        self.pb = [src.pf[FLIP[i]] for i in range(4)]

    @property
    def eps(self) -> float:
        return self.src.eps

    @property
    def up(self) -> int:
        return self.src.up

    @property
    def down(self) -> int:
        return self.src.down


Part = RefinedPartition | _Transposed


def _route(part: Part, x: object, y: object) -> int:
    """OnUpdate's routing (Figure 10): the part given by the statuses of ``x`` and ``y``; O(1).

    A value present in the relation keeps its status; a new value is light, or
    heavy when eps = 0 (θ = 1: every value is heavy).
    """
    pf, pb = part.pf, part.pb
    hx = (x in pf[HL] or x in pf[HH]) if x in part.f else part.eps == 0.0
    hy = (y in pb[LH] or y in pb[HH]) if y in part.b else part.eps == 0.0
    return 2 * hx + hy


# -- small helpers ---------------------------------------------------------------------------------


class _Pair:
    """A binary view ``V(a, c)`` indexed both ways: ``f[a][c]`` and ``b[c][a]``."""

    __slots__ = ("b", "f")

    def __init__(self, f: Index | None = None, b: Index | None = None) -> None:
        self.f: Index = {} if f is None else f
        self.b: Index = {} if b is None else b

    def transposed(self) -> _Pair:
        return _Pair(self.b, self.f)

    def clear(self) -> None:
        self.f.clear()
        self.b.clear()

    def __len__(self) -> int:
        return sum(len(row) for row in self.f.values())


def _dot(one: Mapping[Any, int] | None, other: Mapping[Any, int] | None) -> int:
    """``Σ_k one[k]·other[k]`` iterating the smaller map; O(min size)."""
    if not one or not other:
        return 0
    if len(one) > len(other):
        one, other = other, one
    get = other.get
    total = 0
    for k, m in one.items():
        n = get(k)
        if n:
            total += m * n
    return total


def _join_into(left: Index, right: Index, out: _Pair) -> None:
    """``out(a, c) += Σ_b left[b][a]·right[b][c]``: the pairs of the two B-indexes, O(Σ_b |left_b|·|right_b|)."""
    keys = [b for b in right if b in left] if len(left) > len(right) else [b for b in left if b in right]
    of, ob = out.f, out.b
    for b in keys:
        rrow = right[b]
        for a, s in left[b].items():
            for c, t in rrow.items():
                index_add(of, ob, a, c, s * t)


# -- one side of the state, named as in Figures 15 and 16 -------------------------------------------

_VIEW_SLOTS = (
    "RS_ll",
    "RS_lh",
    "RS_hh",
    "TU_ll",
    "TU_hl",
    "TU_hh",
    "ST_ll_lh",
    "ST_hl_ll",
    "ST_hl_lh",
    "ST_hl_hh",
    "ST_hh_lh",
    "RST_hl_hl",
    "RST_ll_lh",
    "STU_lh_lh",
    "STU_hl_ll",
)
#: Figure 14's name of each stored view (the indicator projections V_{T_h}, V_{S_h} are part indexes)
PAPER_NAMES = {
    "RS_ll": "V_RS_ll",
    "RS_lh": "V_RS_lh",
    "RS_hh": "V_RS_hh",
    "TU_ll": "V_T_ll_U",
    "TU_hl": "V_T_hl_U",
    "TU_hh": "V_T_hh_U",
    "ST_ll_lh": "V_S_ll_T_lh",
    "ST_hl_ll": "V_S_hl_T_ll",
    "ST_hl_lh": "V_S_hl_T_lh",
    "ST_hl_hh": "V_S_hl_T_hh",
    "ST_hh_lh": "V_S_hh_T_lh",
    "RST_hl_hl": "V_RS_hl_T_hl",
    "RST_ll_lh": "V_RS_ll_T_lh",
    "STU_lh_lh": "V_S_lh_T_lh_U",
    "STU_hl_ll": "V_S_hl_T_ll_U",
}
#: the view each view is read as on the mirror side (R <-> U, S <-> T^t); 2-ary views are transposed
MIRROR = {
    "RS_ll": "TU_ll",
    "RS_lh": "TU_hl",
    "RS_hh": "TU_hh",
    "TU_ll": "RS_ll",
    "TU_hl": "RS_lh",
    "TU_hh": "RS_hh",
    "ST_ll_lh": "ST_hl_ll",
    "ST_hl_ll": "ST_ll_lh",
    "ST_hl_lh": "ST_hl_lh",
    "ST_hl_hh": "ST_hh_lh",
    "ST_hh_lh": "ST_hl_hh",
    "RST_hl_hl": "STU_lh_lh",
    "STU_lh_lh": "RST_hl_hl",
    "RST_ll_lh": "STU_hl_ll",
    "STU_hl_ll": "RST_ll_lh",
}
_BINARY = frozenset({"ST_ll_lh", "ST_hl_ll", "ST_hl_lh", "ST_hl_hh", "ST_hh_lh"})


class _Side:
    """The relations and views under the names of Figures 15/16 (``R`` the end updated by Figure 15).

    ``ST_x_y`` is ``V_{S_x T_y}(a, c)`` (a :class:`_Pair`), ``RS_x`` is ``V_{RS_x}(b)``,
    ``TU_x`` is ``V_{T_x U}(b)``, ``RST_hl_hl`` is ``V_{RS_hl T_hl}(b)``, ``RST_ll_lh``
    is ``V_{RS_ll T_lh}(c)``, ``STU_lh_lh`` is ``V_{S_lh T_lh U}(b)`` and ``STU_hl_ll``
    is ``V_{S_hl T_ll U}(a)``.
    """

    __slots__ = ("R", "S", "T", "U", *_VIEW_SLOTS)

    def mirror(self) -> _Side:
        """The same state read backwards (``R ↔ U``, ``S ↔ T^t``), sharing every dict."""
        out = _Side()
        out.R, out.U = self.U, self.R
        out.S = _Transposed(self.T)
        out.T = _Transposed(self.S)
        for name, other in MIRROR.items():
            view = getattr(self, other)
            setattr(out, name, view.transposed() if name in _BINARY else view)
        return out


# -- the engine ------------------------------------------------------------------------------------


class IVMEps4Path(Engine):
    """IVM^eps for the 4-path count (Appendix G, Theorem 27).

    Guarantees (N = Θ(|D|), eps in [0, 1]): **O(|D|^max(eps,1-eps)) amortized update
    time** (Prop. 32 plus rebalancing, G.5), O(1) answer time, O(|D|^{1+min(eps,1-eps)})
    space (Prop. 31) and O(|D|^{1+min(eps,1-eps)}) preprocessing (Prop. 30; O(1) from
    the empty database, which is where this engine starts).  eps = 1 keeps every value
    light (first-order IVM, O(|D|) per update); eps = 0 every value heavy.  Refused
    (by :meth:`refuses`): queries that are not 4-path counts, free variables,
    aggregates other than COUNT(*), HAVING.

    >>> e = IVMEps4Path(parse("Q() :- R(a), S(a,b), T(b,c), U(c)"), eps=0.5)
    >>> e.apply([("R", (1,), 2), ("S", (1, 2), 1), ("T", (2, 3), 3), ("T", (2, 4), 1), ("U", (3,), 1)])
    >>> e.result(), list(e.enumerate())
    (6, [((), 6)])
    """

    name = "ivm_eps_path4"

    def __init__(self, query: Query, eps: float = 0.5) -> None:
        super().__init__(query)
        self.eps = self._check_eps(eps)
        roles = path_roles(query)
        assert isinstance(roles, PathRoles)
        self.roles = roles
        a, b, c = roles.variables
        self.atoms: tuple[Atom, ...] = query.atoms
        # per atom: its role (0 = R, 1 = S, 2 = T, 3 = U) and the positions of its join variables
        self.role_of: dict[int, int] = {k: role for role, k in enumerate(roles.atoms)}
        wanted = ((a,), (a, b), (b, c), (c,))
        self.positions: dict[int, tuple[int, ...]] = {}
        for role, k in enumerate(roles.atoms):
            terms = query.atoms[k].terms
            self.positions[k] = tuple(terms.index(v) for v in wanted[role])
        self.occurrences: dict[str, list[int]] = {}
        for k, atom in enumerate(query.atoms):
            self.occurrences.setdefault(atom.relation, []).append(k)
        self.base: dict[str, dict[Row, int]] = {atom.relation: {} for atom in query.atoms}
        self.count = 0
        self.N = 1  # threshold base, ⌊N/4⌋ ≤ |D| < N (Definition 7; N = 2|D| + 1 = 1 for the empty database)
        self.size = 0  # |D|: distinct stored tuples of R, S, T and U
        self.strict = True  # the partitions are strict (right after preprocessing or a major rebalancing)
        self.updates_applied = 0
        self.major_rebalancings = 0
        self.minor_rebalancings = 0
        self.promotions = 0  # minor rebalancings light -> heavy
        self.demotions = 0  # minor rebalancings heavy -> light
        self.tuples_moved = 0
        self.eps_changes = 0
        side = _Side()
        side.R, side.U = {}, {}
        side.S, side.T = RefinedPartition(self.eps), RefinedPartition(self.eps)
        for name in _VIEW_SLOTS:
            setattr(side, name, _Pair() if name in _BINARY else {})
        self.state = side
        self.mirror = side.mirror()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["mirror"]  # rebuilt from ``state`` (it shares every dict)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.mirror = self.state.mirror()

    @staticmethod
    def _check_eps(eps: float) -> float:
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0.0 <= float(eps) <= 1.0:
            raise ValueError(f"eps must be a number in [0, 1], got {eps!r}")
        return float(eps)

    # -- refusal and guarantees -----------------------------------------------------------------

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        if query.free:
            return f"a 4-path count has no free variables (App. G); this query has ({', '.join(query.free)})"
        if query.aggregate.kind != "count":
            return f"IVM^eps for the 4-path maintains COUNT(*), not {query.aggregate}"
        if query.having:
            return "IVM^eps for the 4-path has no HAVING"
        roles = path_roles(query)
        return roles if isinstance(roles, str) else None

    @classmethod
    def guarantee(cls, query: Query, eps: float = 0.5) -> dict[str, str]:
        """Theorem 27's bounds at this ``eps`` (N = Θ(|D|)) and Proposition 28's lower bound.

        >>> g = IVMEps4Path.guarantee(parse("Q() :- R(a), S(a,b), T(b,c), U(c)"), 0.5)
        >>> g["update"], g["space"], g["preprocessing"], g["answer"]
        ('O(N^0.5) amortized', 'O(N^1.5)', 'O(N^1.5)', 'O(1)')
        >>> IVMEps4Path.guarantee(parse("Q() :- R(a), S(a,b), T(b,c), U(c)"), 1.0)["update"]
        'O(N) amortized'
        """
        reason = cls.refuses(query)
        if reason:
            raise ValueError(reason)
        eps = cls._check_eps(eps)
        hi, lo = max(eps, 1 - eps), min(eps, 1 - eps)
        update = "O(N) amortized" if hi == 1 else f"O(N^{hi:g}) amortized"
        space = "O(N)" if lo == 0 else f"O(N^{1 + lo:g})"
        return {
            "class": "4-path count (App. G, Theorem 27)",
            "update": update,
            "answer": "O(1)",
            "space": space,
            "preprocessing": space,
            "lower_bound": "Prop. 28: no O(N^{1/2-γ}) amortized update with O(N^{1-γ}) answer time unless OMv fails",
        }

    # -- the engine protocol --------------------------------------------------------------------

    def apply(self, updates: Sequence[Update | tuple[str, Row, int]]) -> None:
        """Apply the updates one at a time, in order; each copy of a self-joined relation in turn."""
        for relation, row, m in updates:
            if not m:
                continue
            row = tuple(row)
            atoms = self.occurrences.get(relation)
            if atoms is None:
                raise KeyError(f"relation {relation!r} is not in {self.query}")
            entry_add(self.base[relation], row, m)
            for k in atoms:
                if not self.atoms[k].matches(row):
                    continue  # fails a constant or a repeated variable: contributes 0
                pos = self.positions[k]
                role = self.role_of[k]
                if role == 0:
                    self.on_update_end(self.state, row[pos[0]], m)
                elif role == 3:
                    self.on_update_end(self.mirror, row[pos[0]], m)
                elif role == 1:
                    self.on_update_middle(self.state, row[pos[0]], row[pos[1]], m)
                else:  # T(b, c) is S^t(c, b) on the mirror side
                    self.on_update_middle(self.mirror, row[pos[1]], row[pos[0]], m)
            self.updates_applied += 1

    def result(self) -> int:
        """Q, maintained as one number: O(1)."""
        return self.count

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        if self.count:
            yield (), self.count

    def multiplicity(self, relation: str, row: Row) -> int:
        return self.base[relation].get(tuple(row), 0)

    def stats(self) -> dict[str, int | float]:
        z = self.state
        out: dict[str, int | float] = {
            "result": self.count,
            "N": self.N,
            "D": self.size,
            "eps": self.eps,
            "threshold": float(self.N) ** self.eps,
            "updates_applied": self.updates_applied,
            "base_tuples": sum(len(t) for t in self.base.values()),
            "R_tuples": len(z.R),
            "U_tuples": len(z.U),
        }
        heavy = light = 0
        for rel, part, (xv, yv) in (("S", z.S, ("A", "B")), ("T", z.T, ("B", "C"))):
            for i, pname in enumerate(PART_NAMES):
                out[f"{rel}_{pname}_tuples"] = sum(len(row) for row in part.pf[i].values())
            hx = len(part.pf[HL].keys() | part.pf[HH].keys())
            hy = len(part.pb[LH].keys() | part.pb[HH].keys())
            out[f"{rel}_heavy_{xv}"] = hx
            out[f"{rel}_light_{xv}"] = len(part.f) - hx
            out[f"{rel}_heavy_{yv}"] = hy
            out[f"{rel}_light_{yv}"] = len(part.b) - hy
            heavy += hx + hy
            light += len(part.f) + len(part.b) - hx - hy
        entries = 0
        for name in _VIEW_SLOTS:
            size = len(getattr(z, name))
            out[PAPER_NAMES[name]] = size
            entries += size
        out["V_T_h"] = len(z.T.pf[HL])
        out["V_S_h"] = len(z.S.pb[LH])
        out.update(
            {
                "view_entries": entries,
                "heavy_keys": heavy,
                "light_keys": light,
                "major_rebalancings": self.major_rebalancings,
                "minor_rebalancings": self.minor_rebalancings,
                "promotions": self.promotions,
                "demotions": self.demotions,
                "tuples_moved": self.tuples_moved,
                "eps_changes": self.eps_changes,
                # the names the other IVM^eps engines export
                "threshold_base": self.N,
                "state_tuples": self.size,
                "major_rebalances": self.major_rebalancings,
                "minor_rebalances": self.minor_rebalancings,
            }
        )
        out.update(state_memory(self, int(out["base_tuples"])))
        return out

    def describe(self) -> dict[str, Any]:
        """The roles of the atoms, the partitions, the views and the guarantee (for ``explain``)."""
        a, b, c = self.roles.variables
        atoms = self.query.atoms
        r, s, t, u = (str(atoms[k]) for k in self.roles.atoms)
        return {
            "shape": "4-path count Q() = Σ R(a)·S(a,b)·T(b,c)·U(c) (App. G)",
            "roles": {"R": r, "S": s, "T": t, "U": u},
            "variables": {"a": a, "b": b, "c": c},
            "partitions": {"S": [a, b], "T": [b, c]},
            "views": [PAPER_NAMES[n] for n in _VIEW_SLOTS] + ["V_T_h", "V_S_h"],
            "eps": self.eps,
            "N": self.N,
            "guarantee": self.guarantee(self.query, self.eps),
        }

    # -- OnUpdate (Figure 4 / Figure 10) --------------------------------------------------------

    def on_update_end(self, z: _Side, alpha: object, m: int) -> None:
        """An update ``δR = {α ↦ m}`` (or ``δU`` on the mirror side), then the size invariant."""
        self.apply_end(z, alpha, m)
        self.strict = False
        self._keep_size()

    def on_update_middle(self, z: _Side, x: object, y: object, m: int) -> None:
        """An update ``δS = {(x, y) ↦ m}`` (or ``δT`` on the mirror side, ``x = c``, ``y = b``).

        Routed to the part of the statuses of ``x`` and ``y`` (Figure 10, lines 1-8), applied
        (Figure 16), then major rebalancing if the size invariant broke, else minor
        rebalancing of ``x`` and of ``y`` if their degree crossed ``3/2·N^eps`` (light)
        or ``1/2·N^eps`` (heavy) (Figure 10, lines 16-23).
        """
        part = z.S
        i = _route(part, x, y)
        self.apply_middle(z, i, x, y, m)
        self.size += index_add(part.f, part.b, x, y, m)
        self.strict = False
        if self._keep_size():
            return
        row = part.f.get(x)
        if row is not None:
            if i < HL:
                if len(row) >= part.up:
                    self.rebalance_minor(z, x, on_x=True, to_heavy=True)
            elif len(row) < part.down:
                self.rebalance_minor(z, x, on_x=True, to_heavy=False)
        col = part.b.get(y)
        if col is not None:
            if not i & 1:
                if len(col) >= part.up:
                    self.rebalance_minor(z, y, on_x=False, to_heavy=True)
            elif len(col) < part.down:
                self.rebalance_minor(z, y, on_x=False, to_heavy=False)

    def _keep_size(self) -> bool:
        """Figure 4: ``N := 2N`` when |D| = N, ``N := ⌊N/2⌋ - 1`` when |D| < ⌊N/4⌋, then MajorRebalancing."""
        n = resized(self.size, self.N)
        if n is None:
            return False
        self.N = n
        self.rebalance_major()
        return True

    # -- ApplyUpdate4Path (Figures 15 and 16) ---------------------------------------------------

    def apply_end(self, z: _Side, alpha: object, m: int) -> None:
        """Figure 15: ``δR = {α ↦ m}``; O(N^max(eps,1-eps)).

        δQ over the 16 skew-aware views (lines 3-14), with α's row in each S-part:
        ``S_ll(α,·)``, ``S_lh(α,·)`` have < 3/2·N^eps entries (α light), ``S_hh(α,·)``
        and the rows ``V_{S_x T_y h}(α,·)`` at most 2N^{1-eps} (heavy B- or C-values),
        ``S_hl(α,·)`` is joined with ``V_{T_hl U}`` over at most 2N^{1-eps} heavy
        B-values of T.  Then ``V_{RS_ll}``, ``V_{RS_lh}``, ``V_{RS_hh}``,
        ``V_{RS_hl T_hl}`` (over ``V_{T_h}``, at most 2N^{1-eps} values) and
        ``V_{RS_ll T_lh}`` (lines 16-20), and R (line 21).
        """
        S, U = z.S, z.U
        ll, lh, hl, hh = (S.pf[i].get(alpha) for i in (LL, LH, HL, HH))
        tu_ll, tu_hl, tu_hh = z.TU_ll, z.TU_hl, z.TU_hh
        delta = z.STU_hl_ll.get(alpha, 0)  # line 9: δQ_hlll
        if ll:  # lines 3 and 5 (δQ_llll, δQ_llht_C), line 4 (δQ_lllh)
            for b, s in ll.items():
                v = tu_ll.get(b, 0) + tu_hl.get(b, 0) + tu_hh.get(b, 0)
                if v:
                    delta += s * v
            delta += _dot(z.ST_ll_lh.f.get(alpha), U)
        if lh:  # lines 6-8 (δQ_lhll, δQ_lhlh through the indicator V_{S_h}, δQ_lhht_C)
            stu = z.STU_lh_lh
            for b, s in lh.items():
                v = tu_ll.get(b, 0) + stu.get(b, 0) + tu_hl.get(b, 0) + tu_hh.get(b, 0)
                if v:
                    delta += s * v
        if hl:  # line 10 (δQ_hlhl)
            delta += _dot(hl, tu_hl)
        delta += _dot(z.ST_hl_lh.f.get(alpha), U) + _dot(z.ST_hl_hh.f.get(alpha), U)  # line 11
        if hh:  # lines 12 and 14 (δQ_hhll, δQ_hhht_C), line 13 (δQ_hhlh)
            for b, s in hh.items():
                v = tu_ll.get(b, 0) + tu_hl.get(b, 0) + tu_hh.get(b, 0)
                if v:
                    delta += s * v
        delta += _dot(z.ST_hh_lh.f.get(alpha), U)
        self.count += m * delta  # line 15
        for row, view in ((ll, z.RS_ll), (lh, z.RS_lh), (hh, z.RS_hh)):  # lines 16-18
            if row:
                for b, s in row.items():
                    entry_add(view, b, m * s)
        if hl:  # line 19: V_{RS_hl T_hl}(b) += m·S_hl(α,b)·V_{T_h}(b)
            t_h = z.T.pf[HL]
            view = z.RST_hl_hl
            if len(hl) <= len(t_h):
                for b, s in hl.items():
                    if b in t_h:
                        entry_add(view, b, m * s)
            else:
                for b in t_h:
                    s = hl.get(b)
                    if s:
                        entry_add(view, b, m * s)
        row = z.ST_ll_lh.f.get(alpha)
        if row:  # line 20
            view = z.RST_ll_lh
            for c, v in row.items():
                entry_add(view, c, m * v)
        self.size += entry_add(z.R, alpha, m)  # line 21

    def apply_middle(self, z: _Side, i: int, alpha: object, beta: object, m: int, count: bool = True) -> None:
        """Figure 16: ``δS_i = {(α, β) ↦ m}`` to part ``i``; O(N^max(eps,1-eps)).

        δQ (lines 3-6) = ``R(α)·m·(V_{T_ll U}(β) + Σ_c T_lh(β,c)·U(c) + V_{T_hl U}(β) + V_{T_hh U}(β))``,
        where ``T_lh(β,·)`` has at most min(3/2·N^eps, 2N^{1-eps}) entries.  The views
        built on the part (lines 8-22) iterate ``T_ll(β,·)`` (< 3/2·N^eps),
        ``T_lh(β,·)`` (min) or ``T_hh(β,·)`` (≤ 2N^{1-eps}).  With ``count=False``
        (minor rebalancing) δQ is skipped: a move deletes and reinserts the tuple.
        """
        T, U = z.T, z.U
        r = z.R.get(alpha, 0)
        t_lh = T.pf[LH].get(beta)
        if count and r:
            v = z.TU_ll.get(beta, 0) + z.TU_hl.get(beta, 0) + z.TU_hh.get(beta, 0) + _dot(t_lh, U)
            self.count += r * m * v
        if i == HH:  # lines 9-10
            if r:
                entry_add(z.RS_hh, beta, r * m)
            if t_lh:
                view = z.ST_hh_lh
                for c, t in t_lh.items():
                    index_add(view.f, view.b, alpha, c, m * t)
        elif i == LH:  # line 12 (line 13, the indicator V_{S_h}, is the part index below)
            if r:
                entry_add(z.RS_lh, beta, r * m)
        elif i == HL:  # lines 15-18, and V_{RS_hl T_hl} (omitted in Figure 16)
            for rows, view in (
                (T.pf[LL].get(beta), z.ST_hl_ll),
                (t_lh, z.ST_hl_lh),
                (T.pf[HH].get(beta), z.ST_hl_hh),
            ):
                if rows:
                    for c, t in rows.items():
                        index_add(view.f, view.b, alpha, c, m * t)
            v = z.TU_ll.get(beta, 0)
            if v:
                entry_add(z.STU_hl_ll, alpha, m * v)
            if r and beta in T.pf[HL]:
                entry_add(z.RST_hl_hl, beta, r * m)
        else:  # lines 20-22
            if r:
                entry_add(z.RS_ll, beta, r * m)
            if t_lh:
                view = z.ST_ll_lh
                for c, t in t_lh.items():
                    index_add(view.f, view.b, alpha, c, m * t)
                    if r:
                        entry_add(z.RST_ll_lh, c, r * m * t)
        S = z.S
        if i == LH:  # line 23, and V_{S_lh T_lh U}(β) when β enters or leaves V_{S_h} = ∃_B S_lh
            before = beta in S.pb[LH]
            index_add(S.pf[LH], S.pb[LH], alpha, beta, m)
            after = beta in S.pb[LH]
            if after and not before:
                v = _dot(t_lh, U)
                if v:
                    z.STU_lh_lh[beta] = v
            elif before and not after:
                z.STU_lh_lh.pop(beta, None)
        else:  # line 23
            index_add(S.pf[i], S.pb[i], alpha, beta, m)

    # -- rebalancing (Section 4, Figures 4 and 11; G.5) ------------------------------------------

    def rebalance_minor(self, z: _Side, key: object, on_x: bool, to_heavy: bool) -> None:
        """MinorRebalancing (Figure 11): move every tuple of ``key`` to the parts of its new status.

        ``on_x``: ``key`` is a value of the first variable of ``z.S`` (moves ``S_ll ↔ S_hl``
        and ``S_lh ↔ S_hh``), else of the second (``S_ll ↔ S_lh``, ``S_hl ↔ S_hh``).
        Fewer than 3/2·N^eps + 1 tuples, each two updates of Figure 16 without δQ:
        O(N^{eps + max(eps,1-eps)}), amortized over the Ω(N^eps) updates to ``key``
        since its last move.
        """
        part = z.S
        if on_x:
            pairs = ((LL, HL), (LH, HH)) if to_heavy else ((HL, LL), (HH, LH))
        else:
            pairs = ((LL, LH), (HL, HH)) if to_heavy else ((LH, LL), (HH, HL))
        moved = 0
        for src, dst in pairs:
            rows = (part.pf if on_x else part.pb)[src].get(key)
            if not rows:
                continue
            for other, m in list(rows.items()):
                x, y = (key, other) if on_x else (other, key)
                self.apply_middle(z, src, x, y, -m, count=False)
                self.apply_middle(z, dst, x, y, m, count=False)
                moved += 1
        self.minor_rebalancings += 1
        if to_heavy:
            self.promotions += 1
        else:
            self.demotions += 1
        self.tuples_moved += moved

    def rebalance_major(self) -> None:
        """MajorRebalancing (G.5): strict repartition of S and T with ``θ = N^eps``, views recomputed.

        Q is unchanged.  Repartitioning is O(|D|); the views take O(|D|^{1+min(eps,1-eps)})
        (Prop. 30: every binary view joins a part light on B with one whose other
        variable is heavy, or the converse), amortized over the Ω(N) updates since
        the last major rebalancing.
        """
        z = self.state
        z.S.strict_partition(self.N)
        z.T.strict_partition(self.N)
        self.recompute_views()
        self.strict = True
        self.major_rebalancings += 1

    def recompute_views(self) -> None:
        """Every view of Figure 14 from the parts, in place (Prop. 30): one half per side, then ``V_{S_hl T_lh}``."""
        z = self.state
        for name in _VIEW_SLOTS:
            getattr(z, name).clear()
        for side in (z, self.mirror):
            self._build_half(side)
        _join_into(z.S.pb[HL], z.T.pf[LH], z.ST_hl_lh)

    @staticmethod
    def _build_half(z: _Side) -> None:
        """``V_{RS_ll}``, ``V_{RS_lh}``, ``V_{RS_hh}``, ``V_{S_ll T_lh}``, ``V_{S_hl T_hh}``,
        ``V_{RS_hl T_hl}``, ``V_{RS_ll T_lh}`` of side ``z`` (on the mirror side: their mirrors)."""
        S, T, R = z.S, z.T, z.R
        for i, view in ((LL, z.RS_ll), (LH, z.RS_lh), (HH, z.RS_hh)):
            for a, row in S.pf[i].items():
                r = R.get(a)
                if r:
                    for b, s in row.items():
                        entry_add(view, b, r * s)
        _join_into(S.pb[LL], T.pf[LH], z.ST_ll_lh)
        _join_into(S.pb[HL], T.pf[HH], z.ST_hl_hh)
        t_h = T.pf[HL]
        for b, col in S.pb[HL].items():
            if b in t_h:
                v = _dot(col, R)
                if v:
                    z.RST_hl_hl[b] = v
        for a, row in z.ST_ll_lh.f.items():
            r = R.get(a)
            if r:
                for c, v in row.items():
                    entry_add(z.RST_ll_lh, c, r * v)

    # -- eps at run time (the adaptive wrapper) --------------------------------------------------

    def max_degree(self) -> int:
        """The largest degree of a partition key (A and B in S, B and C in T); O(#keys)."""
        z = self.state
        return max((len(r) for index in (z.S.f, z.S.b, z.T.f, z.T.b) for r in index.values()), default=0)

    def set_eps(self, eps: float) -> None:
        """Set the exponent, then MajorRebalancing with the current N (Q unchanged); O(|D|^{1+min(eps,1-eps)})."""
        self.eps = self._check_eps(eps)
        self.state.S.eps = self.state.T.eps = self.eps
        self.rebalance_major()
        self.major_rebalancings -= 1  # a change of eps, not a size-triggered major rebalancing
        self.eps_changes += 1

    # -- for the invariant checker ---------------------------------------------------------------

    def view_tables(self) -> dict[str, dict[Any, int]]:
        """Every view of Figure 14 by its paper name, flat: unary views ``{b: v}``, binary ``{(a, c): v}``.

        The indicator projections ``V_T_h``/``V_S_h`` are read off the part indexes.
        """
        z = self.state
        out: dict[str, dict[Any, int]] = {}
        for name in _VIEW_SLOTS:
            view = getattr(z, name)
            if name in _BINARY:
                out[PAPER_NAMES[name]] = {(a, c): v for a, row in view.f.items() for c, v in row.items()}
            else:
                out[PAPER_NAMES[name]] = dict(view)
        out["V_T_h"] = dict.fromkeys(z.T.pf[HL], 1)
        out["V_S_h"] = dict.fromkeys(z.S.pb[LH], 1)
        return out
