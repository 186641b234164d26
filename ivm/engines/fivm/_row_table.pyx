# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A base relation as arrays behind an open-addressing hash table: tuples → multiplicities (F-IVM §2, §4).

F-IVM keeps the base relations' multiplicities (``R: tuples → Z``, the Z-relations of §2) for the
input policy's lookups, re-evaluation and snapshots.  A Python ``dict`` of tuples costs about 400
bytes per tuple of 11 numbers; :class:`RowTable` keeps one 8-byte cell per value, an int64
multiplicity and one 8-byte hash slot per tuple (at most half the slots in use), so about
``8 · (arity + 1) + 16..32`` bytes per tuple.

Cells.  A column holds Python ``int`` values (int64) or ``float`` values (the double's bits); the
first row inserted fixes each column's kind.  A row is *stored* only when every value has its
column's kind exactly (``type(v) is int`` within int64, or a ``float`` that is not NaN); any other
row (a ``bool``, an ``int`` in a float column, a string, an int beyond int64, NaN) cannot be
stored, and the caller (:class:`ivm.engines.fivm.base_relation.CompactRelation`) moves the
relation to a ``dict`` for good.  So iteration gives back values of the types that went in.
*Lookups* answer what the ``dict`` answers under Python equality: ``1.0``, ``True`` or
``Fraction(1)`` find the int ``1``, an int equal to a stored double finds it, ``-0.0`` finds
``0.0``, and a value equal to no cell of its column (NaN, ``"1"``, ``2**64``) finds nothing.

Table.  Linear probing over a power-of-two table at most half full; a slot keeps the row number
and the low 32 bits of the row's hash, which place it (so growing the table and deleting never
read a row's cells) and filter the rows compared on a probe.  Rows
are appended in insertion order; a row whose multiplicity reaches 0 leaves the table at once
(backward-shift deletion, no tombstones) and its cells are reclaimed by :meth:`RowTable.compact`
when more than half the rows are dead, which keeps insertion order, as a ``dict`` does.
Expected O(arity) per lookup, insert or delete; cells grow by half their capacity up to 32 MB and by
an eighth beyond, and the cells, multiplicities and slots are zeroed memory that grows without a
copy (``_mem.pxd``: ``mremap`` of an anonymous mapping beyond 256 KB).
"""

from cpython.buffer cimport PyBUF_RECORDS_RO, PyBuffer_Release, PyObject_GetBuffer
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_Check
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.math cimport isnan
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

import numpy as np

from ivm.engines.fivm._mem cimport ivm_alloc, ivm_free, ivm_grow

cdef extern from "Python.h":
    PyObject* PyDict_GetItem(object d, object key)

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define IVM_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 1)
    #else
    #define IVM_PREFETCH(p) ((void)0)
    #endif
    """
    void IVM_PREFETCH(const void* p) noexcept nogil


cdef enum:
    KIND_UNKNOWN = -1
    KIND_INT = 0
    KIND_FLOAT = 1
#: a multiplicity at or beyond this leaves int64 arrays (the relation moves to a dict): with
#: |update| ≤ 2^31 and at most 2^31 updates a batch, |old + net| < 2^63 never overflows
cdef int64_t BIG = (<int64_t>1) << 62
cdef int64_t MAX_UPDATE = (<int64_t>1) << 31

KINDS = {KIND_INT: "int", KIND_FLOAT: "float"}
#: the largest multiplicity one update may carry into a table (beyond it the relation moves to a dict)
MAX_MULTIPLICITY = MAX_UPDATE


cdef inline uint64_t mix(uint64_t x) noexcept nogil:
    # splitmix64's finalizer
    x ^= x >> 30
    x *= <uint64_t>0xbf58476d1ce4e5b9
    x ^= x >> 27
    x *= <uint64_t>0x94d049bb133111eb
    x ^= x >> 31
    return x


cdef inline double as_double(int64_t bits) noexcept nogil:
    cdef double d
    memcpy(&d, &bits, 8)
    return d


cdef inline int64_t as_bits(double d) noexcept nogil:
    cdef int64_t bits
    memcpy(&bits, &d, 8)
    return bits


cdef inline int64_t* seen_pos_fresh(int64_t* seen_pos, Py_ssize_t size, Py_ssize_t k) noexcept nogil:
    """Where :meth:`RowTable.apply_cells` keeps the delta position of the batch's ``k``-th created row
    (after the ``size`` positions of its hash table of rows that were there before)."""
    return seen_pos + size + k


cdef inline uint64_t row_hash(const int64_t* cells, const int8_t* kinds, Py_ssize_t n) noexcept nogil:
    """A 64-bit hash of a row; equal rows (``-0.0 == 0.0``) hash equal."""
    cdef uint64_t h = <uint64_t>0x9E3779B97F4A7C15 + <uint64_t>n
    cdef Py_ssize_t j
    cdef int64_t v
    for j in range(n):  # xor-multiply per cell (a bijection of h for each v), one full mix at the end
        v = cells[j]
        if kinds[j] == KIND_FLOAT and as_double(v) == 0.0:
            v = 0
        h = (h ^ <uint64_t>v) * <uint64_t>0x9E3779B97F4A7C15
        h ^= h >> 29
    return mix(h)


cdef inline bint row_equal(const int64_t* a, const int64_t* b, const int8_t* kinds, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(n):
        if a[j] != b[j]:
            if kinds[j] != KIND_FLOAT or as_double(a[j]) != as_double(b[j]):
                return False
    return True


cdef inline int strict_cell(object v, int8_t* kind, int64_t* out) except -1:
    """The cell of ``v`` if it can be stored in a column of ``kind`` (set when unknown): 1, else 0."""
    cdef int overflow = 0
    cdef long long x
    cdef double d
    if PyLong_CheckExact(v):
        if kind[0] == KIND_FLOAT:
            return 0
        x = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow:
            return 0
        kind[0] = KIND_INT
        out[0] = x
        return 1
    if PyFloat_Check(v):
        if kind[0] == KIND_INT:
            return 0
        d = PyFloat_AS_DOUBLE(v)
        if isnan(d):
            return 0
        kind[0] = KIND_FLOAT
        out[0] = as_bits(d)
        return 1
    return 0


cdef int lookup_cell(object v, int8_t kind, int64_t* out) except -1:
    """The cell equal to ``v`` (Python ``==``) in a column of ``kind``: 1 and the cell, or 0 if none can be."""
    cdef int overflow = 0
    cdef long long x
    cdef double d
    if kind == KIND_INT:
        if PyLong_CheckExact(v):
            x = PyLong_AsLongLongAndOverflow(v, &overflow)
            if overflow:
                return 0
            out[0] = x
            return 1
        try:
            c = int(v)
            if not (c == v):
                return 0
            x = PyLong_AsLongLongAndOverflow(c, &overflow)
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            return 0
        if overflow:
            return 0
        out[0] = x
        return 1
    if kind == KIND_FLOAT:
        if PyFloat_Check(v):
            d = PyFloat_AS_DOUBLE(v)
        else:
            try:
                d = float(v)
                if not (v == d):
                    return 0
            except (TypeError, ValueError, OverflowError, ArithmeticError):
                return 0
        if isnan(d):
            return 0
        out[0] = as_bits(d)
        return 1
    return 0


cdef class RowTable:
    """Tuples of one arity → non-zero int64 multiplicities, in insertion order (see the module docstring).

    >>> t = RowTable(2)
    >>> rows, nets, olds, big = t.apply_cells(*t.parse([((1, 2.5), 3), ((1, 2.5), -1), ((2, 0.5), 1)]))
    >>> rows.tolist(), nets.tolist(), olds.tolist(), t.get((1, 2.5)), t.get((1.0, 2.5)), t.get((True, 2.5)), len(t)
    ([0, 1], [2, 1], [0, 0], 2, 2, 2, 2)
    >>> t.to_dict()
    {(1, 2.5): 2, (2, 0.5): 1}
    """

    cdef readonly Py_ssize_t ncols
    cdef int8_t* kinds
    cdef int64_t* cells
    cdef int64_t* mult
    cdef Py_ssize_t cap
    cdef readonly Py_ssize_t n  # rows appended, live and dead
    cdef readonly Py_ssize_t live
    cdef uint64_t* slots  # (hash & 0xFFFFFFFF) << 32 | (row + 1); 0: empty
    cdef size_t cells_bytes, mult_bytes  # the blocks' sizes (``_mem.pxd`` frees and grows them by size)
    cdef uint64_t mask
    cdef Py_ssize_t used  # slots in use

    def __cinit__(self, Py_ssize_t ncols):
        if ncols < 0:
            raise ValueError("arity must be non-negative")
        self.ncols = ncols
        self.kinds = <int8_t*> malloc(ncols + 1)
        if self.kinds == NULL:
            raise MemoryError()
        memset(self.kinds, 0xFF, ncols + 1)  # KIND_UNKNOWN
        self.cells = NULL
        self.mult = NULL
        self.cells_bytes = self.mult_bytes = 0
        self.cap = 0
        self.n = 0
        self.live = 0
        self.slots = NULL
        self._table(16)

    def __dealloc__(self):
        free(self.kinds)
        ivm_free(self.cells, self.cells_bytes)
        ivm_free(self.mult, self.mult_bytes)
        if self.slots != NULL:
            ivm_free(self.slots, (self.mask + 1) * sizeof(uint64_t))

    # ------------------------------------------------------------------ storage
    cdef void _table(self, Py_ssize_t size) except *:
        """An empty table of ``size`` slots (zeroed memory: no ``memset``)."""
        cdef uint64_t* slots = <uint64_t*> ivm_alloc(size * sizeof(uint64_t))
        if slots == NULL:
            raise MemoryError()
        if self.slots != NULL:
            ivm_free(self.slots, (self.mask + 1) * sizeof(uint64_t))
        self.slots = slots
        self.mask = size - 1
        self.used = 0

    cdef void _rehash(self, Py_ssize_t size) except *:
        """A table of ``size`` slots holding the same entries (their hash halves place them)."""
        cdef uint64_t* old = self.slots
        cdef Py_ssize_t i, old_size = self.mask + 1
        if size > (<Py_ssize_t>1 << 32):
            raise OverflowError("a compact relation's table holds at most 2^32 slots")
        self.slots = NULL
        try:
            self._table(size)
        except MemoryError:
            self.slots = old
            raise
        for i in range(old_size):
            if old[i] != 0:
                self._put_slot(old[i])
        ivm_free(old, old_size * sizeof(uint64_t))

    cdef inline void _put_slot(self, uint64_t slot) noexcept nogil:
        cdef uint64_t i = (slot >> 32) & self.mask
        while self.slots[i] != 0:
            i = (i + 1) & self.mask
        self.slots[i] = slot
        self.used += 1

    cdef void _reserve(self, Py_ssize_t extra) except *:
        """Room for ``extra`` more rows (cells grow by an eighth at a time) and table entries."""
        cdef Py_ssize_t need = self.n + extra, new
        cdef int64_t* cells
        cdef int64_t* mult
        if need > 0xFFFFFFFE:
            raise OverflowError("a compact relation holds fewer than 2^32 rows")
        if need > self.cap:
            new = max(need, self.cap + (self.cap // 2 if self.cap * self.ncols < (4 << 20) else self.cap // 8), 64)
            cells = <int64_t*> ivm_grow(self.cells, self.cells_bytes, max(new * self.ncols, 1) * sizeof(int64_t))
            if cells == NULL:
                raise MemoryError()
            self.cells = cells
            self.cells_bytes = max(new * self.ncols, 1) * sizeof(int64_t)
            mult = <int64_t*> ivm_grow(self.mult, self.mult_bytes, new * sizeof(int64_t))
            if mult == NULL:
                raise MemoryError()
            self.mult = mult
            self.mult_bytes = new * sizeof(int64_t)
            self.cap = new
        if 2 * (self.used + extra) > <Py_ssize_t>(self.mask + 1):
            new = self.mask + 1
            while 2 * (self.used + extra) > new:
                new *= 2
            self._rehash(new)

    cdef inline Py_ssize_t _find(self, const int64_t* probe, uint64_t h, uint64_t* where) noexcept nogil:
        """The row equal to ``probe`` (or -1, ``where`` the empty slot that ends its probe run)."""
        cdef uint64_t i = h & self.mask, s, tag = h << 32
        cdef Py_ssize_t r
        while True:
            s = self.slots[i]
            if s == 0:
                where[0] = i
                return -1
            if (s & <uint64_t>0xFFFFFFFF00000000) == tag:
                r = <Py_ssize_t>(s & <uint64_t>0xFFFFFFFF) - 1
                if row_equal(self.cells + r * self.ncols, probe, self.kinds, self.ncols):
                    where[0] = i
                    return r
            i = (i + 1) & self.mask

    cdef void _unslot(self, Py_ssize_t row) noexcept nogil:
        """Take ``row`` out of the table (backward-shift deletion; slots' hash halves give their homes)."""
        cdef uint64_t h = row_hash(self.cells + row * self.ncols, self.kinds, self.ncols)
        cdef uint64_t i = h & self.mask, j, home, want = <uint64_t>(row + 1)
        while self.slots[i] != 0:
            if (self.slots[i] & <uint64_t>0xFFFFFFFF) == want:
                break
            i = (i + 1) & self.mask
        else:
            return
        j = i
        while True:
            j = (j + 1) & self.mask
            if self.slots[j] == 0:
                break
            home = (self.slots[j] >> 32) & self.mask
            if ((j - home) & self.mask) >= ((j - i) & self.mask):
                self.slots[i] = self.slots[j]
                i = j
        self.slots[i] = 0
        self.used -= 1

    cdef Py_ssize_t _slot_row(self, const int64_t* probe) noexcept nogil:
        """The row equal to ``probe`` (cells of this table's kinds), or -1; nothing is inserted."""
        cdef uint64_t where
        if self.live == 0:
            return -1
        return self._find(probe, row_hash(probe, self.kinds, self.ncols), &where)

    cdef Py_ssize_t _upsert(self, const int64_t* probe, uint64_t h) noexcept nogil:
        """The row equal to ``probe`` (hash ``h``), appended (multiplicity 0) if absent; room reserved by the caller."""
        cdef uint64_t where
        cdef Py_ssize_t r = self._find(probe, h, &where)
        if r >= 0:
            return r
        r = self.n
        memcpy(self.cells + r * self.ncols, probe, self.ncols * sizeof(int64_t))
        self.mult[r] = 0
        self.n += 1
        self.slots[where] = (h << 32) | <uint64_t>(r + 1)
        self.used += 1
        return r

    cdef void _set_kinds(self, const int8_t[:] kinds) noexcept:
        cdef Py_ssize_t j
        for j in range(self.ncols):
            if self.kinds[j] == KIND_UNKNOWN:
                self.kinds[j] = kinds[j]

    # ------------------------------------------------------------------ reading
    def kinds_of(self) -> tuple:
        """Each column's kind: ``"int"``, ``"float"`` or ``None`` (no row yet)."""
        return tuple(KINDS.get(self.kinds[j]) for j in range(self.ncols))

    def __len__(self) -> int:
        return self.live

    @property
    def nbytes(self) -> int:
        """Bytes held: cells and multiplicities (capacity) and the hash table."""
        return self.cap * (self.ncols + 1) * 8 + (self.mask + 1) * 8 + self.ncols + 1

    cdef object _tuple(self, Py_ssize_t r):
        cdef Py_ssize_t j
        cdef const int64_t* c = self.cells + r * self.ncols
        out = [None] * self.ncols
        for j in range(self.ncols):
            out[j] = as_double(c[j]) if self.kinds[j] == KIND_FLOAT else c[j]
        return tuple(out)

    cdef int _lookup_cells(self, object row, int64_t* probe) except -1:
        """``row``'s cells for a lookup: 1, or 0 when no stored row can equal it (TypeError if unhashable)."""
        cdef Py_ssize_t j
        if not PyTuple_Check(row):
            hash(row)  # an unhashable row raises, as a dict lookup does
            return 0
        if PyTuple_GET_SIZE(row) != self.ncols:
            return 0
        for j in range(self.ncols):
            if not lookup_cell(<object>PyTuple_GET_ITEM(row, j), self.kinds[j], probe + j):
                hash(row)
                return 0
        return 1

    def get(self, row, default=0):
        """The multiplicity of ``row`` (``default`` if absent), under Python equality: O(arity) expected."""
        cdef int64_t stack[16]
        cdef int64_t* probe = &stack[0]
        cdef Py_ssize_t r = -1
        if self.ncols > 16:
            probe = <int64_t*> malloc(self.ncols * sizeof(int64_t))
            if probe == NULL:
                raise MemoryError()
        try:
            if self.live and self._lookup_cells(row, probe):
                r = self._slot_row(probe)
        finally:
            if probe != &stack[0]:
                free(probe)
        return self.mult[r] if r >= 0 else default

    def get_many(self, rows) -> list:
        """:meth:`get` of every row (0 when absent)."""
        return [self.get(row) for row in rows]

    # the read-only mapping protocol of the dict it stands for (``engine.base[relation]``)
    def __getitem__(self, row):
        found = self.get(row, None)
        if found is None:
            raise KeyError(row)
        return found

    def __contains__(self, row) -> bool:
        return self.get(row, None) is not None

    def __iter__(self):
        cdef Py_ssize_t r
        for r in range(self.n):
            if self.mult[r] != 0:
                yield self._tuple(r)

    def keys(self):
        return list(self)

    def values(self):
        cdef Py_ssize_t r
        return [self.mult[r] for r in range(self.n) if self.mult[r] != 0]

    def __eq__(self, other):
        if isinstance(other, RowTable):
            return self.to_dict() == other.to_dict()
        if isinstance(other, dict):
            return self.to_dict() == other
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"RowTable({self.to_dict()!r})"

    def live_rows(self):
        """The row numbers of the live rows, in insertion order (int64)."""
        out = np.empty(self.live, dtype=np.int64)
        cdef int64_t[::1] o = out
        cdef Py_ssize_t r, i = 0
        for r in range(self.n):
            if self.mult[r] != 0:
                o[i] = r
                i += 1
        return out

    def tuples(self, const int64_t[:] rows) -> list:
        """The tuples at the given row numbers."""
        return [self._tuple(rows[i]) for i in range(rows.shape[0])]

    def items(self):
        """``(tuple, multiplicity)`` of every live row, in insertion order."""
        cdef Py_ssize_t r
        for r in range(self.n):
            if self.mult[r] != 0:
                yield self._tuple(r), self.mult[r]

    def to_dict(self) -> dict:
        """The relation as ``{tuple: multiplicity}`` (insertion order)."""
        cdef Py_ssize_t r
        out = {}
        for r in range(self.n):
            if self.mult[r] != 0:
                out[self._tuple(r)] = self.mult[r]
        return out

    def delta_dict(self, const int64_t[:] rows, const int64_t[:] nets) -> dict:
        """``{tuple: net}`` of a batch's consolidated delta (:meth:`apply_cells`'s rows and nets)."""
        cdef Py_ssize_t i
        return {self._tuple(rows[i]): nets[i] for i in range(rows.shape[0])}

    def gather(self, const int64_t[:] rows, code_cols, value_cols):
        """``(codes, values)`` of the given rows: int64 ``(d, |code_cols|)`` from int columns, double
        ``(d, |value_cols|)`` (ints converted as ``float(int)`` does); ``None`` if a code column is not int."""
        cdef Py_ssize_t d = rows.shape[0], i, j, nc = len(code_cols), nv = len(value_cols), col
        cdef const int64_t* c
        for j in range(nc):
            if self.kinds[<Py_ssize_t>code_cols[j]] != KIND_INT:
                return None
        codes = np.empty((d, nc), dtype=np.int64)
        values = np.empty((d, nv), dtype=np.float64)
        cdef int64_t[:, ::1] co = codes
        cdef double[:, ::1] va = values
        cdef const Py_ssize_t[:] cc = code_cols if type(code_cols) is np.ndarray else np.asarray(code_cols, np.intp)
        cdef const Py_ssize_t[:] vc = value_cols if type(value_cols) is np.ndarray else np.asarray(value_cols, np.intp)
        for i in range(d):
            c = self.cells + rows[i] * self.ncols
            for j in range(nc):
                co[i, j] = c[cc[j]]
            for j in range(nv):
                col = vc[j]
                va[i, j] = as_double(c[col]) if self.kinds[col] == KIND_FLOAT else <double>c[col]
        return codes, values

    # ------------------------------------------------------------------ writing
    def parse(self, pairs) -> tuple | None:
        """``(cells, mults, kinds)`` of ``(row, multiplicity)`` pairs for :meth:`apply_cells`, or ``None``
        when some row cannot be stored or some multiplicity is not an int of at most 2^31 in size."""
        cdef Py_ssize_t n = len(pairs), i = 0, j
        cdef int overflow = 0
        cdef long long m
        kinds = np.empty(self.ncols, dtype=np.int8)
        cdef int8_t[::1] kv = kinds
        for j in range(self.ncols):
            kv[j] = self.kinds[j]
        cells = np.empty((n, self.ncols), dtype=np.int64)
        mults = np.empty(n, dtype=np.int64)
        cdef int64_t[:, ::1] cv = cells
        cdef int64_t[::1] mv = mults
        for row, mult in pairs:
            if not PyLong_CheckExact(mult):
                return None
            m = PyLong_AsLongLongAndOverflow(mult, &overflow)
            if overflow or m > MAX_UPDATE or m < -MAX_UPDATE:
                return None
            if not PyTuple_Check(row) or PyTuple_GET_SIZE(row) != self.ncols:
                return None
            for j in range(self.ncols):
                if not strict_cell(<object>PyTuple_GET_ITEM(row, j), &kv[j], &cv[i, j]):
                    return None
            mv[i] = m
            i += 1
        return cells, mults, kinds

    def apply_cells(self, const int64_t[:, ::1] cells, const int64_t[:] mults, const int8_t[:] kinds):
        """``R += δR`` for updates given as cells (:meth:`parse`, :func:`parse_batch`), in order.

        Returns ``(rows, nets, olds, big)``: the distinct rows touched, in order of first appearance,
        with a non-zero net multiplicity (the batch consolidated, as
        :func:`ivm.updates.by_relation` does), each row's multiplicity before the batch, and whether
        some multiplicity reached 2^62 (then the caller moves the relation to a ``dict``).  Rows
        whose multiplicity becomes 0 leave the table; their cells stay readable (``gather``,
        ``tuples``) until :meth:`compact`.  O(|δR| · arity) expected.
        """
        cdef Py_ssize_t n = cells.shape[0], i, d = 0, g, size = 16
        cdef int64_t r, new
        cdef bint big = False
        if cells.shape[1] != self.ncols or mults.shape[0] != n or kinds.shape[0] != self.ncols:
            raise ValueError("cells, multiplicities and kinds differ in shape")
        self._set_kinds(kinds)
        self._reserve(n)
        while size < 2 * n:
            size *= 2
        # the batch's distinct rows: row number → position in the delta (open addressing)
        cdef int64_t* seen_row = <int64_t*> malloc(size * sizeof(int64_t))
        cdef int64_t* seen_pos = <int64_t*> malloc((size + n) * sizeof(int64_t))  # then the fresh rows' positions
        rows_a = np.empty(n, dtype=np.int64)
        nets_a = np.empty(n, dtype=np.int64)
        olds_a = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] rows = rows_a
        cdef int64_t[::1] nets = nets_a
        cdef int64_t[::1] olds = olds_a
        cdef uint64_t mask = size - 1, s
        if seen_row == NULL or seen_pos == NULL:
            free(seen_row)
            free(seen_pos)
            raise MemoryError()
        hashes_a = np.empty(n, dtype=np.uint64)
        cdef uint64_t[::1] hashes = hashes_a
        for i in range(n):  # every row's hash first, its slot prefetched (the probes below then overlap)
            hashes[i] = row_hash(&cells[i, 0], self.kinds, self.ncols)
            IVM_PREFETCH(&self.slots[hashes[i] & self.mask])
        cdef Py_ssize_t n0 = self.n, before
        cdef bint seen_ready = False
        try:
            for i in range(n):
                before = self.n
                r = self._upsert(&cells[i, 0], hashes[i])
                if r >= n0:  # a row this batch created: its position is kept by row number, no probe
                    if self.n != before:  # created by this update: its first appearance
                        seen_pos_fresh(seen_pos, size, r - n0)[0] = d
                        rows[d] = r
                        nets[d] = mults[i]
                        olds[d] = 0
                        d += 1
                    else:
                        nets[seen_pos_fresh(seen_pos, size, r - n0)[0]] += mults[i]
                    continue
                if not seen_ready:  # rows there before the batch: the hash table of the batch's distinct ones
                    memset(seen_row, 0xFF, size * sizeof(int64_t))
                    seen_ready = True
                s = mix(<uint64_t>r) & mask
                while seen_row[s] != -1 and seen_row[s] != r:
                    s = (s + 1) & mask
                if seen_row[s] == -1:
                    seen_row[s] = r
                    seen_pos[s] = d
                    rows[d] = r
                    nets[d] = mults[i]
                    olds[d] = self.mult[r]
                    d += 1
                else:
                    nets[seen_pos[s]] += mults[i]
        finally:
            free(seen_row)
            free(seen_pos)
        g = 0
        for i in range(d):
            r = rows[i]
            new = olds[i] + nets[i]
            if nets[i] == 0:  # the batch cancels out on this row: no change (a fresh row leaves again)
                if olds[i] == 0:
                    self._unslot(r)
                continue
            self.mult[r] = new
            if new == 0:
                self._unslot(r)
                self.live -= 1
            elif olds[i] == 0:
                self.live += 1
            if new >= BIG or new <= -BIG:
                big = True
            rows[g] = r
            nets[g] = nets[i]
            olds[g] = olds[i]
            g += 1
        return rows_a[:g], nets_a[:g], olds_a[:g], big

    def compact(self, bint force=False) -> bool:
        """Drop dead rows (order kept) when they are more than half of all rows (or ``force``): O(rows)."""
        cdef Py_ssize_t r, w = 0, dead = self.n - self.live, size = 16
        if not force and (dead <= 64 or 2 * dead <= self.n):
            return False
        for r in range(self.n):
            if self.mult[r] != 0:
                if w != r:
                    memcpy(self.cells + w * self.ncols, self.cells + r * self.ncols, self.ncols * sizeof(int64_t))
                    self.mult[w] = self.mult[r]
                w += 1
        self.n = w
        while size < 2 * w:
            size *= 2
        self._table(size)  # rows moved: their slots are made again from their cells
        for r in range(w):
            self._put_slot((row_hash(self.cells + r * self.ncols, self.kinds, self.ncols) << 32) | <uint64_t>(r + 1))
        return True

    def __reduce__(self):
        return (_restore, (self.ncols, *self.export()))

    def export(self) -> tuple:
        """``(kinds, cells, mults)`` of the live rows in order: plain bytes and int64 arrays (for snapshots)."""
        live = self.live_rows()
        cdef Py_ssize_t i, j
        cells = np.empty((self.live, self.ncols), dtype=np.int64)
        mults = np.empty(self.live, dtype=np.int64)
        cdef int64_t[:, ::1] cv = cells
        cdef int64_t[::1] mv = mults
        cdef int64_t[::1] lv = live
        for i in range(self.live):
            for j in range(self.ncols):
                cv[i, j] = self.cells[lv[i] * self.ncols + j]
            mv[i] = self.mult[lv[i]]
        return table_kinds(self), cells, mults


def _restore(ncols, kinds, cells, mults) -> RowTable:
    table = RowTable(ncols)
    k = np.frombuffer(kinds, dtype=np.int8)
    if len(mults):
        table.apply_cells(np.ascontiguousarray(cells, dtype=np.int64), np.asarray(mults, dtype=np.int64), k)
    else:
        table.apply_cells(np.zeros((0, ncols), dtype=np.int64), np.zeros(0, dtype=np.int64), k)
    return table


def parse_batch(updates, dict names, list tables):
    """A batch of ``(relation, row, multiplicity)`` updates as cells per relation, or ``None``.

    ``names`` maps a relation to its position in ``tables`` (a :class:`RowTable`, or ``None`` for a
    relation kept in a dict).  Returns ``[(position, cells, mults, kinds), ...]`` in order of the
    relations' first appearance, each relation's updates in batch order (updates with multiplicity
    0 change nothing and are left out), for :meth:`RowTable.apply_cells`; ``None`` (and nothing
    parsed) when some update is not a 3-tuple of a known relation in a table, a tuple of that
    arity whose values can be stored (:func:`strict_cell`), and an int multiplicity of at most
    2^31 in size: the caller then takes the general route.  O(|batch| · arity), no Python object made.
    """
    cdef list items = updates if type(updates) is list else list(updates)
    cdef Py_ssize_t n = len(items), i, t = -1, nt = len(tables), j, ncols = -1, p
    cdef int overflow = 0
    cdef long long m
    cdef PyObject* found
    cdef object last = None
    cdef RowTable table
    if n == 0:
        return []
    # updates per relation: C counters (no int object per update), on the stack for up to 64 relations
    cdef Py_ssize_t counts_stack[64]
    cdef Py_ssize_t* counts = counts_stack
    counts_arr = None
    if nt > 64:
        counts_arr = np.zeros(nt, dtype=np.intp)
        counts = <Py_ssize_t*> <size_t> counts_arr.ctypes.data
    else:
        memset(counts_stack, 0, 64 * sizeof(Py_ssize_t))
    order = []
    where = np.empty(n, dtype=np.intp)
    mv_all = np.empty(n, dtype=np.int64)
    cdef Py_ssize_t[::1] wv = where
    cdef int64_t[::1] mm = mv_all
    for i in range(n):
        item = items[i]
        if not PyTuple_Check(item) or PyTuple_GET_SIZE(item) != 3:
            return None
        relation = <object>PyTuple_GET_ITEM(item, 0)
        if relation is not last:
            found = PyDict_GetItem(names, relation)
            if found == NULL:
                return None
            t = <object>found
            if t < 0 or t >= nt or tables[t] is None:
                return None
            table = tables[t]
            ncols = table.ncols
            last = relation
        mult = <object>PyTuple_GET_ITEM(item, 2)
        if not PyLong_CheckExact(mult):
            return None
        m = PyLong_AsLongLongAndOverflow(mult, &overflow)
        if overflow or m > MAX_UPDATE or m < -MAX_UPDATE:
            return None
        row = <object>PyTuple_GET_ITEM(item, 1)
        if not PyTuple_Check(row) or PyTuple_GET_SIZE(row) != ncols:
            return None
        if m == 0:
            wv[i] = -1
            continue
        wv[i] = t
        mm[i] = m
        if counts[t] == 0:
            order.append(t)
        counts[t] += 1
    # one pass over the batch, each update's cells written at its relation's cursor
    cdef Py_ssize_t nrel = len(order), o
    arrays = []
    cdef list tables_o = []
    cell_ptrs = np.zeros(nt, dtype=np.uintp)
    mult_ptrs = np.zeros(nt, dtype=np.uintp)
    kind_ptrs = np.zeros(nt, dtype=np.uintp)
    cdef size_t[::1] cp = cell_ptrs
    cdef size_t[::1] mp = mult_ptrs
    cdef size_t[::1] kp = kind_ptrs
    cursor = np.zeros(nt, dtype=np.intp)
    cdef Py_ssize_t[::1] cur = cursor
    ncols_of = np.zeros(nt, dtype=np.intp)
    cdef Py_ssize_t[::1] nc = ncols_of
    cdef int64_t[:, ::1] cv
    cdef int64_t[::1] ov
    cdef int8_t[::1] kv
    for t in order:
        table = tables[t]
        ncols = table.ncols
        cells = np.empty((counts[t], max(ncols, 1)), dtype=np.int64)[:, :ncols]
        cells = np.ascontiguousarray(cells)
        mults = np.empty(counts[t], dtype=np.int64)
        kinds = np.empty(ncols + 1, dtype=np.int8)
        cv = cells
        ov = mults
        kv = kinds
        for j in range(ncols):
            kv[j] = table.kinds[j]
        cp[t] = <size_t>&cv[0, 0] if ncols and counts[t] else 0
        mp[t] = <size_t>&ov[0]
        kp[t] = <size_t>&kv[0]
        nc[t] = ncols
        arrays.append((t, cells, mults, kinds[:ncols]))
    cdef int64_t* cells_p
    cdef int8_t* kinds_p
    for i in range(n):
        t = wv[i]
        if t < 0:
            continue
        p = cur[t]
        cur[t] = p + 1
        ncols = nc[t]
        (<int64_t*>mp[t])[p] = mm[i]
        if ncols:
            row = <object>PyTuple_GET_ITEM(items[i], 1)
            cells_p = (<int64_t*>cp[t]) + p * ncols
            kinds_p = <int8_t*>kp[t]
            for j in range(ncols):
                if not strict_cell(<object>PyTuple_GET_ITEM(row, j), &kinds_p[j], &cells_p[j]):
                    return None
    return arrays


cdef enum:
    COL_NONE = 0
    COL_I8 = 1
    COL_I16 = 2
    COL_I32 = 3
    COL_I64 = 4
    COL_U8 = 5
    COL_U16 = 6
    COL_U32 = 7
    COL_U64 = 8
    COL_F32 = 9
    COL_F64 = 10


cdef int column_type(const char* fmt, Py_ssize_t itemsize) noexcept:
    """The element type of a 1-D buffer from its struct format (native order only), else ``COL_NONE``."""
    cdef char c
    if fmt == NULL:
        return COL_NONE
    if fmt[0] == b'@' or fmt[0] == b'=' or fmt[0] == b'<':  # (little-endian machines: '<' is native)
        fmt += 1
    if fmt[0] == 0 or fmt[1] != 0:
        return COL_NONE
    c = fmt[0]
    if c == b'd' and itemsize == 8:
        return COL_F64
    if c == b'f' and itemsize == 4:
        return COL_F32
    if c == b'b' or c == b'h' or c == b'i' or c == b'l' or c == b'q':
        return {1: COL_I8, 2: COL_I16, 4: COL_I32, 8: COL_I64}.get(itemsize, COL_NONE)
    if c == b'B' or c == b'H' or c == b'I' or c == b'L' or c == b'Q':
        return {1: COL_U8, 2: COL_U16, 4: COL_U32, 8: COL_U64}.get(itemsize, COL_NONE)
    return COL_NONE  # bool '?', half 'e', objects, strings, records


cdef bint read_column(const char* p, Py_ssize_t stride, int t, Py_ssize_t n, int64_t* out, Py_ssize_t k) noexcept nogil:
    """Column ``p`` (``n`` elements of type ``t``, ``stride`` bytes apart) into every ``k``-th cell of
    ``out``: ints as int64, floats as the double's bits; ``False`` at a NaN or a uint64 beyond int64
    (values a table does not store as given)."""
    cdef Py_ssize_t i
    cdef double d
    cdef uint64_t u
    if t == COL_F64:
        for i in range(n):
            d = (<const double*> (p + i * stride))[0]
            if d != d:
                return False
            out[i * k] = as_bits(d)
    elif t == COL_F32:
        for i in range(n):
            d = <double> (<const float*> (p + i * stride))[0]
            if d != d:
                return False
            out[i * k] = as_bits(d)
    elif t == COL_I64:
        for i in range(n):
            out[i * k] = (<const int64_t*> (p + i * stride))[0]
    elif t == COL_I32:
        for i in range(n):
            out[i * k] = (<const int32_t*> (p + i * stride))[0]
    elif t == COL_I16:
        for i in range(n):
            out[i * k] = (<const int16_t*> (p + i * stride))[0]
    elif t == COL_I8:
        for i in range(n):
            out[i * k] = (<const int8_t*> (p + i * stride))[0]
    elif t == COL_U8:
        for i in range(n):
            out[i * k] = (<const uint8_t*> (p + i * stride))[0]
    elif t == COL_U16:
        for i in range(n):
            out[i * k] = (<const uint16_t*> (p + i * stride))[0]
    elif t == COL_U32:
        for i in range(n):
            out[i * k] = (<const uint32_t*> (p + i * stride))[0]
    else:
        for i in range(n):
            u = (<const uint64_t*> (p + i * stride))[0]
            if u > <uint64_t> 0x7FFFFFFFFFFFFFFF:
                return False
            out[i * k] = <int64_t> u
    return True


def column_cells(list columns, bytes have, Py_ssize_t n):
    """Columns (1-D buffers: numpy arrays of native ints or float32/float64, any stride) as
    ``(cells (n, k) int64, kinds (k,) int8)`` for :meth:`RowTable.apply_cells`, or ``None`` when a
    row would not be stored as given: a column of another element type (bools, halves, objects), a
    kind other than the table's (``have``: its kinds, -1 unknown), a NaN, a uint64 beyond int64.
    One C pass per column (for :func:`ivm.engines.fivm.base_relation.column_cells`)."""
    cdef Py_ssize_t k = len(columns), i, j, got = 0
    if len(have) != k:
        raise ValueError("one kind per column")
    cdef Py_buffer* views = <Py_buffer*> malloc(max(k, 1) * sizeof(Py_buffer))
    cdef const char** data = <const char**> malloc(max(k, 1) * sizeof(char*))
    cdef Py_ssize_t* strides = <Py_ssize_t*> malloc(max(k, 1) * sizeof(Py_ssize_t))
    cdef int* types = <int*> malloc(max(k, 1) * sizeof(int))
    cdef const char* have_kinds = have
    cdef bint ok = True
    kinds = np.empty(k, dtype=np.int8)
    cdef int8_t[::1] kv = kinds
    cells = np.empty((n, k), dtype=np.int64)
    cdef int64_t* out = <int64_t*> NULL
    if n and k:
        out = <int64_t*> <size_t> cells.ctypes.data
    try:
        if views == NULL or data == NULL or strides == NULL or types == NULL:
            raise MemoryError()
        for j in range(k):
            PyObject_GetBuffer(columns[j], &views[j], PyBUF_RECORDS_RO)
            got += 1
            types[j] = column_type(views[j].format, views[j].itemsize) if views[j].ndim == 1 else COL_NONE
            if types[j] == COL_NONE or views[j].shape[0] != n:
                ok = False
                break
            kv[j] = KIND_FLOAT if types[j] >= COL_F32 else KIND_INT
            if have_kinds[j] != KIND_UNKNOWN and have_kinds[j] != kv[j]:
                ok = False
                break
            data[j] = <const char*> views[j].buf
            strides[j] = views[j].strides[0]
        j = 0
        while ok and j < k:  # column by column: one loop per element type (the cells fit the caches)
            ok = read_column(data[j], strides[j], types[j], n, out + j, k)
            j += 1
    finally:
        for j in range(got):
            PyBuffer_Release(&views[j])
        free(views)
        free(data)
        free(strides)
        free(types)
    return (cells, kinds) if ok else None


def table_kinds(RowTable table) -> bytes:
    """The table's column kinds as bytes (-1 unknown, 0 int, 1 float): :func:`column_cells`'s ``have``."""
    return bytes([table.kinds[j] & 0xFF for j in range(table.ncols)])
