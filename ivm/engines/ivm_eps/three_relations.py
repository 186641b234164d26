"""IVM^eps for every count query over three relations (IVM^eps Appendix H, Theorem 37).

A 3R query (Definition 33) is ``Q() = Σ R(a_R, a_RT, a_RS, a_RST) · S(a_S, a_RS, a_ST, a_RST) ·
T(a_T, a_ST, a_RT, a_RST)``; ``3R^i`` (Definition 35) has ``i`` nonempty pair-join
tuples among ``A_RT``, ``A_RS``, ``A_ST``.  Table 1 / Theorem 37:

========================  ==============  =================================  ==========  ======================
class                     preprocessing   update                             answer      space
========================  ==============  =================================  ==========  ======================
3R^3 (cyclic)             O(|D|^{3/2})    O(|D|^max(eps,1-eps)) amortized    O(1)        O(|D|^{1+min(eps,1-eps)})
3R^2 (acyclic path)       O(|D|)          O(|D|^max(eps,1-eps)) amortized    O(1)        O(|D|)
3R^0 ∪ 3R^1 (hierarch.)   O(|D|)          O(1), not amortized                O(1)        O(|D|)
========================  ==============  =================================  ==========  ======================

Proposition 38: at eps = 1/2 the 3R^2 and 3R^3 bounds are optimal unless OMv fails.

How the engine reads the query (the three atoms are *slots* 0, 1, 2 = R, S, T):

- **Non-join variables are aggregated away** (App. H.1, first paragraph): slot ``i``
  stores the projection ``K'_i = Σ_{private} K_i`` onto its join variables, updated in
  O(1) per base update (an update ``δK = {row ↦ m}`` is the update
  ``δK'_i = {π(row) ↦ m}``).  Atoms with constants or repeated variables
  (``R(a, a, 5)``) first filter the row (:meth:`Atom.matches`); rows that fail add 0.
- With ``X_0 = A_RT``, ``X_1 = A_RS``, ``X_2 = A_ST`` and ``Z = A_RST``, slot ``i`` is the
  binary relation ``K'_i(x'_i, x'_{i+1})`` over the **keys** ``x'_i = (x_i, z)``: slot 0
  (R) joins ``A_RT`` and ``A_RS``, slot 1 (S) ``A_RS`` and ``A_ST``, slot 2 (T)
  ``A_ST`` and ``A_RT``.  Slot ``i`` is partitioned on ``x'_i`` when ``X_i`` is
  nonempty (H.1.1: R on ``A_RT``, S on ``A_RS``, T on ``A_ST``).
- **Design choice:** the partition key is ``(X_i, A_RST)``, not ``X_i`` alone.  ``A_RST``
  occurs in all three relations, so ``Q = Σ_z Q_z`` over independent slices; a
  partition on the tuple ``(X_i, A_RST)`` is a partition in the sense of
  Definition 40 (a tuple of variables of K's schema), each degree is at most the
  paper's, and there are at most ``2N^{1-eps}`` heavy keys (each holds ``≥ θ/2``
  tuples).  These are the only two facts the costs of Figure 19 use (H.1.5, H.1.7).

The three plans (``stats()["plan"]``):

- ``triangle`` (3R^3, App. H.2, Figure 21): the views ``V_{S_hT_l}(a_RT, a_RS, a_RST)``
  etc. are the triangle views of Figure 2 over the keys ``x'_i``, so the state is an
  :class:`~ivm.engines.ivm_eps.triangle.IVMEpsTriangle` over the keys, updated
  through its OnUpdate (Figure 4) with major and minor rebalancing.
- ``path`` (3R^2, App. H.3, Figure 22): with ``X_k`` the empty pair-join tuple,
  ``Q = Σ U(a)·M(a,b)·P(b)`` where ``M`` is slot ``k+1`` (both pair-join tuples),
  ``U`` slot ``k`` (not partitioned, its partition tuple is empty) and ``P`` slot
  ``k+2``.  ``M`` is partitioned on ``a``, ``P`` on ``b``; the views are
  ``V_{M_l U}(b) = Σ_a U(a)·M_l(a,b)`` and ``V_{M_h P_l}(a) = Σ_b M_h(a,b)·P_l(b)``
  (paper's ``V_{R_lT}``, ``V_{R_hS_l}``), both linear.
- ``hierarchical`` (3R^0 ∪ 3R^1, App. H.4, Figure 23 after the optimization phase of
  H.1.4, which discards every partition): ``Q = Σ_z C(z)·V_AB(z)`` with
  ``V_AB(z) = Σ_{a ∋ z} A(a)·B(a)`` (paper's ``V_{RS}(a_RST)``), where ``A`` and ``B``
  share the only nonempty pair-join tuple (any two slots for 3R^0).  Every update
  is a constant number of lookups; no rebalancing ever runs.

A relation that occurs in several atoms (a self-join) keeps one copy per atom, and
an update to it is applied to each copy in turn: by telescoping each step is an
exact single-tuple update of a distinct relation (IVM^eps Appendix B, "trivial
option"), so the guarantees hold with the constant factor of the number of copies.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ivm.engines.base import Engine
from ivm.engines.ivm_eps.engine import EpsSpec, eps_for
from ivm.engines.ivm_eps.partition import HeavyLightPartition, entry_add, resized
from ivm.engines.ivm_eps.triangle import IVMEpsTriangle, intersect
from ivm.engines.memory import state_memory
from ivm.query.model import Atom, Query
from ivm.query.parse import parse
from ivm.query.three_relations import ThreeRelationClass, as_distinct_relations, three_relation_class
from ivm.updates import Row, Update

Key = tuple[Any, ...]
PLANS = {0: "hierarchical", 1: "hierarchical", 2: "path", 3: "triangle"}


def classify(query: Query) -> ThreeRelationClass:
    """The 3R class (Definition 35) of a three-atom count query, self-joins read as copies.

    >>> classify(parse("Q() :- R(a,b,c,d), S(e,c,f,d), T(g,f,b,d)")).i
    3
    >>> classify(parse("Q() :- E(a,b), E(b,c), E(c,d)")).i
    2
    """
    verdict = three_relation_class(as_distinct_relations(query))
    if not verdict:
        raise ValueError(verdict.reason)
    return verdict.witness


class IVMEps3R(Engine):
    """IVM^eps for count queries over three relations (Appendix H, Theorem 37, Table 1).

    Guarantees per class (N = Θ(|D|), eps in [0, 1]):

    - 3R^0 ∪ 3R^1 (hierarchical, Prop. 41): **O(1) non-amortized** updates, O(|D|) space;
    - 3R^2 (acyclic paths): **O(|D|^max(eps,1-eps)) amortized** updates, O(|D|) space;
    - 3R^3 (cyclic): **O(|D|^max(eps,1-eps)) amortized** updates,
      O(|D|^{1+min(eps,1-eps)}) space;

    always O(1) answer time.  Refused (by :meth:`refuses`): not three atoms, free
    variables, aggregates other than COUNT(*), HAVING.

    ``eps`` is one exponent in [0, 1] (default 1/2) or a mapping relation -> exponent
    (as :class:`~ivm.engines.ivm_eps.engine.IVMEps`).  Under ``engine="auto"`` the planner
    runs it inside :class:`~ivm.engines.ivm_eps.hybrid.SkewHybrid`, which keeps F-IVM while
    no join value is heavy and switches to this engine once one is.

    >>> e = IVMEps3R(parse("Q() :- R(a,b), S(b,c), T(c,d)"), eps=0.5)
    >>> e.apply([("R", (1, 2), 1), ("S", (2, 3), 2), ("T", (3, 4), 1), ("T", (3, 5), 1)])
    >>> e.result(), e.describe()["plan"], e.stats()["class"], e.stats()["plan_path"]
    (4, 'path', 2, 1)
    """

    name = "ivm_eps_3r"

    def __init__(self, query: Query, eps: EpsSpec = 0.5) -> None:
        super().__init__(query)
        self.eps = eps
        cls = classify(query)
        self.three_r = cls
        self.i = cls.i
        self.plan = PLANS[cls.i]
        atoms = query.atoms
        sets = [a.variables for a in atoms]
        z_vars = sorted(sets[0] & sets[1] & sets[2])
        # X_0 = A_RT (slots 0, 2), X_1 = A_RS (slots 0, 1), X_2 = A_ST (slots 1, 2)
        self.pair_join: tuple[list[str], list[str], list[str]] = (
            sorted(cls.pair_join[(0, 2)]),
            sorted(cls.pair_join[(0, 1)]),
            sorted(cls.pair_join[(1, 2)]),
        )
        self.z_vars = z_vars
        self.atoms: tuple[Atom, ...] = atoms
        # key positions of each slot in its base row: x'_i = (x_i, z) and x'_{i+1} = (x_{i+1}, z)
        self.first_pos: list[tuple[int, ...]] = []
        self.second_pos: list[tuple[int, ...]] = []
        for i, atom in enumerate(atoms):
            where = {v: atom.terms.index(v) for v in atom.variables}
            x, y = self.pair_join[i], self.pair_join[(i + 1) % 3]
            self.first_pos.append(tuple(where[v] for v in (*x, *z_vars)))
            self.second_pos.append(tuple(where[v] for v in (*y, *z_vars)))
        self.occurrences: dict[str, list[int]] = {}
        for i, atom in enumerate(atoms):
            self.occurrences.setdefault(atom.relation, []).append(i)
        self.base: dict[str, dict[Row, int]] = {a.relation: {} for a in atoms}
        self.slot_eps = tuple(eps_for(eps, a.relation) for a in atoms)
        self.count = 0
        self.updates_applied = 0
        self.N = 1  # threshold base of the path plan, ⌊N/4⌋ ≤ |D| < N (H.1.5)
        self.size = 0  # |D| of the path and hierarchical plans: distinct projected tuples
        self.strict = True
        self.major_rebalances = 0
        self.minor_rebalances = 0
        self.tuples_moved = 0
        if self.plan == "triangle":
            inner_query = parse("Q() :- K0(a,b), K1(b,c), K2(c,a)")
            spec = {f"K{i}": e for i, e in enumerate(self.slot_eps)}
            self.triangle = IVMEpsTriangle(inner_query, eps=spec, implementation="python")  # driven per key below
        elif self.plan == "path":
            (k,) = [j for j in range(3) if not self.pair_join[j]]
            self.k = k
            self.u_slot, self.m_slot, self.p_slot = k, (k + 1) % 3, (k + 2) % 3
            self.U: dict[Key, int] = {}
            self.M = HeavyLightPartition(self.slot_eps[self.m_slot])
            self.P = HeavyLightPartition(self.slot_eps[self.p_slot])
            self.V_MlU: dict[Key, int] = {}  # V_{M_l U}(b) = Σ_a U(a)·M_l(a,b)
            self.V_MhPl: dict[Key, int] = {}  # V_{M_h P_l}(a) = Σ_b M_h(a,b)·P_l(b)
        else:
            nonempty = [j for j in range(3) if self.pair_join[j]]
            j = nonempty[0] if nonempty else 1
            # A = slot j keyed by its first key x'_j, B = slot j-1 keyed by its second key x'_j,
            # C = slot j+1 keyed by z (both of its pair-join tuples are empty)
            self.a_slot, self.b_slot, self.c_slot = j, (j - 1) % 3, (j + 1) % 3
            self.A: dict[Key, int] = {}
            self.B: dict[Key, int] = {}
            self.C: dict[Key, int] = {}
            self.V_AB: dict[Key, int] = {}  # V_AB(z) = Σ_{a with z} A(a)·B(a)
            self.z_len = len(z_vars)

    # -- refusal and guarantees -------------------------------------------------------

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        if len(query.atoms) != 3:
            return f"a 3R query has exactly three atoms (Definition 33), this one has {len(query.atoms)}"
        if query.free:
            return f"3R queries are counts Q() without free variables (Definition 33); this one has {query.free}"
        if query.aggregate.kind != "count":
            return f"IVM^eps for 3R queries maintains COUNT(*), not {query.aggregate}"
        if query.having:
            return "IVM^eps for 3R queries has no HAVING"
        return None

    @classmethod
    def guarantee(cls, query: Query, eps: float = 0.5) -> dict[str, str]:
        """Table 1's row for ``query``'s class at this ``eps`` (Theorem 37).

        >>> IVMEps3R.guarantee(parse("Q() :- R(a,b), S(b,c), T(c,a)"))["update"]
        'O(N^0.5) amortized'
        >>> IVMEps3R.guarantee(parse("Q() :- R(a,b), S(b), T(c)"))["update"]
        'O(1) non-amortized'
        """
        reason = cls.refuses(query)
        if reason:
            raise ValueError(reason)
        i = classify(query).i
        hi, lo = max(eps, 1 - eps), min(eps, 1 - eps)
        if i <= 1:
            return {"class": f"3R^{i}", "update": "O(1) non-amortized", "answer": "O(1)", "space": "O(N)",
                    "preprocessing": "O(N)"}  # fmt: skip
        update = "O(N) amortized" if hi == 1 else f"O(N^{hi:g}) amortized"
        space = "O(N)" if i == 2 or lo == 0 else f"O(N^{1 + lo:g})"
        pre = "O(N)" if i == 2 else "O(N^1.5)"
        return {"class": f"3R^{i}", "update": update, "answer": "O(1)", "space": space, "preprocessing": pre}

    # -- the engine protocol ----------------------------------------------------------

    def apply(self, updates: Sequence[Update | tuple[str, Row, int]]) -> None:
        """Apply the updates one at a time, in order; each copy of a self-joined relation in turn."""
        for relation, row, m in updates:
            if not m:
                continue
            row = tuple(row)
            slots = self.occurrences.get(relation)
            if slots is None:
                raise KeyError(f"relation {relation!r} is not in {self.query}")
            entry_add(self.base[relation], row, m)
            for i in slots:
                atom = self.atoms[i]
                if not atom.matches(row):
                    continue  # fails a constant or a repeated variable: contributes 0
                x = tuple(row[p] for p in self.first_pos[i])
                y = tuple(row[p] for p in self.second_pos[i])
                self.on_update(i, x, y, m)
            self.updates_applied += 1

    def result(self) -> int:
        if self.plan == "triangle":
            return self.triangle.count
        return self.count

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        q = self.result()
        if q:
            yield (), q

    def multiplicity(self, relation: str, row: Row) -> int:
        return self.base[relation].get(tuple(row), 0)

    def stats(self) -> dict[str, int | float]:
        out: dict[str, int | float] = {
            "result": self.result(),
            "class": self.i,
            "updates_applied": self.updates_applied,
            "base_tuples": sum(len(t) for t in self.base.values()),
        }
        out.update({f"plan_{p}": int(p == self.plan) for p in ("hierarchical", "path", "triangle")})
        out["eps"] = max(self.slot_eps, key=lambda e: max(e, 1 - e))
        if self.plan == "triangle":
            t = self.triangle
            inner = t.stats()
            out.update(
                {
                    "state_tuples": t.size,
                    "threshold_base": t.N,
                    "threshold": float(t.N) ** t.parts[0].eps,
                    "heavy_keys": inner["heavy_keys"],
                    "light_keys": inner["light_keys"],
                    "heavy_tuples": inner["heavy_tuples"],
                    "light_tuples": inner["light_tuples"],
                    "view_entries": inner["view_entries"],
                    "major_rebalances": t.major_rebalances,
                    "minor_rebalances": t.minor_rebalances,
                    "tuples_moved": t.tuples_moved,
                    "partitioned_relations": 3,
                }
            )
        elif self.plan == "path":
            out.update(
                {
                    "state_tuples": self.size,
                    "threshold_base": self.N,
                    "threshold": float(self.N) ** self.M.eps,
                    "heavy_keys": len(self.M.hf) + len(self.P.hf),
                    "light_keys": len(self.M.lf) + len(self.P.lf),
                    "heavy_tuples": self.M.hsize + self.P.hsize,
                    "light_tuples": self.M.lsize + self.P.lsize,
                    "unpartitioned_tuples": len(self.U),
                    "view_entries": len(self.V_MlU) + len(self.V_MhPl),
                    "major_rebalances": self.major_rebalances,
                    "minor_rebalances": self.minor_rebalances,
                    "tuples_moved": self.tuples_moved,
                    "partitioned_relations": 2,
                }
            )
        else:
            out.update(
                {
                    "state_tuples": self.size,
                    "unpartitioned_tuples": self.size,
                    "view_entries": len(self.V_AB),
                    "major_rebalances": 0,
                    "minor_rebalances": 0,
                    "tuples_moved": 0,
                    "partitioned_relations": 0,
                }
            )
        # the triangle plan's engine counts its own state (compiled or not); the rest is Python objects
        memory = state_memory(self, int(out["base_tuples"]), exclude=("triangle",))
        if self.plan == "triangle":
            memory["state_bytes"] += int(inner.get("state_bytes", 0))
            tuples = out["base_tuples"]
            memory["bytes_per_tuple"] = round(memory["state_bytes"] / tuples, 1) if tuples else 0.0
        out.update(memory)
        return out

    def describe(self) -> dict[str, Any]:
        """The class, the plan, the pair-join tuples and the guarantee (for ``explain``)."""
        names = ("A_RT", "A_RS", "A_ST")
        return {
            "class": f"3R^{self.i}",
            "plan": self.plan,
            "pair_join": {names[j]: list(self.pair_join[j]) for j in range(3)},
            "A_RST": list(self.z_vars),
            "eps": list(self.slot_eps),
            "guarantee": self.guarantee(self.query, max(self.slot_eps, key=lambda e: max(e, 1 - e))),
        }

    # -- dispatch ---------------------------------------------------------------------

    def on_update(self, i: int, x: Key, y: Key, m: int) -> None:
        """A single-tuple update ``δK'_i = {(x'_i, x'_{i+1}) ↦ m}`` of slot ``i``'s projection."""
        if self.plan == "triangle":
            self.triangle.on_update(i, x, y, m)  # Figure 4 over the keys (App. H.2)
        elif self.plan == "path":
            self.on_update_path(i, x, y, m)
        else:
            self.on_update_hierarchical(i, x, y, m)

    # -- 3R^0 ∪ 3R^1: Figure 23 after the optimization phase (App. H.1.4, H.4) ----------

    def on_update_hierarchical(self, i: int, x: Key, y: Key, m: int) -> None:
        """O(1) non-amortized: one lookup per delta, one view entry changed (Figure 23)."""
        if i == self.a_slot:  # δA(α): δQ = m·B(α)·C(z), V_AB(z) += m·B(α)
            z = x[len(x) - self.z_len :]
            other = self.B.get(x, 0)
            if other:
                self.count += m * other * self.C.get(z, 0)
                entry_add(self.V_AB, z, m * other)
            self.size += entry_add(self.A, x, m)
        elif i == self.b_slot:  # δB(α), keyed by its second key
            z = y[len(y) - self.z_len :]
            other = self.A.get(y, 0)
            if other:
                self.count += m * other * self.C.get(z, 0)
                entry_add(self.V_AB, z, m * other)
            self.size += entry_add(self.B, y, m)
        else:  # δC(z): δQ = m·V_AB(z)
            self.count += m * self.V_AB.get(x, 0)
            self.size += entry_add(self.C, x, m)

    # -- 3R^2: Figure 22 (App. H.3) ---------------------------------------------------

    def on_update_path(self, i: int, x: Key, y: Key, m: int) -> None:
        """OnUpdate (Figure 4 shape): route by the key's part, apply, then major/minor rebalancing.

        Cost O(N^max(eps,1-eps)) per update plus rebalancing, O(N^max) amortized.
        """
        if i == self.u_slot:
            self.apply_u(y, m)  # U is keyed by its second key a = x'_{k+1}
            part, key = None, None
        elif i == self.m_slot:
            part, key = self.M, x
            self.apply_m(part.routes_heavy(x), x, y, m)
        else:
            part, key = self.P, x
            self.apply_p(part.routes_heavy(x), x, y, m)
        self.strict = False
        n = resized(self.size, self.N)
        if n is not None:
            self.N = n
            self.rebalance_major()
        elif part is not None:
            heavy = key in part.hf
            if part.crossed(key, heavy):
                self.rebalance_minor(part, key, to_heavy=not heavy)

    def apply_u(self, a: Key, m: int) -> None:
        """``δU = {a ↦ m}`` (U unpartitioned; paper's updates to T in Figure 22).

        ``δQ = m·Σ_b M(a,b)·P(b)``: if ``a`` is light, iterate ``M_l(a,·)`` (< 1.5N^eps);
        if heavy, ``V_{M_h P_l}(a)`` plus ``M_h(a,·) ⋈ P_h`` iterating the smaller of the row
        and the heavy keys of ``P`` with ``a``'s ``A_RST`` value (≤ 2N^{1-eps}).
        ``V_{M_l U}(b) += m·M_l(a,b)``: O(N^eps).
        """
        light_row = self.M.lf.get(a)
        if light_row is not None:
            p = self.P
            delta = 0
            for b, mm in light_row.items():
                pm = p.get(b, self._z_of_b(b))
                if pm:
                    delta += mm * pm
            self.count += m * delta
            view = self.V_MlU
            for b, mm in light_row.items():
                entry_add(view, b, m * mm)
        else:
            heavy_row = self.M.hf.get(a)
            if heavy_row is not None:
                delta = self.V_MhPl.get(a, 0)
                if self.P.hb:
                    delta += intersect(heavy_row, self.P.hb.get(self._z_of_a(a)))
                self.count += m * delta
        self.size += entry_add(self.U, a, m)

    def apply_m(self, heavy: bool, a: Key, b: Key, m: int, count: bool = True) -> None:
        """``δM_r = {(a, b) ↦ m}`` (paper's δR_r): ``δQ = m·U(a)·P(b)``; one view entry; O(1)."""
        if count:
            u = self.U.get(a, 0)
            if u:
                pm = self.P.get(b, self._z_of_b(b))
                if pm:
                    self.count += m * u * pm
        if heavy:
            row = self.P.lf.get(b)
            if row is not None:
                entry_add(self.V_MhPl, a, m * next(iter(row.values())))
        else:
            u = self.U.get(a, 0)
            if u:
                entry_add(self.V_MlU, b, m * u)
        self.size += self.M.add(heavy, a, b, m)

    def apply_p(self, heavy: bool, b: Key, z: Key, m: int, count: bool = True) -> None:
        """``δP_s = {b ↦ m}`` (paper's δS_s): ``δQ = m·(V_{M_l U}(b) + Σ_{a ∈ M_h(·,b)} M_h(a,b)·U(a))``.

        The heavy keys of ``M`` paired with ``b`` are at most 2N^{1-eps}; if ``s = l``,
        ``V_{M_h P_l}(a) += M_h(a,b)·m`` over the same keys.  O(N^{1-eps}).
        """
        col = self.M.hb.get(b)
        if count:
            delta = self.V_MlU.get(b, 0)
            if col is not None:
                get = self.U.get
                for a, mm in col.items():
                    u = get(a)
                    if u:
                        delta += mm * u
            self.count += m * delta
        if not heavy and col is not None:
            view = self.V_MhPl
            for a, mm in col.items():
                entry_add(view, a, mm * m)
        self.size += self.P.add(heavy, b, z, m)

    def _z_of_a(self, a: Key) -> Key:
        return a[len(self.pair_join[self.m_slot]) :]

    def _z_of_b(self, b: Key) -> Key:
        return b[len(self.pair_join[self.p_slot]) :]

    def rebalance_major(self) -> None:
        """MajorRebalancing: strict repartition of M and P with ``θ = N^eps``, views recomputed.

        Q is unchanged.  Both views have FAQ-width one and are recomputed in O(|D|)
        (App. H.3), amortized O(1) over the ≥ N/4 updates between two of them.
        """
        self.M.strict_partition(self.N)
        self.P.strict_partition(self.N)
        self.V_MlU, self.V_MhPl = {}, {}
        for a, row in self.M.lf.items():
            u = self.U.get(a, 0)
            if u:
                for b, mm in row.items():
                    entry_add(self.V_MlU, b, u * mm)
        for a, row in self.M.hf.items():
            for b, mm in row.items():
                prow = self.P.lf.get(b)
                if prow is not None:
                    entry_add(self.V_MhPl, a, mm * next(iter(prow.values())))
        self.strict = True
        self.major_rebalances += 1

    # -- changing eps -----------------------------------------------------------------

    def max_degree(self) -> int:
        """The largest degree of a partition key (the path plan's M and P; the triangle's slots); O(keys)."""
        if self.plan == "triangle":
            return max((len(r) for p in self.triangle.parts for f in (p.hf, p.lf) for r in f.values()), default=0)
        if self.plan == "path":
            return max((len(r) for p in (self.M, self.P) for f in (p.hf, p.lf) for r in f.values()), default=0)
        return 0

    def set_eps(self, eps: float) -> None:
        """Set the exponent of every partitioned slot, then MajorRebalancing (Q unchanged).

        The path plan: O(|D|); the triangle plan: O(|D|^{1+min(eps,1-eps)}) (Prop. 11).
        The hierarchical plan has no partition: nothing to do.
        """
        if not 0.0 <= float(eps) <= 1.0:
            raise ValueError(f"eps must lie in [0, 1], got {eps}")
        eps = float(eps)
        self.slot_eps = (eps, eps, eps)
        if self.plan == "path":
            self.M.eps = self.P.eps = eps
            self.rebalance_major()
            self.major_rebalances -= 1  # a change of eps, not a size-triggered major rebalancing
        elif self.plan == "triangle":
            for part in self.triangle.parts:
                part.eps = eps
            before = self.triangle.major_rebalances
            self.triangle.rebalance_major()
            self.triangle.major_rebalances = before

    def rebalance_minor(self, part: HeavyLightPartition, key: Key, to_heavy: bool) -> None:
        """MinorRebalancing: move every tuple of ``key`` to the other part, δQ skipped (net zero).

        M: fewer than 1.5N^eps + 1 tuples, O(1) each; P: one tuple, O(N^{1-eps}).
        Amortized over the > N^eps/2 updates to ``key`` since its last move (§4.1).
        """
        source = part.lf if to_heavy else part.hf
        moved = list(source[key].items())
        apply = self.apply_m if part is self.M else self.apply_p
        for y, m in moved:
            apply(not to_heavy, key, y, -m, count=False)
            apply(to_heavy, key, y, m, count=False)
        self.minor_rebalances += 1
        self.tuples_moved += len(moved)
