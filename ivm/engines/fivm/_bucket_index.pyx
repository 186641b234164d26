# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A compiled secondary index of a count view over two int columns: bound value → contiguous block.

F-IVM's delta rule joins a sibling through a secondary index on its bound key positions
(§2.2 storage contract, Fig. 7): ``σ_{X = x} V`` enumerated with constant delay.  The Python
:class:`~ivm.engines.fivm.view_tree.Store` keeps it as a dict of dicts, so a scan visits a
tuple, two int objects and a dict slot per row, scattered in memory.  :class:`BucketIndex`
keeps, for a view whose keys are ``(int, int)`` with int64 count payloads, each bound value's
rows as one contiguous block of ``(other value, payload)`` pairs, found through an
open-addressing table; a second table maps ``(bound, other)`` to the row's place in its block,
so an update or delete is O(1) expected (a delete moves the block's last row into the hole).
:meth:`BucketIndex.scan` is the delta rule ``δV(y) = Σ_i Σ_{(x_i, y) ∈ V} V[x_i, y] · m_i`` in one
C loop over the blocks, summed per ``y`` in a growing open-addressing table: O(|δ| + |join|)
expected, every product and sum checked for int64 overflow (``None`` then, and the caller takes
the Python rule, exact over Python ints).  Keys of any type (issue 38): built with a
:class:`~ivm.engines.keys.KeyDictionary`, the index holds each key value's int64 code (an int in
``[-2**62, 2**63)`` is its own code, a value equal to an int that int's, any other value an interned id
below ``-2**62``; NaN refused) and :meth:`BucketIndex.scan` / :meth:`BucketIndex.block` answer values
again (codes never leave the index; equal values share a code, as they share a ``dict`` key in the
view).  Linear probing over power-of-two tables at most half
full, splitmix64 hashing, backward-shift deletion (no tombstones).  Memory: 16 bytes per row in
the blocks (doubling capacity) plus 24 bytes per slot of the row table (a slot's bound value,
other value and place together, one cache line per probe) and 16 per slot of the bound table.
"""

from cpython.dict cimport PyDict_Next
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.object cimport PyObject
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memset


cdef extern from "Python.h":
    PyObject* PyDict_GetItemWithError(object d, object key) except? NULL
    bint PyLong_CheckExact(object o)
    bint PyTuple_CheckExact(object o)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    PyObject* PyTuple_GET_ITEM(object o, Py_ssize_t i)


cdef extern from *:
    bint mul_overflow "__builtin_mul_overflow"(long long a, long long b, long long* out) nogil
    bint add_overflow "__builtin_add_overflow"(long long a, long long b, long long* out) nogil


ctypedef struct Row:
    int64_t other
    int64_t payload


ctypedef struct Slot:  # a slot of the row table: one cache line per probe
    int64_t bound
    int64_t other
    int64_t place  # EMPTY: a free slot


cdef int64_t EMPTY = -1


cdef inline uint64_t mix(uint64_t x) noexcept nogil:
    # splitmix64's finalizer: every key bit reaches every slot bit
    x ^= x >> 30
    x *= <uint64_t>0xbf58476d1ce4e5b9
    x ^= x >> 27
    x *= <uint64_t>0x94d049bb133111eb
    x ^= x >> 31
    return x


cdef inline uint64_t mix2(int64_t a, int64_t b) noexcept nogil:
    return mix(mix(<uint64_t>a) ^ (<uint64_t>b + <uint64_t>0x9e3779b97f4a7c15))


cdef inline bint as_int64(PyObject* obj, long long* out):
    """``obj`` as int64 if it is a plain ``int`` in range."""
    cdef int overflow = 0
    if not PyLong_CheckExact(<object>obj):
        return False
    out[0] = PyLong_AsLongLongAndOverflow(<object>obj, &overflow)
    return overflow == 0


cdef int64_t KEY_HIGH = -(2**62)  # ivm.engines.keys.HIGH: codes below it are interned ids
cdef int64_t KEY_LOW = INT64_MIN  # ivm.engines.keys.LOW: the id of the first interned value is LOW + 1


cdef class BucketIndex:
    """``σ_{key[bound] = x} V`` for a count view with keys ``(int, int)``: one block of rows per ``x``.

    ``bound`` is the key position the index is on, the other position is ``1 - bound``.  With
    ``keydict`` (a :class:`~ivm.engines.keys.KeyDictionary`, owned by the index's store) the key values
    may be of any hashable type, coded on the way in and translated back on the way out.  The
    methods that take Python keys answer ``False`` (or ``None``) when a key is not a 2-tuple of
    codable values (int64 ints without a dictionary; NaN never) or a payload not an int64 int: the
    caller then drops the index and keeps the dict index of the Python store (the reference).

    >>> ix = BucketIndex(1)
    >>> ix.update([(1, 7), (2, 7), (1, 8)], [2, 1, 3])
    True
    >>> sorted(ix.scan({(7,): 5, (8,): -1}, 0).items())
    [((1,), 7), ((2,), 5)]
    >>> ix.update([(1, 7)], [0]), len(ix), sorted(ix.block(7))
    (True, 2, [(2, 1)])
    """

    cdef readonly Py_ssize_t bound_pos
    cdef readonly Py_ssize_t other_pos
    # bound table: bound value -> block id (EMPTY: free slot)
    cdef int64_t* bkeys
    cdef int64_t* bids
    cdef uint64_t bmask
    cdef Py_ssize_t bused
    # blocks: rows, length and capacity per block id; the bound value of each; ids of freed blocks
    cdef Row** blocks
    cdef int64_t* lengths
    cdef int64_t* capacities
    cdef int64_t* owners
    cdef Py_ssize_t nblocks
    cdef Py_ssize_t block_room
    cdef int64_t* free_ids
    cdef Py_ssize_t nfree
    # row table: (bound, other) -> place in its block (EMPTY: free slot)
    cdef Slot* slots
    cdef uint64_t rmask
    cdef Py_ssize_t rused
    # the least and the greatest other value ever indexed (lo > hi: none yet); never narrowed
    cdef int64_t lo
    cdef int64_t hi
    # the codes of non-int key values (ivm.engines.keys.KeyDictionary), or None: int64 ints only
    cdef readonly object keydict
    cdef list interned  # keydict's values by id - LOW (read back in C, no method call per output key)
    cdef dict ids  # keydict's interned value -> id (probed in C before any method call)

    def __cinit__(self, Py_ssize_t bound, keydict=None):
        if bound not in (0, 1):
            raise ValueError("a key has two positions: bound must be 0 or 1")
        self.bound_pos = bound
        self.other_pos = 1 - bound
        self.bkeys = self.bids = NULL
        self.slots = NULL
        self.blocks = NULL
        self.lengths = self.capacities = self.owners = self.free_ids = NULL
        self._bound_table(16)
        self._row_table(16)
        self.block_room = 0
        self.nblocks = 0
        self.nfree = 0
        self.lo = INT64_MAX
        self.hi = INT64_MIN
        self.keydict = keydict
        self.interned = None if keydict is None else keydict._values
        self.ids = None if keydict is None else keydict._ids
        self._grow_blocks()

    # -- key values as int64 codes -------------------------------------------------------

    cdef int _code(self, PyObject* obj, long long* out, bint intern) except -1:
        """``obj``'s int64 code: a plain int in int64 is itself (without a dictionary), or in
        ``[HIGH, 2**63)`` (with one); any other value is coded by the dictionary (interned when
        ``intern``, else looked up: :data:`~ivm.engines.keys.ABSENT`, found in no block, if it has no
        code).  ``False`` when it has no code here (no dictionary, or NaN: the dictionary refuses it)."""
        cdef int overflow = 0
        cdef long long x
        cdef PyObject* found
        if PyLong_CheckExact(<object>obj):
            x = PyLong_AsLongLongAndOverflow(<object>obj, &overflow)
            if overflow == 0 and (self.keydict is None or x >= KEY_HIGH):
                out[0] = x
                return True
        if self.keydict is None:
            return False
        found = PyDict_GetItemWithError(self.ids, <object>obj)  # interned already: its id, no call
        if found != NULL:
            out[0] = PyLong_AsLongLongAndOverflow(<object>found, &overflow)
            return True
        try:
            out[0] = self.keydict.code(<object>obj) if intern else self.keydict.find(<object>obj)
        except ValueError:  # NaN: the index cannot hold it, the Python store (the reference) decides
            return False
        return True

    cdef inline object _value(self, int64_t code):
        """The key value of a code (:meth:`_code`'s inverse)."""
        if self.interned is None or code >= KEY_HIGH:
            return code
        return self.interned[<Py_ssize_t>(<uint64_t>code - <uint64_t>KEY_LOW)]

    cdef inline int _pair(self, object key, long long* bound, long long* other) except -1:
        """The bound and other code of a 2-tuple key (interned if new)."""
        if not PyTuple_CheckExact(key) or PyTuple_GET_SIZE(key) != 2:
            return False
        return self._code(PyTuple_GET_ITEM(key, self.bound_pos), bound, True) and self._code(
            PyTuple_GET_ITEM(key, self.other_pos), other, True
        )

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.blocks != NULL:
            for i in range(self.nblocks):
                free(self.blocks[i])
        free(self.blocks)
        free(self.lengths)
        free(self.capacities)
        free(self.owners)
        free(self.free_ids)
        free(self.bkeys)
        free(self.bids)
        free(self.slots)

    # -- tables ------------------------------------------------------------------------

    cdef void _bound_table(self, Py_ssize_t size) except *:
        cdef int64_t* keys = <int64_t*> malloc(size * sizeof(int64_t))
        cdef int64_t* ids = <int64_t*> malloc(size * sizeof(int64_t))
        if keys == NULL or ids == NULL:
            free(keys)
            free(ids)
            raise MemoryError()
        memset(ids, 0xFF, size * sizeof(int64_t))
        cdef int64_t* old_keys = self.bkeys
        cdef int64_t* old_ids = self.bids
        cdef Py_ssize_t old_size = 0 if old_ids == NULL else <Py_ssize_t>(self.bmask + 1), i
        cdef uint64_t j
        self.bkeys, self.bids, self.bmask = keys, ids, size - 1
        for i in range(old_size):
            if old_ids[i] != EMPTY:
                j = mix(<uint64_t>old_keys[i]) & self.bmask
                while ids[j] != EMPTY:
                    j = (j + 1) & self.bmask
                keys[j] = old_keys[i]
                ids[j] = old_ids[i]
        free(old_keys)
        free(old_ids)

    cdef void _row_table(self, Py_ssize_t size) except *:
        cdef Slot* slots = <Slot*> malloc(size * sizeof(Slot))
        if slots == NULL:
            raise MemoryError()
        cdef Py_ssize_t i
        for i in range(size):
            slots[i].place = EMPTY
        cdef Slot* old = self.slots
        cdef Py_ssize_t old_size = 0 if old == NULL else <Py_ssize_t>(self.rmask + 1)
        cdef uint64_t j
        self.slots, self.rmask = slots, size - 1
        for i in range(old_size):
            if old[i].place != EMPTY:
                j = mix2(old[i].bound, old[i].other) & self.rmask
                while slots[j].place != EMPTY:
                    j = (j + 1) & self.rmask
                slots[j] = old[i]
        free(old)

    cdef void _grow_blocks(self) except *:
        cdef Py_ssize_t room = 16 if self.block_room == 0 else 2 * self.block_room
        cdef Row** blocks = <Row**> realloc(self.blocks, room * sizeof(Row*))
        if blocks == NULL:
            raise MemoryError()
        self.blocks = blocks
        cdef int64_t* lengths = <int64_t*> realloc(self.lengths, room * sizeof(int64_t))
        if lengths == NULL:
            raise MemoryError()
        self.lengths = lengths
        cdef int64_t* capacities = <int64_t*> realloc(self.capacities, room * sizeof(int64_t))
        if capacities == NULL:
            raise MemoryError()
        self.capacities = capacities
        cdef int64_t* owners = <int64_t*> realloc(self.owners, room * sizeof(int64_t))
        if owners == NULL:
            raise MemoryError()
        self.owners = owners
        cdef int64_t* free_ids = <int64_t*> realloc(self.free_ids, room * sizeof(int64_t))
        if free_ids == NULL:
            raise MemoryError()
        self.free_ids = free_ids
        self.block_room = room

    cdef inline int64_t _block_of(self, int64_t bound) noexcept nogil:
        cdef uint64_t i = mix(<uint64_t>bound) & self.bmask
        while self.bids[i] != EMPTY:
            if self.bkeys[i] == bound:
                return self.bids[i]
            i = (i + 1) & self.bmask
        return EMPTY

    cdef inline uint64_t _row_slot(self, int64_t bound, int64_t other) noexcept nogil:
        """The slot of ``(bound, other)`` in the row table, or the free slot where it would go."""
        cdef uint64_t i = mix2(bound, other) & self.rmask
        while self.slots[i].place != EMPTY:
            if self.slots[i].bound == bound and self.slots[i].other == other:
                return i
            i = (i + 1) & self.rmask
        return i

    cdef int64_t _new_block(self, int64_t bound) except -1:
        cdef int64_t b
        cdef uint64_t i
        if 2 * (self.bused + 1) > <Py_ssize_t>(self.bmask + 1):
            self._bound_table(2 * <Py_ssize_t>(self.bmask + 1))
        if self.nfree:
            self.nfree -= 1
            b = self.free_ids[self.nfree]
        else:
            if self.nblocks == self.block_room:
                self._grow_blocks()
            b = self.nblocks
            self.nblocks += 1
        self.blocks[b] = NULL
        self.lengths[b] = 0
        self.capacities[b] = 0
        self.owners[b] = bound
        i = mix(<uint64_t>bound) & self.bmask
        while self.bids[i] != EMPTY:
            i = (i + 1) & self.bmask
        self.bkeys[i] = bound
        self.bids[i] = b
        self.bused += 1
        return b

    cdef void _drop_block(self, int64_t b) noexcept nogil:
        """Free an empty block and take its bound value out of the bound table (backward shift)."""
        cdef int64_t bound = self.owners[b]
        cdef uint64_t i = mix(<uint64_t>bound) & self.bmask, j, home
        free(self.blocks[b])
        self.blocks[b] = NULL
        self.capacities[b] = 0
        self.free_ids[self.nfree] = b
        self.nfree += 1
        while self.bids[i] != EMPTY and self.bkeys[i] != bound:
            i = (i + 1) & self.bmask
        j = i
        while True:
            j = (j + 1) & self.bmask
            if self.bids[j] == EMPTY:
                break
            home = mix(<uint64_t>self.bkeys[j]) & self.bmask
            if ((j - home) & self.bmask) >= ((j - i) & self.bmask):
                self.bkeys[i] = self.bkeys[j]
                self.bids[i] = self.bids[j]
                i = j
        self.bids[i] = EMPTY
        self.bused -= 1

    cdef void _row_delete(self, uint64_t i) noexcept nogil:
        """Empty slot ``i`` of the row table (backward shift)."""
        cdef uint64_t j = i, home
        while True:
            j = (j + 1) & self.rmask
            if self.slots[j].place == EMPTY:
                break
            home = mix2(self.slots[j].bound, self.slots[j].other) & self.rmask
            if ((j - home) & self.rmask) >= ((j - i) & self.rmask):
                self.slots[i] = self.slots[j]
                i = j
        self.slots[i].place = EMPTY
        self.rused -= 1

    # -- rows --------------------------------------------------------------------------

    cdef int _set(self, int64_t bound, int64_t other, int64_t payload) except -1:
        """``V[bound, other] = payload``; 0 removes the row.  O(1) expected, amortized."""
        cdef uint64_t i = self._row_slot(bound, other), j
        cdef int64_t b, place, last
        cdef Row* block
        cdef Row* grown
        if self.slots[i].place != EMPTY:
            b = self._block_of(bound)
            place = self.slots[i].place
            block = self.blocks[b]
            if payload != 0:
                block[place].payload = payload
                return 0
            last = self.lengths[b] - 1
            if place != last:  # the block's last row fills the hole
                block[place] = block[last]
                j = self._row_slot(bound, block[place].other)
                self.slots[j].place = place
            self.lengths[b] = last
            self._row_delete(i)
            if last == 0:
                self._drop_block(b)
            return 0
        if payload == 0:
            return 0
        b = self._block_of(bound)
        if b == EMPTY:
            b = self._new_block(bound)
        if self.lengths[b] == self.capacities[b]:
            grown = <Row*> realloc(self.blocks[b], (2 * self.capacities[b] + 2) * sizeof(Row))
            if grown == NULL:
                raise MemoryError()
            self.blocks[b] = grown
            self.capacities[b] = 2 * self.capacities[b] + 2
        place = self.lengths[b]
        self.blocks[b][place].other = other
        if other < self.lo:
            self.lo = other
        if other > self.hi:
            self.hi = other
        self.blocks[b][place].payload = payload
        self.lengths[b] = place + 1
        if 2 * (self.rused + 1) > <Py_ssize_t>(self.rmask + 1):
            self._row_table(2 * <Py_ssize_t>(self.rmask + 1))
            i = self._row_slot(bound, other)
        self.slots[i].bound = bound
        self.slots[i].other = other
        self.slots[i].place = place
        self.rused += 1
        return 0

    def update(self, keys, list payloads) -> bool:
        """``V[key] = payload`` for every pair (0 removes the key; absent keys stay absent).

        ``keys`` is a list or a dict (its keys, in order).  ``False`` at the first key that is not
        a 2-tuple of int64 ints or payload that is not an int64 int (the rows before it are
        written): the index no longer matches the view and must be dropped.  O(len(keys)) expected.
        """
        cdef Py_ssize_t n = len(payloads), k = 0, pos = 0
        cdef long long bound, other, payload
        cdef PyObject* key
        cdef PyObject* value
        cdef object item
        if len(keys) != n:
            raise ValueError("one payload per key")
        if type(keys) is dict:
            while PyDict_Next(keys, &pos, &key, &value):
                if not self._pair(<object>key, &bound, &other):
                    return False
                item = payloads[k]
                if not as_int64(<PyObject*>item, &payload):
                    return False
                self._set(bound, other, payload)
                k += 1
            return True
        for k in range(n):
            if not self._pair(keys[k], &bound, &other):
                return False
            item = payloads[k]
            if not as_int64(<PyObject*>item, &payload):
                return False
            self._set(bound, other, payload)
        return True

    def set(self, key, payload) -> bool:
        """``V[key] = payload`` for one key (0 removes it); ``False`` as in :meth:`update`."""
        cdef long long bound, other, value
        if not self._pair(key, &bound, &other):
            return False
        if not as_int64(<PyObject*>payload, &value):
            return False
        self._set(bound, other, value)
        return True

    def build(self, dict data) -> bool:
        """Index every ``key → payload`` of a view (into an empty index); ``False`` as in :meth:`update`."""
        while 2 * (self.rused + len(data)) > <Py_ssize_t>(self.rmask + 1):
            self._row_table(2 * <Py_ssize_t>(self.rmask + 1))
        return self.update(data, list(data.values()))

    def scan(self, dict delta, Py_ssize_t position):
        """``{(y,): Σ_{key ∈ δ} Σ_{(x, y) ∈ V, x = key[position]} V[x, y] · δ[key]}``, zero sums left out.

        The index join of Fig. 7 for one sibling: each delta key's bound value meets its block.
        The sums go to an array indexed by ``y`` when every ``y`` ever indexed lies in a range of
        at most ``4·|join| + 1024`` values (the range is kept on insert, never narrowed), else to
        an open-addressing table grown as keys arrive.  ``None`` when a delta key's value or
        payload is not an int64 int, or a product or sum overflows int64.  O(|δ| + |join| +
        |output|) expected (the array's range counts as output: at most 4·|join| + 1024).
        """
        cdef Py_ssize_t pos = 0, n = len(delta), count = 0, j, r, length, total = 0
        cdef PyObject* k
        cdef PyObject* v
        cdef long long x, m
        cdef int64_t b
        cdef int64_t* ids = <int64_t*> malloc((n + 1) * sizeof(int64_t))
        cdef long long* mults = <long long*> malloc((n + 1) * sizeof(long long))
        if ids == NULL or mults == NULL:
            free(ids)
            free(mults)
            raise MemoryError()
        try:
            while PyDict_Next(delta, &pos, &k, &v):  # each delta key's block, and the join's size
                key = <object>k
                if not PyTuple_CheckExact(key) or PyTuple_GET_SIZE(key) <= position:
                    return None
                if not self._code(PyTuple_GET_ITEM(key, position), &x, False) or not as_int64(v, &m):
                    return None
                b = self._block_of(x)
                if b == EMPTY:
                    continue
                ids[count] = b
                mults[count] = m
                count += 1
                total += self.lengths[b]
            if total == 0:
                return {}
            if self.hi >= self.lo and <uint64_t>self.hi - <uint64_t>self.lo < <uint64_t>(4 * total + 1024):
                return self._scan_dense(ids, mults, count)
            return self._scan_hashed(ids, mults, count)
        finally:
            free(ids)
            free(mults)

    cdef object _scan_dense(self, int64_t* ids, long long* mults, Py_ssize_t count):
        """:meth:`scan`'s sums in an array over ``[lo, hi]``."""
        cdef Py_ssize_t span = <Py_ssize_t>(<uint64_t>self.hi - <uint64_t>self.lo) + 1, j, r
        cdef long long* sums = <long long*> calloc(span, sizeof(long long))
        cdef long long product
        cdef Row* block
        if sums == NULL:
            raise MemoryError()
        try:
            for j in range(count):
                block = self.blocks[ids[j]]
                for r in range(self.lengths[ids[j]]):
                    if mul_overflow(block[r].payload, mults[j], &product):
                        return None
                    if add_overflow(sums[block[r].other - self.lo], product, &sums[block[r].other - self.lo]):
                        return None
            out = {}
            for r in range(span):
                if sums[r] != 0:
                    out[(self._value(self.lo + r),)] = sums[r]
            return out
        finally:
            free(sums)

    cdef object _scan_hashed(self, int64_t* ids, long long* mults, Py_ssize_t count):
        """:meth:`scan`'s sums in an open-addressing table, at most half full, grown as keys arrive."""
        cdef Py_ssize_t size = 1024, i, j, r, found = 0, length
        cdef uint64_t mask = size - 1, slot
        cdef long long m, product
        cdef int64_t y
        cdef Row* block
        cdef int64_t* keys = <int64_t*> malloc(size * sizeof(int64_t))
        cdef long long* sums = <long long*> malloc(size * sizeof(long long))
        cdef char* used = <char*> malloc(size)
        cdef int64_t* old_keys
        cdef long long* old_sums
        cdef char* old_used
        cdef uint64_t old_size
        if keys == NULL or sums == NULL or used == NULL:
            free(keys)
            free(sums)
            free(used)
            raise MemoryError()
        memset(used, 0, size)
        try:
            for j in range(count):
                block = self.blocks[ids[j]]
                length = self.lengths[ids[j]]
                m = mults[j]
                if 2 * (found + length) > size:  # keep the table at most half full
                    old_keys, old_sums, old_used, old_size = keys, sums, used, size
                    while 2 * (found + length) > size:
                        size *= 2
                    mask = size - 1
                    keys = <int64_t*> malloc(size * sizeof(int64_t))
                    sums = <long long*> malloc(size * sizeof(long long))
                    used = <char*> malloc(size)
                    if keys == NULL or sums == NULL or used == NULL:
                        free(old_keys)
                        free(old_sums)
                        free(old_used)
                        raise MemoryError()
                    memset(used, 0, size)
                    for i in range(<Py_ssize_t>old_size):
                        if old_used[i]:
                            slot = mix(<uint64_t>old_keys[i]) & mask
                            while used[slot]:
                                slot = (slot + 1) & mask
                            used[slot] = 1
                            keys[slot] = old_keys[i]
                            sums[slot] = old_sums[i]
                    free(old_keys)
                    free(old_sums)
                    free(old_used)
                for r in range(length):
                    if mul_overflow(block[r].payload, m, &product):
                        return None
                    y = block[r].other
                    slot = mix(<uint64_t>y) & mask
                    while used[slot] and keys[slot] != y:
                        slot = (slot + 1) & mask
                    if not used[slot]:
                        used[slot] = 1
                        keys[slot] = y
                        sums[slot] = product
                        found += 1
                    elif add_overflow(sums[slot], product, &sums[slot]):
                        return None
            out = {}
            for i in range(size):
                if used[i] and sums[i] != 0:
                    out[(self._value(keys[i]),)] = sums[i]
            return out
        finally:
            free(keys)
            free(sums)
            free(used)

    def block(self, bound):
        """``[(other, payload), ...]`` of one bound value, in block order (empty if absent)."""
        cdef long long x
        if not self._code(<PyObject*>bound, &x, False):
            return []
        cdef int64_t b = self._block_of(x)
        if b == EMPTY:
            return []
        return [(self._value(self.blocks[b][r].other), self.blocks[b][r].payload) for r in range(self.lengths[b])]

    def __len__(self) -> int:
        return self.rused

    @property
    def nbytes(self) -> int:
        """Bytes held: the blocks (their capacity) and both tables, empty slots included."""
        cdef Py_ssize_t total = 0, i
        for i in range(self.nblocks):
            total += self.capacities[i] * sizeof(Row)
        total += <Py_ssize_t>(self.bmask + 1) * 2 * sizeof(int64_t)
        total += <Py_ssize_t>(self.rmask + 1) * sizeof(Slot)
        return total + self.block_room * (sizeof(Row*) + 4 * sizeof(int64_t))

    def __reduce__(self):
        raise TypeError("a BucketIndex is derived from its view: the store rebuilds it after a restore")
