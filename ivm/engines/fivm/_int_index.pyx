# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A map from 64-bit integer keys to row numbers, probed a whole array at a time.

A view's primary index (F-IVM §2.2: key → payload) when every key is one integer: the
grouped delta rule of :mod:`ivm.engines.fivm.columnar` looks up all keys of a delta in
one call, without a Python object per key.  Two layouts, chosen by the keys:

- *direct*: keys that are a dense range of non-negative ints (a postcode, a dictionary code) are
  addressed by the key itself, ``dense[key] = row + 1``: no hash, no probe sequence, 8 bytes per
  key of the range, and consecutive keys on consecutive cache lines (a batch in key order touches
  a few lines instead of one random line per key).  It is kept while the range is at most twice the
  slots a hash table would take for the same keys (``8·range ≤ 2·16·slots``: never more memory
  than a table of at least half the load), growing by doubling;
- *hash*: open addressing with linear probing over a power-of-two table at most half full,
  splitmix64 hashing, backward-shift deletion (no tombstones), 16 bytes per slot (a key and its row
  side by side, so a probe reads one cache line).

An index starts direct; a key that is negative or too far past the range moves it to a hash table;
a hash table that doubles while its keys have become dense enough moves back (the check costs
nothing between doublings).  Both keep the row as ``row + 1``, so an empty slot is all zero and
new memory is zeroed memory from ``_mem.pxd``, no ``memset``.  O(1) per lookup, insert and delete
(expected for the hash layout, worst case for the direct one), amortized over the doublings.  The
tables live in C memory, so the garbage collector never walks them.
"""

from libc.stdint cimport int64_t, uint64_t
import numpy as np

from ivm.engines.fivm._mem cimport ivm_alloc, ivm_free, ivm_grow

cdef int64_t EMPTY = 0  # a slot's row + 1; 0: empty
cdef int64_t DIRECT_MAX = (<int64_t>1) << 40  # keys from here on are never addressed directly


cdef inline uint64_t mix(uint64_t x) noexcept nogil:
    # splitmix64's finalizer: every key bit reaches every slot bit
    x ^= x >> 30
    x *= <uint64_t>0xbf58476d1ce4e5b9
    x ^= x >> 27
    x *= <uint64_t>0x94d049bb133111eb
    x ^= x >> 31
    return x


cdef inline Py_ssize_t hash_size(Py_ssize_t n) noexcept nogil:
    """The slots of a hash table holding ``n`` keys (a power of two, at most half full)."""
    cdef Py_ssize_t size = 16
    while size < 2 * n:
        size *= 2
    return size


cdef inline Py_ssize_t direct_size(int64_t hi) noexcept nogil:
    """The entries of a direct table covering the keys ``0..hi`` (a power of two, at least 16)."""
    cdef Py_ssize_t size = 16
    while size <= hi:
        size *= 2
    return size


cdef class Int64Index:
    """``key → row`` for int64 keys; rows are non-negative.  ``get_many`` answers -1 for absent keys.

    >>> import numpy as np
    >>> ix = Int64Index()
    >>> ix.set_many(np.array([7, -3, 2**40]), np.array([0, 1, 2]))
    >>> ix.get_many(np.array([2**40, 5, 7])).tolist(), len(ix), ix.direct
    ([2, -1, 0], 3, False)
    >>> ix.delete_many(np.array([7])); ix.get_many(np.array([7, -3])).tolist()
    [-1, 1]
    >>> dense = Int64Index(); dense.set_many(np.arange(100), np.arange(100)[::-1].copy())
    >>> dense.direct, dense.get(3), dense.get(100), dense.nbytes
    (True, 96, -1, 1024)
    """

    def __cinit__(self, Py_ssize_t capacity=16):
        # (``capacity`` is accepted as before; an index starts direct and sizes itself by its keys)
        self.dense = NULL
        self.slots = NULL
        self.dense_cap = 0
        self.mask = 0
        self.used = 0
        self.hi = -1
        self.negative = False
        self.dense = <int64_t*> ivm_alloc(16 * sizeof(int64_t))  # direct, keys 0..15 (grows with them)
        if self.dense == NULL:
            raise MemoryError()
        self.dense_cap = 16

    def __dealloc__(self):
        if self.dense != NULL:
            ivm_free(self.dense, self.dense_cap * sizeof(int64_t))
        if self.slots != NULL:
            ivm_free(self.slots, 2 * (self.mask + 1) * sizeof(int64_t))

    cdef void _allocate(self, Py_ssize_t size) except *:
        """A new, empty hash table of ``size`` slots (the caller frees or moves what was there)."""
        self.slots = <int64_t*> ivm_alloc(2 * size * sizeof(int64_t))  # zeroed: every slot empty
        if self.slots == NULL:
            raise MemoryError()
        self.mask = size - 1
        self.used = 0
        self.hi = -1
        self.negative = False

    cdef void _to_hash(self) except *:
        """Direct → hash: every entry moved into a table sized for one more key."""
        cdef int64_t* dense = self.dense
        cdef Py_ssize_t cap = self.dense_cap, k
        self._allocate(hash_size(self.used + 1))
        for k in range(cap):
            if dense[k] != EMPTY:
                self._hash_put(k, dense[k] - 1)
        ivm_free(dense, cap * sizeof(int64_t))
        self.dense = NULL
        self.dense_cap = 0

    cdef void _grow(self) except *:
        """Hash mode, table full: doubled, or made direct when the keys put are dense enough."""
        cdef int64_t* old = self.slots
        cdef Py_ssize_t old_size = self.mask + 1, i, cap
        cdef int64_t* dense
        if not self.negative and self.hi < DIRECT_MAX:
            cap = direct_size(self.hi)
            if cap <= 2 * (2 * old_size):  # direct takes no more than the doubled table would
                dense = <int64_t*> ivm_alloc(cap * sizeof(int64_t))
                if dense == NULL:
                    raise MemoryError()
                for i in range(old_size):
                    if old[2 * i + 1] != EMPTY:
                        dense[old[2 * i]] = old[2 * i + 1]
                ivm_free(old, 2 * old_size * sizeof(int64_t))
                self.slots = NULL
                self.mask = 0
                self.dense = dense
                self.dense_cap = cap
                return
        self._allocate(2 * old_size)
        for i in range(old_size):
            if old[2 * i + 1] != EMPTY:
                self._hash_put(old[2 * i], old[2 * i + 1] - 1)
        ivm_free(old, 2 * old_size * sizeof(int64_t))

    cdef void _reserve(self, Py_ssize_t n) except *:
        """Room for ``n`` more keys without growing a hash table (it stays at most half full); a direct
        table grows when a key needs it (:meth:`_put`)."""
        while self.dense == NULL and 2 * (self.used + n) > <Py_ssize_t>(self.mask + 1):
            self._grow()

    cdef int _put(self, int64_t key, int64_t row) except -1:
        """``index[key] = row``: O(1) (amortized over the doublings; expected in the hash layout)."""
        cdef Py_ssize_t cap
        cdef void* grown
        if self.dense != NULL:
            if <uint64_t>key < <uint64_t>self.dense_cap:
                if self.dense[key] == EMPTY:
                    self.used += 1
                self.dense[key] = row + 1
                return 0
            if 0 <= key < DIRECT_MAX:
                cap = direct_size(key)
                if cap <= 2 * hash_size(self.used + 1):  # the range stays dense enough: grow it
                    grown = ivm_grow(self.dense, self.dense_cap * sizeof(int64_t), cap * sizeof(int64_t))
                    if grown == NULL:
                        raise MemoryError()
                    self.dense = <int64_t*> grown
                    self.dense_cap = cap
                    self.used += 1
                    self.dense[key] = row + 1
                    return 0
            self._to_hash()
        if 2 * (self.used + 1) > <Py_ssize_t>(self.mask + 1):
            self._grow()
            if self.dense != NULL:
                return self._put(key, row)
        self._hash_put(key, row)
        return 0

    cdef void _hash_put(self, int64_t key, int64_t row) noexcept nogil:
        """:meth:`_put` in the hash layout, with room for the key."""
        cdef uint64_t i = mix(<uint64_t>key) & self.mask
        cdef int64_t* slots = self.slots
        if key > self.hi:
            self.hi = key
        if key < 0:
            self.negative = True
        while slots[2 * i + 1] != EMPTY:
            if slots[2 * i] == key:
                slots[2 * i + 1] = row + 1
                return
            i = (i + 1) & self.mask
        slots[2 * i] = key
        slots[2 * i + 1] = row + 1
        self.used += 1

    cdef int64_t _get(self, int64_t key) noexcept nogil:
        if self.dense != NULL:
            if <uint64_t>key < <uint64_t>self.dense_cap:
                return self.dense[key] - 1
            return -1
        cdef uint64_t i = mix(<uint64_t>key) & self.mask
        cdef int64_t* slots = self.slots
        while slots[2 * i + 1] != EMPTY:
            if slots[2 * i] == key:
                return slots[2 * i + 1] - 1
            i = (i + 1) & self.mask
        return -1

    cdef void _delete(self, int64_t key) noexcept nogil:
        if self.dense != NULL:
            if <uint64_t>key < <uint64_t>self.dense_cap and self.dense[key] != EMPTY:
                self.dense[key] = EMPTY
                self.used -= 1
            return
        cdef uint64_t i = mix(<uint64_t>key) & self.mask, j, home
        cdef int64_t* slots = self.slots
        while slots[2 * i + 1] != EMPTY:
            if slots[2 * i] == key:
                break
            i = (i + 1) & self.mask
        else:
            return
        # backward shift: move later members of the probe run into the hole when their home allows it
        j = i
        while True:
            j = (j + 1) & self.mask
            if slots[2 * j + 1] == EMPTY:
                break
            home = mix(<uint64_t>slots[2 * j]) & self.mask
            if ((j - home) & self.mask) >= ((j - i) & self.mask):
                slots[2 * i] = slots[2 * j]
                slots[2 * i + 1] = slots[2 * j + 1]
                i = j
        slots[2 * i + 1] = EMPTY
        self.used -= 1

    @property
    def direct(self) -> bool:
        """Whether the keys are addressed directly (a dense range of non-negative ints) rather than hashed."""
        return self.dense != NULL

    def __len__(self) -> int:
        return self.used

    @property
    def nbytes(self) -> int:
        """Bytes of the table (keys and rows, empty slots included)."""
        if self.dense != NULL:
            return self.dense_cap * sizeof(int64_t)
        return <Py_ssize_t>(self.mask + 1) * 2 * sizeof(int64_t)

    def get(self, int64_t key) -> int:
        """The row of one key, -1 if absent: O(1) expected."""
        return self._get(key)

    def get_many(self, const int64_t[:] keys):
        """The row of every key, -1 where absent: O(len(keys)) expected."""
        cdef Py_ssize_t n = keys.shape[0], i
        out = np.empty(n, dtype=np.int64)
        cdef int64_t[:] o = out
        with nogil:
            for i in range(n):
                o[i] = self._get(keys[i])
        return out

    def set_many(self, const int64_t[:] keys, const int64_t[:] rows) -> None:
        """``index[key] = row`` for every pair (rows must be ≥ 0): O(len(keys)) expected, amortized."""
        cdef Py_ssize_t n = keys.shape[0], i
        if rows.shape[0] != n:
            raise ValueError("keys and rows differ in length")
        for i in range(n):
            if rows[i] < 0:
                raise ValueError("rows must be non-negative")
        self._reserve(n)
        for i in range(n):
            self._put(keys[i], rows[i])

    def delete_many(self, const int64_t[:] keys) -> None:
        """Remove every key (absent keys are ignored): O(len(keys)) expected."""
        cdef Py_ssize_t n = keys.shape[0], i
        with nogil:
            for i in range(n):
                self._delete(keys[i])

    def items(self):
        """``(keys, rows)`` of every entry, as two int64 arrays in table order (key order when direct)."""
        cdef Py_ssize_t size = self.mask + 1, i, j = 0
        ks = np.empty(self.used, dtype=np.int64)
        rs = np.empty(self.used, dtype=np.int64)
        cdef int64_t[:] k = ks
        cdef int64_t[:] r = rs
        if self.dense != NULL:
            for i in range(self.dense_cap):
                if self.dense[i] != EMPTY:
                    k[j] = i
                    r[j] = self.dense[i] - 1
                    j += 1
            return ks, rs
        for i in range(size):
            if self.slots[2 * i + 1] != EMPTY:
                k[j] = self.slots[2 * i]
                r[j] = self.slots[2 * i + 1] - 1
                j += 1
        return ks, rs

    def __reduce__(self):
        keys, rows = self.items()
        return (_restore, (keys, rows))


def _restore(keys, rows) -> Int64Index:
    ix = Int64Index(len(keys))
    ix.set_many(keys, rows)
    return ix
