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

A view is a :class:`ColumnStore`: one array ``A (rows, 1 + k + k(k+1)/2)`` of payloads (the count,
``s``, and the upper triangle of the symmetric ``Q``, packed row by row: :func:`triangle`, as
F-IVM's C++ keeps it), its columns seen as ``C``, ``S`` and ``Q``, and a primary index from key to
row: int64 codes in a compiled hash table for views keyed by at most one int variable, a dict
otherwise; deleted rows are reused, and the arrays grow by an eighth of their capacity once large
(in place).  The same stores are read and written by the compiled path of
``_covar_kernel.pyx`` (``implementation="compiled"``), which this module's numpy path is the
reference of (and the fallback where the kernel does not apply).

Small deltas, one row at a time (:func:`row_delta`, :meth:`ColumnStore.add_row`).  (The figures
below were measured before ``Q`` was packed and before the compiled path; they explain the row
path's threshold.)
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
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from ivm.engines.fivm.view_tree import DeltaPlan, ViewNode, key_projection, projection
from ivm.engines.keys import HIGH as KEY_HIGH
from ivm.engines.keys import KeyDictionary
from ivm.rings.covariance import Covariance
from ivm.rings.exact import exact

try:  # the compiled int64 hash index (``_int_index.pyx``), present when pip install compiled it
    from ivm.engines.fivm._int_index import Int64Index
except ImportError:  # no compiler at install time: every view is indexed by its dict alone
    Int64Index = None  # type: ignore[assignment,misc]

try:  # growable zeroed memory (``_arena.pyx``): float payload arrays and key codes grow without a copy
    from ivm.engines.fivm._arena import Arena
except ImportError:  # no compiler at install time: numpy's resize
    Arena = None  # type: ignore[assignment,misc]

Key = tuple[Any, ...]


def _absent(n: int) -> Iterator[int]:
    """``-1`` ``n`` times: the default of ``map(dict.get, keys, _absent(n))`` (a C-level lookup loop)."""
    return repeat(-1, n)


#: Float payloads whose entries are all within this of 0 are zero (the ring's zero test, §9 item 1).
FLOAT_ZERO = 1e-7
#: A store's arrays of at least :data:`SMALL_ARRAY` bytes grow by 1/GROWTH of their capacity (at least to
#: what is needed), so at most about 1/9 of it is unused; they grow in place (an :class:`Arena`'s
#: ``mremap``, or ``realloc`` without the extension).
GROWTH = 8
#: arrays below this many bytes grow by half their capacity instead (``realloc`` may copy them)
SMALL_ARRAY = 32 << 20


class _Epoch:
    """A counter bumped whenever some store leaves int mode or gains a secondary index: what decides
    whether the compiled kernel may write a store (cached per compiled path, checked in O(1))."""

    value = 0

    @classmethod
    def bump(cls) -> None:
        cls.value += 1


EPOCH = _Epoch


# ------------------------------------------------------------------ the packed upper triangle of Q
def triangle_size(k: int) -> int:
    """``k (k + 1) / 2``: the entries of a symmetric ``k × k`` matrix kept (its upper triangle)."""
    return k * (k + 1) // 2


@cache
def triangle(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of every packed entry: the upper triangle of a ``k × k`` matrix, row by row.

    ``Q`` of a payload over a support of size k is symmetric (``Q = Σ x xᵀ``, §6.2), so a store
    keeps ``Q[i, j]`` for ``i ≤ j`` only, at position ``i k - i (i - 1) / 2 + (j - i)``
    (row-major), as F-IVM's C++ does: ``1 + k + k (k + 1) / 2`` numbers per payload.

    >>> [a.tolist() for a in triangle(3)]
    [[0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]]
    """
    rows, cols = np.triu_indices(k)
    rows.flags.writeable = False
    cols.flags.writeable = False
    return rows, cols


def packed_position(k: int, i: int, j: int) -> int:
    """The position of ``Q[i, j]`` (``i ≤ j``) in the packed upper triangle of a ``k × k`` matrix."""
    return i * k - i * (i - 1) // 2 + (j - i)


@cache
def diagonal_cells(k: int, offset: int, size: int) -> np.ndarray:
    """Where a factor's packed ``size × size`` triangle lands in a ``k``-support's triangle at ``offset``.

    >>> diagonal_cells(3, 1, 2).tolist()  # Q[1,1], Q[1,2], Q[2,2] of a 3 × 3 matrix
    [3, 4, 5]
    """
    rows, cols = triangle(size)
    i, j = rows + offset, cols + offset
    out = i * k - i * (i - 1) // 2 + (j - i)
    out.flags.writeable = False
    return out


@cache
def cross_cells(k: int, offset_a: int, size_a: int, offset_b: int, size_b: int) -> np.ndarray:
    """Where the block rows ``offset_a..`` × columns ``offset_b..`` (row-major, ``offset_a + size_a ≤
    offset_b``) land in a ``k``-support's packed triangle."""
    i = np.repeat(np.arange(offset_a, offset_a + size_a), size_b)
    j = np.tile(np.arange(offset_b, offset_b + size_b), size_a)
    out = i * k - i * (i - 1) // 2 + (j - i)
    out.flags.writeable = False
    return out


def pack(Q: np.ndarray) -> np.ndarray:
    """The packed upper triangle of ``Q (..., k, k)``: ``(..., k (k + 1) / 2)``."""
    rows, cols = triangle(Q.shape[-1])
    return Q[..., rows, cols]


def unpack(packed: np.ndarray, k: int) -> np.ndarray:
    """The symmetric ``k × k`` matrix of one packed triangle."""
    rows, cols = triangle(k)
    out = np.zeros((k, k), dtype=packed.dtype)
    out[rows, cols] = packed
    out[cols, rows] = packed
    return out


@dataclass
class Block:
    """Payloads of ``len(keys)`` rows over one support: ``C (n,)``, ``S (n, k)``, packed ``Q (n, k(k+1)/2)``."""

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
        codes = np.fromiter(values, dtype=np.int64, count=len(values))
    except OverflowError:
        return None
    return codes if codes.min() >= KEY_HIGH else None  # (below: interned ids' range, ivm.engines.keys)


def equal_code(value: Any) -> int | None:
    """The int64 ``c`` with ``c == value`` (Python equality: ``1.0``, ``True``, ``Fraction(1)`` → 1), else ``None``."""
    if type(value) is not int:
        try:
            code = int(value)
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            return None
        if code != value:  # (Python equality: 1 == 1.0 == True)
            return None
        value = code
    return value if -(2**63) <= value < 2**63 else None


def empty_block(k: int, dtype: Any) -> Block:
    return Block(
        [], np.zeros(0, dtype=dtype), np.zeros((0, k), dtype=dtype), np.zeros((0, triangle_size(k)), dtype=dtype)
    )


def zero_rows(C: np.ndarray, S: np.ndarray, Q: np.ndarray, tolerance: bool) -> np.ndarray:
    """The rows whose payload is 0 (float payloads: every entry within :data:`FLOAT_ZERO`)."""
    if tolerance:
        zero = np.abs(C) <= 0  # counts are exact even in float payloads
        if S.shape[1]:
            zero &= (np.abs(S) <= FLOAT_ZERO).all(axis=1) & (np.abs(Q) <= FLOAT_ZERO).all(axis=1)
        return zero
    zero = C == 0
    if S.shape[1]:
        zero &= ~S.astype(bool).any(axis=1) & ~Q.astype(bool).any(axis=1)
    return np.asarray(zero, dtype=bool)


class ColumnStore:
    """A materialized view as arrays, with a primary index (key → row) and lazy secondary indexes (§2.2).

    Payloads are rows of one array ``A (capacity, 1 + k + k(k+1)/2)``: the count, ``s`` over the
    support, and the packed upper triangle of the symmetric ``Q`` (:func:`triangle`); ``C``, ``S``
    and ``Q`` are views of its columns.  Rows are stable while a key is present (deleted rows are
    reused), so indexes change only when keys come and go.  ``A`` grows by an eighth of its
    capacity at a time (by half below :data:`SMALL_ARRAY`) without copying: float payloads and the
    int key codes live in an :class:`~ivm.engines.fivm._arena.Arena` (remapped, the new rows zero
    without a ``memset``) while no other array views them, else numpy's ``resize`` (``realloc``).
    Amortized O(1) dictionary work per key and O(k²) array work per payload.

    Keys.  A view keyed by at most one variable (``arity`` 0 or 1) keeps its keys as int64
    *codes* while every key is ``()`` (code 0) or a 1-tuple of a value with a code (an ``int`` in
    ``[-2**62, 2**63)`` is its own, others as below): an
    :class:`Int64Index` (code → row) and ``keycode`` (row → code), with no Python object per key,
    so a grouped delta finds all its rows in one call (:meth:`lookup`) and the compiled kernel
    (``_covar_kernel.pyx``) reads and writes the store directly.  Lookups keep the dict's
    equality (``(1.0,)`` finds ``(1,)``).  With the engine's :class:`~ivm.engines.keys.KeyDictionary`
    attached (:meth:`attach`; F-IVM attaches one to all its stores) every single key value has a
    code (floats, strings, dates, ``None``, ... interned), so a store keyed by one variable stays in
    int mode whatever its keys, and keys read back (:meth:`live`, snapshots) are the values again;
    without it, the first new key of another kind (a string, a float that is not already present as
    an int) moves the store to a dict (``key → row``) for good.  Without the compiled index every
    store uses the dict.
    """

    def __init__(self, k: int, dtype: Any, tolerance: bool, arity: int | None = None) -> None:
        self.k = k
        self.T = triangle_size(k)
        self.W = 1 + k + self.T
        self.dtype = dtype
        self.tolerance = tolerance
        self.arity = arity
        self.A = np.zeros((0, self.W), dtype=dtype)
        self._arenas: dict[str, Any] = {}  # "A", "keycode": the Arena under that array (float A, codes)
        self.top = 0  # rows ever handed out (in use or free)
        self.free = np.zeros(0, dtype=np.int64)  # a stack of free rows: free[:nfree]
        self.nfree = 0
        self.indexes: dict[tuple[int, ...], dict[Key, dict[Key, int]]] = {}
        self.support: tuple[int, ...] = ()  # ring indices in layout order (set by the engine)
        self.codes: Any = None
        self.keycode: np.ndarray | None = None
        #: the engine's key dictionary (:mod:`ivm.engines.keys`): with it, any single key value has a code
        self.keydict: KeyDictionary | None = None
        self._rows: dict[Key, int] | None = {}
        self._keys: list[Key | None] | None = []
        #: exact cells (issue 36): > 0 while ``A`` keeps ``nc`` doubles a cell (:meth:`to_cells`), 0 otherwise
        self.nc = 0
        #: the ring indices of the variables that were ever lifted from a float (exact cells: which cells read
        #: as exact dyadic rationals, the others as ints); one set shared by an engine's stores
        self.float_vars: set[int] = set()
        if Int64Index is not None and arity in (0, 1):
            self._use_codes()

    # -- the two key modes
    def _use_codes(self) -> None:
        EPOCH.bump()
        self.codes = Int64Index()
        self.keycode = np.zeros(len(self.A), dtype=np.int64)
        self._arenas.pop("keycode", None)
        self._rows = self._keys = None

    def attach(self, keydict: KeyDictionary) -> None:
        """Code keys through ``keydict`` from now on (an int-mode store of ints only keeps its codes, which
        are the dictionary's codes of those ints; one holding an int of the interned range leaves int mode)."""
        live = self.codes is not None and self.arity == 1 and self.keydict is None and len(self)
        if live and int(self.keycode[self.codes.items()[1]].min()) < KEY_HIGH:  # type: ignore[index,union-attr]
            self.to_dict_keys()
        self.keydict = keydict

    def _key(self, code: int) -> Key:
        if self.arity == 0:
            return ()
        return (code,) if self.keydict is None or code >= KEY_HIGH else (self.keydict.value(code),)

    def _exact_code(self, key: Key) -> int | None:
        """The code a new key is stored under in int mode, or ``None`` if it needs the dict."""
        if self.arity == 0:
            return 0 if key == () else None
        if len(key) != 1:
            return None
        if self.keydict is not None:
            return self.keydict.code(key[0])
        if type(key[0]) is int and KEY_HIGH <= key[0] < 2**63:
            return key[0]
        return None

    def _equal_code(self, key: Key) -> int | None:
        """The code of the stored key equal to ``key`` if there can be one (Python equality)."""
        if self.arity == 0:
            return 0 if len(key) == 0 else None
        if len(key) != 1:
            return None
        if self.keydict is not None:
            return self.keydict.find(key[0])  # (ABSENT, a code no index holds, if the value has none)
        return equal_code(key[0])

    def _int_codes(self, keys: Sequence[Key], insert: bool = False) -> np.ndarray | None:
        """The keys' codes, or ``None`` if some key has none (``insert``: intern new values, for keys being
        entered; else a value never seen gets :data:`~ivm.engines.keys.ABSENT`)."""
        if self.arity == 0:
            return np.zeros(len(keys), dtype=np.int64) if all(map(tuple.__eq__, keys, repeat(()))) else None
        codes = int_codes(keys)
        if codes is None and self.keydict is not None and keys and all(len(k) == 1 for k in keys):
            values = list(map(_first, keys))
            return self.keydict.codes(values) if insert else self.keydict.find_many(values)
        return codes

    def live(self) -> tuple[list[Key], np.ndarray]:
        """Every key and its row, in row order."""
        if self.codes is not None:
            codes, rows = self.codes.items()
            order = np.argsort(rows, kind="stable")
            codes, rows = codes[order], rows[order]
            if self.arity == 0:
                return [() for _ in range(len(rows))], rows
            if self.keydict is not None and len(codes) and int(codes.min()) < KEY_HIGH:
                return list(zip(self.keydict.values(codes.tolist()))), rows
            return list(zip(codes.tolist())), rows
        assert self._rows is not None
        return list(self._rows), np.fromiter(self._rows.values(), dtype=np.int64, count=len(self._rows))

    def to_dict_keys(self) -> None:
        """Leave int mode for good: keys as Python tuples in a dict (for a key the codes cannot hold)."""
        if self.codes is None:
            return
        EPOCH.bump()
        keys, rows = self.live()
        self._rows = dict(zip(keys, rows.tolist(), strict=True))
        self._keys = [None] * len(self.A)
        for key, row in zip(keys, rows.tolist(), strict=True):
            self._keys[row] = key
        self.codes = self.keycode = None
        self._arenas.pop("keycode", None)

    def prefer_codes(self, arity: int) -> None:
        """Take int mode if it is available and every key fits (after a restore of an older snapshot)."""
        self.arity = arity
        if self.codes is not None or Int64Index is None or arity not in (0, 1) or self.indexes:
            return
        keys, rows = self.live()
        codes = self._int_codes(keys, insert=True) if keys else np.zeros(0, dtype=np.int64)
        if codes is None:
            return
        self._use_codes()
        self.codes.set_many(codes, rows)
        self.keycode[rows] = codes  # type: ignore[index]

    # -- reading
    @property
    def C(self) -> np.ndarray:
        self.to_numbers()
        return self.A[:, 0]

    @property
    def S(self) -> np.ndarray:
        self.to_numbers()
        return self.A[:, 1 : 1 + self.k]

    @property
    def Q(self) -> np.ndarray:
        self.to_numbers()
        return self.A[:, 1 + self.k :]

    # -- exact cells (issue 36): the compiled exact kernel's representation of an exact store
    def _float_cells(self) -> np.ndarray:
        """Which of the ``W`` cells hold sums of floats (exact dyadic rationals); the count and the cells of
        variables never lifted from a float hold ints, as in the reference path (ints stay ints)."""
        fl = np.array([v in self.float_vars for v in self.support] if self.support else [False] * self.k, dtype=bool)
        out = np.zeros(self.W, dtype=bool)
        out[1 : 1 + self.k] = fl
        if self.k:
            iu = np.triu_indices(self.k)
            out[1 + self.k :] = fl[iu[0]] | fl[iu[1]]
        return out

    def _numbers(self, rows: np.ndarray) -> np.ndarray:
        """The exact cells of ``rows`` as the reference path's numbers (an object array ``(len(rows), W)``):
        ints, and :class:`~ivm.rings.exact.Dyadic` values for sums of floats, each the exact sum of its
        cell's components."""
        nc, W = self.nc, self.W
        floats = self._float_cells().tolist()
        out = np.zeros((len(rows), W), dtype=object)
        comps = self.A[rows].reshape(len(rows), W, nc).tolist()
        zero = exact(0.0)
        for i, row in enumerate(comps):
            o = out[i]
            for w, cell in enumerate(row):
                if floats[w]:
                    v = zero
                    for c in cell:
                        if c != 0.0:
                            v = v + exact(c)
                    o[w] = v
                else:
                    o[w] = sum(int(c) for c in cell if c != 0.0)
        return out

    def to_cells(self, nc: int) -> bool:
        """Keep the payloads as exact cells of ``nc`` doubles each (a Shewchuk expansion per cell, for
        ``_covar_kernel.ExactPath``): from the reference path's numbers (an object array of ints and exact
        dyadic rationals).  False, and the store unchanged, when some value needs more components (or is
        not an exact number); the float variables seen (a Dyadic ``s`` or diagonal ``Q`` cell) are added to
        :attr:`float_vars`."""
        from ivm.rings._exact_kernel import Dyadic as CDyadic

        if self.nc:
            return True
        if self.dtype is not object:
            return False
        _, rows = self.live()
        width = self.W * nc
        cells = np.zeros((len(self.A), width), dtype=np.float64)
        seen: set[int] = set()
        diag = [1 + self.k + row_start for row_start in _diagonal(self.k)]
        for r in rows.tolist():
            row = self.A[r]
            for w in range(self.W):
                v = row[w]
                if type(v) is int:
                    d = CDyadic(v)
                elif hasattr(v, "m") and hasattr(v, "e"):
                    d = CDyadic(v.m, v.e)
                    if 1 <= w <= self.k:
                        seen.add(self.support[w - 1] if self.support else w - 1)
                    elif w in diag:
                        i = diag.index(w)
                        seen.add(self.support[i] if self.support else i)
                else:
                    return False
                comps = d.components
                if comps is None or len(comps) > nc:
                    return False
                cells[r, w * nc : w * nc + len(comps)] = comps
        EPOCH.bump()
        self.float_vars.update(seen)
        self._arenas.pop("A", None)
        self.A = cells
        self.dtype = np.float64
        self.nc = nc
        return True

    def to_numbers(self) -> None:
        """Leave exact cells for the reference path's numbers (object arrays; the numpy path computes on
        them).  A no-op for a store without exact cells."""
        if not self.nc:
            return
        EPOCH.bump()
        A = np.zeros((len(self.A), self.W), dtype=object)
        _, rows = self.live()
        if len(rows):
            A[rows] = self._numbers(rows)
        self._arenas.pop("A", None)
        self.A = A
        self.dtype = object
        self.nc = 0

    @property
    def rows(self) -> Mapping[Key, int]:
        """key → row: the dict, or (int mode) a read-only mapping over the codes."""
        return self._rows if self.codes is None else IntRows(self)  # type: ignore[return-value]

    def row_of(self, key: Key) -> int:
        """The row of ``key``, -1 if absent (Python equality of keys)."""
        if self.codes is None:
            return self._rows.get(key, -1)  # type: ignore[union-attr]
        code = self._equal_code(key)
        return -1 if code is None else self.codes.get(code)

    def lookup(self, keys: Sequence[Key], codes: np.ndarray | None = None) -> np.ndarray:
        """The row of every key, -1 where absent (``codes``: the keys' :func:`int_codes`, if known)."""
        if self.codes is not None:
            if codes is None and keys:
                codes = self._int_codes(keys)
            if codes is not None:
                return self.codes.get_many(codes)
            return np.fromiter(map(self.row_of, keys), dtype=np.int64, count=len(keys))
        get = self._rows.get  # type: ignore[union-attr]
        return np.fromiter(map(get, keys, _absent(len(keys))), dtype=np.intp, count=len(keys))

    def __len__(self) -> int:
        return len(self.codes) if self.codes is not None else len(self._rows)  # type: ignore[arg-type]

    @property
    def data(self) -> PayloadView:
        """The payloads by key as ring elements (built on access; O(1) per key read)."""
        return PayloadView(self)

    def payload(self, row: int) -> Any:
        a = self._numbers(np.array([row]))[0] if self.nc else self.A[row]
        c = a[0]
        c = c.item() if isinstance(c, np.generic) else c
        order = np.argsort(self.support, kind="stable")
        idx = tuple(self.support[i] for i in order)
        Q = unpack(a[1 + self.k :], self.k)
        return Covariance(c, a[1 : 1 + self.k][order].copy(), Q[np.ix_(order, order)].copy(), idx)

    def block(self) -> Block:
        """Every stored payload as one :class:`Block` (for re-evaluation)."""
        self.to_numbers()
        keys, r = self.live()
        a = self.A[r]
        codes = self.keycode[r] if self.codes is not None and self.arity == 1 else None  # type: ignore[index]
        return Block(keys, a[:, 0], a[:, 1 : 1 + self.k], a[:, 1 + self.k :], codes)

    def index(self, positions: tuple[int, ...]) -> dict[Key, dict[Key, int]]:
        idx = self.indexes.get(positions)
        if idx is None:
            EPOCH.bump()
            idx = {}
            project = key_projection(positions)
            keys, rows = self.live()
            for key, row in zip(keys, rows.tolist(), strict=True):
                idx.setdefault(project(key), {})[key] = row
            self.indexes[positions] = idx
        return idx

    def memory(self) -> tuple[int, int, float]:
        """(keys, bytes, bytes per payload): arrays exactly (capacity included), tables and keys measured."""
        n = len(self)
        item = self.A.itemsize * max(self.nc, 1) if self.dtype != object else 8 + 32  # (an object: slot and number)
        per_payload = float(self.W * item)
        tables = sys.getsizeof(self.indexes) + sum(sys.getsizeof(i) for i in self.indexes.values())
        tables += self.free.nbytes
        if self.codes is not None:
            tables += self.codes.nbytes + self.keycode.nbytes  # type: ignore[union-attr]
            per_key = 0.0
        else:
            tables += sys.getsizeof(self._rows) + sys.getsizeof(self._keys)
            sample = [k for k, _ in zip(self._rows, range(32), strict=False)]  # type: ignore[arg-type]
            per_key = sum(sys.getsizeof(k) + sum(map(sys.getsizeof, k)) for k in sample) / len(sample) if sample else 0
        arrays = len(self.A) * self.W * item
        return n, int(tables + arrays + n * per_key), per_payload

    # -- writing
    def _grow(self, need: int) -> None:
        """Capacity for ``need`` rows: by an eighth at least, in place when numpy can (no copy)."""
        cap = len(self.A)
        if need <= cap:
            return
        # below 32 MB (where realloc may copy) by half the capacity, above by an eighth (remapped in place)
        width = self.W * max(self.nc, 1)  # (exact cells: nc doubles a cell)
        step = cap // 2 if cap * width * 8 < SMALL_ARRAY else cap // GROWTH
        new = max(need, cap + step, 16)
        if self.dtype is object:  # an object array's new rows must hold the int 0
            A = np.zeros((new, self.W), dtype=object)
            A[:cap] = self.A
            self.A = A
        elif Arena is not None:
            self._grow_arena("A", (new, width))
        else:
            try:
                self.A.resize((new, width), refcheck=True)  # realloc: large arrays are remapped, not copied
            except ValueError:  # a view of A is alive somewhere: copy instead
                A = np.zeros((new, width), dtype=self.dtype)
                A[:cap] = self.A
                self.A = A
        if self.keycode is not None:
            if Arena is not None:
                self._grow_arena("keycode", (new,))
            else:
                keycode = np.zeros(new, dtype=np.int64)
                keycode[:cap] = self.keycode
                self.keycode = keycode
        if self._keys is not None:
            self._keys.extend([None] * (new - len(self._keys)))

    def _grow_arena(self, name: str, shape: tuple[int, ...]) -> None:
        """The array ``self.<name>`` (``A`` or ``keycode``) with ``shape[0]`` rows, its rows kept and the
        new ones zero: its :class:`Arena` remapped in place when no other array views it (O(1) per
        page), else (a view of it alive, or an array not yet over an arena) copied into a new arena."""
        old = getattr(self, name)
        dtype = old.dtype
        nbytes = int(np.prod(shape)) * dtype.itemsize
        arena = self._arenas.get(name)
        if arena is not None:
            alive = weakref.ref(old)
            setattr(self, name, None)
            del old  # the arena's only export, unless a view of the array lives on
            if arena.resize(nbytes):
                setattr(self, name, np.frombuffer(arena, dtype=dtype, count=int(np.prod(shape))).reshape(shape))
                return
            old = alive()
        arena = Arena(nbytes)
        new = np.frombuffer(arena, dtype=dtype, count=int(np.prod(shape))).reshape(shape)
        new[: len(old)] = old
        self._arenas[name] = arena
        setattr(self, name, new)

    def reserve(self, n: int) -> None:
        """Room for ``n`` new rows at the top without growing (for the compiled kernel)."""
        self._grow(self.top + n)

    def reserve_free(self, n: int) -> None:
        """Room for ``n`` more rows on the free stack."""
        if len(self.free) < self.nfree + n:
            free = np.zeros(max(self.nfree + n, len(self.free) + len(self.free) // 2, 16), dtype=np.int64)
            free[: self.nfree] = self.free[: self.nfree]
            self.free = free

    def _take_rows(self, n: int) -> np.ndarray:
        """``n`` unused rows (freed ones first, latest first, then new ones at the end)."""
        reuse = min(n, self.nfree)
        taken = self.free[self.nfree - reuse : self.nfree][::-1]
        self.nfree -= reuse
        fresh = n - reuse
        self._grow(self.top + fresh)
        out = np.concatenate([taken, np.arange(self.top, self.top + fresh, dtype=np.int64)])
        self.top += fresh
        return out

    def _rows_for(self, keys: list[Key], codes: np.ndarray | None) -> np.ndarray:
        """The row of every key (distinct keys), new keys entered at fresh rows (zero payloads)."""
        if self.codes is not None:
            if codes is None:
                codes = self._int_codes(keys, insert=True)
            if codes is None:  # other kinds of keys: equal to stored ints, or new (then the dict)
                found = [self._equal_code(key) for key in keys]
                rows = np.array([-1 if c is None else self.codes.get(c) for c in found], dtype=np.int64)
                if (rows >= 0).all():
                    return rows
                if all(
                    c is not None and (r >= 0 or self._exact_code(key) is not None)
                    for c, r, key in zip(found, rows.tolist(), keys, strict=True)
                ):
                    codes = np.array(found, dtype=np.int64)
                else:
                    self.to_dict_keys()
                    return self._rows_for(keys, None)
            r = self.codes.get_many(codes)
            fresh = np.flatnonzero(r < 0)
            if len(fresh):
                new = self._take_rows(len(fresh))
                r[fresh] = new
                self.codes.set_many(codes[fresh], new)
                self.keycode[new] = codes[fresh]  # type: ignore[index]
                if self.indexes:
                    self._index_fresh([keys[i] for i in fresh.tolist()], new.tolist())
            return r
        get = self._rows.get  # type: ignore[union-attr]
        rows = list(map(get, keys, _absent(len(keys))))
        fresh_i = [i for i, row in enumerate(rows) if row < 0]
        if fresh_i:
            new_rows = self._take_rows(len(fresh_i)).tolist()
            for i, row in zip(fresh_i, new_rows, strict=True):
                rows[i] = row
            fresh_keys = [keys[i] for i in fresh_i]
            self._rows.update(zip(fresh_keys, new_rows, strict=True))  # type: ignore[union-attr]
            slots = self._keys
            for row, key in zip(new_rows, fresh_keys, strict=True):
                slots[row] = key  # type: ignore[index]
            if self.indexes:
                self._index_fresh(fresh_keys, new_rows)
        return np.asarray(rows, dtype=np.intp)

    def add(self, block: Block) -> None:
        """``V += δV`` for a block with distinct keys, deleting keys whose payload becomes 0 (§9 item 1)."""
        if not block.keys:
            return
        self.to_numbers()
        r = self._rows_for(block.keys, block.codes)
        k = self.k
        A = self.A
        A[r, 0] += block.C
        if k:
            A[r, 1 : 1 + k] += block.S
            A[r, 1 + k :] += block.Q
        candidates = r[A[r, 0] == 0]  # counts are exact, so only a row with count 0 can be 0 (§9 item 1)
        if len(candidates):
            a = A[candidates]
            zero = zero_rows(a[:, 0], a[:, 1 : 1 + k], a[:, 1 + k :], self.tolerance)
            if zero.any():
                self._delete(candidates[zero])

    def _index_fresh(self, keys: list[Key], rows: list[int]) -> None:
        """Enter new keys at their rows in the secondary indexes."""
        for positions, idx in self.indexes.items():
            project = key_projection(positions)
            for key, row in zip(keys, rows, strict=True):
                idx.setdefault(project(key), {})[key] = row

    def add_row(self, key: Key, c: Any, s: np.ndarray | None, q: np.ndarray | None) -> None:
        """:meth:`add` for one key: ``V[key] += (c, s, q)`` in place (``s``/``q`` ``None`` when ``k = 0``).

        One primary-index probe, in-place array updates and an O(1) zero test while the count is not 0
        (O(k²) when it is, §9 item 1): no temporary arrays.
        """
        self.to_numbers()
        r = self.row_of(key)
        if r < 0:
            r = int(self._rows_for([key], None)[0])
        A, k = self.A, self.k
        A[r, 0] += c
        if k:
            A[r, 1 : 1 + k] += s
            A[r, 1 + k :] += q
        C = A.item(r, 0)
        if C != 0:
            return
        if k == 0 or row_is_zero(C, A[r, 1 : 1 + k], A[r, 1 + k :], self.tolerance):
            self._delete(np.array([r], dtype=np.intp))

    def _delete(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        if self.codes is not None:
            codes = self.keycode[rows]  # type: ignore[index]
            self.codes.delete_many(codes)
            keys = [self._key(c) for c in codes.tolist()] if self.indexes else []
        else:
            keys = [self._keys[r] for r in rows.tolist()]  # type: ignore[index]
            for row, key in zip(rows.tolist(), keys, strict=True):
                self._keys[row] = None  # type: ignore[index]
                del self._rows[key]  # type: ignore[union-attr,arg-type]
        for positions, idx in self.indexes.items():
            project = key_projection(positions)
            for key in keys:
                sub = project(key)  # type: ignore[arg-type]
                bucket = idx[sub]
                del bucket[key]  # type: ignore[arg-type]
                if not bucket:
                    del idx[sub]
        self.A[rows] = 0
        self.reserve_free(len(rows))
        self.free[self.nfree : self.nfree + len(rows)] = rows
        self.nfree += len(rows)

    # -- snapshots: live rows only; the compiled index is rebuilt (snapshots need no extension)
    def __getstate__(self) -> dict[str, Any]:
        keys, rows = self.live()
        state = {  # (exact cells are saved as the reference path's numbers: one snapshot format)
            "version": 2,
            "k": self.k,
            "dtype": object if self.nc else self.dtype,
            "tolerance": self.tolerance,
            "arity": self.arity,
            "support": self.support,
            "A": self._numbers(rows) if self.nc else self.A[rows],
        }
        if self.codes is not None:
            state["codes"] = self.keycode[rows]  # type: ignore[index]
        else:
            state["keys"] = keys
        if self.keydict is not None:
            state["keydict"] = self.keydict  # (one object for every store of an engine: pickled once)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "version" not in state:  # a snapshot of the full-matrix layout (C, S, Q (n, k, k), rows dict)
            state = _upgrade_state(state)
        self.__init__(state["k"], state["dtype"], state["tolerance"], None)  # type: ignore[misc]
        self.arity = state["arity"]
        self.support = state["support"]
        self.keydict = state.get("keydict")
        A = state["A"]
        n = len(A)
        self.A = A.copy() if A.flags.owndata and A.flags.c_contiguous else np.ascontiguousarray(A).copy()
        self.top = n
        self._keys = [None] * n
        rows = np.arange(n, dtype=np.int64)
        if "codes" in state:
            codes = np.asarray(state["codes"], dtype=np.int64)
            keys = [self._key(c) for c in codes.tolist()]
        else:
            keys = list(state["keys"])
            codes = self._int_codes(keys, insert=True) if keys and self.arity in (0, 1) else None
            if not keys:
                codes = np.zeros(0, dtype=np.int64)
        self._rows = dict(zip(keys, rows.tolist(), strict=True))
        self._keys = list(keys)
        if codes is not None and Int64Index is not None and self.arity in (0, 1):
            self._use_codes()
            self.codes.set_many(codes, rows)
            self.keycode[:] = codes  # type: ignore[index]


@cache
def _diagonal(k: int) -> tuple[int, ...]:
    """Positions of ``Q[i, i]`` in the packed upper triangle of a ``k × k`` matrix."""
    return tuple(i * k - i * (i - 1) // 2 for i in range(k))


def _upgrade_state(state: dict[str, Any]) -> dict[str, Any]:
    """A :class:`ColumnStore` state of the full-matrix layout as a packed one (older snapshots)."""
    rows: dict[Key, int] = state["rows"]
    r = np.fromiter(rows.values(), dtype=np.intp, count=len(rows))
    k = state["k"]
    C, S, Q = state["C"], state["S"], state["Q"]
    A = np.zeros((len(r), 1 + k + triangle_size(k)), dtype=C.dtype)
    A[:, 0] = C[r]
    A[:, 1 : 1 + k] = S[r]
    A[:, 1 + k :] = pack(Q[r])
    keys = list(rows)
    arity = len(keys[0]) if keys else None
    return {
        "version": 2,
        "k": k,
        "dtype": state["dtype"],
        "tolerance": state["tolerance"],
        "arity": arity,
        "support": state.get("support", ()),
        "A": A,
        "keys": keys,
    }


class IntRows(Mapping[Key, int]):
    """key → row over a store in int mode (the codes), with the dict's key equality."""

    def __init__(self, store: ColumnStore) -> None:
        self.store = store

    def __getitem__(self, key: Key) -> int:
        row = self.store.row_of(key)
        if row < 0:
            raise KeyError(key)
        return row

    def get(self, key: Key, default: Any = None) -> Any:
        row = self.store.row_of(key)
        return default if row < 0 else row

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self.store.row_of(key) >= 0

    def __iter__(self) -> Iterator[Key]:
        return iter(self.store.live()[0])

    def __len__(self) -> int:
        return len(self.store)

    def items(self) -> Any:
        keys, rows = self.store.live()
        return list(zip(keys, rows.tolist(), strict=True))

    def values(self) -> Any:
        return self.store.live()[1].tolist()


class PayloadView(Mapping[Key, Any]):
    """A read-only mapping key → ring element over a :class:`ColumnStore`."""

    def __init__(self, store: ColumnStore) -> None:
        self.store = store

    def __getitem__(self, key: Key) -> Any:
        row = self.store.row_of(key)
        if row < 0:
            raise KeyError(key)
        return self.store.payload(row)

    def get(self, key: Key, default: Any = None) -> Any:
        row = self.store.row_of(key)
        return default if row < 0 else self.store.payload(row)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self.store.row_of(key) >= 0

    def __iter__(self) -> Iterator[Key]:
        return iter(self.store.live()[0])

    def __len__(self) -> int:
        return len(self.store)

    def items(self) -> Any:
        keys, rows = self.store.live()
        return [(key, self.store.payload(r)) for key, r in zip(keys, rows.tolist(), strict=True)]


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
    factors: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None, int]] = []  # (c, s, Q packed, offset)
    off, size = child_block
    factors.append((delta.C[src], delta.S[src] if size else None, delta.Q[src] if size else None, off))
    for (off, size), store, rows in zip(sibling_blocks, stores, sib_rows, strict=True):
        store.to_numbers()  # type: ignore[union-attr]  # (a store with exact cells: the reference numbers)
        a = store.A[rows]  # type: ignore[union-attr]  # one gather per sibling: count, s and Q
        kk = store.k  # type: ignore[union-attr]
        factors.append((a[:, 0], a[:, 1 : 1 + kk] if size else None, a[:, 1 + kk :] if size else None, off))
    n = len(out_keys)
    X = lift_values(lifted) if layout.lift_size else None
    if dtype is not object:
        block = _float_product(factors, X, layout.lift_offset, k, reduce, n)
        if block is not None:
            return Block(keys, *block, codes)
    if X is not None:
        rows_l, cols_l = triangle(X.shape[1])
        factors.append((None, X, X[:, rows_l] * X[:, cols_l], layout.lift_offset))  # type: ignore[arg-type]
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
    Q = np.zeros((len(keys), triangle_size(k)), dtype=dtype)
    blocks = sorted(
        (i for i, f in enumerate(factors) if f[1] is not None and f[1].shape[1]), key=lambda i: factors[i][3]
    )
    for i in blocks:
        _, s, q, o = factors[i]
        w = c_except(i)
        kk = s.shape[1]  # type: ignore[union-attr]
        S[:, o : o + kk] = reduce(s if w is None else s * w[:, None])  # type: ignore[index, operator]
        Q[:, diagonal_cells(k, o, kk)] = reduce(q if w is None else q * w[:, None])  # type: ignore[index, operator]
    for a_i, i in enumerate(blocks):  # blocks in offset order: block i's rows lie above block j's columns
        for j in blocks[a_i + 1 :]:
            _, si, _, oi = factors[i]
            _, sj, _, oj = factors[j]
            ki, kj = si.shape[1], sj.shape[1]  # type: ignore[union-attr]
            cross = reduce.outer(c_except(i, j), si, sj)  # type: ignore[arg-type]
            Q[:, cross_cells(k, oi, ki, oj, kj)] = cross.reshape(len(keys), ki * kj)
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
    of :func:`row_delta` for a whole batch); only the upper triangle is formed.  ``None`` when some
    row has ``P = 0`` (a count 0): the division-free rule of :func:`delta_rule` handles those batches.
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
    rows, cols = triangle(k)
    Q = (scaled.T @ Shat)[rows, cols][None] if reduce.single else reduce(scaled[:, rows] * Shat[:, cols])
    for o, kk, q, w in diagonal:
        Q[:, diagonal_cells(k, o, kk)] = reduce(q * w[:, None])
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


class _RowGetter:
    """``get(key)`` → the row of ``key`` in a store, ``None`` if absent (a primary-key step of an index join)."""

    __slots__ = ("store",)

    def __init__(self, store: ColumnStore) -> None:
        self.store = store

    def get(self, key: Key) -> int | None:
        row = self.store.row_of(key)
        return None if row < 0 else row


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
        _RowGetter(store) if step.full else store.index(step.bound_pos)
        for step, store in zip(steps, stores, strict=True)
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
    packed cell (i ≤ j) of the ``k × k`` matrix (:func:`triangle`) to the cell ``(f(i), f(j))`` of
    the sized factors' coefficient matrix (f(i): the sized factor owning support position i).
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
        rows, cols = triangle(k)
        flat = owner[rows] * len(sized) + owner[cols]
        rules.append(RowRule(k, tuple(blocks), sized, tuple(blocks[f][1] for f in sized), flat, lift))
    return rules


def row_rules(node: ViewNode) -> list[RowRule | None]:
    """``node.layout.rules``, compiled on first use for layouts restored from older snapshots."""
    layout: Layout = node.layout  # type: ignore[attr-defined]
    rules = layout.rules
    if rules is None or any(r is not None and len(r.flat) != triangle_size(r.k) for r in rules):
        layout.rules = rules = _compile_rules(node, layout)  # (older snapshots: the full k × k map)
    return rules


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
    array calls, only the upper triangle of ``Q`` formed (packed, :func:`triangle`).  Returns
    ``(key, c, s, q)`` of the view, or ``None`` if a sibling has no such key.
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
        r = store.row_of(project(key))  # type: ignore[union-attr]
        if r < 0:
            return None
        store.to_numbers()  # type: ignore[union-attr]
        a = store.A[r]  # type: ignore[union-attr]
        cf = a.item(0)
        if blocks[f][1]:
            kk = store.k  # type: ignore[union-attr]
            cs[f], ss[f], qs[f] = cf, a[1 : 1 + kk], a[1 + kk :]
        else:
            u *= cf
        f += 1
    if rule.lift >= 0:
        lifted = direct.lift(key)
        if not floats:  # exact payloads: a float is lifted as its exact dyadic rational (ivm.rings.exact)
            lifted = np.array([x if type(x) is int else exact(x) for x in lifted], dtype=object)
        cs[f], ss[f] = 1, lifted
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
        rows, cols = triangle(k)
        Q = S[rows] * S[cols]
        np.divide(Q, P, out=Q)  # every block Q_fg = K_fg s_f s_gᵀ, the lifting's diagonal block included
        for f in sized:
            if qs[f] is not None:
                o, size = blocks[f]
                Q[diagonal_cells(k, o, size)] = qs[f] * (P / cs[f])
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
    rows, cols = triangle(rule.k)
    Q = np.array(K, dtype=dtype).ravel().take(rule.flat) * (s_all[rows] * s_all[cols])
    for i, f in enumerate(sized):
        if f != lift:
            o, size = blocks[f]
            Q[diagonal_cells(rule.k, o, size)] = w[i] * qs[f]
    S = np.repeat(np.array(w, dtype=dtype), rule.sizes) * s_all
    return S, Q
