# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""An open-addressing hash map from 64-bit integer keys to row numbers, probed a whole array at a time.

A view's primary index (F-IVM §2.2: key → payload) when every key is one integer: the
grouped delta rule of :mod:`ivm.engines.fivm.columnar` looks up all keys of a delta in
one call, without a Python object per key.  Linear probing over a power-of-two table
at most half full, splitmix64 hashing, backward-shift deletion (no tombstones): expected
O(1) per key for lookup, insert and delete, 16 bytes per slot (a key and its row side by side, so
a probe reads one cache line; the row is kept as ``row + 1``, so an empty slot is all zero and a new
table is zeroed memory from ``_mem.pxd``, no ``memset``).  The table lives in C memory, so the
garbage collector never walks it.
"""

from libc.stdint cimport int64_t, uint64_t
import numpy as np

from ivm.engines.fivm._mem cimport ivm_alloc, ivm_free

cdef int64_t EMPTY = 0  # a slot's row + 1; 0: empty


cdef inline uint64_t mix(uint64_t x) noexcept nogil:
    # splitmix64's finalizer: every key bit reaches every slot bit
    x ^= x >> 30
    x *= <uint64_t>0xbf58476d1ce4e5b9
    x ^= x >> 27
    x *= <uint64_t>0x94d049bb133111eb
    x ^= x >> 31
    return x


cdef class Int64Index:
    """``key → row`` for int64 keys; rows are non-negative.  ``get_many`` answers -1 for absent keys.

    >>> import numpy as np
    >>> ix = Int64Index()
    >>> ix.set_many(np.array([7, -3, 2**40]), np.array([0, 1, 2]))
    >>> ix.get_many(np.array([2**40, 5, 7])).tolist(), len(ix)
    ([2, -1, 0], 3)
    >>> ix.delete_many(np.array([7])); ix.get_many(np.array([7, -3])).tolist()
    [-1, 1]
    """

    def __cinit__(self, Py_ssize_t capacity=16):
        cdef Py_ssize_t size = 16
        while size < 2 * capacity:
            size *= 2
        self._allocate(size)

    def __dealloc__(self):
        if self.slots != NULL:
            ivm_free(self.slots, 2 * (self.mask + 1) * sizeof(int64_t))

    cdef void _allocate(self, Py_ssize_t size) except *:
        self.slots = <int64_t*> ivm_alloc(2 * size * sizeof(int64_t))  # zeroed: every slot empty
        if self.slots == NULL:
            raise MemoryError()
        self.mask = size - 1
        self.used = 0

    cdef void _grow(self) except *:
        cdef int64_t* old = self.slots
        cdef Py_ssize_t old_size = self.mask + 1, i
        self._allocate(2 * old_size)
        for i in range(old_size):
            if old[2 * i + 1] != EMPTY:
                self._put(old[2 * i], old[2 * i + 1] - 1)
        ivm_free(old, 2 * old_size * sizeof(int64_t))

    cdef void _reserve(self, Py_ssize_t n) except *:
        """Room for ``n`` more keys without growing (the table stays at most half full)."""
        while 2 * (self.used + n) > <Py_ssize_t>(self.mask + 1):
            self._grow()

    cdef void _put(self, int64_t key, int64_t row) noexcept nogil:
        cdef uint64_t i = mix(<uint64_t>key) & self.mask
        cdef int64_t* slots = self.slots
        while slots[2 * i + 1] != EMPTY:
            if slots[2 * i] == key:
                slots[2 * i + 1] = row + 1
                return
            i = (i + 1) & self.mask
        slots[2 * i] = key
        slots[2 * i + 1] = row + 1
        self.used += 1

    cdef int64_t _get(self, int64_t key) noexcept nogil:
        cdef uint64_t i = mix(<uint64_t>key) & self.mask
        cdef int64_t* slots = self.slots
        while slots[2 * i + 1] != EMPTY:
            if slots[2 * i] == key:
                return slots[2 * i + 1] - 1
            i = (i + 1) & self.mask
        return -1

    cdef void _delete(self, int64_t key) noexcept nogil:
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

    def __len__(self) -> int:
        return self.used

    @property
    def nbytes(self) -> int:
        """Bytes of the table (keys and rows, empty slots included)."""
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
        with nogil:
            for i in range(n):
                self._put(keys[i], rows[i])

    def delete_many(self, const int64_t[:] keys) -> None:
        """Remove every key (absent keys are ignored): O(len(keys)) expected."""
        cdef Py_ssize_t n = keys.shape[0], i
        with nogil:
            for i in range(n):
                self._delete(keys[i])

    def items(self):
        """``(keys, rows)`` of every entry, as two int64 arrays in table order."""
        cdef Py_ssize_t size = self.mask + 1, i, j = 0
        ks = np.empty(self.used, dtype=np.int64)
        rs = np.empty(self.used, dtype=np.int64)
        cdef int64_t[:] k = ks
        cdef int64_t[:] r = rs
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
