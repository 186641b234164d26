# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled compact state of the q-hierarchical engine (Berkholz et al., PODS'17, Thm 3.2; 002 §3, §6).

The same data structure as :class:`ivm.engines.qhier.engine.QHierEngine` (the Python
reference), laid out as rows of typed C arrays instead of Python objects, so the
cyclic garbage collector never walks it:

- one :class:`Pool` per q-tree node holds that node's items ``[v, α, a]`` as rows
  of one byte array (item id = row number, node-local): parent id, value code,
  support, weight, the multiplicities of the atoms represented at v, the
  children sums; for free nodes the local factor ``lw``, the free weight ``fw``
  and the fit-list links ``prev``/``next``; for free nodes with children the
  ``fsum`` and the fit-list head per child slot.  Leaves derive weight, ``lw``
  and ``fw`` from their multiplicities.  An inner node's deleted rows go to a
  free list and are reused; rows grow by x1.5.  A leaf's rows live in its hash
  table itself, so one probe reaches the row (one cache miss where a slot and
  a row would be two, once the state outgrows the caches): a bound leaf's rows,
  referenced by no other row, move on a deletion (backward shift); a free
  leaf's rows, linked in their parent's fit-list, leave a tombstone and move
  only at a rehash, which relinks them.
- the value→item maps of the trie are one open-addressing hash index per pool
  (linear probing, backward-shift deletion, doubling) keyed by ``(parent id,
  value code)``: 8 bytes a slot, the key's 32-bit hash beside the row id, the
  key itself read from the row on a hash match.  The hash of an item is its
  *path hash*, a sum of one term per value on its root path: the atom of an
  update holds every variable of its path (002 §3), so the update knows where
  each of its probes starts before it has found any item, and :meth:`Kernel.apply`
  prefetches them (a batch: the update two places ahead, decoded in blocks of 64).
- the base relations are :class:`Relation` tables (the row's value codes and
  its multiplicity, the same kind of index), or, under bag semantics for a
  relation with one plain occurrence, the trie alone (its deepest item's
  multiplicity is the tuple's).
- arrays of 4 MB and more are anonymous mappings advised for transparent huge
  pages (fewer TLB misses on the random probes of a large state;
  :func:`huge_pages` switches the advice, for measuring).
- an insert at a free node asks for the head of its parent's fit-list before
  it probes for its own row, and a deletion for its fit-list neighbours as
  soon as it has its row, so those misses overlap (:func:`_prefetch_head`).

Values are int64 codes: an ``int`` in ``[-2^62, 2^62)`` (and a ``bool`` or an
integral ``float``, which compare equal to it) is its own code; any other value
is interned once (a dict and a list of the distinct values, not per tuple).
Weights, sums and multiplicities are int64 with overflow checks: an overflow
raises :class:`KernelOverflow` with the base relations as they were before the
failing update, and the engine continues on the Python reference.

Every operation has the reference's complexity: an update is O(|φ|²) expected
(hash probes), count and Boolean answer O(1), enumeration O(|free|) delay.
"""

from libc.string cimport memcpy, memset
from cpython.mem cimport PyMem_Realloc, PyMem_Free
from cpython.ref cimport PyObject

import operator
import sys
from array import array

ctypedef long long i64
ctypedef int i32
ctypedef unsigned long long u64

cdef extern from *:
    """
    static inline int qh_mul(long long a, long long b, long long *r) { return __builtin_mul_overflow(a, b, r); }
    static inline int qh_add(long long a, long long b, long long *r) { return __builtin_add_overflow(a, b, r); }
    static inline int qh_sub(long long a, long long b, long long *r) { return __builtin_sub_overflow(a, b, r); }
    static inline unsigned long long qh_mix(unsigned long long x) {
        x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL; x ^= x >> 27; x *= 0x94d049bb133111ebULL; x ^= x >> 31;
        return x;
    }
    """
    int qh_mul(long long a, long long b, long long *r) nogil
    int qh_add(long long a, long long b, long long *r) nogil
    int qh_sub(long long a, long long b, long long *r) nogil
    unsigned long long qh_mix(unsigned long long x) nogil
    void qh_prefetch_write "__builtin_prefetch"(const void* p, int rw, int locality) nogil

cdef extern from "sys/mman.h":
    void* mmap(void* addr, size_t length, int prot, int flags, int fd, long offset) nogil
    int munmap(void* addr, size_t length) nogil
    int madvise(void* addr, size_t length, int advice) nogil
    int PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS, MADV_HUGEPAGE
    void* MAP_FAILED

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1

#: codes of interned (non-integer or huge) values start here; ints below it are their own code
cdef i64 TAG = (<i64>1) << 62
cdef i64 LOW = -((<i64>1) << 62)
#: the smallest row capacity (rows then grow by x1.5, indexes by x2)
cdef Py_ssize_t MIN_CAP = 8
#: :meth:`Kernel.apply` decodes this many updates at a time, and prefetches the probes of the update
#: this many places ahead of the one it applies (an update costs more than a miss to memory)
cdef enum:
    BLOCK = 64
    AHEAD = 2


class KernelOverflow(OverflowError):
    """An int64 weight, sum or multiplicity overflowed at update ``index`` of the batch.

    The base relations are as before that update; the item state is not (the
    engine discards it and continues on the Python reference).
    """

    def __init__(self, index):
        super().__init__(f"int64 overflow at update {index} of the batch")
        self.index = index


#: arrays of at least this many bytes are mapped directly, on transparent huge pages where the kernel
#: allows it (madvise): the update's random accesses then miss the TLB far less at 10^7 tuples
cdef size_t BIG = 1 << 22
cdef size_t HUGE_PAGE = 1 << 21
#: whether :func:`_grow` advises its mappings for huge pages (:func:`huge_pages` switches it, to measure)
cdef bint ADVISE_HUGE = True


def huge_pages(flag=None):
    """Whether arrays of 4 MB and more are advised for transparent huge pages (``madvise(MADV_HUGEPAGE)``).

    Pass ``flag`` to switch it for arrays allocated from then on (the benchmark measures both).  The
    advice takes effect where ``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or
    ``madvise``; with ``never`` the arrays live on 4 KB pages.  Returns the value before the call.
    """
    global ADVISE_HUGE
    old = bool(ADVISE_HUGE)
    if flag is not None:
        ADVISE_HUGE = bool(flag)
    return old


cdef inline size_t _mapped(size_t n) noexcept nogil:
    return (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)


cdef void* _grow(void* p, size_t old, size_t new, bint zero=True) except NULL:
    """Reallocate ``p`` from ``old`` to ``new`` bytes (``new > old``), zero-filling the new tail when asked.

    Small arrays live on the Python allocator; from :data:`BIG` bytes on, a fresh
    anonymous mapping (zeroed by the kernel) advised for huge pages, the old
    contents copied.  :func:`_release` frees by the same rule.
    """
    cdef char* q
    cdef void* m
    if new < BIG:
        q = <char*>PyMem_Realloc(p, new if new else 1)
        if q == NULL:
            raise MemoryError()
        if zero and new > old:
            memset(q + old, 0, new - old)
        return q
    m = mmap(NULL, _mapped(new), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if m == MAP_FAILED:
        raise MemoryError()
    if ADVISE_HUGE:
        madvise(m, _mapped(new), MADV_HUGEPAGE)
    if old:
        memcpy(m, p, old)
    _release(p, old)
    return m


cdef void _release(void* p, size_t n) noexcept:
    """Free an array of ``n`` bytes allocated by :func:`_grow`."""
    if p == NULL:
        return
    if n >= BIG:
        munmap(p, _mapped(n))
    else:
        PyMem_Free(p)


cdef inline Py_ssize_t _more(Py_ssize_t cap) noexcept:
    """The next row capacity: x1.5 (at most a third of the rows idle, for the bytes-per-tuple bound)."""
    return max(MIN_CAP, cap + cap // 2)


cdef inline unsigned long long _level_hash(int depth, i64 v) noexcept nogil:
    """The term of value ``v`` at q-tree depth ``depth`` (a root is at 1) in an item's path hash.

    An item's hash is the sum of the terms of the values on its root path, so an update knows the
    hash of every item on its atom's path from the tuple alone (the atom holds every variable of the
    path, 002 §3), before any of those items is found: all the path's probes can start at once.
    """
    return qh_mix(<unsigned long long>v + <unsigned long long>depth * 0x9E3779B97F4A7C15ULL)


# -- open-addressing indexes ----------------------------------------------------------------------
#
# A slot is ``hash32 << 32 | row`` (``EMPTY``: all ones): the low 32 bits of the key's hash beside the
# row id, so a probe reads a row only when the hashes agree, and deletion (backward shift) and growth
# never read rows.  Linear probing, at most 70% full, capacity a power of two.  A pool's key is
# (parent id, value) and its hash the item's path hash (:func:`_level_hash`), which the caller passes.

cdef u64 EMPTY = 0xFFFFFFFFFFFFFFFFULL


cdef u64* _index_new(Py_ssize_t icap) except NULL:
    cdef u64* index = <u64*>_grow(NULL, 0, icap * 8, False)
    memset(index, 0xFF, icap * 8)
    return index


cdef inline void _index_insert(u64* index, size_t mask, unsigned long long h, i32 r) noexcept:
    cdef size_t j = h & mask
    while index[j] != EMPTY:
        j = (j + 1) & mask
    index[j] = ((h & 0xFFFFFFFFULL) << 32) | <u64><unsigned int>r


cdef u64* _index_grow(u64* old, Py_ssize_t oldcap, Py_ssize_t icap) except NULL:
    """The slots of ``old`` re-placed in a new index of ``icap`` slots (from the stored hashes)."""
    cdef u64* index = _index_new(icap)
    cdef Py_ssize_t i
    cdef u64 s
    for i in range(oldcap):
        s = old[i]
        if s != EMPTY:
            _index_insert(index, icap - 1, s >> 32, <i32>(s & 0xFFFFFFFFULL))
    _release(old, oldcap * 8)
    return index


cdef inline void _index_remove(u64* index, size_t mask, unsigned long long h, i32 r) noexcept:
    """Delete row ``r`` (key hash ``h``) by backward shift: later slots of the cluster move up."""
    cdef size_t i = h & mask, j, k
    cdef u64 s
    while <i32>(index[i] & 0xFFFFFFFFULL) != r:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        s = index[j]
        if s == EMPTY:
            break
        k = (s >> 32) & mask
        if (i <= j and i < k <= j) or (i > j and (k > i or k <= j)):
            continue
        index[i] = s
        i = j
    index[i] = EMPTY


cdef class Pool:
    """The items of one q-tree node as rows of one byte array, with the (parent, value) → row index.

    A row is ``parent:i32 support:i32 value:i64`` then, for an inner node,
    ``weight:i64`` and, if free, ``lw:i64 fw:i64``; for a free node the fit-list
    links ``prev:i32 next:i32``; the atoms' multiplicities and the children's
    sums (``i64`` each); for a free inner node the children's ``fsum:i64`` and
    fit-list heads ``i32``.  A leaf's weight and ``lw`` are the product of its
    multiplicities and its ``fw`` is ``[lw ≠ 0]`` (Lemma 6.3/6.4 with no
    children), so leaves do not store them: a leaf of a free node takes 32
    bytes, of a bound node 24.  One row is one or two cache lines, whatever
    the field.

    A leaf's rows are the slots of its hash table (``inline``; empty slot:
    parent -1); a free leaf's deleted rows are tombstones (parent -2, ``tomb``)
    until an insert reuses them or a rehash drops them.  An inner node's rows
    are a separate array with a free list, named by the index's slots.
    """

    cdef public int n_atoms, n_children, free, lists, slot, fpos, leaf, inline, tomb
    #: the node's depth in its q-tree (a root is at 1, the component's sentinel at 0); set by the
    #: occurrences whose path holds it, before any item is added
    cdef public int depth
    #: rehashes of an inline table that doubled it, and that only dropped its tombstones (inspection)
    cdef public Py_ssize_t grown, purged
    cdef Py_ssize_t cap, top, live, dead, icap, nfreed, freedcap, stride
    cdef Py_ssize_t o_weight, o_lw, o_fw, o_prev, o_mults, o_sums, o_fsums, o_heads
    cdef char* data
    cdef u64* index
    cdef i32* freed
    cdef int n_bound, n_free
    cdef int* bound_slots
    cdef int* free_slots
    #: the pool of the parent node (the component's sentinel for a root), whose rows hold this node's
    #: fit-list heads: a rehash of a free leaf's table moves its rows and relinks them
    cdef Pool up

    def __cinit__(self, int n_atoms, int n_children, bint free, bint lists, int slot, int fpos,
                  bound_slots, free_slots):
        cdef Py_ssize_t o = 16
        self.n_atoms = n_atoms
        self.n_children = n_children
        self.free = free
        self.lists = lists
        self.slot = slot
        self.fpos = fpos
        self.leaf = n_children == 0
        self.n_bound = len(bound_slots)
        self.n_free = len(free_slots)
        self.bound_slots = <int*>_grow(NULL, 0, sizeof(int) * (self.n_bound + 1))
        self.free_slots = <int*>_grow(NULL, 0, sizeof(int) * (self.n_free + 1))
        for i, b in enumerate(bound_slots):
            self.bound_slots[i] = b
        for i, b in enumerate(free_slots):
            self.free_slots[i] = b
        self.o_weight = self.o_lw = self.o_fw = self.o_prev = self.o_fsums = self.o_heads = -1
        if not self.leaf:
            self.o_weight = o
            o += 8
            if free:
                self.o_lw = o
                self.o_fw = o + 8
                o += 16
        if free:
            self.o_prev = o
            o += 8
        self.o_mults = o
        o += 8 * n_atoms
        self.o_sums = o
        o += 8 * n_children
        if lists:
            self.o_fsums = o
            o += 8 * n_children
            self.o_heads = o
            o += 4 * n_children
        self.stride = (o + 7) // 8 * 8
        self.icap = 0
        # A leaf's items are referenced by no row of another node but through the fit-lists, so they
        # live in the hash table itself: one probe reaches the row, where an index costs a slot and a
        # row (two dependent cache misses once the state outgrows the caches).  A bound leaf's rows are
        # referenced by nothing and move on a deletion (backward shift); a free leaf's rows are linked
        # in their parent's fit-list, so a deletion leaves a tombstone instead and rows move only at a
        # rehash, which relinks them (``tomb``).
        self.inline = self.leaf
        self.tomb = self.leaf and free
        if self.inline:
            self._rehash_inline(MIN_CAP * 2)
        else:
            self._rehash(MIN_CAP * 2)

    def __dealloc__(self):
        _release(self.data, self.cap * self.stride)
        _release(self.index, self.icap * 8)
        _release(self.freed, self.freedcap * 4)
        PyMem_Free(self.bound_slots)
        PyMem_Free(self.free_slots)

    # -- fields of row r -------------------------------------------------------------------------

    cdef inline char* row(self, i64 r) noexcept:
        return self.data + r * self.stride

    cdef inline i32* parent(self, i64 r) noexcept:
        return <i32*>(self.data + r * self.stride)

    cdef inline i32* support(self, i64 r) noexcept:
        return <i32*>(self.data + r * self.stride + 4)

    cdef inline i64 val(self, i64 r) noexcept:
        return (<i64*>(self.data + r * self.stride + 8))[0]

    cdef inline i64* mults(self, i64 r) noexcept:
        return <i64*>(self.data + r * self.stride + self.o_mults)

    cdef inline i64* sums(self, i64 r) noexcept:
        return <i64*>(self.data + r * self.stride + self.o_sums)

    cdef inline i64* fsums(self, i64 r) noexcept:
        return <i64*>(self.data + r * self.stride + self.o_fsums)

    cdef inline i32* heads(self, i64 r) noexcept:
        return <i32*>(self.data + r * self.stride + self.o_heads)

    cdef inline i32* prev(self, i64 r) noexcept:
        return <i32*>(self.data + r * self.stride + self.o_prev)

    cdef inline i32* next(self, i64 r) noexcept:
        return <i32*>(self.data + r * self.stride + self.o_prev + 4)

    cdef inline i64 leaf_local(self, i64 r) noexcept:
        """Π of a leaf row's multiplicities: its weight and its ``lw`` (no children)."""
        cdef i64* m = <i64*>(self.data + r * self.stride + self.o_mults)
        cdef i64 x = 1
        cdef int c
        for c in range(self.n_atoms):
            x *= m[c]
        return x

    cdef inline i64 weight(self, i64 r) noexcept:
        if self.leaf:
            return self.leaf_local(r)
        return (<i64*>(self.data + r * self.stride + self.o_weight))[0]

    cdef inline i64 lw(self, i64 r) noexcept:
        if self.leaf:
            return self.leaf_local(r)
        return (<i64*>(self.data + r * self.stride + self.o_lw))[0]

    cdef inline i64 fw(self, i64 r) noexcept:
        if self.leaf:
            return self.leaf_local(r) != 0
        return (<i64*>(self.data + r * self.stride + self.o_fw))[0]

    # -- rows and index --------------------------------------------------------------------------

    cdef int _rehash(self, Py_ssize_t icap) except -1:
        if self.index == NULL:
            self.index = _index_new(icap)
        else:
            self.index = _index_grow(self.index, self.icap, icap)
        self.icap = icap
        return 0

    def set_parent(self, Pool up):
        """The pool of the parent node (the sentinel for a root): a free leaf's fit-list heads are there."""
        if self.tomb and not up.lists:
            raise ValueError("the parent of a free leaf keeps no fit-lists")
        self.up = up

    cdef int _rehash_inline(self, Py_ssize_t icap) except -1:
        """An inline table of ``icap`` row slots (empty: parent -1), the live rows re-placed; O(icap).

        A free leaf's rows are relinked: the fit-list links among them mapped to the new
        slots, and the head of each list (a fit row without predecessor) set in its
        parent's row.  Called only between updates of occurrences (from :meth:`add`, in
        the top-down walk), when every row is in its parent's fit-list iff its ``fw`` is
        non-zero.  Tombstones are dropped.
        """
        cdef char* old = self.data
        cdef Py_ssize_t oldcap = self.icap, i
        cdef size_t mask = icap - 1, j
        cdef char* src
        cdef char* row
        cdef i32* moved = NULL
        cdef i32 link
        self.data = <char*>_grow(NULL, 0, icap * self.stride, False)
        memset(self.data, 0xFF, icap * self.stride)
        if self.tomb and self.live:
            if self.up is None:
                raise RuntimeError("a free leaf's pool needs its parent pool (set_parent) before it grows")
            moved = <i32*>_grow(NULL, 0, oldcap * 4, False)
        for i in range(oldcap):
            src = old + i * self.stride
            if (<i32*>src)[0] >= 0:
                j = self.hash_of((<i32*>src)[0], (<i64*>(src + 8))[0]) & mask
                while (<i32*>(self.data + j * self.stride))[0] >= 0:
                    j = (j + 1) & mask
                memcpy(self.data + j * self.stride, src, self.stride)
                if moved != NULL:
                    moved[i] = <i32>j
        if moved != NULL:
            for j in range(<size_t>icap):
                row = self.data + j * self.stride
                if (<i32*>row)[0] < 0:
                    continue
                link = (<i32*>(row + self.o_prev))[0]
                if link >= 0:
                    (<i32*>(row + self.o_prev))[0] = moved[link]
                elif self.leaf_local(j) != 0:  # fit and first: the head of its parent's fit-list
                    self.up.heads((<i32*>row)[0])[self.slot] = <i32>j
                link = (<i32*>(row + self.o_prev + 4))[0]
                if link >= 0:
                    (<i32*>(row + self.o_prev + 4))[0] = moved[link]
            _release(moved, oldcap * 4)
        _release(old, oldcap * self.stride)
        self.icap = self.cap = self.top = icap
        self.dead = 0
        return 0

    cdef inline unsigned long long hash_of(self, i64 pid, i64 v) noexcept:
        """The path hash of item (``pid``, ``v``), read up the parent chain (O(depth)): for the rows a
        rehash or a backward shift moves, whose hash no caller knows."""
        cdef unsigned long long h = _level_hash(self.depth, v)
        cdef Pool p = self.up
        while p is not None and p.depth > 0:
            h += _level_hash(p.depth, p.val(pid))
            pid = p.parent(pid)[0]
            p = p.up
        return h

    cdef inline void prefetch(self, unsigned long long h) noexcept:
        """Start fetching where a probe for path hash ``h`` begins (the row of an inline table, else the
        index slot)."""
        cdef size_t j = h & (self.icap - 1)
        if self.inline:
            qh_prefetch_write(self.data + j * self.stride, 1, 3)
        else:
            qh_prefetch_write(&self.index[j], 0, 3)

    cdef inline i32 find(self, unsigned long long h, i64 pid, i64 v) noexcept:
        """Row of item (``pid``, ``v``) whose path hash is ``h``, -1 if absent; O(1) expected."""
        cdef size_t mask = self.icap - 1
        cdef u64 h32 = h & 0xFFFFFFFFULL, s
        cdef size_t j = h & mask
        cdef i32 r, p
        cdef char* row
        if self.inline:
            while True:
                row = self.data + j * self.stride
                p = (<i32*>row)[0]
                if p == -1:  # empty (a tombstone, -2, continues the probe)
                    return -1
                if p == pid and (<i64*>(row + 8))[0] == v:
                    return <i32>j
                j = (j + 1) & mask
        while True:
            s = self.index[j]
            if s == EMPTY:
                return -1
            if (s >> 32) == h32:
                r = <i32>(s & 0xFFFFFFFFULL)
                row = self.data + r * self.stride
                if (<i64*>(row + 8))[0] == v and (<i32*>row)[0] == pid:
                    return r
            j = (j + 1) & mask

    cdef i32 add(self, unsigned long long h, i64 pid, i64 v) except -1:
        """A new item (pid, v) of path hash ``h`` with every field zero and empty fit-list links and heads;
        O(1) amortized."""
        cdef i32 r
        cdef Py_ssize_t c, cap
        cdef size_t j, mask
        cdef char* row
        if self.inline:
            if (self.live + self.dead + 1) * 10 > self.icap * 7:
                # grow when the live rows alone fill more than 35%, else only drop the tombstones
                if (self.live + 1) * 20 > self.icap * 7:
                    self._rehash_inline(self.icap * 2)
                    self.grown += 1
                else:
                    self._rehash_inline(self.icap)
                    self.purged += 1
            mask = self.icap - 1
            j = h & mask
            while (<i32*>(self.data + j * self.stride))[0] >= 0:
                j = (j + 1) & mask
            row = self.data + j * self.stride
            if (<i32*>row)[0] == -2:  # the key is absent (the caller found no row): reuse the tombstone
                self.dead -= 1
            memset(row, 0, self.stride)
            (<i32*>row)[0] = <i32>pid
            (<i64*>(row + 8))[0] = v
            if self.free:
                self.prev(j)[0] = -1
                self.next(j)[0] = -1
            self.live += 1
            return <i32>j
        if self.nfreed:
            self.nfreed -= 1
            r = self.freed[self.nfreed]
        else:
            if self.top == self.cap:
                cap = _more(self.cap)
                if cap > 0x7FFFFFFF:
                    raise MemoryError("more than 2^31 items at one q-tree node")
                self.data = <char*>_grow(self.data, self.cap * self.stride, cap * self.stride, False)
                self.cap = cap
            r = <i32>self.top
            self.top += 1
        row = self.data + r * self.stride
        memset(row, 0, self.stride)
        (<i32*>row)[0] = <i32>pid
        (<i64*>(row + 8))[0] = v
        if self.free:
            self.prev(r)[0] = -1
            self.next(r)[0] = -1
        if self.lists:
            for c in range(self.n_children):
                self.heads(r)[c] = -1
        self.live += 1
        if self.live * 10 > self.icap * 7:
            self._rehash(self.icap * 2)
        _index_insert(self.index, self.icap - 1, h, r)
        return r

    cdef int remove(self, i32 r) except -1:
        """Drop item ``r`` from the index (backward-shift deletion) and put its row on the free list.

        In a bound leaf's table the later rows of the cluster move up instead (their ids change: nothing
        refers to a bound leaf's row).  A free leaf's row (unlinked from its fit-list, since its ``fw`` is
        0) becomes a tombstone, or, at the end of its cluster, empty with the tombstones before it."""
        cdef size_t mask, i, j, k
        cdef char* rj
        if self.tomb:
            # Only the parent field marks the slot (the rest of the row stays readable: the answer
            # deltas of this update are read through it after the collection, see Kernel._emit).
            mask = self.icap - 1
            self.support(r)[0] = 0
            if self.parent((r + 1) & mask)[0] == -1:
                self.parent(r)[0] = -1
                i = (r - 1) & mask
                while self.parent(i)[0] == -2:
                    self.parent(i)[0] = -1
                    self.dead -= 1
                    i = (i - 1) & mask
            else:
                self.parent(r)[0] = -2
                self.dead += 1
            self.live -= 1
            return 0
        if self.inline:
            mask = self.icap - 1
            i = r
            j = i
            while True:
                j = (j + 1) & mask
                rj = self.data + j * self.stride
                if (<i32*>rj)[0] < 0:
                    break
                k = self.hash_of((<i32*>rj)[0], (<i64*>(rj + 8))[0]) & mask
                if (i <= j and i < k <= j) or (i > j and (k > i or k <= j)):
                    continue
                memcpy(self.data + i * self.stride, rj, self.stride)
                i = j
            memset(self.data + i * self.stride, 0xFF, self.stride)
            self.live -= 1
            return 0
        _index_remove(self.index, self.icap - 1, self.hash_of(self.parent(r)[0], self.val(r)), r)
        self.support(r)[0] = 0
        if self.nfreed == self.freedcap:
            self.freed = <i32*>_grow(self.freed, self.freedcap * 4, _more(self.freedcap) * 4, False)
            self.freedcap = _more(self.freedcap)
        self.freed[self.nfreed] = r
        self.nfreed += 1
        self.live -= 1
        return 0

    def item(self, Py_ssize_t r):
        """Row ``r`` as Python values (inspection): parent, value code, support, weight, lw, fw, prev, next,
        mults, sums, fsums, heads (-1: none)."""
        cdef int c
        na, nc = self.n_atoms, self.n_children
        return (
            self.parent(r)[0], self.val(r), self.support(r)[0], self.weight(r),
            self.lw(r) if self.free else 0, self.fw(r) if self.free else 0,
            self.prev(r)[0] if self.free else -1, self.next(r)[0] if self.free else -1,
            [self.mults(r)[c] for c in range(na)],
            [self.sums(r)[c] for c in range(nc)],
            [self.fsums(r)[c] for c in range(nc)] if self.lists else None,
            [self.heads(r)[c] for c in range(nc)] if self.lists else None,
        )

    def children(self, Py_ssize_t pid):
        """The live rows whose parent is ``pid`` (inspection only: O(rows of the pool))."""
        cdef Py_ssize_t r
        return [r for r in range(self.top) if self.parent(r)[0] == pid and self.support(r)[0] > 0]

    def table(self):
        """``(slots, live rows, tombstones)`` of the pool's hash table (inspection)."""
        return self.icap, self.live, self.dead

    def rebuild(self):
        """Rehash an inline table at its size, as :meth:`add` does when tombstones fill it (tests)."""
        if self.inline:
            self._rehash_inline(self.icap)
            self.purged += 1

    def make_root(self):
        """The single item (row 0) of a component's sentinel pool (the paper's start list)."""
        self.add(0, 0, 0)

    cpdef Py_ssize_t nbytes(self):
        """Allocated bytes of the rows, the index and the free list."""
        if self.inline:
            return self.icap * self.stride
        return self.cap * self.stride + self.icap * 8 + self.freedcap * 4


cdef inline void _prefetch_head(Pool pool, Pool ppool, i64 pid) noexcept:
    """Start fetching the head row of item ``pid``'s fit-list of ``pool`` (an insert links before it).

    Issued before the find of the item itself, so the two cache misses of an insert at a free
    node overlap instead of following each other: the head's id is in the parent's row, which the
    walk has just read.
    """
    cdef i32 head = ppool.heads(pid)[pool.slot]
    if head >= 0:
        qh_prefetch_write(pool.row(head), 1, 3)


cdef inline unsigned long long _row_hash(const i64* codes, int arity) noexcept nogil:
    cdef unsigned long long h = 0x243F6A8885A308D3ULL
    cdef int i
    for i in range(arity):
        h = qh_mix(h ^ <unsigned long long>codes[i]) + <unsigned long long>i
    return h


cdef class Relation:
    """A base Z-relation: rows ``codes:i64[arity] multiplicity:i64`` with a row → id index.

    Or *virtual*: under bag semantics a relation with a single occurrence whose
    root path holds each of its attributes once (no constant, no repeated
    variable) is stored in the trie alone: the multiplicity of a tuple is the
    one its deepest item keeps for that atom (002 §6.4 sets it to exactly the
    new multiplicity), so the table would only repeat it.  Lookups walk the
    path (O(|φ|) expected), and a tuple costs its trie rows only.
    """

    cdef public int arity
    cdef public str name
    cdef public bint virtual
    cdef object occ
    cdef Py_ssize_t vlive
    cdef Py_ssize_t cap, top, live, icap, nfreed, freedcap, width
    cdef i64* data
    cdef u64* index
    cdef i32* freed

    def __cinit__(self, str name, int arity):
        self.name = name
        self.arity = arity
        self.width = arity + 1
        self.icap = 0
        self._rehash(MIN_CAP * 2)

    def __dealloc__(self):
        _release(self.data, self.cap * 8 * self.width)
        _release(self.index, self.icap * 8)
        _release(self.freed, self.freedcap * 4)

    cdef inline i64* codes(self, i64 r) noexcept:
        return self.data + r * self.width

    cdef inline i64 mult(self, i64 r) noexcept:
        return self.data[r * self.width + self.arity]

    cdef int _rehash(self, Py_ssize_t icap) except -1:
        if self.index == NULL:
            self.index = _index_new(icap)
        else:
            self.index = _index_grow(self.index, self.icap, icap)
        self.icap = icap
        return 0

    cdef inline i32 find(self, const i64* key) noexcept:
        cdef size_t mask = self.icap - 1
        cdef unsigned long long h = _row_hash(key, self.arity)
        cdef u64 h32 = h & 0xFFFFFFFFULL, s
        cdef size_t j = h & mask
        cdef i32 r
        cdef int a
        cdef bint same
        cdef i64* row
        while True:
            s = self.index[j]
            if s == EMPTY:
                return -1
            if (s >> 32) == h32:
                r = <i32>(s & 0xFFFFFFFFULL)
                row = self.data + r * self.width
                same = True
                for a in range(self.arity):
                    if row[a] != key[a]:
                        same = False
                        break
                if same:
                    return r
            j = (j + 1) & mask

    cdef inline i64 get(self, const i64* key) noexcept:
        cdef i32 r = self.find(key)
        return 0 if r < 0 else self.mult(r)

    cdef int put(self, const i64* key, i64 m) except -1:
        """Set the multiplicity of ``key`` (0 deletes the row); O(1) expected."""
        cdef i32 r = self.find(key)
        cdef int a
        cdef size_t i, j, k, mask
        cdef Py_ssize_t cap
        cdef i32 s
        if r >= 0 and m:
            self.data[r * self.width + self.arity] = m
            return 0
        if r < 0:
            if not m:
                return 0
            if self.nfreed:
                self.nfreed -= 1
                r = self.freed[self.nfreed]
            else:
                if self.top == self.cap:
                    cap = _more(self.cap)
                    if cap > 0x7FFFFFFF:
                        raise MemoryError("more than 2^31 rows in one relation")
                    self.data = <i64*>_grow(self.data, self.cap * 8 * self.width, cap * 8 * self.width, False)
                    self.cap = cap
                r = <i32>self.top
                self.top += 1
            for a in range(self.arity):
                self.data[r * self.width + a] = key[a]
            self.data[r * self.width + self.arity] = m
            self.live += 1
            if self.live * 10 > self.icap * 7:
                self._rehash(self.icap * 2)
            _index_insert(self.index, self.icap - 1, _row_hash(key, self.arity), r)
            return 0
        # m == 0: delete row r
        _index_remove(self.index, self.icap - 1, _row_hash(key, self.arity), r)
        self.data[r * self.width + self.arity] = 0
        if self.nfreed == self.freedcap:
            self.freed = <i32*>_grow(self.freed, self.freedcap * 4, _more(self.freedcap) * 4, False)
            self.freedcap = _more(self.freedcap)
        self.freed[self.nfreed] = r
        self.nfreed += 1
        self.live -= 1
        return 0

    def __len__(self):
        return self.vlive if self.virtual else self.live

    cpdef Py_ssize_t nbytes(self):
        return self.cap * 8 * self.width + self.icap * 8 + self.freedcap * 4

    def export(self):
        """The live rows as ``(codes, multiplicities)``: two bytes objects of int64 (row-major codes)."""
        cdef bytearray codes = bytearray(self.live * 8 * self.arity)
        cdef bytearray mults = bytearray(self.live * 8)
        cdef i64* c = <i64*><char*>codes
        cdef i64* m = <i64*><char*>mults
        cdef Py_ssize_t r, n = 0
        cdef int a
        for r in range(self.top):
            if self.mult(r):
                for a in range(self.arity):
                    c[n * self.arity + a] = self.data[r * self.width + a]
                m[n] = self.mult(r)
                n += 1
        return bytes(codes), bytes(mults)


cdef class Occurrence:
    """One atom occurrence: its root path of pools, the row positions and selections (codes)."""

    cdef int rel, depth, slot, free_depth, comp, comp_free, n_equal, n_consts
    cdef list pools
    cdef PyObject** path
    cdef Pool sentinel
    cdef int* positions
    cdef int* eq
    cdef int* cpos
    cdef i64* cval
    cdef i32* ids
    #: the path hashes of the current update's items, level by level (:meth:`Kernel._hash_path`)
    cdef unsigned long long* hashes

    def __cinit__(self, int rel, list pools, Pool sentinel, positions, equal, consts, int slot, int free_depth,
                  int comp, bint comp_free):
        cdef int k
        self.rel = rel
        self.pools = pools
        self.sentinel = sentinel
        self.depth = len(pools)
        self.slot = slot
        self.free_depth = free_depth
        self.comp = comp
        self.comp_free = comp_free
        self.n_equal = len(equal)
        self.n_consts = len(consts)
        self.path = <PyObject**>_grow(NULL, 0, sizeof(PyObject*) * (self.depth + 1))
        self.positions = <int*>_grow(NULL, 0, sizeof(int) * (self.depth + 1))
        self.ids = <i32*>_grow(NULL, 0, sizeof(i32) * (self.depth + 1))
        self.hashes = <unsigned long long*>_grow(NULL, 0, sizeof(unsigned long long) * (self.depth + 1))
        self.eq = <int*>_grow(NULL, 0, sizeof(int) * (2 * self.n_equal + 1))
        self.cpos = <int*>_grow(NULL, 0, sizeof(int) * (self.n_consts + 1))
        self.cval = <i64*>_grow(NULL, 0, sizeof(i64) * (self.n_consts + 1))
        for k in range(self.depth):
            self.path[k] = <PyObject*>pools[k]
            self.positions[k] = positions[k]
            if (<Pool>pools[k]).depth not in (0, k + 1):
                raise ValueError("a q-tree node at two depths")
            (<Pool>pools[k]).depth = k + 1
        for k, (p, q) in enumerate(equal):
            self.eq[2 * k] = p
            self.eq[2 * k + 1] = q
        for k, (p, c) in enumerate(consts):
            self.cpos[k] = p
            self.cval[k] = c

    def __dealloc__(self):
        PyMem_Free(self.path)
        PyMem_Free(self.positions)
        PyMem_Free(self.ids)
        PyMem_Free(self.hashes)
        PyMem_Free(self.eq)
        PyMem_Free(self.cpos)
        PyMem_Free(self.cval)


cdef class Kernel:
    """The whole mutable state of a compact q-hierarchical engine, and its update and answer loops.

    Built by :class:`ivm.engines.qhier.compact.QHierCompactEngine` from the
    reference's plan (q-trees, occurrences, free nodes in document order).
    """

    cdef public list pools, relations, occurrences, sentinels, values
    cdef public dict rel_index, interned
    cdef public list comp_free, nullary
    cdef public object delta
    cdef public bint tracking, set_mode
    cdef public Py_ssize_t updates, version, items
    cdef list pending
    cdef int m
    cdef PyObject** fpool
    cdef PyObject** fparentpool
    cdef int* fparent
    cdef int* fslot
    cdef tuple head
    cdef i64* buf
    cdef int bufcap
    #: a block of decoded updates (:meth:`apply`): relation index, multiplicity, position in the batch,
    #: and ``bufcap`` value codes and path hashes each
    cdef int* brel
    cdef i64* bmult
    cdef Py_ssize_t* bidx
    cdef i64* bcodes
    cdef unsigned long long* bhash
    cdef object stale

    def __cinit__(self):
        self.fpool = NULL
        self.fparentpool = NULL
        self.fparent = NULL
        self.fslot = NULL
        self.buf = NULL
        self.brel = NULL
        self.bmult = NULL
        self.bidx = NULL
        self.bcodes = NULL
        self.bhash = NULL

    def __init__(self, list pools, list sentinels, list comp_free, list relations, list occurrences,
                 list free_nodes, tuple head, list nullary, bint set_mode, stale):
        """``free_nodes``: (pool index, parent free position or -1, parent pool index) in document order."""
        cdef int j
        self.pools = pools
        self.sentinels = sentinels
        self.comp_free = comp_free
        self.relations = relations
        self.rel_index = {r.name: i for i, r in enumerate(relations)}
        self.occurrences = occurrences
        self.nullary = nullary
        self.set_mode = set_mode
        self.stale = stale
        self.head = head
        self.values = []
        self.interned = {}
        self.delta = {}
        self.pending = []
        self.tracking = False
        self.updates = self.version = self.items = 0
        self.m = len(free_nodes)
        self.fpool = <PyObject**>_grow(NULL, 0, sizeof(PyObject*) * (self.m + 1))
        self.fparentpool = <PyObject**>_grow(NULL, 0, sizeof(PyObject*) * (self.m + 1))
        self.fparent = <int*>_grow(NULL, 0, sizeof(int) * (self.m + 1))
        self.fslot = <int*>_grow(NULL, 0, sizeof(int) * (self.m + 1))
        for j, (p, parent, pp) in enumerate(free_nodes):
            self.fpool[j] = <PyObject*>pools[p]
            self.fparentpool[j] = <PyObject*>pools[pp]
            self.fparent[j] = parent
            self.fslot[j] = (<Pool>pools[p]).slot
        self.bufcap = max([r.arity for r in relations] + [1])
        self.buf = <i64*>_grow(NULL, 0, sizeof(i64) * self.bufcap)
        self.brel = <int*>_grow(NULL, 0, sizeof(int) * BLOCK)
        self.bmult = <i64*>_grow(NULL, 0, sizeof(i64) * BLOCK)
        self.bidx = <Py_ssize_t*>_grow(NULL, 0, sizeof(Py_ssize_t) * BLOCK)
        self.bcodes = <i64*>_grow(NULL, 0, sizeof(i64) * BLOCK * self.bufcap)
        # an occurrence's path has at most one node per attribute of its atom
        self.bhash = <unsigned long long*>_grow(NULL, 0, sizeof(unsigned long long) * BLOCK * self.bufcap)

    def __dealloc__(self):
        PyMem_Free(self.fpool)
        PyMem_Free(self.fparentpool)
        PyMem_Free(self.fparent)
        PyMem_Free(self.fslot)
        PyMem_Free(self.buf)
        PyMem_Free(self.brel)
        PyMem_Free(self.bmult)
        PyMem_Free(self.bidx)
        PyMem_Free(self.bcodes)
        PyMem_Free(self.bhash)

    # -- value codes ------------------------------------------------------------------------------

    cdef int encode(self, object v, i64* out, bint insert) except -1:
        """The code of ``v`` into ``out``: 1, or 0 if ``v`` was never seen and ``insert`` is false."""
        cdef int ovf = 0
        cdef i64 c
        cdef type t = type(v)
        if t is int or t is bool:
            c = PyLong_AsLongLongAndOverflow(v, &ovf)
            if not ovf and LOW <= c < TAG:
                out[0] = c
                return 1
        elif t is float:
            if v == v and v.is_integer() and -4.6e18 < v < 4.6e18:
                out[0] = <i64>v
                return 1
        elif hasattr(t, "__index__"):
            return self.encode(operator.index(v), out, insert)
        code = self.interned.get(v)
        if code is None:
            if not insert:
                return 0
            code = TAG + len(self.values)
            self.interned[v] = code
            self.values.append(v)
        out[0] = code
        return 1

    cdef inline object decode(self, i64 c):
        if c < TAG:
            return c
        return self.values[c - TAG]

    def decode_value(self, i64 c):
        return self.decode(c)

    def encode_value(self, v):
        """The code of ``v`` (interning it when new)."""
        cdef i64 c
        self.encode(v, &c, True)
        return c

    def load_values(self, list values):
        """Restore the interned values of a snapshot (before any update)."""
        self.values = list(values)
        self.interned = {v: TAG + i for i, v in enumerate(self.values)}

    # -- updates (§6.4) ---------------------------------------------------------------------------

    def apply(self, updates):
        """Apply ``(relation, row, multiplicity)`` updates one by one, in order; O(|φ|²) expected each.

        The updates are decoded a block of :data:`BLOCK` at a time into value codes, then applied
        while the probes of the update :data:`AHEAD` places later are prefetched (its path hashes
        come from its codes alone, :func:`_level_hash`): in a batch, the cache misses of one update
        overlap the work of the ones before it.  An update that cannot be decoded (an unknown
        relation, a wrong arity, a multiplicity beyond int64) raises after the ones before it are
        applied, as if they were applied one at a time.
        """
        cdef list seq = updates if type(updates) is list else list(updates)
        cdef Py_ssize_t n = len(seq), pos = 0, count, b, w = self.bufcap
        cdef int ri, a, ovf
        cdef Relation rel
        cdef i64 m
        cdef i64* codes
        error = None
        while pos < n:
            count = 0
            try:
                while pos < n and count < BLOCK:
                    relation, row, mult = seq[pos]
                    pos += 1
                    if not mult:
                        continue
                    index = self.rel_index.get(relation)
                    if index is None:
                        raise KeyError(f"relation {relation!r} does not occur in the query")
                    ri = index
                    rel = <Relation>self.relations[ri]
                    if type(row) is not tuple:
                        row = tuple(row)
                    if len(row) != rel.arity:
                        raise ValueError(
                            f"{relation}{row!r} has {len(row)} values, the relation has arity {rel.arity}"
                        )
                    codes = self.bcodes + count * w
                    for a in range(rel.arity):
                        self.encode(row[a], codes + a, True)
                    ovf = 0
                    m = PyLong_AsLongLongAndOverflow(mult, &ovf)
                    if ovf:
                        raise KernelOverflow(pos - 1)
                    self.brel[count] = ri
                    self.bmult[count] = m
                    self.bidx[count] = pos - 1
                    count += 1
            except Exception as exc:  # raised once the updates before it are applied
                error = exc
                n = 0
            for b in range(min(AHEAD, count)):
                self._prefetch_path(self.brel[b], self.bcodes + b * w, self.bhash + b * w)
            for b in range(count):
                if b + AHEAD < count:
                    self._prefetch_path(
                        self.brel[b + AHEAD], self.bcodes + (b + AHEAD) * w, self.bhash + (b + AHEAD) * w
                    )
                self._update(self.brel[b], self.bcodes + b * w, self.bmult[b], self.bidx[b], self.bhash + b * w)
        if error is not None:
            raise error

    cdef inline void _prefetch_path(self, int ri, const i64* codes, unsigned long long* hashes) noexcept:
        """Start fetching where the probes of an update of relation ``ri`` with tuple ``codes`` begin:
        the items on its first occurrence's path (their path hashes, written to ``hashes``, come from
        the tuple alone) and, for a relation kept in a table, the table's index slot."""
        cdef list occs = <list>self.occurrences[ri]
        cdef Relation rel = <Relation>self.relations[ri]
        if not rel.virtual:
            qh_prefetch_write(&rel.index[_row_hash(codes, rel.arity) & (rel.icap - 1)], 0, 3)
        if occs:
            self._hash_path(<Occurrence>occs[0], codes, hashes, True)

    cdef inline void _hash_path(
        self, Occurrence occ, const i64* codes, unsigned long long* hashes, bint prefetch
    ) noexcept:
        """The path hashes of the items on ``occ``'s path for tuple ``codes``, level by level, into
        ``hashes``, and, if asked, a prefetch of where each probe begins: the hashes come from the
        tuple alone, so the misses of all levels (the deepest one, in the largest pool, above all)
        overlap the work before them instead of following one another."""
        cdef unsigned long long h = 0
        cdef int k
        for k in range(occ.depth):
            h += _level_hash(k + 1, codes[occ.positions[k]])
            hashes[k] = h
            if prefetch:
                (<Pool>occ.path[k]).prefetch(h)

    def apply_codes(self, int ri, bytes codes, bytes mults):
        """Apply the rows of a compact snapshot (codes already interned) as inserts."""
        cdef Relation rel = <Relation>self.relations[ri]
        cdef const i64* c = <const i64*><const char*>codes
        cdef const i64* m = <const i64*><const char*>mults
        cdef Py_ssize_t n = len(mults) // 8, r
        for r in range(n):
            self._update(ri, c + r * rel.arity, m[r], r, NULL)

    cdef int _update(self, int ri, const i64* codes, i64 m, Py_ssize_t i, const unsigned long long* hashes) except -1:
        """One update; ``hashes``: the path hashes of the first occurrence's items, or NULL."""
        cdef Relation rel = <Relation>self.relations[ri]
        cdef i64 base_old, old, new
        cdef Occurrence occ
        cdef list occs = <list>self.occurrences[ri]
        cdef Py_ssize_t j
        if occs:
            if hashes == NULL:
                self._hash_path(<Occurrence>occs[0], codes, (<Occurrence>occs[0]).hashes, False)
            else:
                memcpy((<Occurrence>occs[0]).hashes, hashes, sizeof(unsigned long long) * (<Occurrence>occs[0]).depth)
        base_old = self._virtual_get(<Occurrence>rel.occ, codes) if rel.virtual else rel.get(codes)
        old = base_old
        if qh_add(old, m, &new):
            raise KernelOverflow(i)
        nullary = self.tracking and rel.arity == 0 and self._nullary_count(ri)
        if nullary:
            factor_before = self.global_factor(-1)
        if not rel.virtual:
            rel.put(codes, new)
        self.updates += 1
        if self.set_mode:
            old = old > 0
            new = new > 0
            if old == new:
                return 0
        self.version += 1
        try:
            for j in range(len(occs)):
                occ = <Occurrence>occs[j]
                if j:
                    self._hash_path(occ, codes, occ.hashes, False)
                self._update_occurrence(occ, codes, old, new)
        except OverflowError:
            if rel.virtual:  # the items on the path still exist (overflows precede the collection)
                self._virtual_set(<Occurrence>rel.occ, codes, base_old)
            else:
                rel.put(codes, base_old)
            self.updates -= 1
            self.pending = []
            raise KernelOverflow(i)
        if rel.virtual:
            rel.vlive += (new != 0) - (base_old != 0)
        if nullary:
            self._emit(None, -1, 1, 1, factor_before, self.global_factor(-1))
        if self.pending:
            delta = self.delta
            for row, d in self.pending:
                total = delta.get(row, 0) + d
                if total:
                    delta[row] = total
                else:
                    delta.pop(row, None)
            self.pending = []
        return 0

    cdef inline i64 _virtual_get(self, Occurrence occ, const i64* codes) noexcept:
        """A virtual relation's multiplicity of ``codes``: the deepest item's, 0 without one (``occ.hashes``
        holds the path hashes of ``codes``)."""
        cdef i64 pid = 0
        cdef i32 r = 0
        cdef int k
        cdef Pool pool
        for k in range(occ.depth):
            pool = <Pool>occ.path[k]
            if k == occ.depth - 1 and pool.free:  # see _update_occurrence
                _prefetch_head(pool, <Pool>occ.path[k - 1] if k else occ.sentinel, pid)
            r = pool.find(occ.hashes[k], pid, codes[occ.positions[k]])
            if r < 0:
                return 0
            pid = r
        return pool.mults(r)[occ.slot]

    cdef int _virtual_set(self, Occurrence occ, const i64* codes, i64 m) except -1:
        cdef i64 pid = 0
        cdef i32 r = 0
        cdef int k
        cdef Pool pool
        for k in range(occ.depth):
            pool = <Pool>occ.path[k]
            r = pool.find(occ.hashes[k], pid, codes[occ.positions[k]])
            if r < 0:
                return 0
            pid = r
        pool.mults(r)[occ.slot] = m
        return 0

    def link_virtual(self):
        """Store in the trie alone every relation that allows it (see :class:`Relation`); before any update."""
        cdef Relation rel
        cdef Occurrence occ
        for ri, rel_obj in enumerate(self.relations):
            rel = <Relation>rel_obj
            occs = self.occurrences[ri]
            if self.set_mode or len(occs) != 1 or rel.arity == 0:
                continue
            occ = <Occurrence>occs[0]
            if occ.n_equal or occ.n_consts or occ.depth != rel.arity:
                continue
            rel.virtual = True
            rel.occ = occ

    cdef list _virtual_rows(self, Relation rel):
        """``(codes list, multiplicity)`` of every tuple of a virtual relation: the leaf rows with a non-zero
        multiplicity for its atom, their codes read up the parent chain; O(rows of the leaf pool · depth)."""
        cdef Occurrence occ = <Occurrence>rel.occ
        cdef Pool leaf = <Pool>occ.path[occ.depth - 1], pool
        cdef Py_ssize_t r, q
        cdef int k
        cdef i64 m
        out = []
        for r in range(leaf.top):
            if leaf.support(r)[0] <= 0:
                continue
            m = leaf.mults(r)[occ.slot]
            if not m:
                continue
            codes = [0] * rel.arity
            q = r
            for k in range(occ.depth - 1, -1, -1):
                pool = <Pool>occ.path[k]
                codes[occ.positions[k]] = pool.val(q)
                q = pool.parent(q)[0]
            out.append((codes, m))
        return out

    cdef int _nullary_count(self, int ri):
        for r, count in self.nullary:
            if r == ri:
                return count
        return 0

    cdef int _update_occurrence(self, Occurrence occ, const i64* codes, i64 old, i64 new) except -1:
        """002 §6.4: find or create the items on the tuple's root path, set its multiplicity at the deepest
        one, then recompute weight, ``lw``, ``fw`` and the fit-lists bottom-up while anything changes and
        drop the unsupported items; O(|φ|) expected per occurrence, whatever the database."""
        cdef int k, c, slot, depth = occ.depth, watch
        cdef Pool pool, ppool
        cdef i64 pid = 0, v, local, weight, fw, old_weight, old_lw, old_fw, diff, lw0 = 0, lw1 = 0
        cdef i64 bool_before, old_leaf = 0
        cdef i32 r, support, pr, nx
        cdef i32* hp
        cdef i64* sums
        cdef i64* ps
        cdef bint changed, have_change = False
        for k in range(occ.n_equal):
            if codes[occ.eq[2 * k]] != codes[occ.eq[2 * k + 1]]:
                return 0
        for k in range(occ.n_consts):
            if codes[occ.cpos[k]] != occ.cval[k]:
                return 0
        support = 1 if old == 0 else (-1 if new == 0 else 0)
        for k in range(depth):
            pool = <Pool>occ.path[k]
            v = codes[occ.positions[k]]
            if k == depth - 1 and pool.free:
                _prefetch_head(pool, <Pool>occ.path[k - 1] if k else occ.sentinel, pid)
            r = pool.find(occ.hashes[k], pid, v)
            if r < 0:
                r = pool.add(occ.hashes[k], pid, v)
                self.items += 1
            pool.support(r)[0] += support
            occ.ids[k] = r
            pid = r
        if pool.leaf:  # the leaf's weight, lw and fw before the update (derived, not stored)
            old_leaf = pool.leaf_local(r)
        if pool.free:
            # The fit-list neighbours this update may relink are random rows of a large pool: start
            # fetching them now, so the misses overlap the bottom-up pass instead of following it (the
            # head of the parent's list, which an insert links before, was asked for before the find).
            pr = pool.prev(r)[0]
            nx = pool.next(r)[0]
            if pr >= 0:
                qh_prefetch_write(pool.row(pr), 1, 3)
            if nx >= 0:
                qh_prefetch_write(pool.row(nx), 1, 3)
        pool.mults(r)[occ.slot] = new

        watch = occ.free_depth if (self.tracking and occ.comp_free) else -2
        bool_before = occ.sentinel.sums(0)[0]
        for k in range(depth - 1, -1, -1):
            pool = <Pool>occ.path[k]
            r = occ.ids[k]
            if k:
                ppool = <Pool>occ.path[k - 1]
                pid = occ.ids[k - 1]
            else:
                ppool = occ.sentinel
                pid = 0
            slot = pool.slot
            local = 1
            for c in range(pool.n_atoms):
                if qh_mul(local, pool.mults(r)[c], &local):
                    raise OverflowError()
            weight = local
            sums = pool.sums(r)
            for c in range(pool.n_children):
                if qh_mul(weight, sums[c], &weight):
                    raise OverflowError()
            if pool.leaf:
                old_weight = old_lw = old_leaf
                old_fw = old_leaf != 0
            else:
                old_weight = (<i64*>(pool.row(r) + pool.o_weight))[0]
                if pool.free:
                    old_lw = (<i64*>(pool.row(r) + pool.o_lw))[0]
                    old_fw = (<i64*>(pool.row(r) + pool.o_fw))[0]
            changed = weight != old_weight
            if changed:
                ps = &ppool.sums(pid)[slot]
                if qh_sub(weight, old_weight, &diff) or qh_add(ps[0], diff, ps):
                    raise OverflowError()
                if not pool.leaf:
                    (<i64*>(pool.row(r) + pool.o_weight))[0] = weight
            if pool.free:
                for c in range(pool.n_bound):
                    if qh_mul(local, sums[pool.bound_slots[c]], &local):
                        raise OverflowError()
                fw = 0
                if local:
                    fw = 1
                    for c in range(pool.n_free):
                        if qh_mul(fw, pool.fsums(r)[pool.free_slots[c]], &fw):
                            raise OverflowError()
                if k == watch and local != old_lw:
                    have_change = True
                    lw0 = old_lw
                    lw1 = local
                if local != old_lw:
                    if not pool.leaf:
                        (<i64*>(pool.row(r) + pool.o_lw))[0] = local
                    changed = True
                if fw != old_fw:
                    changed = True
                    if not pool.leaf:
                        (<i64*>(pool.row(r) + pool.o_fw))[0] = fw
                    hp = &ppool.heads(pid)[slot]
                    if old_fw == 0:  # link at the head of the parent's fit-list
                        pool.prev(r)[0] = -1
                        pool.next(r)[0] = hp[0]
                        if hp[0] >= 0:
                            pool.prev(hp[0])[0] = r
                        hp[0] = r
                    elif fw == 0:  # unlink
                        pr = pool.prev(r)[0]
                        nx = pool.next(r)[0]
                        if pr >= 0:
                            pool.next(pr)[0] = nx
                        else:
                            hp[0] = nx
                        if nx >= 0:
                            pool.prev(nx)[0] = pr
                        pool.prev(r)[0] = -1
                        pool.next(r)[0] = -1
                    ps = &ppool.fsums(pid)[slot]
                    if qh_add(ps[0], fw - old_fw, ps):
                        raise OverflowError()
            if not changed:
                break  # nothing above depends on an unchanged item
        for k in range(depth - 1, -1, -1):  # garbage-collect unsupported items bottom-up
            pool = <Pool>occ.path[k]
            r = occ.ids[k]
            if pool.support(r)[0]:
                break
            pool.remove(r)
            self.items -= 1

        if have_change:
            factor = self.global_factor(-1)
            if factor:
                self._emit(occ, (<Pool>occ.path[occ.free_depth]).fpos, lw0, lw1, factor, factor)
        elif self.tracking and not occ.comp_free:
            bool_after = occ.sentinel.sums(0)[0]
            if bool_after != bool_before:
                others = self.global_factor(occ.comp)
                if others:
                    self._emit(None, -1, 1, 1, others * bool_before, others * bool_after)
        return 0

    # -- answers (§6.5, Algorithm 1) ----------------------------------------------------------------

    cpdef object global_factor(self, int skip):
        """Π of the Boolean components' weights and the nullary atoms' multiplicities (Python ints)."""
        factor = 1
        cdef int c
        cdef i64 code = 0
        for c in range(len(self.sentinels)):
            if not self.comp_free[c] and c != skip:
                factor *= (<Pool>self.sentinels[c]).sums(0)[0]
        for ri, count in self.nullary:
            m = (<Relation>self.relations[ri]).get(&code)
            if self.set_mode:
                m = int(m > 0)
            factor *= m ** count
        return factor

    def bag_count(self):
        total = self.global_factor(-1)
        for c in range(len(self.sentinels)):
            if self.comp_free[c]:
                total *= (<Pool>self.sentinels[c]).sums(0)[0]
        return total

    def count(self):
        if not self.global_factor(-1):
            return 0
        total = 1
        for c in range(len(self.sentinels)):
            if self.comp_free[c]:
                total *= (<Pool>self.sentinels[c]).fsums(0)[0]
        return total

    def multiplicity_of(self, tuple row):
        """``G · Π lw`` of the free items on the answer's path, 0 if any is missing; O(|free|)."""
        cdef int n = len(self.head), j
        cdef i64 code
        cdef i32 r
        cdef unsigned long long h
        cdef Pool pool, ppool
        if len(row) != n:
            return 0
        codes = [0] * self.m
        for j in range(n):
            if not self.encode(row[j], &code, False):
                return 0
            codes[self.head[j]] = code
        found = [0] * self.m
        hashes = [0] * self.m
        mult = self.global_factor(-1)
        for j in range(self.m):
            if not mult:
                return 0
            pool = <Pool>self.fpool[j]
            h = 0
            if self.fparent[j] >= 0:
                h = hashes[self.fparent[j]]
            h += _level_hash(pool.depth, codes[j])  # wraps modulo 2^64, as on the update path
            r = pool.find(h, 0 if self.fparent[j] < 0 else found[self.fparent[j]], codes[j])
            if r < 0:
                return 0
            found[j] = r
            hashes[j] = h
            mult *= pool.lw(r)
        if self.set_mode:
            return int(mult != 0)
        return mult

    def cursor(self):
        """Algorithm 1 over the free nodes, as an iterator of ``(answer, multiplicity)``."""
        return Cursor(self, None, self.global_factor(-1), self.version)

    def multiplicity(self, str relation, row):
        cdef Relation rel = <Relation>self.relations[self.rel_index[relation]]
        cdef int a
        if type(row) is not tuple:
            row = tuple(row)
        if len(row) != rel.arity:
            return 0
        for a in range(rel.arity):
            if not self.encode(row[a], self.buf + a, False):
                return 0
        if rel.virtual:
            self._hash_path(<Occurrence>rel.occ, self.buf, (<Occurrence>rel.occ).hashes, False)
            return self._virtual_get(<Occurrence>rel.occ, self.buf)
        return rel.get(self.buf)

    def export_relation(self, int ri):
        """The live rows of relation ``ri`` as ``(codes, multiplicities)`` bytes of int64."""
        cdef Relation rel = <Relation>self.relations[ri]
        if not rel.virtual:
            return rel.export()
        rows = self._virtual_rows(rel)
        codes = array("q", [c for row, _ in rows for c in row])
        mults = array("q", [m for _, m in rows])
        return codes.tobytes(), mults.tobytes()

    def decode_rows(self, int ri):
        """The live rows of relation ``ri`` as a ``{row: multiplicity}`` dict (Python values)."""
        cdef Relation rel = <Relation>self.relations[ri]
        cdef Py_ssize_t r
        cdef int a
        out = {}
        if rel.virtual:
            for codes, m in self._virtual_rows(rel):
                out[tuple([self.decode(c) for c in codes])] = m
            return out
        for r in range(rel.top):
            if rel.mult(r):
                out[tuple([self.decode(rel.codes(r)[a]) for a in range(rel.arity)])] = rel.mult(r)
        return out

    def nbytes(self):
        """Allocated bytes of every table, plus the interned values (dict, list and the objects)."""
        total = sum((<Pool>p).nbytes() for p in self.pools) + sum((<Relation>r).nbytes() for r in self.relations)
        if self.values:
            total += sys.getsizeof(self.interned) + sys.getsizeof(self.values)
            total += sum(sys.getsizeof(v) for v in self.values)
        return total

    cdef int _emit(self, Occurrence occ, int changed, i64 l0, i64 l1, object g0, object g1) except -1:
        """Record the delta of the answers through the occurrence's free items (all answers if ``occ`` is None).

        An answer's multiplicity is ``G · Π_j lw(item_j)``; the update moved the
        local factor at free position ``changed`` from ``l0`` to ``l1`` and ``G``
        from ``g0`` to ``g1`` (see :meth:`QHierEngine._emit`).
        """
        cdef Cursor cur = Cursor(self, occ, 1, self.version)
        cdef int j
        cdef Pool pool
        if occ is not None:
            for j in range(self.m):
                if cur.fixed[j] and j != changed and not (<Pool>self.fpool[j]).lw(cur.cur[j]):
                    return 0
        while cur.advance():
            rest = 1
            for j in range(self.m):
                if j != changed:
                    rest *= (<Pool>self.fpool[j]).lw(cur.cur[j])
            before = g0 * rest * l0
            after = g1 * rest * l1
            d = int(after != 0) - int(before != 0) if self.set_mode else after - before
            if d:
                self.pending.append((cur.row(), d))
        return 0


cdef class Cursor:
    """Algorithm 1 (002 §6.5): the current free item per free node, advanced like an odometer.

    O(|free|) per answer: the last free node that has a fit successor moves on,
    every later one restarts at the head of its parent's fit-list.
    """

    cdef Kernel k
    cdef int m, started, done
    cdef i32* cur
    cdef char* fixed
    cdef object factor
    cdef Py_ssize_t version

    def __cinit__(self, Kernel k, Occurrence occ, factor, Py_ssize_t version):
        cdef int j, d
        self.k = k
        self.m = k.m
        self.factor = factor
        self.version = version
        self.cur = <i32*>_grow(NULL, 0, sizeof(i32) * (self.m + 1))
        self.fixed = <char*>_grow(NULL, 0, self.m + 1)
        if occ is not None:
            for d in range(occ.free_depth + 1):
                j = (<Pool>occ.path[d]).fpos
                self.fixed[j] = 1
                self.cur[j] = occ.ids[d]
        if not factor:
            self.done = 1

    def __dealloc__(self):
        PyMem_Free(self.cur)
        PyMem_Free(self.fixed)

    cdef inline i32 first(self, int j) noexcept:
        cdef Pool ppool
        cdef i64 pid
        if self.fixed[j]:
            return self.cur[j]
        ppool = <Pool>self.k.fparentpool[j]
        pid = 0 if self.k.fparent[j] < 0 else self.cur[self.k.fparent[j]]
        return ppool.heads(pid)[self.k.fslot[j]]

    cdef int advance(self) except -1:
        """Move to the next answer: 1, or 0 when there is none."""
        cdef int j, i
        cdef i32 r
        if self.done:
            return 0
        if not self.started:
            self.started = 1
            for j in range(self.m):
                r = self.first(j)
                if r < 0:
                    self.done = 1
                    return 0
                self.cur[j] = r
            return 1
        j = self.m - 1
        while j >= 0 and (self.fixed[j] or (<Pool>self.k.fpool[j]).next(self.cur[j])[0] < 0):
            j -= 1
        if j < 0:
            self.done = 1
            return 0
        self.cur[j] = (<Pool>self.k.fpool[j]).next(self.cur[j])[0]
        for i in range(j + 1, self.m):
            r = self.first(i)
            if r < 0:
                self.done = 1
                return 0
            self.cur[i] = r
        return 1

    cdef tuple row(self):
        cdef tuple head = self.k.head
        cdef Py_ssize_t n = len(head), i
        out = [None] * n
        for i in range(n):
            j = head[i]
            out[i] = self.k.decode((<Pool>self.k.fpool[j]).val(self.cur[j]))
        return tuple(out)

    def __iter__(self):
        return self

    def __next__(self):
        cdef int j
        cdef i64 mult = 1
        cdef bint big = False
        if self.done:
            raise StopIteration
        if self.k.version != self.version:
            raise self.k.stale("the view was updated since this enumeration started; restart it")
        if not self.advance():
            raise StopIteration
        if self.k.set_mode:
            return self.row(), 1
        for j in range(self.m):
            if qh_mul(mult, (<Pool>self.k.fpool[j]).lw(self.cur[j]), &mult):
                big = True
                break
        if big:
            total = self.factor
            for j in range(self.m):
                total *= (<Pool>self.k.fpool[j]).lw(self.cur[j])
            return self.row(), total
        return self.row(), self.factor * mult
