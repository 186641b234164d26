"""Batch delta propagation as grouped array operations (F-IVM §4, §6.2; batch updates as in §9 of the paper).

The delta of a view for a whole batch, ``δV = ⊕_X (δV_j ⊗ ⊗_{i≠j} V_i)`` (Fig. 7), is
computed in three array steps instead of one ring operation per tuple:

1. *join*: the delta rows are matched with the siblings' rows (dict lookups on
   the primary index or a secondary index, §2.2), giving for every output row
   the row numbers of its factors, its output key and its lifted values;
2. *product*: the factors' payloads are gathered and multiplied by blocks;
3. *marginalize*: rows with the same output key are summed (``⊕_X``), one
   ``np.add.reduceat`` per block, or one matrix product per block pair when the
   whole delta falls on one key (the root of a Boolean query).

Payloads are those of the covariance ring sized per view (§6.2): a view's
payload is ``(c, s, Q)`` over its *support*, the covariance variables lifted in
its subtree, laid out child by child (then the view's own lifted variables), so
each child's block sits at a fixed offset and a product over the disjoint
supports of siblings is a set of block writes:
``c = Π c_f``, ``s_f ← (Π_{g≠f} c_g) s_f``, ``Q_ff ← (Π_{g≠f} c_g) Q_f``,
``Q_fg ← (Π_{h≠f,g} c_h) s_f s_gᵀ``.  Cost per view and batch: O(|join| · k²) arithmetic
in numpy for support size k, plus O(|join|) dictionary lookups; the number of
Python-level operations does not depend on k.

A view is a :class:`ColumnStore`: a dict from key to row number and arrays
``C (rows,)``, ``S (rows, k)``, ``Q (rows, k, k)``; deleted rows are reused.

Small deltas, one row at a time (:func:`row_delta`, :meth:`ColumnStore.add_row`).
The grouped kernel's cost has a fixed part per view and call that does not
shrink with the delta: every factor's C, S and Q rows gathered by fancy
indexing (three copies per factor), per pair of factor blocks a weight product,
an outer product, two block writes and a transpose (21 pairs at the Housing
root: 6 relations and the lifted postcode), the join's index arrays and masks,
the grouping, and the zero tests of :func:`drop_zero` and :meth:`ColumnStore.add`,
in all some 150 numpy calls of 0.5-2 µs.  Measured on the Housing star
(``bench/housing.py``, one-row delta, steady state): :func:`delta_rule` 187 µs
at the root (k = 27; ``_direct_join`` 16 µs, grouping 4 µs, :func:`drop_zero`
7 µs, the rest the block products) and 18 µs at a relation's view (k = 10), so
batch 1 ran at 6k tuples/s against 15.5k for the engine before this module
(313b097, one covariance object per payload).  A delta of at most
:data:`SMALL_DELTA` keys therefore goes up the path one row at a time over the
*same* stores (one state): per view one primary-key lookup per sibling, the
product as one outer product ``(w_f s_f)(w_g s_g)ᵀ / P`` plus the diagonal
blocks ``w_f Q_f`` written in place (2F + 3 array calls for F factors), and an
in-place ``V[key] += δ`` with an O(1) zero test while the count is not 0:
21 µs at the Housing root, 5 µs at a relation's view, 1.6 µs for the store
update, 35 µs for a whole single-tuple ``apply``.  A plan with fan-out (an index
join) hands its row to :func:`delta_rule`; a grouped delta that shrinks to a
few keys continues as rows.  Housing, 27,118 tuples (``--postcodes 3000``),
tuples/s, median of 3 fresh processes, load average 0.4-0.9 on 2 cores (42a65d7, the
commit before the row path, from a second run of ``--old`` on its worktree)::

    .venv/bin/python bench/housing.py --postcodes 3000 --batches 1 10 100 1000 \
        --implementations auto numpy python --old /tmp/old313      # git worktree add /tmp/old313 313b097

    batch     auto    numpy   before (42a65d7, auto)   python   old 313b097
        1   43,201   42,776                    6,048    8,537        15,528
       10   44,769   45,832                   37,485    8,739        15,923
      100  143,009  141,030                  135,218    8,833        16,155
    1,000  199,003  195,635                  190,448    9,633        16,416
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from ivm.engines.fivm.view_tree import DeltaPlan, ViewNode, key_projection, projection
from ivm.rings.covariance import Covariance

try:  # the compiled int64 hash index (``_int_index.pyx``), present when pip install compiled it
    from ivm.engines.fivm._int_index import Int64Index
except ImportError:  # no compiler at install time: every view is indexed by its dict alone
    Int64Index = None  # type: ignore[assignment,misc]

Key = tuple[Any, ...]


def _absent(n: int) -> Iterator[int]:
    """``-1`` ``n`` times: the default of ``map(dict.get, keys, _absent(n))`` (a C-level lookup loop)."""
    return repeat(-1, n)


#: Float payloads whose entries are all within this of 0 are zero (the ring's zero test, §9 item 1).
FLOAT_ZERO = 1e-7


@dataclass
class Block:
    """Payloads of ``len(keys)`` rows over one support: ``C (n,)``, ``S (n, k)``, ``Q (n, k, k)``."""

    keys: list[Key]
    C: np.ndarray
    S: np.ndarray
    Q: np.ndarray
    #: the keys as an int64 array when every key is one Python int (:func:`int_codes`), else ``None``
    codes: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)


_first = itemgetter(0)


def int_codes(keys: Sequence[Key]) -> np.ndarray | None:
    """A view's keys (all of one arity) as int64 codes if each is a 1-tuple of an int64 ``int``, else ``None``.

    Equal codes mean equal keys exactly as for the dict (``bool``, ``float`` and numpy scalars,
    which compare equal to ints, give ``None``).  Two C-level passes, no Python loop.
    """
    if Int64Index is None or not keys or len(keys[0]) != 1:
        return None
    values = list(map(_first, keys))
    if set(map(type, values)) != {int}:  # a view's keys share its arity
        return None
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except OverflowError:
        return None


def empty_block(k: int, dtype: Any) -> Block:
    return Block([], np.zeros(0, dtype=dtype), np.zeros((0, k), dtype=dtype), np.zeros((0, k, k), dtype=dtype))


def zero_rows(C: np.ndarray, S: np.ndarray, Q: np.ndarray, tolerance: bool) -> np.ndarray:
    """The rows whose payload is 0 (float payloads: every entry within :data:`FLOAT_ZERO`)."""
    n = len(C)
    if tolerance:
        zero = np.abs(C) <= 0  # counts are exact even in float payloads
        if S.shape[1]:
            zero &= (np.abs(S) <= FLOAT_ZERO).all(axis=1) & (np.abs(Q.reshape(n, -1)) <= FLOAT_ZERO).all(axis=1)
        return zero
    zero = C == 0
    if S.shape[1]:
        zero &= ~S.astype(bool).any(axis=1) & ~Q.reshape(n, -1).astype(bool).any(axis=1)
    return np.asarray(zero, dtype=bool)


class ColumnStore:
    """A materialized view as arrays, with a primary index (key → row) and lazy secondary indexes (§2.2).

    ``index(positions)`` maps ``π_positions key`` to ``{key: row}``; rows are
    stable while a key is present, so indexes change only when keys come and go.
    Amortized O(1) dictionary work per key and O(k²) array work per payload.

    While every key is one Python int, ``codes`` (an :class:`Int64Index`, when compiled) mirrors
    the dict, so a grouped delta finds all its rows in one call (:meth:`lookup`) instead of one dict
    probe per key; the first key of another kind drops it for good (the dict stays authoritative).
    """

    def __init__(self, k: int, dtype: Any, tolerance: bool) -> None:
        self.k = k
        self.dtype = dtype
        self.tolerance = tolerance
        self.rows: dict[Key, int] = {}
        self.keys: list[Key | None] = []
        self.free: list[int] = []
        self.C = np.zeros(0, dtype=dtype)
        self.S = np.zeros((0, k), dtype=dtype)
        self.Q = np.zeros((0, k, k), dtype=dtype)
        self.indexes: dict[tuple[int, ...], dict[Key, dict[Key, int]]] = {}
        self.support: tuple[int, ...] = ()  # ring indices in layout order (set by the engine)
        self.codes: Any = Int64Index() if Int64Index is not None else None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["codes"] = self.codes is not None  # rebuilt from the dict: snapshots need no extension
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        codes = state.pop("codes", False)
        self.__dict__.update(state)
        self.codes = None
        if codes and Int64Index is not None:
            keys = list(self.rows)
            found = int_codes(keys) if keys else np.zeros(0, dtype=np.int64)
            if found is not None:
                self.codes = Int64Index(len(keys))
                self.codes.set_many(found, np.fromiter(self.rows.values(), dtype=np.int64, count=len(keys)))

    def _codes_of(self, keys: Sequence[Key], codes: np.ndarray | None) -> np.ndarray | None:
        """``keys``' int codes if the int index is in use and they all have one, else drop the index."""
        if self.codes is None:
            return None
        if codes is None:
            codes = int_codes(keys)
            if codes is None:
                self.codes = None
        return codes

    # -- reading
    def lookup(self, keys: Sequence[Key], codes: np.ndarray | None = None) -> np.ndarray:
        """The row of every key, -1 where absent (``codes``: the keys' :func:`int_codes`, if known)."""
        if self.codes is not None and (codes is not None or keys):
            if codes is None:
                codes = int_codes(keys)
            if codes is not None:
                return self.codes.get_many(codes)
        get = self.rows.get
        return np.fromiter(map(get, keys, _absent(len(keys))), dtype=np.intp, count=len(keys))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def data(self) -> PayloadView:
        """The payloads by key as ring elements (built on access; O(1) per key read)."""
        return PayloadView(self)

    def payload(self, row: int) -> Any:
        c = self.C[row]
        c = c.item() if isinstance(c, np.generic) else c
        order = np.argsort(self.support, kind="stable")
        idx = tuple(self.support[i] for i in order)
        return Covariance(c, self.S[row][order].copy(), self.Q[row][np.ix_(order, order)].copy(), idx)

    def block(self) -> Block:
        """Every stored payload as one :class:`Block` (for re-evaluation)."""
        keys = list(self.rows)
        r = np.fromiter(self.rows.values(), dtype=np.intp, count=len(keys))
        return Block(keys, self.C[r], self.S[r], self.Q[r])

    def index(self, positions: tuple[int, ...]) -> dict[Key, dict[Key, int]]:
        idx = self.indexes.get(positions)
        if idx is None:
            idx = {}
            project = key_projection(positions)
            for key, row in self.rows.items():
                idx.setdefault(project(key), {})[key] = row
            self.indexes[positions] = idx
        return idx

    def memory(self) -> tuple[int, int, float]:
        """(keys, bytes, bytes per payload): arrays exactly (rows in use), tables and keys measured."""
        n = len(self.rows)
        width = 1 + self.k + self.k * self.k
        item = self.C.itemsize if self.dtype != object else 8 + 32  # an object slot and its Python number
        per_payload = float(width * item)
        sample = [k for k, _ in zip(self.rows, range(32), strict=False)]
        per_key = sum(sys.getsizeof(k) for k in sample) / len(sample) if sample else 0.0
        tables = (
            sys.getsizeof(self.rows) + sys.getsizeof(self.keys) + sum(sys.getsizeof(i) for i in self.indexes.values())
        )
        if self.codes is not None:
            tables += self.codes.nbytes
        arrays = len(self.C) * width * item
        return n, int(tables + arrays + n * per_key), per_payload

    # -- writing
    def _grow(self, need: int) -> None:
        cap = len(self.C)
        if need <= cap:
            return
        new = max(need, 2 * cap, 16)
        k, dtype = self.k, self.dtype
        C, S, Q = np.zeros(new, dtype=dtype), np.zeros((new, k), dtype=dtype), np.zeros((new, k, k), dtype=dtype)
        C[:cap], S[:cap], Q[:cap] = self.C, self.S, self.Q
        self.C, self.S, self.Q = C, S, Q
        self.keys.extend([None] * (new - len(self.keys)))

    def add(self, block: Block) -> None:
        """``V += δV`` for a block with distinct keys, deleting keys whose payload becomes 0 (§9 item 1)."""
        if not block.keys:
            return
        codes = self._codes_of(block.keys, block.codes)
        if codes is not None:
            r = self.codes.get_many(codes)
            fresh = np.flatnonzero(r < 0)
            if len(fresh):
                new = self._take_rows(len(fresh))
                r[fresh] = new
                self.codes.set_many(codes[fresh], new)
                self._index_fresh([block.keys[i] for i in fresh.tolist()], new.tolist())
        else:
            rows_get = self.rows.get
            rows = list(map(rows_get, block.keys, _absent(len(block.keys))))
            fresh_i = [i for i, row in enumerate(rows) if row < 0]
            if fresh_i:
                new_rows = self._take_rows(len(fresh_i)).tolist()
                for i, row in zip(fresh_i, new_rows, strict=True):
                    rows[i] = row
                self._index_fresh([block.keys[i] for i in fresh_i], new_rows)
            r = np.asarray(rows, dtype=np.intp)
        self.C[r] += block.C
        if self.k:
            self.S[r] += block.S
            self.Q[r] += block.Q
        C = self.C[r]
        candidates = r[C == 0]  # counts are exact, so only a row with count 0 can be 0 (§9 item 1)
        if len(candidates):
            zero = zero_rows(self.C[candidates], self.S[candidates], self.Q[candidates], self.tolerance)
            if zero.any():
                self._delete(candidates[zero])

    def _take_rows(self, n: int) -> np.ndarray:
        """``n`` unused rows (freed ones first, then new ones at the end), the arrays grown to hold them."""
        reuse = min(n, len(self.free))
        taken = [self.free.pop() for _ in range(reuse)]
        top = len(self.rows) + len(self.free) + reuse  # rows in use or free before this call
        self._grow(top + n - reuse)
        return np.array(taken + list(range(top, top + n - reuse)), dtype=np.int64)

    def _index_fresh(self, keys: list[Key], rows: list[int]) -> None:
        """Enter new keys at their rows in the dict, the key list and the secondary indexes."""
        self.rows.update(zip(keys, rows, strict=True))
        slots = self.keys
        for row, key in zip(rows, keys, strict=True):
            slots[row] = key
        for positions, idx in self.indexes.items():
            project = key_projection(positions)
            for key, row in zip(keys, rows, strict=True):
                idx.setdefault(project(key), {})[key] = row

    def add_row(self, key: Key, c: Any, s: np.ndarray | None, q: np.ndarray | None) -> None:
        """:meth:`add` for one key: ``V[key] += (c, s, q)`` in place (``s``/``q`` ``None`` when ``k = 0``).

        One dict probe, three in-place array updates and an O(1) zero test while the count is not 0
        (O(k²) when it is, §9 item 1): no temporary arrays.
        """
        r = self.rows.get(key)
        if r is None:
            free = self.free
            if free:
                r = free.pop()
            else:
                r = len(self.rows)
                if r >= len(self.C):
                    self._grow(r + 1)
            self.rows[key] = r
            self.keys[r] = key
            codes = self._codes_of((key,), None)
            if codes is not None:
                self.codes.set_many(codes, np.array([r], dtype=np.int64))
            for positions, idx in self.indexes.items():
                idx.setdefault(key_projection(positions)(key), {})[key] = r
            self.C[r] = c  # a free row holds 0
            if self.k:
                self.S[r] = s
                self.Q[r] = q
        else:
            self.C[r] += c
            if self.k:
                self.S[r] += s
                self.Q[r] += q
        C = self.C.item(r)
        if C != 0:
            return
        if self.k == 0 or row_is_zero(C, self.S[r], self.Q[r], self.tolerance):
            self._delete(np.array([r], dtype=np.intp))

    def _delete(self, rows: np.ndarray) -> None:
        projected = [(key_projection(p), idx) for p, idx in self.indexes.items()]
        if self.codes is not None:
            self.codes.delete_many(np.fromiter((self.keys[r][0] for r in rows.tolist()), np.int64, len(rows)))  # type: ignore[index]
        for row in rows.tolist():
            key = self.keys[row]
            self.keys[row] = None
            del self.rows[key]  # type: ignore[arg-type]
            for project, idx in projected:
                sub = project(key)  # type: ignore[arg-type]
                bucket = idx[sub]
                del bucket[key]  # type: ignore[arg-type]
                if not bucket:
                    del idx[sub]
            self.free.append(row)
        self.C[rows] = 0
        if self.k:
            self.S[rows] = 0
            self.Q[rows] = 0


class PayloadView(Mapping[Key, Any]):
    """A read-only mapping key → ring element over a :class:`ColumnStore`."""

    def __init__(self, store: ColumnStore) -> None:
        self.store = store

    def __getitem__(self, key: Key) -> Any:
        return self.store.payload(self.store.rows[key])

    def get(self, key: Key, default: Any = None) -> Any:
        row = self.store.rows.get(key)
        return default if row is None else self.store.payload(row)

    def __iter__(self) -> Iterator[Key]:
        return iter(self.store.rows)

    def __len__(self) -> int:
        return len(self.store.rows)


@dataclass
class Layout:
    """A view's payload layout: its support and, per delta plan, where each factor's block sits.

    The support lists the children's supports in order, then the view's own
    lifted variables; ``plans[j]`` is ``(child block, sibling blocks in join
    order)`` as ``(offset, size)`` for the plan of child ``j``.
    """

    support: tuple[int, ...]
    lift_offset: int
    lift_size: int
    plans: list[tuple[tuple[int, int], list[tuple[int, int]]]]
    #: per delta plan, its :class:`RowRule` when the plan is direct (``None`` otherwise); ``None`` in
    #: snapshots taken before row rules existed (rebuilt by :func:`row_rules`)
    rules: list[RowRule | None] | None = None


def assign_layouts(nodes: Sequence[ViewNode], ring_index: Mapping[str, int]) -> None:
    """Set ``node.layout`` (a :class:`Layout`) on every view of a view tree: O(|tree| · k)."""

    def visit(node: ViewNode) -> tuple[int, ...]:
        support: list[int] = []
        blocks: list[tuple[int, int]] = []
        for child in node.children:
            sub = visit(child)
            blocks.append((len(support), len(sub)))
            support += sub
        lifted = [ring_index[v] for v in node.lifted if v in ring_index]
        plans = []
        for plan in node.plans:
            position = {id(c): i for i, c in enumerate(node.children)}
            plans.append(
                (blocks[position[id(plan.child)]], [blocks[position[id(step.sibling)]] for step in plan.steps])
            )
        layout = Layout(tuple(support + lifted), len(support), len(lifted), plans)
        node.layout = layout  # type: ignore[attr-defined]
        layout.rules = _compile_rules(node, layout)
        return tuple(support + lifted)

    for node in nodes:
        visit(node)


def _group(keys: list[Key]) -> tuple[list[Key], np.ndarray, np.ndarray | None]:
    """Distinct keys, each row's group number, and the distinct keys' :func:`int_codes` (or ``None``).

    Int keys are grouped by one sort of their codes (keys in code order); others by a dict (keys in
    order of first appearance).  O(n log n) in C, or O(n) dictionary work.
    """
    codes = int_codes(keys)
    if codes is not None:
        distinct, first, gid = np.unique(codes, return_index=True, return_inverse=True)
        if len(distinct) == len(keys):  # all distinct: the rows as they are (the identity grouping)
            return keys, np.arange(len(keys)), codes
        return list(map(keys.__getitem__, first.tolist())), gid, distinct
    index = dict(zip(dict.fromkeys(keys), range(len(keys)), strict=False))
    gid = np.fromiter(map(index.__getitem__, keys), dtype=np.intp, count=len(keys))
    return list(index), gid, None


class _Reducer:
    """``⊕`` over rows with the same output key: identity, a sum, or sorted segment sums."""

    def __init__(self, gid: np.ndarray, groups: int) -> None:
        n = len(gid)
        self.groups = groups
        self.single = groups == 1
        self.identity = groups == n and bool((gid == np.arange(n)).all())
        if not self.single and not self.identity:
            self.order = np.argsort(gid, kind="stable")
            sorted_gid = gid[self.order]
            self.starts = np.flatnonzero(np.r_[True, sorted_gid[1:] != sorted_gid[:-1]])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.identity:
            return x
        if self.single:
            return x.sum(axis=0, keepdims=True)
        return np.add.reduceat(x[self.order], self.starts, axis=0)

    def outer(self, w: np.ndarray | None, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``⊕ w · a ⊗ b`` per group; one matrix product when every row is in one group."""
        if w is not None:
            a = a * w[:, None]
        if self.single:
            return (a.T @ b)[None]
        return self(a[:, :, None] * b[:, None, :])


def delta_rule(plan: DeltaPlan, delta: Block, dtype: Any, lift_values: Any) -> Block:
    """``δV = ⊕_X (δV_j ⊗ ⊗_{i≠j} V_i ⊗ g_X)`` for a whole batch (Fig. 7) as grouped array operations.

    ``lift_values(rows_of_values) -> array`` converts the lifted variables'
    values to the payload dtype.  O(|join|) lookups plus O(|join| · k²) array work.
    """
    steps = plan.steps
    stores = [step.sibling.store for step in steps]
    layout: Layout = plan.node.layout  # type: ignore[attr-defined]
    child_block, sibling_blocks = layout.plans[next(i for i, p in enumerate(plan.node.plans) if p is plan)]
    if plan.direct is not None:
        src, sib_rows, out_keys, lifted = _direct_join(plan, delta, stores)
    else:
        src, sib_rows, out_keys, lifted = _index_join(plan, delta, stores)
    k = len(layout.support)
    if not out_keys:
        return empty_block(k, dtype)
    keys, gid, codes = _group(out_keys)
    reduce = _Reducer(gid, len(keys))
    factors: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None, int]] = []  # (c, s, Q, offset)
    off, size = child_block
    factors.append((delta.C[src], delta.S[src] if size else None, delta.Q[src] if size else None, off))
    for (off, size), store, rows in zip(sibling_blocks, stores, sib_rows, strict=True):
        factors.append((store.C[rows], store.S[rows] if size else None, store.Q[rows] if size else None, off))  # type: ignore[union-attr]
    n = len(out_keys)
    X = lift_values(lifted) if layout.lift_size else None
    if dtype is not object:
        block = _float_product(factors, X, layout.lift_offset, k, reduce, n)
        if block is not None:
            return Block(keys, *block, codes)
    if X is not None:
        factors.append((None, X, X[:, :, None] * X[:, None, :], layout.lift_offset))  # type: ignore[arg-type]
    cs = [f[0] for f in factors]

    def c_except(*skip: int) -> np.ndarray | None:
        out: np.ndarray | None = None
        for i, c in enumerate(cs):
            if c is None or i in skip:
                continue
            out = c if out is None else out * c
        return out

    C = reduce(c_except() if any(c is not None for c in cs) else np.ones(n, dtype=dtype))
    S = np.zeros((len(keys), k), dtype=dtype)
    Q = np.zeros((len(keys), k, k), dtype=dtype)
    blocks = [i for i, f in enumerate(factors) if f[1] is not None and f[1].shape[1]]
    for i in blocks:
        _, s, q, o = factors[i]
        w = c_except(i)
        kk = s.shape[1]  # type: ignore[union-attr]
        S[:, o : o + kk] = reduce(s if w is None else s * w[:, None])  # type: ignore[index, operator]
        Q[:, o : o + kk, o : o + kk] = reduce(q if w is None else q * w[:, None, None])  # type: ignore[index, operator]
    for a_i, i in enumerate(blocks):
        for j in blocks[a_i + 1 :]:
            _, si, _, oi = factors[i]
            _, sj, _, oj = factors[j]
            ki, kj = si.shape[1], sj.shape[1]  # type: ignore[union-attr]
            cross = reduce.outer(c_except(i, j), si, sj)  # type: ignore[arg-type]
            Q[:, oi : oi + ki, oj : oj + kj] = cross
            Q[:, oj : oj + kj, oi : oi + ki] = cross.transpose(0, 2, 1)
    return Block(keys, C, S, Q, codes)


def _float_product(
    factors: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None, int]],
    X: np.ndarray | None,
    lift_offset: int,
    k: int,
    reduce: _Reducer,
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The block product of :func:`delta_rule` for float payloads in O(F + 1) array calls, not O(F²).

    With ``P = Π c_f`` per row and ``w_f = P / c_f`` (exact: counts are integers), every block of
    the product is ``Q_fg = (w_f s_f)(w_g s_g)ᵀ / P`` (f ≠ g; the lifting's own block ``P x xᵀ``
    too), so ``Q = ⊕ Ŝᵀ Ŝ / P`` for ``Ŝ = [w_f s_f]_f``, one matrix product when the delta has one
    output key, and the diagonal blocks of stored factors are then ``⊕ w_f Q_f`` (§6.2, the rule
    of :func:`row_delta` for a whole batch).  ``None`` when some row has ``P = 0`` (a count 0): the
    division-free rule of :func:`delta_rule` handles those batches.
    """
    P: np.ndarray | None = None
    for c, _, _, _ in factors:
        P = c if P is None else P * c
    if P is None:
        P = np.ones(n)
    if not P.all():
        return None
    Shat = np.empty((n, k))
    diagonal = []
    for c, s, q, o in factors:
        if s is None or not s.shape[1]:
            continue
        w = P / c
        kk = s.shape[1]
        np.multiply(s, w[:, None], out=Shat[:, o : o + kk])
        diagonal.append((o, kk, q, w))
    if X is not None:
        np.multiply(X, P[:, None], out=Shat[:, lift_offset : lift_offset + X.shape[1]])
    scaled = Shat / P[:, None]
    Q = (scaled.T @ Shat)[None] if reduce.single else reduce(scaled[:, :, None] * Shat[:, None, :])
    for o, kk, q, w in diagonal:
        Q[:, o : o + kk, o : o + kk] = reduce(q * w[:, None, None])
    return reduce(P), reduce(Shat), Q


def _direct_join(
    plan: DeltaPlan, delta: Block, stores: list[Any]
) -> tuple[np.ndarray, list[np.ndarray], list[Key], list[Key]]:
    """Every sibling by primary key, a projection of the delta key (:class:`DirectPlan`): O(|δ| · #siblings)."""
    direct = plan.direct
    assert direct is not None
    keys = delta.keys
    n = len(keys)
    mask = np.ones(n, dtype=bool)
    found: list[np.ndarray] = []
    for store, project, positions in zip(stores, direct.siblings, direct.sibling_positions, strict=True):
        if keys and positions == tuple(range(len(keys[0]))):  # the sibling's key is the delta key (a star's root)
            rows = store.lookup(keys, delta.codes)
        else:
            rows = store.lookup(list(map(project, keys)))
        mask &= rows >= 0
        found.append(rows)
    if mask.all():
        src = np.arange(n)
        sel = keys
    else:
        src = np.flatnonzero(mask)
        sel = [keys[i] for i in src.tolist()]
        found = [rows[src] for rows in found]
    out_keys = sel if direct.identity else list(map(direct.key, sel))
    lifted = list(map(direct.lift, sel)) if plan.lift_vars else []
    return src, found, out_keys, lifted


def _index_join(
    plan: DeltaPlan, delta: Block, stores: list[Any]
) -> tuple[np.ndarray, list[np.ndarray], list[Key], list[Key]]:
    """Siblings through primary or secondary indexes (§2.2, Remark 20): O(|δ| · fan-out) lookups."""
    steps = plan.steps
    nsteps = len(steps)
    slots: list[Any] = [None] * plan.width
    key_of = projection(plan.key_slots)
    lift_of = projection(plan.lift_slots)
    lifting = bool(plan.lift_vars)
    probes = [projection(step.key_slots if step.full else step.bound_slots) for step in steps]
    lookups = [
        store.rows if step.full else store.index(step.bound_pos) for step, store in zip(steps, stores, strict=True)
    ]
    src: list[int] = []
    sib: list[list[int]] = [[] for _ in steps]
    chosen: list[int] = [0] * nsteps
    out_keys: list[Key] = []
    lifted: list[Key] = []

    def join(i: int, row: int) -> None:
        if i == nsteps:
            src.append(row)
            for j in range(nsteps):
                sib[j].append(chosen[j])
            out_keys.append(key_of(slots))  # type: ignore[arg-type]
            if lifting:
                lifted.append(lift_of(slots))  # type: ignore[arg-type]
            return
        step = steps[i]
        found = lookups[i].get(probes[i](slots))  # type: ignore[arg-type]
        if found is None:
            return
        if step.full:
            chosen[i] = found
            join(i + 1, row)
            return
        fill = step.fill
        for key, r in list(found.items()):
            for p, s in fill:
                slots[s] = key[p]
            chosen[i] = r
            join(i + 1, row)

    child_slots = plan.child_slots
    for row, key in enumerate(delta.keys):
        for s, value in zip(child_slots, key, strict=True):
            slots[s] = value
        join(0, row)
    return (
        np.asarray(src, dtype=np.intp),
        [np.asarray(r, dtype=np.intp) for r in sib],
        out_keys,
        lifted,
    )


def drop_zero(block: Block) -> Block:
    """The rows of ``block`` whose payload is not 0 (a zero delta changes nothing)."""
    if not block.keys:
        return block
    zero = zero_rows(block.C, block.S, block.Q, False)
    if not zero.any():
        return block
    keep = np.flatnonzero(~zero)
    codes = None if block.codes is None else block.codes[keep]
    return Block([block.keys[i] for i in keep.tolist()], block.C[keep], block.S[keep], block.Q[keep], codes)


# ---------------------------------------------------------------------------- small deltas, one row at a time
#: Deltas of at most this many keys go up the path one row at a time (:func:`row_delta`) instead of
#: through :func:`delta_rule`: a row costs 2F + O(1) array calls per view for F factors, a grouped
#: delta about 5 calls per pair of factor blocks plus 6 per factor, whatever its size.  Measured
#: crossovers (rows vs grouped, tuples/s equal): 9 keys on a 3-path (index joins), 12 on a group-by
#: star, 13 on the Housing star, 16 on a 3-relation star.
SMALL_DELTA = 10


@dataclass
class RowRule:
    """:func:`row_delta`'s compiled layout for one direct plan (every sibling found by primary key).

    Factors in plan order: the child, the siblings, then the liftings of the view's own variables.
    ``blocks[f]`` is factor f's ``(offset, size)`` in the view's support; ``sized`` lists the factors
    with a non-empty support in offset order (their blocks tile the support); ``flat`` maps every
    cell (i, j) of the ``k × k`` matrix to the cell ``(f(i), f(j))`` of the sized factors' coefficient
    matrix (f(i): the sized factor owning support position i).
    """

    k: int
    blocks: tuple[tuple[int, int], ...]
    sized: tuple[int, ...]
    sizes: tuple[int, ...]
    flat: np.ndarray
    lift: int  # the factor index of the liftings (-1 without lifted variables)


def _compile_rules(node: ViewNode, layout: Layout) -> list[RowRule | None]:
    """A :class:`RowRule` per direct delta plan of ``node``: O(#plans · k²)."""
    rules: list[RowRule | None] = []
    k = len(layout.support)
    for plan, (child_block, sibling_blocks) in zip(node.plans, layout.plans, strict=True):
        if plan.direct is None:
            rules.append(None)
            continue
        blocks = [child_block, *sibling_blocks]
        lift = -1
        if layout.lift_size:
            lift = len(blocks)
            blocks.append((layout.lift_offset, layout.lift_size))
        sized = tuple(sorted((f for f, (_, size) in enumerate(blocks) if size), key=lambda f: blocks[f][0]))
        owner = np.empty(k, dtype=np.intp)
        for position, f in enumerate(sized):
            offset, size = blocks[f]
            owner[offset : offset + size] = position
        flat = (owner[:, None] * len(sized) + owner[None, :]).ravel()
        rules.append(RowRule(k, tuple(blocks), sized, tuple(blocks[f][1] for f in sized), flat, lift))
    return rules


def row_rules(node: ViewNode) -> list[RowRule | None]:
    """``node.layout.rules``, compiled on first use for layouts restored from older snapshots."""
    layout: Layout = node.layout  # type: ignore[attr-defined]
    if layout.rules is None:
        layout.rules = _compile_rules(node, layout)
    return layout.rules


def row_is_zero(c: Any, s: np.ndarray | None, q: np.ndarray | None, tolerance: bool) -> bool:
    """:func:`zero_rows` for one payload (``s``/``q`` ``None`` for an empty support): O(k²), O(1) if ``c ≠ 0``."""
    if c != 0:
        return False
    if s is None or not len(s):
        return True
    if tolerance:
        return bool((np.abs(s) <= FLOAT_ZERO).all() and (np.abs(q) <= FLOAT_ZERO).all())  # type: ignore[arg-type]
    return not (s.astype(bool).any() or q.astype(bool).any())  # type: ignore[union-attr]


Row = tuple[Key, Any, "np.ndarray | None", "np.ndarray | None"]


def row_delta(plan: DeltaPlan, rule: RowRule, key: Key, c: Any, s: Any, q: Any, floats: bool) -> Row | None:
    """``δV = δV_j ⊗ ⊗_{i≠j} V_i ⊗ g_X`` (Fig. 7) for a delta of one key through a direct plan.

    The delta row ``(c, s, q)`` of the child (``s``, ``q`` ``None`` for an empty support) meets one
    stored row per sibling (a primary-key lookup each) and the liftings of the view's variables,
    all over disjoint supports, so the product is (§6.2, the block rule of :mod:`.columnar`), with
    ``P = Π c_f``, ``w_f = Π_{g≠f} c_g`` and ``K_fg = Π_{h≠f,g} c_h``::

        c = P,   s_f = w_f s_f,   Q_ff = w_f Q_f,   Q_fg = K_fg s_f s_gᵀ.

    With float payloads and ``P ≠ 0`` the off-diagonal blocks are one outer product,
    ``Q_fg = (w_f s_f)(w_g s_g)ᵀ / P`` (counts are integers, so ``w_f = P / c_f`` is exact; the rest
    rounds like the block rule, within a few ulp); otherwise (exact payloads, or a factor with count
    0) ``K`` is formed division-free by prefix products and expanded to ``k × k`` by one ``take``.
    Cost: #siblings lookups, O(F²) scalar operations for F factors and O(k²) arithmetic in 2F + O(1)
    array calls (about 15 µs for the Housing root, F = 7, k = 27), no per-call allocation besides the
    output row.  Returns ``(key, c, s, q)`` of the view, or ``None`` if a sibling has no such key.
    """
    direct = plan.direct
    assert direct is not None
    blocks = rule.blocks
    u = 1  # product of the counts of factors without support
    cs: list[Any] = [None] * len(blocks)
    ss: list[Any] = [None] * len(blocks)
    qs: list[Any] = [None] * len(blocks)
    if blocks[0][1]:
        cs[0], ss[0], qs[0] = c, s, q
    else:
        u = c
    f = 1
    for step, project in zip(plan.steps, direct.siblings, strict=True):
        store = step.sibling.store
        r = store.rows.get(project(key))  # type: ignore[union-attr]
        if r is None:
            return None
        cf = store.C.item(r)  # type: ignore[union-attr]
        if blocks[f][1]:
            cs[f], ss[f], qs[f] = cf, store.S[r], store.Q[r]  # type: ignore[union-attr]
        else:
            u *= cf
        f += 1
    if rule.lift >= 0:
        cs[f], ss[f] = 1, direct.lift(key)
    out_key = key if direct.identity else direct.key(key)
    sized = rule.sized
    if not sized:
        return out_key, u, None, None
    P = u
    for f in sized:
        P *= cs[f]
    k = rule.k
    if floats and P != 0:
        S = np.empty(k)
        for f in sized:
            o, size = blocks[f]
            np.multiply(ss[f], P / cs[f], out=S[o : o + size])
        Q = np.multiply.outer(S, S)
        np.divide(Q, P, out=Q)  # every block Q_fg = K_fg s_f s_gᵀ, the lifting's diagonal block included
        for f in sized:
            if qs[f] is not None:
                o, size = blocks[f]
                np.multiply(qs[f], P / cs[f], out=Q[o : o + size, o : o + size])
        return out_key, P, S, Q
    return out_key, P, *_row_product(rule, cs, ss, qs, u, np.float64 if floats else object)


def _row_product(
    rule: RowRule, cs: list[Any], ss: list[Any], qs: list[Any], u: Any, dtype: Any
) -> tuple[np.ndarray, np.ndarray]:
    """``(s, Q)`` of :func:`row_delta` without division: ``w`` and ``K`` from prefix and suffix products."""
    sized, blocks = rule.sized, rule.blocks
    counts = [cs[f] for f in sized]
    n = len(counts)
    pre = [u]
    for x in counts:
        pre.append(pre[-1] * x)
    suf = [1] * (n + 1)
    for i in range(n - 1, -1, -1):
        suf[i] = counts[i] * suf[i + 1]
    w = [pre[i] * suf[i + 1] for i in range(n)]
    K = [[0] * n for _ in range(n)]
    for i in range(n):
        m = pre[i]
        for j in range(i + 1, n):
            K[i][j] = K[j][i] = m * suf[j + 1]
            m *= counts[j]
    lift = rule.lift
    for i, f in enumerate(sized):
        if f == lift:
            K[i][i] = w[i]  # g_X = (1, x, x xᵀ): its own block is w · x xᵀ
    vectors = [np.asarray(ss[f], dtype=dtype) for f in sized]
    s_all = np.concatenate(vectors) if n > 1 else vectors[0]
    Q = np.array(K, dtype=dtype).ravel().take(rule.flat).reshape(rule.k, rule.k) * np.multiply.outer(s_all, s_all)
    for i, f in enumerate(sized):
        if f != lift:
            o, size = blocks[f]
            Q[o : o + size, o : o + size] = w[i] * qs[f]
    S = np.repeat(np.array(w, dtype=dtype), rule.sizes) * s_all
    return S, Q
