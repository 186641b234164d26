# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compact state for the triangle (IVM^eps: first-order App. A.1, partitions §3-4, App. B, App. E), compiled.

The three slots ``K_0(u0,u1), K_1(u1,u2), K_2(u2,u0)`` of the triangle (the
partition at eps = 1: every key light) are kept in C, not as Python dicts of
sets:

- every value of the stream gets a dense ``uint32`` id: a Python dict
  value -> id (authoritative: values equal in Python, such as ``1``, ``1.0``
  and ``True``, share one id), a list id -> value, and for exact ints a C
  ``int64 -> id`` map in front of the dict (one probe, no Python object read);
- per slot and direction, an array indexed by id of key sets (32-byte headers;
  the arrays and the int map from 256 kB on 2 MB-aligned mappings with huge
  pages, ``ivm/engines/fivm/_mem.pxd``: on a large graph every update reads
  headers of random ids, one TLB entry per 2 MB instead of per 4 kB): for a key ``x``
  the ids ``{y : K(x,y) ≠ 0}`` in a dense array (scans have no empty slots; a
  key of degree 1 keeps its id in its header: no block, no second miss),
  plus from degree 9 a position table into it (open addressing, linear
  probing, load at most 1/2, backward-shift deletion: the layout of a CPython
  dict), plus for a key of degree at least 64 and at least (number of ids)/64
  a bitset over the ids (probes without branches; made with at most one word
  per id it holds, dropped once it has more than four);
- the multiplicities other than 1 aside, per slot, in an open-addressing map
  ``(x, y) -> int64`` (empty under set semantics).

A single-tuple update ``δK_i = {(x, y) ↦ m}`` changes the count by
``m · Σ_z K_j(y,z)·K_k(z,x)`` (``j = i+1``, ``k = i+2``): the ids of the smaller
of ``K_j(y,·)`` and ``K_k(·,x)`` are scanned and each is tested in the other
(a bit, a table probe or a scan of at most 8 ids), or, when both are bitsets
with fewer words than the smaller has ids, the words are ANDed and counted:
**O(min(deg_j(y), deg_k(x)))** per update, the first-order bound of §1.1.  Then
``K_i`` changes in O(1) amortized (arrays and tables double and halve, a
bitset is made or dropped with hysteresis, each O(degree) and paid for by the
Ω(degree) updates before it).  A batch is one call, applied in order, so
``apply(batch)`` equals applying its updates one by one.

Counts are exact: deltas are summed in a 128-bit accumulator, flushed into the
Python int count before it could overflow.  Multiplicities are stored as
int64; an update whose multiplicity, or a stored multiplicity, exceeds
``LIMIT`` in absolute value (or is not an int) is not applied here:
:meth:`TriangleFirstOrder.apply` stops before it and reports it *blocked*, and
the engine continues with the Python reference loop on Python slots
(:mod:`ivm.engines.first_order.engine`).  Space is O(|D|): ids no longer stored are
renumbered away once they outnumber ``4|D| + 4096`` (:meth:`TriangleFirstOrder.compact`).

**The partitioned mode** (:meth:`TriangleFirstOrder.set_partitioned`, IVM^eps
§3-4, Theorem 3) keeps, beside the same tables, each slot's heavy/light
partition on its first variable (Definition 6): a heavy flag per key (all of a
key's tuples are in one part) and the backward index of the heavy part alone
(``K^h(·, y)``; ``K^l(·, y)`` is the rest of the backward index), the cutoffs
of ``θ = N^eps`` and N (Definition 7), and the three views ``V[i](x_i,
x_{i+2}) = Σ K_i^h·K_{i+1}^l`` (Figure 2) as open-addressing maps of 128-bit
values.  :meth:`TriangleFirstOrder.apply_partitioned` runs OnUpdate (Figure 4)
per slot update: ApplyUpdate (Figure 3: δQ from two intersections and a view
entry, O(N^max(eps,1-eps)); the views' share; the part) and the minor
rebalancing of the updated key (its row moved at once, the views changed by the
row as a whole: O(N^{eps+max}), Proposition 12); it returns to the engine when
the size invariant breaks, so that the engine computes the new cutoffs and
calls :meth:`TriangleFirstOrder.major` (strict repartition, views recomputed:
O(N^{1+min}), Proposition 11), and for the adaptive engine's skew tests.
Built with ``selfjoin=True`` the state is Appendix B's one partitioned relation
and one view ``V = R^h·R^l`` (Figure 5 with the corrected line 13, the
self-loop terms).  :meth:`TriangleFirstOrder.enable_listing` adds the listing's
views (Appendix E, Figures 12-13): Q^L as a set of triples, per slot the groups
of ``W[i] = K_i^h·K_{i+1}^l`` by ``(x_i, x_{i+2})`` with the dense list of
``F[i]``, and the pending answer changes; their members change only when a
tuple appears or vanishes, the multiplicities being read from the slots.
"""

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_GET_SIZE, PyList_CheckExact
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.ref cimport PyObject
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.string cimport memset
from libc.stdlib cimport calloc, free

from ivm.engines.first_order._work_rule cimport work_step
from ivm.engines.fivm._mem cimport ivm_alloc, ivm_free, ivm_grow

from array import array
import sys

cdef extern from "Python.h":
    ctypedef struct PyListObject:
        PyObject **ob_item
    bint PyLong_Check(object o)
    bint PyLong_CheckExact(object o)
    bint PyTuple_Check(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1
    long long PyLong_AsLongLong(object o) except? -1


cdef extern from *:
    """
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>

    #define TK_EMPTY 0xFFFFFFFFu
    #define TK_MEMPTY 0xFFFFFFFFFFFFFFFFull
    #define TK_SMALL 8   /* a key of degree <= 8 is a plain array of ids, scanned */
    #define TK_DENSE 64  /* a key of degree >= 64 and >= (number of ids)/64 also gets a bitset over the ids */

    /* One key's neighbours.  mem[0, n) holds the ids, dense (scans have no empty slots).
       bits == 0: mem has room for `small` ids and membership scans it; bits > 0: one block,
       mem (room for 2^(bits-1) ids) then tab, 2^bits positions into mem (open addressing,
       linear probing, load at most 1/2, backward-shift deletion: the layout of a CPython dict).
       bs: a bitset of the ids below 64*nw (NULL unless the key is dense), probed branch-free.
       A key of degree 1 keeps its id in the header (inl, in what was padding: still 32 bytes): bits == 0,
       small == 1 and mem == &inl, no block and no second cache miss (most keys of a large sparse graph);
       an array of headers that moves (realloc, mremap) has these pointers set again (tk_fix_inline). */
    typedef struct { uint32_t *mem; uint64_t *bs; uint32_t n; uint32_t nw; uint8_t bits; uint8_t small; uint32_t inl; } tk_adj;
    /* one direction of one slot: tables indexed by id; keys = number of ids with a non-empty table */
    typedef struct { tk_adj *v; uint32_t len; int64_t keys; } tk_index;
    /* the multiplicities other than 1: (x << 32 | y) -> m, linear probing */
    typedef struct { uint64_t *keys; int64_t *vals; uint64_t mask; uint64_t n; } tk_mmap;
    typedef struct { tk_index f, b; tk_mmap o; int64_t size; } tk_slot;
    typedef struct { __int128 v; } tk_acc;

    static inline void tk_free_block(tk_adj *a) {  /* the block of ids, unless held in the header */
        if (a->mem != &a->inl) free(a->mem);
    }
    /* after the array v[0, len) of headers moved: the inline keys point at their own header again */
    static void tk_fix_inline(tk_adj *v, uint64_t len) {
        uint64_t j;
        for (j = 0; j < len; j++)
            if (v[j].bits == 0 && v[j].small == 1 && v[j].mem != NULL) v[j].mem = &v[j].inl;
    }

    static inline uint32_t tk_home(uint32_t z, uint8_t bits) {
        return (uint32_t)(((uint64_t)z * 0x9E3779B97F4A7C15ull) >> (64 - bits));
    }
    static inline uint32_t *tk_tab(const tk_adj *a) { return a->mem + (1u << (a->bits - 1)); }

    static inline int tk_bit(const tk_adj *a, uint32_t z) {
        return (uint64_t)z < 64ull * a->nw ? (int)((a->bs[z >> 6] >> (z & 63)) & 1) : 0;
    }

    static inline int tk_probe(const tk_adj *a, uint32_t z) {  /* table mode */
        const uint32_t *tab = tk_tab(a), *mem = a->mem;
        uint32_t mask = (1u << a->bits) - 1, i = tk_home(z, a->bits), p = tab[i];
        while (p != TK_EMPTY && mem[p] != z) {
            i = (i + 1) & mask;
            p = tab[i];
        }
        return p != TK_EMPTY;
    }

    static inline int tk_has(const tk_adj *a, uint32_t z) {
        if (a->bs != NULL) return tk_bit(a, z);
        if (a->bits == 0) {
            int f = 0;
            uint32_t t;
            for (t = 0; t < a->n; t++) f |= a->mem[t] == z;
            return f;
        }
        return tk_probe(a, z);
    }

    /* rebuild the block: bits == 0 a plain array of room `small`, else mem + tab of 2^bits */
    static int tk_build(tk_adj *a, uint8_t bits) {
        uint32_t *blk, t;
        if (bits == 0 && a->small == 1) {
            blk = &a->inl;  /* (from an empty key only: small grows 0, 1, 2, 4, 8) */
            if (a->n) blk[0] = a->mem[0];
        } else if (bits == 0) {
            blk = (uint32_t *)malloc((size_t)a->small * 4);
            if (blk == NULL) return -1;
            if (a->n) memcpy(blk, a->mem, (size_t)a->n * 4);
        } else {
            uint32_t cap = 1u << bits, half = cap >> 1, mask = cap - 1, *tab;
            blk = (uint32_t *)malloc(((size_t)half + cap) * 4);
            if (blk == NULL) return -1;
            if (a->n) memcpy(blk, a->mem, (size_t)a->n * 4);
            tab = blk + half;
            memset(tab, 0xFF, (size_t)cap * 4);
            for (t = 0; t < a->n; t++) {
                uint32_t i = tk_home(blk[t], bits);
                while (tab[i] != TK_EMPTY) i = (i + 1) & mask;
                tab[i] = t;
            }
        }
        tk_free_block(a);
        a->mem = blk;
        a->bits = bits;
        return 0;
    }

    static int tk_bits_cover(tk_adj *a, uint64_t words) {  /* the bitset covers ids < 64*words */
        if (words <= a->nw) return 0;
        if (words < 2 * (uint64_t)a->nw) words = 2 * (uint64_t)a->nw;
        uint64_t *bs = (uint64_t *)realloc(a->bs, words * 8);
        if (bs == NULL) return -1;
        memset(bs + a->nw, 0, (words - a->nw) * 8);
        a->bs = bs;
        a->nw = (uint32_t)words;
        return 0;
    }

    /* z must be absent; nids: ids numbered so far (the bitset's range) */
    static int tk_add(tk_adj *a, uint32_t z, uint32_t nids) {
        if (a->bits == 0 && a->n >= TK_SMALL) {
            if (tk_build(a, 5) < 0) return -1;
        }
        if (a->bits == 0) {
            if (a->n == a->small) {
                uint8_t old = a->small;
                a->small = old ? 2 * old : 1;
                if (tk_build(a, 0) < 0) { a->small = old; return -1; }
            }
            a->mem[a->n++] = z;
        } else {
            if (2 * ((uint64_t)a->n + 1) > (1ull << a->bits)) {
                if (tk_build(a, a->bits + 1) < 0) return -1;
            }
            uint32_t *tab = tk_tab(a), mask = (1u << a->bits) - 1, i = tk_home(z, a->bits);
            while (tab[i] != TK_EMPTY) i = (i + 1) & mask;
            tab[i] = a->n;
            a->mem[a->n++] = z;
        }
        if (a->bs != NULL) {
            if (tk_bits_cover(a, (uint64_t)z / 64 + 1) < 0) return -1;
            a->bs[z >> 6] |= 1ull << (z & 63);
        } else if (a->n >= TK_DENSE && 64 * (uint64_t)a->n >= nids) {
            uint64_t need = ((uint64_t)nids + 63) / 64, t;
            if (tk_bits_cover(a, need) == 0) {  /* no memory: the key just stays without a bitset */
                for (t = 0; t < a->n; t++) a->bs[a->mem[t] >> 6] |= 1ull << (a->mem[t] & 63);
            }
        }
        return 0;
    }

    /* z must be present: the last id moves into its place; tables shrink below load 1/8 */
    static void tk_remove(tk_adj *a, uint32_t z) {
        uint32_t p, last = a->mem[a->n - 1];
        if (a->bits == 0) {
            for (p = 0; a->mem[p] != z; p++) {}
            a->mem[p] = last;
            a->n--;
        } else {
            uint32_t *tab = tk_tab(a), mask = (1u << a->bits) - 1, i = tk_home(z, a->bits), j;
            while (a->mem[tab[i]] != z) i = (i + 1) & mask;
            p = tab[i];
            if (p != a->n - 1) {
                uint32_t k = tk_home(last, a->bits);
                while (tab[k] != a->n - 1) k = (k + 1) & mask;
                tab[k] = p;
                a->mem[p] = last;
            }
            a->n--;
            for (j = (i + 1) & mask; tab[j] != TK_EMPTY; j = (j + 1) & mask) {
                uint32_t h = tk_home(a->mem[tab[j]], a->bits);
                if (((j - h) & mask) >= ((j - i) & mask)) { tab[i] = tab[j]; i = j; }
            }
            tab[i] = TK_EMPTY;
        }
        if (a->bs != NULL) {
            a->bs[z >> 6] &= ~(1ull << (z & 63));
            if (a->n < TK_DENSE / 2 || 4 * (uint64_t)a->n < a->nw) {
                free(a->bs);
                a->bs = NULL;
                a->nw = 0;
            }
        }
        if (a->n == 0) {
            tk_free_block(a);
            a->mem = NULL;
            a->bits = 0;
            a->small = 0;
        } else if (a->bits > 0 && a->n <= TK_SMALL / 2) {
            uint8_t old = a->small;
            a->small = TK_SMALL;
            if (tk_build(a, 0) < 0) a->small = old;  /* on failure the table stays: still correct */
        } else if (a->bits > 5 && 8 * (uint64_t)a->n < (1ull << a->bits)) {
            tk_build(a, a->bits - 1);
        }
    }

    static int tk_reserve(tk_index *ix, uint32_t id) {
        if (id < ix->len) return 0;
        uint64_t len = ix->len ? 2 * (uint64_t)ix->len : 16;
        if (len <= id) len = (uint64_t)id + 1;
        if (len > 0xFFFFFFFFull) len = 0xFFFFFFFFull;
        /* zeroed growth; from 256 kB an anonymous mapping on 2 MB units (huge pages: the rows of
           random ids are read with one TLB entry per 2 MB instead of per 4 kB), grown by mremap */
        tk_adj *v = (tk_adj *)ivm_grow(ix->v, (size_t)ix->len * sizeof(tk_adj), len * sizeof(tk_adj));
        if (v == NULL) return -1;
        if (v != ix->v) tk_fix_inline(v, ix->len);
        ix->v = v;
        ix->len = (uint32_t)len;
        return 0;
    }

    static inline const tk_adj *tk_row(const tk_index *ix, int64_t id) {
        return (id >= 0 && (uint64_t)id < ix->len && ix->v[id].n) ? &ix->v[id] : NULL;
    }

    static void tk_index_free(tk_index *ix) {
        uint32_t j;
        for (j = 0; j < ix->len; j++) {
            tk_free_block(&ix->v[j]);
            free(ix->v[j].bs);
        }
        ivm_free(ix->v, (size_t)ix->len * sizeof(tk_adj));
        ix->v = NULL;
        ix->len = 0;
        ix->keys = 0;
    }

    static inline uint64_t tk_mix(uint64_t x) {  /* murmur3 finalizer */
        x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
        return x;
    }

    static inline int tk_mget(const tk_mmap *o, uint64_t key, int64_t *out) {
        if (o->n == 0) return 0;
        uint64_t i = tk_mix(key) & o->mask;
        for (;;) {
            if (o->keys[i] == key) { *out = o->vals[i]; return 1; }
            if (o->keys[i] == TK_MEMPTY) return 0;
            i = (i + 1) & o->mask;
        }
    }

    static int tk_mgrow(tk_mmap *o, uint64_t cap) {
        uint64_t *keys = (uint64_t *)malloc(cap * 8), j;
        int64_t *vals = (int64_t *)malloc(cap * 8);
        if (keys == NULL || vals == NULL) { free(keys); free(vals); return -1; }
        memset(keys, 0xFF, cap * 8);
        if (o->keys != NULL) {
            for (j = 0; j <= o->mask; j++) {
                if (o->keys[j] != TK_MEMPTY) {
                    uint64_t i = tk_mix(o->keys[j]) & (cap - 1);
                    while (keys[i] != TK_MEMPTY) i = (i + 1) & (cap - 1);
                    keys[i] = o->keys[j];
                    vals[i] = o->vals[j];
                }
            }
            free(o->keys);
            free(o->vals);
        }
        o->keys = keys;
        o->vals = vals;
        o->mask = cap - 1;
        return 0;
    }

    static int tk_mset(tk_mmap *o, uint64_t key, int64_t m) {
        if (o->keys == NULL) {
            if (tk_mgrow(o, 16) < 0) return -1;
        } else if (2 * (o->n + 1) > o->mask + 1) {
            if (tk_mgrow(o, 2 * (o->mask + 1)) < 0) return -1;
        }
        uint64_t i = tk_mix(key) & o->mask;
        while (o->keys[i] != TK_MEMPTY) {
            if (o->keys[i] == key) { o->vals[i] = m; return 0; }
            i = (i + 1) & o->mask;
        }
        o->keys[i] = key;
        o->vals[i] = m;
        o->n++;
        return 0;
    }

    static void tk_mdel(tk_mmap *o, uint64_t key) {  /* key must be present */
        uint64_t i = tk_mix(key) & o->mask, j;
        while (o->keys[i] != key) i = (i + 1) & o->mask;
        for (j = (i + 1) & o->mask; o->keys[j] != TK_MEMPTY; j = (j + 1) & o->mask) {
            uint64_t h = tk_mix(o->keys[j]) & o->mask;
            if (((j - h) & o->mask) >= ((j - i) & o->mask)) {
                o->keys[i] = o->keys[j];
                o->vals[i] = o->vals[j];
                i = j;
            }
        }
        o->keys[i] = TK_MEMPTY;
        o->n--;
    }

    static void tk_mfree(tk_mmap *o) {
        free(o->keys);
        free(o->vals);
        o->keys = NULL;
        o->vals = NULL;
        o->mask = 0;
        o->n = 0;
    }

    static inline uint64_t tk_pair(uint32_t x, uint32_t y) { return ((uint64_t)x << 32) | y; }

    /* int value -> id for exact ints (a cache in front of the Python dict of ids): one probe,
       no Python object read but the int itself; slot empty when id1 == 0 (id1 = id + 1) */
    typedef struct { int64_t key; uint32_t id1; uint32_t pad; } tk_ient;
    typedef struct { tk_ient *t; uint64_t mask; uint64_t n; } tk_imap;

    static inline int64_t tk_iget(const tk_imap *m, int64_t key) {
        if (m->t == NULL) return -1;
        uint64_t i = tk_mix((uint64_t)key) & m->mask;
        for (;;) {
            const tk_ient *e = &m->t[i];
            if (e->id1 == 0) return -1;
            if (e->key == key) return (int64_t)e->id1 - 1;
            i = (i + 1) & m->mask;
        }
    }

    static int tk_iput(tk_imap *m, int64_t key, uint32_t id) {  /* key absent */
        if (m->t == NULL || 2 * (m->n + 1) > m->mask + 1) {
            uint64_t cap = m->t ? 2 * (m->mask + 1) : 1024, j;
            tk_ient *t = (tk_ient *)ivm_alloc(cap * sizeof(tk_ient));  /* zeroed; huge pages from 2 MB */
            if (t == NULL) return -1;
            if (m->t != NULL) {
                for (j = 0; j <= m->mask; j++) {
                    if (m->t[j].id1) {
                        uint64_t i = tk_mix((uint64_t)m->t[j].key) & (cap - 1);
                        while (t[i].id1) i = (i + 1) & (cap - 1);
                        t[i] = m->t[j];
                    }
                }
                ivm_free(m->t, (m->mask + 1) * sizeof(tk_ient));
            }
            m->t = t;
            m->mask = cap - 1;
        }
        uint64_t i = tk_mix((uint64_t)key) & m->mask;
        while (m->t[i].id1) i = (i + 1) & m->mask;
        m->t[i].key = key;
        m->t[i].id1 = id + 1;
        m->n++;
        return 0;
    }

    static void tk_ifree(tk_imap *m) {
        if (m->t != NULL) ivm_free(m->t, (m->mask + 1) * sizeof(tk_ient));
        m->t = NULL;
        m->mask = 0;
        m->n = 0;
    }

    /* |a ∩ b| of two bitsets over their common words (the ids above the shorter one are in neither) */
    #if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __attribute__((target("popcnt"))) static int64_t tk_and_popcnt_hw(const uint64_t *a, const uint64_t *b, uint32_t w) {
        int64_t c = 0;
        uint32_t t;
        for (t = 0; t < w; t++) c += __builtin_popcountll(a[t] & b[t]);
        return c;
    }
    static int tk_has_popcnt(void) {
        static int known = -1;
        if (known < 0) { __builtin_cpu_init(); known = __builtin_cpu_supports("popcnt") ? 1 : 0; }
        return known;
    }
    #else
    static int64_t tk_and_popcnt_hw(const uint64_t *a, const uint64_t *b, uint32_t w) { return 0; }
    static int tk_has_popcnt(void) { return 0; }
    #endif
    static int64_t tk_and_count(const tk_adj *s, const tk_adj *b) {
        uint32_t w = s->nw < b->nw ? s->nw : b->nw, t;
        if (tk_has_popcnt()) return tk_and_popcnt_hw(s->bs, b->bs, w);
        int64_t c = 0;
        for (t = 0; t < w; t++) c += __builtin_popcountll(s->bs[t] & b->bs[t]);
        return c;
    }

    /* |s ∩ b| scanning s's ids (the caller passes the smaller) and probing b: bit tests when b
       has a bitset, else a scan of b's few ids or a probe of its table; no branch on the outcome */
    static int64_t tk_common(const tk_adj *s, const tk_adj *b) {
        const uint32_t *mem = s->mem;
        uint32_t t, n = s->n;
        int64_t c = 0;
        if (b->bs != NULL && s->bs != NULL && (s->nw < b->nw ? s->nw : b->nw) <= n) {
            return tk_and_count(s, b);  /* fewer words than ids to probe: AND the bitsets */
        }
        if (b->bs != NULL) {
            const uint64_t *bs = b->bs;
            uint64_t lim = 64ull * b->nw;
            for (t = 0; t < n; t++) {
                uint32_t z = mem[t];
                c += z < lim ? (int64_t)((bs[z >> 6] >> (z & 63)) & 1) : 0;
            }
        } else if (b->bits == 0) {
            uint32_t u;
            for (t = 0; t < n; t++)
                for (u = 0; u < b->n; u++) c += mem[t] == b->mem[u];
        } else {
            for (t = 0; t < n; t++) c += tk_probe(b, mem[t]);
        }
        return c;
    }

    /* Σ_z K_j(y,z)·K_k(z,x) over the ids z in both `out` (K_j(y,·)) and `into` (K_k(·,x), or the part of it
       in one part of K_k): the smaller is scanned and the other probed; under set semantics (no multiplicity
       other than 1 in either slot) a plain count (tk_common), else the products from the maps (default 1) */
    static __int128 tk_wsum(const tk_adj *out, const tk_adj *into, const tk_mmap *oj, const tk_mmap *ok,
                            uint32_t y, uint32_t x) {
        int out_small = out->n <= into->n;
        const tk_adj *small = out_small ? out : into, *big = out_small ? into : out;
        if (oj->n == 0 && ok->n == 0) return tk_common(small, big);
        __int128 d = 0;
        uint32_t t;
        for (t = 0; t < small->n; t++) {
            uint32_t z = small->mem[t];
            if (!tk_has(big, z)) continue;
            int64_t a = 1, b = 1;
            tk_mget(oj, tk_pair(y, z), &a);
            tk_mget(ok, tk_pair(z, x), &b);
            d += (__int128)a * b;
        }
        return d;
    }

    /* m · Σ_z K_j(y,z)·K_k(z,x) added to acc (slot i's update of (x, y); ids < 0: unknown value).
       Returns the first-order work of the update, min(|K_j(y,.)|, |K_k(.,x)|): the smaller of the two
       rows intersected (0 when one is missing), read from the rows already at hand. */
    static int64_t tk_delta(tk_slot *S, int i, int64_t x, int64_t y, int64_t m, tk_acc *acc) {
        int j = i == 2 ? 0 : i + 1, k = i == 0 ? 2 : i - 1;
        const tk_adj *out = tk_row(&S[j].f, y), *into = tk_row(&S[k].b, x);
        if (out == NULL || into == NULL) return 0;
        acc->v += (__int128)m * tk_wsum(out, into, &S[j].o, &S[k].o, (uint32_t)y, (uint32_t)x);
        return out->n < into->n ? (int64_t)out->n : (int64_t)into->n;
    }

    /* K(x,y) += m on one slot (ids exist, nids numbered); +1 new tuple, 0, -1 removed,
       -9 out of memory.  *absmax grows to the largest |multiplicity| stored. */
    static int tk_change(tk_slot *s, uint32_t x, uint32_t y, int64_t m, int64_t *absmax, uint32_t nids) {
        if (tk_reserve(&s->f, x) < 0 || tk_reserve(&s->b, y) < 0) return -9;
        tk_adj *r = &s->f.v[x];
        if (r->n && tk_has(r, y)) {
            int64_t old = 1, nw;
            uint64_t key = tk_pair(x, y);
            tk_mget(&s->o, key, &old);
            nw = old + m;
            if (nw == 0) {
                tk_adj *c = &s->b.v[y];
                tk_remove(r, y);
                if (r->n == 0) s->f.keys--;
                tk_remove(c, x);
                if (c->n == 0) s->b.keys--;
                if (old != 1) tk_mdel(&s->o, key);
                s->size--;
                return -1;
            }
            if (nw == 1) {
                tk_mdel(&s->o, key);  /* old != 1 since m != 0 */
            } else {
                if (tk_mset(&s->o, key, nw) < 0) return -9;
                if (nw > *absmax) *absmax = nw;
                if (-nw > *absmax) *absmax = -nw;
            }
            return 0;
        }
        tk_adj *c = &s->b.v[y];
        if (m != 1 && tk_mset(&s->o, tk_pair(x, y), m) < 0) return -9;
        if (tk_add(r, y, nids) < 0) return -9;
        if (tk_add(c, x, nids) < 0) { tk_remove(r, y); return -9; }
        if (r->n == 1) s->f.keys++;
        if (c->n == 1) s->b.keys++;
        if (m > *absmax) *absmax = m;
        if (-m > *absmax) *absmax = -m;
        s->size++;
        return 1;
    }

    static inline void tk_acc_zero(tk_acc *a) { a->v = 0; }
    static inline int tk_acc_nonzero(const tk_acc *a) { return a->v != 0; }
    /* flush before |acc| could overflow: one delta is below 2^120 in magnitude (LIMIT = 2^28) */
    static inline int tk_acc_big(const tk_acc *a) {
        __int128 lim = (__int128)1 << 125;
        return a->v > lim || a->v < -lim;
    }
    static inline int64_t tk_acc_hi(const tk_acc *a) { return (int64_t)(a->v >> 64); }
    static inline uint64_t tk_acc_lo(const tk_acc *a) { return (uint64_t)a->v; }

    static size_t tk_index_bytes(const tk_index *ix) {
        size_t n = (size_t)ix->len * sizeof(tk_adj);
        uint32_t j;
        for (j = 0; j < ix->len; j++) {
            const tk_adj *a = &ix->v[j];
            if (a->mem && a->mem != &a->inl) n += a->bits ? (size_t)6 << a->bits : (size_t)4 * a->small;
            n += (size_t)8 * a->nw;
        }
        return n;
    }
    static size_t tk_mmap_bytes(const tk_mmap *o) { return o->keys ? (size_t)16 * (o->mask + 1) : 0; }

    /* ---- the partitioned state of IVM^eps (§3, Definitions 6-7; Appendix B for the self-join) ---- */

    /* One slot's heavy/light partition on its first variable, beside the slot's tk_slot: heavy[x] = 1 iff
       key x is heavy (all its tuples are in K^h, domain partition), hb the backward index of K^h alone
       (y -> {x heavy : K(x,y) != 0}).  The tk_slot's forward index f and backward index b hold both parts,
       so K^h(x,·) = K^l(x,·) = f[x] for a key of that part and K^l(·,y) = b[y] minus hb[y].  strict/up/down
       are the integer cutoffs of theta = N^eps (ivm.engines.ivm_eps.partition.cutoffs). */
    typedef struct { tk_index hb; uint8_t *heavy; uint32_t hlen; int64_t hsize; int64_t hkeys;
                     int64_t strict, up, down; double eps; } tk_part;
    /* A view V(u, w): (u << 32 | w) -> value, linear probing, backward-shift deletion, no zero value stored.
       Values are 128-bit: a view sums fewer than 2^32 products of two multiplicities below 2^29. */
    typedef struct { uint64_t *keys; __int128 *vals; uint64_t mask; uint64_t n; } tk_view;
    /* what one OnUpdate reads and writes; L: the listing's views (Appendix E) when the state keeps them */
    struct tk_list_s;
    typedef struct { tk_slot *S; tk_part *P; tk_view *V; int selfjoin; int64_t N; int64_t *absmax; uint32_t nids;
                     int64_t minors; int64_t moved; struct tk_list_s *L; } tk_ctx;
    static int tk_lbefore(tk_ctx *c, struct tk_list_s *L, int i, uint32_t x, uint32_t y, int64_t m, int heavy, int record);
    static int tk_lafter(tk_ctx *c, struct tk_list_s *L, int i, uint32_t x, uint32_t y);
    static int tk_lminor(tk_ctx *c, struct tk_list_s *L, int i, uint32_t x, int to_heavy);
    static int tk_lrebuild(tk_ctx *c, struct tk_list_s *L);

    static inline int tk_heavy(const tk_part *p, uint32_t x) { return x < p->hlen && p->heavy[x]; }

    static int tk_hreserve(tk_part *p, uint32_t x) {
        if (x < p->hlen) return 0;
        uint64_t len = p->hlen ? 2 * (uint64_t)p->hlen : 16;
        if (len <= x) len = (uint64_t)x + 1;
        if (len > 0xFFFFFFFFull) len = 0xFFFFFFFFull;
        uint8_t *h = (uint8_t *)realloc(p->heavy, len);
        if (h == NULL) return -1;
        memset(h + p->hlen, 0, len - p->hlen);
        p->heavy = h;
        p->hlen = (uint32_t)len;
        return 0;
    }

    static void tk_part_free(tk_part *p) {
        tk_index_free(&p->hb);
        free(p->heavy);
        p->heavy = NULL;
        p->hlen = 0;
        p->hsize = 0;
        p->hkeys = 0;
    }

    static inline __int128 tk_vget(const tk_view *v, uint64_t key) {
        if (v->n == 0) return 0;
        uint64_t i = tk_mix(key) & v->mask;
        for (;;) {
            uint64_t k = v->keys[i];
            if (k == key) return v->vals[i];
            if (k == TK_MEMPTY) return 0;
            i = (i + 1) & v->mask;
        }
    }

    static int tk_vresize(tk_view *v, uint64_t cap) {
        uint64_t *keys = (uint64_t *)malloc(cap * 8), j;
        __int128 *vals = (__int128 *)malloc(cap * sizeof(__int128));
        if (keys == NULL || vals == NULL) { free(keys); free(vals); return -1; }
        memset(keys, 0xFF, cap * 8);
        if (v->keys != NULL) {
            for (j = 0; j <= v->mask; j++) {
                if (v->keys[j] != TK_MEMPTY) {
                    uint64_t i = tk_mix(v->keys[j]) & (cap - 1);
                    while (keys[i] != TK_MEMPTY) i = (i + 1) & (cap - 1);
                    keys[i] = v->keys[j];
                    vals[i] = v->vals[j];
                }
            }
            free(v->keys);
            free(v->vals);
        }
        v->keys = keys;
        v->vals = vals;
        v->mask = cap - 1;
        return 0;
    }

    static void tk_vfree(tk_view *v) {
        free(v->keys);
        free(v->vals);
        v->keys = NULL;
        v->vals = NULL;
        v->mask = 0;
        v->n = 0;
    }

    /* V(key) += d, the entry removed when it becomes 0 (digest §8 item 2); the table halves below load 1/8 */
    static int tk_vadd(tk_view *v, uint64_t key, __int128 d) {
        uint64_t i, j;
        if (d == 0) return 0;
        if (v->keys == NULL && tk_vresize(v, 16) < 0) return -9;
        i = tk_mix(key) & v->mask;
        for (;;) {
            uint64_t k = v->keys[i];
            if (k == key) break;
            if (k == TK_MEMPTY) {
                if (2 * (v->n + 1) > v->mask + 1) {
                    if (tk_vresize(v, 2 * (v->mask + 1)) < 0) return -9;
                    i = tk_mix(key) & v->mask;
                    while (v->keys[i] != TK_MEMPTY) i = (i + 1) & v->mask;
                }
                v->keys[i] = key;
                v->vals[i] = d;
                v->n++;
                return 0;
            }
            i = (i + 1) & v->mask;
        }
        v->vals[i] += d;
        if (v->vals[i] != 0) return 0;
        for (j = (i + 1) & v->mask; v->keys[j] != TK_MEMPTY; j = (j + 1) & v->mask) {
            uint64_t h = tk_mix(v->keys[j]) & v->mask;
            if (((j - h) & v->mask) >= ((j - i) & v->mask)) {
                v->keys[i] = v->keys[j];
                v->vals[i] = v->vals[j];
                i = j;
            }
        }
        v->keys[i] = TK_MEMPTY;
        v->n--;
        if (v->mask > 15 && 8 * v->n < v->mask + 1) tk_vresize(v, (v->mask + 1) / 2);  /* on failure: stays big */
        return 0;
    }

    static inline int64_t tk_mult(const tk_mmap *o, uint32_t x, uint32_t y) {  /* K(x,y) of a stored tuple */
        int64_t m = 1;
        tk_mget(o, tk_pair(x, y), &m);
        return m;
    }

    /* x joins (add) or leaves (!add) the heavy backward index at y */
    static int tk_hb_set(tk_part *p, uint32_t y, uint32_t x, int add, uint32_t nids) {
        if (add) {
            if (tk_reserve(&p->hb, y) < 0) return -9;
            if (tk_add(&p->hb.v[y], x, nids) < 0) return -9;
            if (p->hb.v[y].n == 1) p->hb.keys++;
        } else {
            tk_remove(&p->hb.v[y], x);
            if (p->hb.v[y].n == 0) p->hb.keys--;
        }
        return 0;
    }

    /* δQ of δK_i = {(x,y) ↦ m} (Figure 3 lines 3-6 in the generic form of the digest's §2.5, pre-update
       values), added to acc: y heavy in K_j: m·(Σ_z K_j^h(y,z)·K_k^h(z,x) + V[j](y,x)), O(N^{1-eps});
       y light: m·Σ_z K_j^l(y,z)·K_k(z,x) over both parts of K_k (the terms rlh and rll in one pass),
       O(min(N^eps, deg)).  The self-join (App. B): one slot, one view, 3·m·(...) plus the self-loop terms. */
    static void tk_pdelta(const tk_ctx *c, int i, uint32_t x, uint32_t y, int64_t m, tk_acc *acc) {
        int sj = c->selfjoin, j = sj ? i : (i == 2 ? 0 : i + 1), k = sj ? i : (i == 0 ? 2 : i - 1);
        const tk_slot *S = c->S;
        const tk_adj *out = tk_row(&S[j].f, y), *into;
        __int128 d = 0;
        if (out != NULL) {
            if (tk_heavy(&c->P[j], y)) {
                into = tk_row(&c->P[k].hb, x);
                if (into != NULL) d = tk_wsum(out, into, &S[j].o, &S[k].o, y, x);
                d += tk_vget(&c->V[j], tk_pair(y, x));
            } else {
                into = tk_row(&S[k].b, x);
                if (into != NULL) d = tk_wsum(out, into, &S[j].o, &S[k].o, y, x);
            }
        }
        if (!sj) {
            acc->v += (__int128)m * d;
            return;
        }
        acc->v += (__int128)3 * m * d;
        if (x == y) {  /* Figure 5 lines 7-9: 3·m²·R(x,x) + m³ */
            const tk_adj *r = tk_row(&S[i].f, x);
            __int128 self = (r != NULL && tk_has(r, x)) ? tk_mult(&S[i].o, x, x) : 0;
            acc->v += (__int128)3 * m * m * self + (__int128)m * m * m;
        }
    }

    /* the views' share of δK_i^r(x,y) = m (Figure 3 lines 8-11; Figure 5 lines 11 and 13, corrected):
       r = h: Vh(x,g) += m·K_j^l(y,g) for g in K_j^l(y,·), O(N^eps); r = l: Vl(g,y) += K_k^h(g,x)·m for g in
       K_k^h(·,x), O(N^{1-eps}) */
    static int tk_pviews(const tk_ctx *c, int j, int k, tk_view *Vh, tk_view *Vl, uint32_t x, uint32_t y,
                         int64_t m, int heavy) {
        const tk_slot *S = c->S;
        uint32_t t;
        if (heavy) {
            const tk_adj *row = tk_row(&S[j].f, y);
            if (row == NULL || tk_heavy(&c->P[j], y)) return 0;
            for (t = 0; t < row->n; t++) {
                uint32_t g = row->mem[t];
                if (tk_vadd(Vh, tk_pair(x, g), (__int128)m * tk_mult(&S[j].o, y, g)) < 0) return -9;
            }
        } else {
            const tk_adj *col = tk_row(&c->P[k].hb, x);
            if (col == NULL) return 0;
            for (t = 0; t < col->n; t++) {
                uint32_t g = col->mem[t];
                if (tk_vadd(Vl, tk_pair(g, y), (__int128)tk_mult(&S[k].o, g, x) * m) < 0) return -9;
            }
        }
        return 0;
    }

    /* K_i^r(x,y) += m (line 12): a new key takes part r; the heavy backward index, sizes and key counts kept */
    static int tk_pchange(tk_slot *s, tk_part *p, uint32_t x, uint32_t y, int64_t m, int heavy, int64_t *absmax,
                          uint32_t nids) {
        int res = tk_change(s, x, y, m, absmax, nids);
        if (res == 1) {
            if (s->f.v[x].n == 1) {  /* a new key */
                if (tk_hreserve(p, x) < 0) return -9;
                p->heavy[x] = (uint8_t)(heavy != 0);
                p->hkeys += heavy != 0;
            }
            if (tk_heavy(p, x)) {
                if (tk_hb_set(p, y, x, 1, nids) < 0) return -9;
                p->hsize++;
            }
        } else if (res == -1 && tk_heavy(p, x)) {
            tk_hb_set(p, y, x, 0, nids);
            p->hsize--;
            if (s->f.v[x].n == 0) {
                p->heavy[x] = 0;
                p->hkeys--;
            }
        }
        return res;
    }

    /* ApplyUpdate (Figure 3; Figure 5 corrected) of δK_i^r = {(x,y) ↦ m}: δQ into acc (when count), the views,
       then the part; O(N^max(eps,1-eps)).  Returns tk_change's code (+1, 0, -1) or -9 (out of memory). */
    static int tk_papply(tk_ctx *c, int i, uint32_t x, uint32_t y, int64_t m, int heavy, tk_acc *acc) {
        int sj = c->selfjoin, j = sj ? i : (i == 2 ? 0 : i + 1), k = sj ? i : (i == 0 ? 2 : i - 1), res;
        if (c->L != NULL && (res = tk_lbefore(c, c->L, i, x, y, m, heavy, acc != NULL)) < 0) return res;
        if (acc != NULL) tk_pdelta(c, i, x, y, m, acc);
        if (tk_pviews(c, j, k, &c->V[i], &c->V[k], x, y, m, heavy) < 0) return -9;
        res = tk_pchange(&c->S[i], &c->P[i], x, y, m, heavy, c->absmax, c->nids);
        if (res >= -1 && c->L != NULL && tk_lafter(c, c->L, i, x, y) < 0) return -9;
        return res;
    }

    /* MinorRebalancing (Figure 4): every tuple of key x of slot i moves to the other part; Q is unchanged.
       The views change by the moved row E = K_i(x,·) as a whole: to heavy V[i] += E·K_j^l and V[k] -= K_k^h·E,
       to light the opposite.  The self-join's one view V = R^h·R^l changes by E·R^l' - R^h·E to heavy and by
       R^h'·E - E·R^l to light, where ' leaves out row x (the printed per-tuple moves give the same V).
       Fewer than (3/2)N^eps + 1 tuples, each O(N^max): O(N^{eps+max}) (Proposition 12). */
    static int tk_minor(tk_ctx *c, int i, uint32_t x, int to_heavy) {
        int sj = c->selfjoin, j = sj ? i : (i == 2 ? 0 : i + 1), k = sj ? i : (i == 0 ? 2 : i - 1), e;
        tk_slot *S = c->S;
        tk_part *p = &c->P[i];
        const tk_adj *row = &S[i].f.v[x], *col = tk_row(&c->P[k].hb, x);
        tk_view *Vh = &c->V[i], *Vl = &c->V[k];
        int64_t sign = to_heavy ? 1 : -1;
        uint32_t t, u, n = row->n;
        if (c->L != NULL && (e = tk_lminor(c, c->L, i, x, to_heavy)) < 0) return e;
        for (t = 0; t < n; t++) {
            uint32_t b = row->mem[t];
            int64_t e = tk_mult(&S[i].o, x, b);
            const tk_adj *light = tk_row(&S[j].f, b);
            if (light != NULL && !tk_heavy(&c->P[j], b) && !(sj && b == x)) {  /* ± E·K_j^l */
                for (u = 0; u < light->n; u++) {
                    uint32_t g = light->mem[u];
                    __int128 d = (__int128)sign * e * tk_mult(&S[j].o, b, g);
                    if (tk_vadd(Vh, tk_pair(x, g), d) < 0) return -9;
                }
            }
            if (col != NULL) {  /* ∓ K_k^h·E */
                for (u = 0; u < col->n; u++) {
                    uint32_t a = col->mem[u];
                    if (sj && a == x) continue;
                    __int128 d = (__int128)(-sign) * tk_mult(&S[k].o, a, x) * e;
                    if (tk_vadd(Vl, tk_pair(a, b), d) < 0) return -9;
                }
            }
        }
        if (tk_hreserve(p, x) < 0) return -9;
        for (t = 0; t < n; t++) {
            if (tk_hb_set(p, row->mem[t], x, to_heavy, c->nids) < 0) return -9;
        }
        p->heavy[x] = (uint8_t)(to_heavy != 0);
        p->hsize += sign * (int64_t)n;
        p->hkeys += sign;
        c->minors++;
        c->moved += n;
        return 0;
    }

    /* OnUpdate (Figure 4) of δK_i = {(x,y) ↦ m}: route (x heavy or eps = 0: the heavy part), ApplyUpdate, then
       the size invariant ⌊N/4⌋ ≤ |D| < N (returns 1 with *n the new N when it broke: the major rebalancing is
       the caller's) or else the minor rebalancing of x when it crossed its part's cutoff.  0, 1 or -9. */
    static int tk_on_update(tk_ctx *c, int i, uint32_t x, uint32_t y, int64_t m, tk_acc *acc, int64_t *n) {
        tk_slot *S = c->S;
        const tk_adj *row = tk_row(&S[i].f, x);
        int heavy = row != NULL ? tk_heavy(&c->P[i], x) : c->P[i].eps == 0.0;
        int64_t size;
        int r = tk_papply(c, i, x, y, m, heavy, acc);
        if (r < -1) return r;
        size = c->selfjoin ? S[i].size : S[0].size + S[1].size + S[2].size;
        if (size == c->N) { *n = 2 * c->N; return 1; }
        if (size < c->N / 4) { *n = c->N / 2 - 1; return 1; }
        row = tk_row(&S[i].f, x);
        if (row != NULL) {
            if (heavy && (int64_t)row->n < c->P[i].down) return tk_minor(c, i, x, 0);
            if (!heavy && (int64_t)row->n >= c->P[i].up) return tk_minor(c, i, x, 1);
        }
        return 0;
    }

    /* heavy keys' rows into the heavy backward index (the flags set), sizes counted; O(|K^h|) */
    static int tk_build_hb(tk_slot *s, tk_part *p, uint32_t nids) {
        uint32_t x, t;
        tk_index_free(&p->hb);
        p->hsize = 0;
        p->hkeys = 0;
        for (x = 0; x < s->f.len && x < p->hlen; x++) {
            const tk_adj *row = &s->f.v[x];
            if (!p->heavy[x]) continue;
            if (row->n == 0) { p->heavy[x] = 0; continue; }
            p->hkeys++;
            p->hsize += row->n;
            for (t = 0; t < row->n; t++) {
                if (tk_hb_set(p, row->mem[t], x, 1, nids) < 0) return -9;
            }
        }
        return 0;
    }

    /* V = Σ_b K_s1^h(a,b)·K_s2^l(b,c) from scratch (Proposition 8, step 4): over the heavy tuples (a,b) of s1
       and the light row of b in s2; the cost is the number of joining pairs, O(N^{1+min(eps,1-eps)}) */
    static int tk_join(const tk_slot *S, const tk_part *P, int s1, int s2, tk_view *V) {
        uint32_t a, t, u;
        tk_vfree(V);
        for (a = 0; a < S[s1].f.len; a++) {
            const tk_adj *row = &S[s1].f.v[a];
            if (row->n == 0 || !tk_heavy(&P[s1], a)) continue;
            for (t = 0; t < row->n; t++) {
                uint32_t b = row->mem[t];
                const tk_adj *light = tk_row(&S[s2].f, b);
                if (light == NULL || tk_heavy(&P[s2], b)) continue;
                int64_t r = tk_mult(&S[s1].o, a, b);
                for (u = 0; u < light->n; u++) {
                    uint32_t g = light->mem[u];
                    if (tk_vadd(V, tk_pair(a, g), (__int128)r * tk_mult(&S[s2].o, b, g)) < 0) return -9;
                }
            }
        }
        return 0;
    }

    static int tk_views(tk_ctx *c) {  /* every view from the current partitions */
        int i;
        if (c->selfjoin) return tk_join(c->S, c->P, 0, 0, &c->V[0]);
        for (i = 0; i < 3; i++) {
            if (tk_join(c->S, c->P, i, i == 2 ? 0 : i + 1, &c->V[i]) < 0) return -9;
        }
        return 0;
    }

    /* MajorRebalancing (Figure 4): each slot strictly partitioned (a key of degree >= strict is heavy: the
       caller has set the cutoffs of the new N), then every view recomputed; Q is unchanged.
       O(|D|^{1+min(eps,1-eps)}) (Proposition 11). */
    static int tk_major(tk_ctx *c) {
        int i, nslots = c->selfjoin ? 1 : 3;
        uint32_t x;
        for (i = 0; i < nslots; i++) {
            tk_slot *s = &c->S[i];
            tk_part *p = &c->P[i];
            if (s->f.len && tk_hreserve(p, s->f.len - 1) < 0) return -9;
            memset(p->heavy, 0, p->hlen);
            for (x = 0; x < s->f.len; x++) {
                uint32_t n = s->f.v[x].n;
                p->heavy[x] = n != 0 && (int64_t)n >= p->strict;
            }
            if (tk_build_hb(s, p, c->nids) < 0) return -9;
        }
        if (tk_views(c) < 0) return -9;
        return c->L != NULL ? tk_lrebuild(c, c->L) : 0;
    }

    static size_t tk_view_bytes(const tk_view *v) { return v->keys ? (size_t)24 * (v->mask + 1) : 0; }

    /* ---- triangle listing (IVM^eps Appendix E, Theorem 21) on the partitioned state ---- */

    /* A map of triples (u0, u1, u2) of ids, keyed (u0 << 32 | u1, u2), linear probing, backward-shift deletion;
       with values (`vals` != NULL: 128-bit sums, no zero kept) or a set. */
    typedef struct { uint64_t *k1; uint32_t *k2; __int128 *vals; uint64_t mask; uint64_t n; int valued; } tk_tmap;

    static inline uint64_t tk_thash(uint64_t k1, uint32_t k2) { return tk_mix(k1 ^ ((uint64_t)k2 * 0x9E3779B97F4A7C15ull)); }

    static int tk_tresize(tk_tmap *t, uint64_t cap) {
        uint64_t *k1 = (uint64_t *)malloc(cap * 8), j;
        uint32_t *k2 = (uint32_t *)malloc(cap * 4);
        __int128 *vals = t->valued ? (__int128 *)malloc(cap * sizeof(__int128)) : NULL;
        if (k1 == NULL || k2 == NULL || (t->valued && vals == NULL)) { free(k1); free(k2); free(vals); return -1; }
        memset(k1, 0xFF, cap * 8);
        if (t->k1 != NULL) {
            for (j = 0; j <= t->mask; j++) {
                if (t->k1[j] == TK_MEMPTY) continue;
                uint64_t i = tk_thash(t->k1[j], t->k2[j]) & (cap - 1);
                while (k1[i] != TK_MEMPTY) i = (i + 1) & (cap - 1);
                k1[i] = t->k1[j];
                k2[i] = t->k2[j];
                if (t->valued) vals[i] = t->vals[j];
            }
            free(t->k1);
            free(t->k2);
            free(t->vals);
        }
        t->k1 = k1;
        t->k2 = k2;
        t->vals = vals;
        t->mask = cap - 1;
        return 0;
    }

    static void tk_tfree(tk_tmap *t) {
        free(t->k1);
        free(t->k2);
        free(t->vals);
        t->k1 = NULL;
        t->k2 = NULL;
        t->vals = NULL;
        t->mask = 0;
        t->n = 0;
    }

    static void tk_tdel_at(tk_tmap *t, uint64_t i) {
        uint64_t j;
        for (j = (i + 1) & t->mask; t->k1[j] != TK_MEMPTY; j = (j + 1) & t->mask) {
            uint64_t h = tk_thash(t->k1[j], t->k2[j]) & t->mask;
            if (((j - h) & t->mask) >= ((j - i) & t->mask)) {
                t->k1[i] = t->k1[j];
                t->k2[i] = t->k2[j];
                if (t->valued) t->vals[i] = t->vals[j];
                i = j;
            }
        }
        t->k1[i] = TK_MEMPTY;
        t->n--;
        if (t->mask > 15 && 8 * t->n < t->mask + 1) tk_tresize(t, (t->mask + 1) / 2);  /* on failure: stays big */
    }

    /* set: add (on) or remove (!on) the triple, which is absent / present; map: += d, removed at 0 */
    static int tk_tput(tk_tmap *t, uint64_t k1, uint32_t k2, int on, __int128 d) {
        uint64_t i;
        if (t->valued && d == 0) return 0;
        if (t->k1 == NULL && tk_tresize(t, 16) < 0) return -9;
        i = tk_thash(k1, k2) & t->mask;
        for (;;) {
            if (t->k1[i] == TK_MEMPTY) break;
            if (t->k1[i] == k1 && t->k2[i] == k2) {
                if (!t->valued) {
                    if (!on) tk_tdel_at(t, i);
                    return 0;
                }
                t->vals[i] += d;
                if (t->vals[i] == 0) tk_tdel_at(t, i);
                return 0;
            }
            i = (i + 1) & t->mask;
        }
        if (!t->valued && !on) return 0;
        if (2 * (t->n + 1) > t->mask + 1) {
            if (tk_tresize(t, 2 * (t->mask + 1)) < 0) return -9;
            i = tk_thash(k1, k2) & t->mask;
            while (t->k1[i] != TK_MEMPTY) i = (i + 1) & t->mask;
        }
        t->k1[i] = k1;
        t->k2[i] = k2;
        if (t->valued) t->vals[i] = d;
        t->n++;
        return 0;
    }

    /* The groups of one slot's listing view W[i](x_i, x_{i+1}, x_{i+2}) = K_i^h·K_{i+1}^l by (x_i, x_{i+2})
       (Figure 12's V_RS(a,b,c) grouped by (a,c)): pair -> group id; per group its members x_{i+1} (a tk_adj),
       its pair, and its place in `tops`, the dense list of the groups of F[i] (non-empty, closing tuple
       K_{i+2}(x_{i+2}, x_i) != 0), so that enumeration walks F[i] with constant delay.  Member values are
       K_i(x_i,x_{i+1})·K_{i+1}(x_{i+1},x_{i+2}), read from the slots when enumerating. */
    typedef struct {
        uint64_t *keys; uint32_t *gids; uint64_t mask; uint64_t n;
        tk_adj *mem; uint64_t *pair; uint32_t *toppos; uint32_t cap; uint32_t used;
        uint32_t *freed; uint32_t nfree; uint32_t freecap;
        uint32_t *tops; uint32_t ntops; uint32_t topcap;
        int64_t members;
    } tk_groups;

    typedef struct tk_list_s { tk_tmap listing; tk_tmap pending; tk_groups G[3]; int track; } tk_list;

    static int64_t tk_gfind(const tk_groups *G, uint64_t pair) {
        if (G->n == 0) return -1;
        uint64_t i = tk_mix(pair) & G->mask;
        for (;;) {
            if (G->keys[i] == TK_MEMPTY) return -1;
            if (G->keys[i] == pair) return G->gids[i];
            i = (i + 1) & G->mask;
        }
    }

    static int tk_gresize(tk_groups *G, uint64_t cap) {
        uint64_t *keys = (uint64_t *)malloc(cap * 8), j;
        uint32_t *gids = (uint32_t *)malloc(cap * 4);
        if (keys == NULL || gids == NULL) { free(keys); free(gids); return -1; }
        memset(keys, 0xFF, cap * 8);
        if (G->keys != NULL) {
            for (j = 0; j <= G->mask; j++) {
                if (G->keys[j] == TK_MEMPTY) continue;
                uint64_t i = tk_mix(G->keys[j]) & (cap - 1);
                while (keys[i] != TK_MEMPTY) i = (i + 1) & (cap - 1);
                keys[i] = G->keys[j];
                gids[i] = G->gids[j];
            }
            free(G->keys);
            free(G->gids);
        }
        G->keys = keys;
        G->gids = gids;
        G->mask = cap - 1;
        return 0;
    }

    static void tk_gfree(tk_groups *G) {
        uint32_t g;
        for (g = 0; g < G->used; g++) tk_free_block(&G->mem[g]), free(G->mem[g].bs);
        free(G->keys); free(G->gids); free(G->mem); free(G->pair); free(G->toppos); free(G->freed); free(G->tops);
        memset(G, 0, sizeof(*G));
    }

    static int tk_gtop(tk_groups *G, uint32_t g, int on) {  /* g joins or leaves F */
        if (on && !G->toppos[g]) {
            if (G->ntops == G->topcap) {
                uint32_t cap = G->topcap ? 2 * G->topcap : 16, *t = (uint32_t *)realloc(G->tops, (size_t)cap * 4);
                if (t == NULL) return -9;
                G->tops = t;
                G->topcap = cap;
            }
            G->tops[G->ntops++] = g;
            G->toppos[g] = G->ntops;
        } else if (!on && G->toppos[g]) {
            uint32_t p = G->toppos[g] - 1, last = G->tops[--G->ntops];
            G->tops[p] = last;
            G->toppos[last] = p + 1;
            G->toppos[g] = 0;
        }
        return 0;
    }

    /* member z joins the group of `pair` (created when absent: *created = 1); returns the group or -9 */
    static int64_t tk_gjoin(tk_groups *G, uint64_t pair, uint32_t z, uint32_t nids, int *created) {
        int64_t g = tk_gfind(G, pair);
        *created = 0;
        if (g < 0) {
            uint64_t i;
            if (G->nfree) {
                g = G->freed[--G->nfree];
            } else {
                if (G->used == G->cap) {
                    uint32_t cap = G->cap ? 2 * G->cap : 16;
                    tk_adj *mem = (tk_adj *)realloc(G->mem, (size_t)cap * sizeof(tk_adj));
                    if (mem == NULL) return -9;
                    if (mem != G->mem) tk_fix_inline(mem, G->used);
                    G->mem = mem;
                    uint64_t *pr = (uint64_t *)realloc(G->pair, (size_t)cap * 8);
                    if (pr == NULL) return -9;
                    G->pair = pr;
                    uint32_t *tp = (uint32_t *)realloc(G->toppos, (size_t)cap * 4);
                    if (tp == NULL) return -9;
                    G->toppos = tp;
                    G->cap = cap;
                }
                g = G->used++;
            }
            memset(&G->mem[g], 0, sizeof(tk_adj));
            G->pair[g] = pair;
            G->toppos[g] = 0;
            if (G->keys == NULL && tk_gresize(G, 16) < 0) return -9;
            if (2 * (G->n + 1) > G->mask + 1 && tk_gresize(G, 2 * (G->mask + 1)) < 0) return -9;
            i = tk_mix(pair) & G->mask;
            while (G->keys[i] != TK_MEMPTY) i = (i + 1) & G->mask;
            G->keys[i] = pair;
            G->gids[i] = (uint32_t)g;
            G->n++;
            *created = 1;
        }
        if (tk_add(&G->mem[g], z, nids) < 0) return -9;
        G->members++;
        return g;
    }

    /* member z leaves the group of `pair`; an empty group is deleted (and leaves F).  -8 when the group or the
       member is missing: the listing's views would be out of step with the slots (never, by Figure 13) */
    static int tk_gleave(tk_groups *G, uint64_t pair, uint32_t z) {
        int64_t found = tk_gfind(G, pair);
        if (found < 0 || !tk_has(&G->mem[found], z)) return -8;
        uint32_t g = (uint32_t)found;
        tk_remove(&G->mem[g], z);
        G->members--;
        if (G->mem[g].n) return 0;
        uint64_t i = tk_mix(pair) & G->mask, j;
        tk_gtop(G, g, 0);
        while (G->keys[i] != pair) i = (i + 1) & G->mask;
        for (j = (i + 1) & G->mask; G->keys[j] != TK_MEMPTY; j = (j + 1) & G->mask) {
            uint64_t h = tk_mix(G->keys[j]) & G->mask;
            if (((j - h) & G->mask) >= ((j - i) & G->mask)) {
                G->keys[i] = G->keys[j];
                G->gids[i] = G->gids[j];
                i = j;
            }
        }
        G->keys[i] = TK_MEMPTY;
        G->n--;
        free(G->mem[g].bs);
        G->mem[g].bs = NULL;
        G->mem[g].nw = 0;
        if (G->nfree == G->freecap) {
            uint32_t cap = G->freecap ? 2 * G->freecap : 16, *f = (uint32_t *)realloc(G->freed, (size_t)cap * 4);
            if (f == NULL) return -9;
            G->freed = f;
            G->freecap = cap;
        }
        G->freed[G->nfree++] = g;
        return 0;
    }

    /* K(x,y) of a slot, 0 when absent; O(1) */
    static inline int64_t tk_kget(const tk_slot *s, uint32_t x, uint32_t y) {
        const tk_adj *r = tk_row(&s->f, x);
        return (r != NULL && tk_has(r, y)) ? tk_mult(&s->o, x, y) : 0;
    }

    /* the canonical (u0, u1, u2) of x_i = a, x_{i+1} = b, x_{i+2} = c, as the triple map's key */
    static inline void tk_canon(int i, uint32_t a, uint32_t b, uint32_t c, uint64_t *k1, uint32_t *k2) {
        uint32_t u0 = i == 0 ? a : (i == 1 ? c : b), u1 = i == 0 ? b : (i == 1 ? a : c), u2 = i == 0 ? c : (i == 1 ? b : a);
        *k1 = ((uint64_t)u0 << 32) | u1;
        *k2 = u2;
    }

    static inline int tk_ltoggle(tk_list *L, int i, uint32_t a, uint32_t b, uint32_t c, int on) {
        uint64_t k1;
        uint32_t k2;
        tk_canon(i, a, b, c, &k1, &k2);
        return tk_tput(&L->listing, k1, k2, on, 0);
    }

    static inline int tk_lrecord(tk_list *L, int i, uint32_t a, uint32_t b, uint32_t c, __int128 d) {
        uint64_t k1;
        uint32_t k2;
        tk_canon(i, a, b, c, &k1, &k2);
        return tk_tput(&L->pending, k1, k2, 1, d);
    }

    /* Figure 13, before the slot update δK_i^r(x,y) = m (ApplyUpdate follows): the answers' changes
       m·K_j(y,c)·K_k(c,x) recorded (when tracking and `record`), O(N^max + changed answers); then, if (x,y)
       appears or vanishes, Q^L (r = h: the c of K_j^h(y,·) ∩ K_k^h(·,x); r = l: of K_j^l(y,·) ∩ K_k^l(·,x))
       and the groups (r = h: y in W[i](x,c) for c in K_j^l(y,·); r = l: x in W[k](g,y) for g in K_k^h(·,x),
       a new group in F when its closing tuple is there).  O(N^max(eps,1-eps)).  A tuple whose multiplicity
       changes but stays non-zero changes no membership: the values are read from the slots. */
    static int tk_lbefore(tk_ctx *c, tk_list *L, int i, uint32_t x, uint32_t y, int64_t m, int heavy, int record) {
        int j = i == 2 ? 0 : i + 1, k = i == 0 ? 2 : i - 1, created, e;
        const tk_slot *S = c->S;
        const tk_part *P = c->P;
        const tk_adj *row = tk_row(&S[j].f, y), *hc = tk_row(&P[k].hb, x), *small, *big;
        int yh = row != NULL && tk_heavy(&P[j], y);
        int64_t old = tk_kget(&S[i], x, y), g;
        uint32_t t;
        if (record && L->track && row != NULL) {
            if (!yh) {  /* fewer than 1.5N^eps candidates */
                for (t = 0; t < row->n; t++) {
                    uint32_t z = row->mem[t];
                    int64_t tz = tk_kget(&S[k], z, x);
                    if (tz && tk_lrecord(L, i, x, y, z, (__int128)m * tk_mult(&S[j].o, y, z) * tz) < 0) return -9;
                }
            } else {
                if (hc != NULL) {  /* heavy C-keys: at most 2N^{1-eps} */
                    small = row->n <= hc->n ? row : hc;
                    big = small == row ? hc : row;
                    for (t = 0; t < small->n; t++) {
                        uint32_t z = small->mem[t];
                        if (!tk_has(big, z)) continue;
                        __int128 d = (__int128)m * tk_mult(&S[j].o, y, z) * tk_mult(&S[k].o, z, x);
                        if (tk_lrecord(L, i, x, y, z, d) < 0) return -9;
                    }
                }
                g = tk_gfind(&L->G[j], ((uint64_t)y << 32) | x);  /* K_j^h(y,z)·K_k^l(z,x), already joined */
                if (g >= 0) {
                    const tk_adj *grp = &L->G[j].mem[g];
                    for (t = 0; t < grp->n; t++) {
                        uint32_t z = grp->mem[t];
                        __int128 d = (__int128)m * tk_mult(&S[j].o, y, z) * tk_mult(&S[k].o, z, x);
                        if (tk_lrecord(L, i, x, y, z, d) < 0) return -9;
                    }
                }
            }
        }
        if (old != 0 && old + m != 0) return 0;
        int on = old == 0;
        if (row != NULL && yh == heavy) {  /* Q^L: r = h extends K_j^h·K_k^h, r = l extends K_j^l·K_k^l */
            if (heavy) {
                if (hc != NULL) {
                    small = row->n <= hc->n ? row : hc;
                    big = small == row ? hc : row;
                    for (t = 0; t < small->n; t++) {
                        if (tk_has(big, small->mem[t]) && tk_ltoggle(L, i, x, y, small->mem[t], on) < 0) return -9;
                    }
                }
            } else {
                for (t = 0; t < row->n; t++) {
                    uint32_t z = row->mem[t];
                    if (!tk_heavy(&P[k], z) && tk_kget(&S[k], z, x) && tk_ltoggle(L, i, x, y, z, on) < 0) return -9;
                }
            }
        }
        if (heavy) {  /* δW[i](x, y, z) for z in K_j^l(y, ·) */
            if (row != NULL && !yh) {
                for (t = 0; t < row->n; t++) {
                    uint32_t z = row->mem[t];
                    uint64_t pair = ((uint64_t)x << 32) | z;
                    if (on) {
                        g = tk_gjoin(&L->G[i], pair, y, c->nids, &created);
                        if (g < 0) return -9;
                        if (created && tk_kget(&S[k], z, x) && tk_gtop(&L->G[i], (uint32_t)g, 1) < 0) return -9;
                    } else if ((e = tk_gleave(&L->G[i], pair, y)) < 0) {
                        return e;
                    }
                }
            }
        } else if (hc != NULL) {  /* δW[k](g, x, y) for g in K_k^h(·, x) */
            for (t = 0; t < hc->n; t++) {
                uint32_t z = hc->mem[t];
                uint64_t pair = ((uint64_t)z << 32) | y;
                if (on) {
                    g = tk_gjoin(&L->G[k], pair, x, c->nids, &created);
                    if (g < 0) return -9;
                    if (created && tk_kget(&S[j], y, z) && tk_gtop(&L->G[k], (uint32_t)g, 1) < 0) return -9;
                } else if ((e = tk_gleave(&L->G[k], pair, x)) < 0) {
                    return e;
                }
            }
        }
        return 0;
    }

    /* after the slot update: F[j]'s group (y, x) is closed by K_i(x, y), which may have appeared or vanished */
    static int tk_lafter(tk_ctx *c, tk_list *L, int i, uint32_t x, uint32_t y) {
        int j = i == 2 ? 0 : i + 1;
        int64_t g = tk_gfind(&L->G[j], ((uint64_t)y << 32) | x);
        if (g < 0) return 0;
        return tk_gtop(&L->G[j], (uint32_t)g, tk_kget(&c->S[i], x, y) != 0);
    }

    /* the minor rebalancing of key x of slot i, for the listing (before the flag flips): the row's triangles of
       its old part leave Q^L and those of its new part join; the row joins (to heavy) or leaves W[i], and
       leaves (to heavy) or joins W[k].  The same work as Figure 13 per moved tuple. */
    static int tk_lminor(tk_ctx *c, tk_list *L, int i, uint32_t x, int to_heavy) {
        int j = i == 2 ? 0 : i + 1, k = i == 0 ? 2 : i - 1, created, e;
        const tk_slot *S = c->S;
        const tk_part *P = c->P;
        const tk_adj *row = tk_row(&S[i].f, x), *hc = tk_row(&P[k].hb, x), *small, *big;
        uint32_t t, u;
        int64_t g;
        if (row == NULL) return 0;
        for (t = 0; t < row->n; t++) {
            uint32_t y = row->mem[t];
            const tk_adj *rj = tk_row(&S[j].f, y);
            int yh = rj != NULL && tk_heavy(&P[j], y);
            if (rj != NULL && yh && hc != NULL) {  /* hhh: in to heavy, out to light */
                small = rj->n <= hc->n ? rj : hc;
                big = small == rj ? hc : rj;
                for (u = 0; u < small->n; u++) {
                    if (tk_has(big, small->mem[u]) && tk_ltoggle(L, i, x, y, small->mem[u], to_heavy) < 0) return -9;
                }
            } else if (rj != NULL && !yh) {  /* lll: out to heavy, in to light */
                for (u = 0; u < rj->n; u++) {
                    uint32_t z = rj->mem[u];
                    if (!tk_heavy(&P[k], z) && tk_kget(&S[k], z, x) && tk_ltoggle(L, i, x, y, z, !to_heavy) < 0) return -9;
                }
            }
            if (rj != NULL && !yh) {  /* W[i] = K_i^h·K_j^l */
                for (u = 0; u < rj->n; u++) {
                    uint32_t z = rj->mem[u];
                    uint64_t pair = ((uint64_t)x << 32) | z;
                    if (to_heavy) {
                        g = tk_gjoin(&L->G[i], pair, y, c->nids, &created);
                        if (g < 0) return -9;
                        if (created && tk_kget(&S[k], z, x) && tk_gtop(&L->G[i], (uint32_t)g, 1) < 0) return -9;
                    } else if ((e = tk_gleave(&L->G[i], pair, y)) < 0) {
                        return e;
                    }
                }
            }
            if (hc != NULL) {  /* W[k] = K_k^h·K_i^l */
                for (u = 0; u < hc->n; u++) {
                    uint32_t z = hc->mem[u];
                    uint64_t pair = ((uint64_t)z << 32) | y;
                    if (!to_heavy) {
                        g = tk_gjoin(&L->G[k], pair, x, c->nids, &created);
                        if (g < 0) return -9;
                        if (created && tk_kget(&S[j], y, z) && tk_gtop(&L->G[k], (uint32_t)g, 1) < 0) return -9;
                    } else if ((e = tk_gleave(&L->G[k], pair, x)) < 0) {
                        return e;
                    }
                }
            }
        }
        return 0;
    }

    /* Q^L, W and F from scratch (major rebalancing): Q^L = the hhh and lll triangles, O(|D|^{3/2});
       W[i] over the heavy tuples of slot i and the light rows of slot j; F from the closing tuples */
    static int tk_lrebuild(tk_ctx *c, tk_list *L) {
        const tk_slot *S = c->S;
        const tk_part *P = c->P;
        uint32_t a, t, u;
        int i, created;
        int64_t g;
        tk_tfree(&L->listing);
        for (i = 0; i < 3; i++) tk_gfree(&L->G[i]);
        for (i = 0; i < 3; i++) {
            int j = i == 2 ? 0 : i + 1, k = i == 0 ? 2 : i - 1;
            for (a = 0; a < S[i].f.len; a++) {
                const tk_adj *row = &S[i].f.v[a];
                if (row->n == 0 || !tk_heavy(&P[i], a)) continue;
                for (t = 0; t < row->n; t++) {
                    uint32_t b = row->mem[t];
                    const tk_adj *rj = tk_row(&S[j].f, b);
                    if (rj == NULL || tk_heavy(&P[j], b)) continue;
                    for (u = 0; u < rj->n; u++) {
                        uint32_t z = rj->mem[u];
                        g = tk_gjoin(&L->G[i], ((uint64_t)a << 32) | z, b, c->nids, &created);
                        if (g < 0) return -9;
                        if (created && tk_kget(&S[k], z, a) && tk_gtop(&L->G[i], (uint32_t)g, 1) < 0) return -9;
                    }
                }
            }
        }
        for (a = 0; a < S[0].f.len; a++) {  /* Q^L over u0 = a: both parts */
            const tk_adj *row = &S[0].f.v[a];
            if (row->n == 0) continue;
            int h = tk_heavy(&P[0], a);
            const tk_adj *hc = tk_row(&P[2].hb, a);
            for (t = 0; t < row->n; t++) {
                uint32_t b = row->mem[t];
                const tk_adj *r1 = tk_row(&S[1].f, b);
                if (r1 == NULL || tk_heavy(&P[1], b) != h) continue;
                if (h) {
                    if (hc == NULL) continue;
                    const tk_adj *small = r1->n <= hc->n ? r1 : hc, *big = small == r1 ? hc : r1;
                    for (u = 0; u < small->n; u++) {
                        if (tk_has(big, small->mem[u]) && tk_ltoggle(L, 0, a, b, small->mem[u], 1) < 0) return -9;
                    }
                } else {
                    for (u = 0; u < r1->n; u++) {
                        uint32_t z = r1->mem[u];
                        if (!tk_heavy(&P[2], z) && tk_kget(&S[2], z, a) && tk_ltoggle(L, 0, a, b, z, 1) < 0) return -9;
                    }
                }
            }
        }
        return 0;
    }

    static int tk_lput_pending(tk_list *L, uint32_t u0, uint32_t u1, uint32_t u2, int64_t hi, uint64_t lo) {
        __int128 d = ((__int128)hi << 64) | (__int128)lo;
        return tk_tput(&L->pending, ((uint64_t)u0 << 32) | u1, u2, 1, d);
    }

    static void tk_lfree(tk_list *L) {
        int i;
        tk_tfree(&L->listing);
        tk_tfree(&L->pending);
        for (i = 0; i < 3; i++) tk_gfree(&L->G[i]);
    }

    static inline void tk_tsplit(const tk_tmap *t, uint64_t i, uint32_t *u0, uint32_t *u1, uint32_t *u2, int64_t *hi,
                                 uint64_t *lo) {
        *u0 = (uint32_t)(t->k1[i] >> 32);
        *u1 = (uint32_t)t->k1[i];
        *u2 = t->k2[i];
        if (t->valued) { *hi = (int64_t)(t->vals[i] >> 64); *lo = (uint64_t)t->vals[i]; }
    }
    static inline int tk_tslot_used(const tk_tmap *t, uint64_t i) { return t->k1 != NULL && t->k1[i] != TK_MEMPTY; }
    static size_t tk_tmap_bytes(const tk_tmap *t) { return t->k1 ? (size_t)(t->valued ? 28 : 12) * (t->mask + 1) : 0; }
    static size_t tk_groups_bytes(const tk_groups *G) {
        size_t n = (size_t)12 * (G->mask + (G->keys ? 1 : 0)) + (size_t)G->cap * (sizeof(tk_adj) + 12) + 4 * (size_t)(G->freecap + G->topcap);
        uint32_t g;
        for (g = 0; g < G->used; g++) {
            const tk_adj *a = &G->mem[g];
            if (a->mem && a->mem != &a->inl) n += a->bits ? (size_t)6 << a->bits : (size_t)4 * a->small;
            n += (size_t)8 * a->nw;
        }
        return n;
    }

    /* Software prefetch of the input a few updates ahead (a list of (relation, (a, b), m) tuples): the update
       tuple 12 ahead, its row 8 ahead, the row's values 4 ahead, 2 ahead the int map's slot of each exact int
       value, and 1 ahead the forward and backward row headers of its ids in the first `nslots` slots; each
       step reads only what an earlier one fetched.  Hints only: no effect on the result.  On the two-hub
       stream of bench/compare.py (10^6 tuples: rows and ids far apart in memory) 1.4x for the partitioned
       loop and 1.6x for the first-order one, CPU time, alternating in one process; neutral on facebook. */
    static inline void tk_prefetch_input(PyObject *const *items, Py_ssize_t n, Py_ssize_t k, const tk_imap *ints,
                                         const tk_slot *S, int nslots) {
        PyObject *u, *r, *v;
        int t, ovf, i;
        if (k + 12 < n) __builtin_prefetch(items[k + 12]);
        if (k + 8 < n) {
            u = items[k + 8];
            if (PyTuple_Check(u) && PyTuple_GET_SIZE(u) == 3) __builtin_prefetch(PyTuple_GET_ITEM(u, 1));
        }
        if (k + 4 < n) {
            u = items[k + 4];
            if (PyTuple_Check(u) && PyTuple_GET_SIZE(u) == 3) {
                r = PyTuple_GET_ITEM(u, 1);
                if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
                    __builtin_prefetch(PyTuple_GET_ITEM(r, 0));
                    __builtin_prefetch(PyTuple_GET_ITEM(r, 1));
                }
            }
        }
        if (k + 2 < n && ints->t != NULL) {
            u = items[k + 2];
            if (PyTuple_Check(u) && PyTuple_GET_SIZE(u) == 3) {
                r = PyTuple_GET_ITEM(u, 1);
                if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
                    for (t = 0; t < 2; t++) {
                        v = PyTuple_GET_ITEM(r, t);
                        if (PyLong_CheckExact(v)) {
                            long long key = PyLong_AsLongLongAndOverflow(v, &ovf);
                            if (!ovf) __builtin_prefetch(&ints->t[tk_mix((uint64_t)key) & ints->mask]);
                        }
                    }
                }
            }
        }
        if (k + 1 < n && ints->t != NULL) {  /* the next update's ids (its int map slots fetched): row headers */
            u = items[k + 1];
            if (PyTuple_Check(u) && PyTuple_GET_SIZE(u) == 3) {
                r = PyTuple_GET_ITEM(u, 1);
                if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
                    for (t = 0; t < 2; t++) {
                        v = PyTuple_GET_ITEM(r, t);
                        if (!PyLong_CheckExact(v)) continue;
                        long long key = PyLong_AsLongLongAndOverflow(v, &ovf);
                        if (ovf) continue;
                        int64_t id = tk_iget(ints, key);
                        if (id < 0) continue;
                        for (i = 0; i < nslots; i++) {
                            if ((uint64_t)id < S[i].f.len) __builtin_prefetch(&S[i].f.v[id]);
                            if ((uint64_t)id < S[i].b.len) __builtin_prefetch(&S[i].b.v[id]);
                        }
                    }
                }
            }
        }
    }
    /* the blocks of the rows slot i's update of (x, y) reads (headers fetched by tk_prefetch_input): K_j(y,.)
       and K_k(.,x) of the delta, K_i(x,.) and K_i(.,y) of the change, so that their misses overlap */
    static inline void tk_vslot(const tk_view *v, uint64_t i, int64_t *hi, uint64_t *lo) {
        *hi = (int64_t)(v->vals[i] >> 64);
        *lo = (uint64_t)v->vals[i];
    }
    static inline void tk_vlookup(const tk_view *v, uint64_t key, int64_t *hi, uint64_t *lo) {
        __int128 x = tk_vget(v, key);
        *hi = (int64_t)(x >> 64);
        *lo = (uint64_t)x;
    }
    """
    ctypedef struct tk_adj:
        uint32_t *mem
        uint32_t n
    ctypedef struct tk_index:
        tk_adj *v
        uint32_t len
        int64_t keys
    ctypedef struct tk_mmap:
        uint64_t *keys
        int64_t *vals
        uint64_t mask
        uint64_t n
    ctypedef struct tk_slot:
        tk_index f
        tk_index b
        tk_mmap o
        int64_t size
    ctypedef struct tk_acc:
        pass
    ctypedef struct tk_ient:
        pass
    ctypedef struct tk_imap:
        tk_ient *t
        uint64_t mask
        uint64_t n
    int64_t tk_iget(const tk_imap *m, int64_t key)
    int tk_iput(tk_imap *m, int64_t key, uint32_t id)
    void tk_ifree(tk_imap *m)
    uint64_t TK_MEMPTY
    const tk_adj *tk_row(const tk_index *ix, int64_t id)
    int tk_has(const tk_adj *a, uint32_t z)
    void tk_index_free(tk_index *ix)
    void tk_mfree(tk_mmap *o)
    int tk_mget(const tk_mmap *o, uint64_t key, int64_t *out)
    uint64_t tk_pair(uint32_t x, uint32_t y)
    int64_t tk_delta(tk_slot *S, int i, int64_t x, int64_t y, int64_t m, tk_acc *acc)
    int tk_change(tk_slot *s, uint32_t x, uint32_t y, int64_t m, int64_t *absmax, uint32_t nids)
    void tk_acc_zero(tk_acc *a)
    int tk_acc_nonzero(const tk_acc *a)
    int tk_acc_big(const tk_acc *a)
    int64_t tk_acc_hi(const tk_acc *a)
    uint64_t tk_acc_lo(const tk_acc *a)
    size_t tk_index_bytes(const tk_index *ix)
    size_t tk_mmap_bytes(const tk_mmap *o)
    ctypedef struct tk_part:
        tk_index hb
        uint8_t *heavy
        uint32_t hlen
        int64_t hsize
        int64_t hkeys
        int64_t strict
        int64_t up
        int64_t down
        double eps
    ctypedef struct tk_view:
        uint64_t *keys
        uint64_t mask
        uint64_t n
    ctypedef struct tk_ctx:
        tk_slot *S
        tk_part *P
        tk_view *V
        int selfjoin
        int64_t N
        int64_t *absmax
        uint32_t nids
        int64_t minors
        int64_t moved
        tk_list *L
    int tk_heavy(const tk_part *p, uint32_t x)
    void tk_part_free(tk_part *p)
    void tk_vfree(tk_view *v)
    int tk_papply(tk_ctx *c, int i, uint32_t x, uint32_t y, int64_t m, int heavy, tk_acc *acc)
    int tk_on_update(tk_ctx *c, int i, uint32_t x, uint32_t y, int64_t m, tk_acc *acc, int64_t *n)
    int tk_build_hb(tk_slot *s, tk_part *p, uint32_t nids)
    int tk_views(tk_ctx *c)
    int tk_major(tk_ctx *c)
    int tk_hreserve(tk_part *p, uint32_t x)
    size_t tk_view_bytes(const tk_view *v)
    void tk_vslot(const tk_view *v, uint64_t i, int64_t *hi, uint64_t *lo)
    void tk_vlookup(const tk_view *v, uint64_t key, int64_t *hi, uint64_t *lo)
    void tk_prefetch_input(PyObject *const *items, Py_ssize_t n, Py_ssize_t k, const tk_imap *ints,
                           const tk_slot *S, int nslots)
    ctypedef struct tk_tmap:
        uint64_t *k1
        uint64_t mask
        uint64_t n
        int valued
    ctypedef struct tk_groups:
        uint64_t n
        uint32_t used
        tk_adj *mem
        uint64_t *pair
        uint32_t *tops
        uint32_t ntops
        int64_t members
    ctypedef struct tk_list:
        tk_tmap listing
        tk_tmap pending
        tk_groups G[3]
        int track
    int tk_lrebuild(tk_ctx *c, tk_list *L)
    void tk_lfree(tk_list *L)
    void tk_tfree(tk_tmap *t)
    void tk_tsplit(const tk_tmap *t, uint64_t i, uint32_t *u0, uint32_t *u1, uint32_t *u2, int64_t *hi, uint64_t *lo)
    int tk_tslot_used(const tk_tmap *t, uint64_t i)
    size_t tk_tmap_bytes(const tk_tmap *t)
    size_t tk_groups_bytes(const tk_groups *G)
    int64_t tk_kget(const tk_slot *s, uint32_t x, uint32_t y)
    int tk_lput_pending(tk_list *L, uint32_t u0, uint32_t u1, uint32_t u2, int64_t hi, uint64_t lo)


#: the largest |multiplicity| the compiled state applies or stores (products and sums stay exact in 128 bits)
LIMIT = 1 << 28
cdef int64_t C_LIMIT = 1 << 28
#: the most distinct values one state numbers (ids are uint32, one reserved as the empty mark)
MAX_IDS = 0xFFFFFFFE


cdef object _flush(object count, tk_acc *acc):
    """``count + acc`` as a Python int, and ``acc`` reset to 0."""
    cdef int64_t hi
    cdef uint64_t lo
    if not tk_acc_nonzero(acc):
        return count
    hi = tk_acc_hi(acc)
    lo = tk_acc_lo(acc)
    tk_acc_zero(acc)
    if hi == 0:
        return count + lo
    if hi == -1 and lo >= (<uint64_t>1 << 63):
        return count + <int64_t>lo
    return count + (<object> hi << 64) + lo


def _rebuild(occurrences, values, slots, partition=None):
    """Unpickle a :class:`TriangleFirstOrder` (see its ``__reduce__``); O(|D|), plus the views
    recomputed, O(|D|^{1+min(eps,1-eps)}), when it is partitioned."""
    state = TriangleFirstOrder(occurrences, partition is not None and partition[0])
    state._load(values, slots, partition)
    return state


cdef int _raise(int code) except -1:
    """The exception of a C error code: -9 out of memory, -8 the listing's views out of step with the slots."""
    if code == -9:
        raise MemoryError()
    raise RuntimeError(f"the compiled listing's views are out of step with its slots (code {code})")


cdef object _int128(int64_t hi, uint64_t lo):
    """The 128-bit value ``hi·2^64 + lo`` as a Python int."""
    if hi == 0:
        return lo
    if hi == -1 and lo >= (<uint64_t>1 << 63):
        return <int64_t>lo
    return (<object> hi << 64) + lo


#: events of :meth:`TriangleFirstOrder.apply_partitioned`
EV_DONE, EV_MAJOR, EV_HIT, EV_CHECK, EV_BLOCKED = 0, 1, 2, 3, 4


cdef class TriangleFirstOrder:
    """The three slots of the triangle in compact C tables: first-order key sets, or IVM^eps's partitions
    and views in the partitioned mode (module docstring).

    ``occurrences`` maps each relation to its ``[(slot, flipped)]`` in cycle
    order (a relation of a self-join feeds several slots, in turn: the
    telescoping delta rule of :mod:`ivm.engines.first_order.engine`).  Space is
    O(|D|): per stored tuple and direction 4 bytes in the array, up to 8 more
    in the position table and, for dense keys, a bitset of at most 4 words per
    id held; 32 bytes per id, slot and direction; 16 per entry of the int map
    and per multiplicity other than 1.
    """

    cdef tk_slot s[3]
    cdef tk_part p[3]
    cdef tk_view v[3]
    cdef tk_imap ints
    cdef dict ids
    cdef list values
    cdef Py_ssize_t uncovered  # values of the dict without an entry in the int map (not exact ints in int64)
    cdef dict plan
    cdef object occurrences
    cdef int64_t absmax
    cdef bint partitioned
    cdef bint selfjoin
    cdef int64_t N
    cdef tk_list *lst
    cdef readonly int64_t version

    def __cinit__(self, occurrences, bint selfjoin=False):
        cdef int i
        memset(self.p, 0, sizeof(self.p))
        memset(self.v, 0, sizeof(self.v))
        self.selfjoin = selfjoin
        self.partitioned = selfjoin
        self.N = 1
        for i in range(3):
            self.p[i].eps = 1.0
            self.p[i].strict, self.p[i].up, self.p[i].down = 1, 2, 1
        for i in range(3):
            self.s[i].f.v = NULL
            self.s[i].f.len = 0
            self.s[i].f.keys = 0
            self.s[i].b.v = NULL
            self.s[i].b.len = 0
            self.s[i].b.keys = 0
            self.s[i].o.keys = NULL
            self.s[i].o.vals = NULL
            self.s[i].o.mask = 0
            self.s[i].o.n = 0
            self.s[i].size = 0
        self.ints.t = NULL
        self.ints.mask = 0
        self.ints.n = 0
        self.ids = {}
        self.values = []
        self.uncovered = 0
        self.absmax = 1
        self.occurrences = {r: [(int(i), bool(f)) for i, f in occs] for r, occs in occurrences.items()}
        self.plan = {r: tuple(2 * int(i) + bool(f) for i, f in occs) for r, occs in occurrences.items()}

    def __dealloc__(self):
        cdef int i
        for i in range(3):
            tk_index_free(&self.s[i].f)
            tk_index_free(&self.s[i].b)
            tk_mfree(&self.s[i].o)
            tk_part_free(&self.p[i])
            tk_vfree(&self.v[i])
        tk_ifree(&self.ints)
        if self.lst is not NULL:
            tk_lfree(self.lst)
            free(self.lst)
            self.lst = NULL

    # -- ids ---------------------------------------------------------------------------

    cdef inline int64_t _find(self, object v) except -2:
        """The id of ``v`` or -1: exact ints in the C map first, then the dict (equal values of
        other types, e.g. 1.0 for 1, share the id, as in a Python set).  While every value numbered
        is an exact int in the int map (``uncovered == 0``), a miss there is final: no dict probe
        for a new int (one random read of a large dict saved per new value)."""
        cdef PyObject *p
        cdef int ovf = 0
        cdef long long k
        cdef int64_t i
        if PyLong_CheckExact(v):
            k = PyLong_AsLongLongAndOverflow(v, &ovf)
            if not ovf:
                i = tk_iget(&self.ints, k)
                if i >= 0 or self.uncovered == 0:
                    return i  # every value numbered is in the int map: v is new
                p = PyDict_GetItem(self.ids, v)
                if p is NULL:
                    return -1
                i = PyLong_AsLongLong(<object> p)
                if tk_iput(&self.ints, k, <uint32_t> i) < 0:
                    raise MemoryError()
                return i
        p = PyDict_GetItem(self.ids, v)
        if p is NULL:
            return -1
        return PyLong_AsLongLong(<object> p)

    cdef int64_t _intern(self, object v) except -1:
        """A new id for ``v`` (absent from the dict); O(1) amortized."""
        cdef int64_t i = PyList_GET_SIZE(self.values)
        cdef int ovf = 0
        cdef long long k
        if i >= MAX_IDS:
            raise OverflowError("more distinct values than the compiled state numbers")
        PyDict_SetItem(self.ids, v, i)
        self.values.append(v)
        if PyLong_CheckExact(v):
            k = PyLong_AsLongLongAndOverflow(v, &ovf)
            if not ovf and tk_iput(&self.ints, k, <uint32_t> i) < 0:
                self.uncovered += 1  # (in the dict only)
                raise MemoryError()
        else:
            ovf = 1
        if ovf:
            self.uncovered += 1
        return i

    # -- updates -----------------------------------------------------------------------

    def apply(
        self,
        updates,
        Py_ssize_t start,
        count,
        Py_ssize_t lo=-1,
        Py_ssize_t hi=sys.maxsize,
        Py_ssize_t hot=sys.maxsize,
        list work=None,
    ):
        """First-order IVM (IVM^eps §1.1) of ``updates[start:]`` in order; O(min(deg)) per update.

        The same contract as :func:`ivm.engines.first_order.engine.apply_first_order_python`
        (stops after the update that makes |D| reach ``hi`` or fall below ``lo``
        or a key reach degree ``hot``), returning ``(index of the next update,
        count, non-zero updates applied, (slot, key, degree) or None,
        blocked)``; ``blocked`` is True when ``updates[next]`` was not applied
        because a multiplicity is not an int of magnitude at most ``LIMIT``
        (nothing of it was applied: the caller continues on Python slots).
        ``work``: the counter ``[E, r, W]`` of the adaptive engine's work rule,
        updated in place as the reference does (per update ``w`` = the smaller
        row of each intersection, ``E := max(0, E + w - r)``, ``W += w``; stop
        once ``E ≥ |D|`` and ``E > 0``); O(1) more per update.
        """
        cdef Py_ssize_t stop = len(updates), k, nxt, applied = 0, size = 0, ne, e
        cdef bint track = work is not None
        cdef int64_t excess = 0, rate = 0, spent = 0, w = 0
        cdef tk_acc acc
        cdef object update, relation, row, mo, a, b, hit = None
        cdef PyObject *p
        cdef tuple entries
        cdef int64_t m = 0, aid, bid, xid, yid
        cdef int ovf = 0, code, slot, res
        cdef uint32_t nids
        cdef bint halt = False, blocked = False
        cdef tk_slot *S = self.s
        cdef dict plan = self.plan
        if self.partitioned:
            raise ValueError("the state is partitioned: apply_partitioned runs it")
        if track:
            excess, rate, spent = work[0], work[1], work[2]
        self.version += 1
        cdef PyObject **items = NULL
        if PyList_CheckExact(updates):
            items = (<PyListObject *> updates).ob_item
        tk_acc_zero(&acc)
        size = S[0].size + S[1].size + S[2].size
        nxt = stop
        for k in range(start, stop):
            if items is not NULL:
                tk_prefetch_input(items, stop, k, &self.ints, S, 3)
            update = updates[k]
            if PyTuple_Check(update) and PyTuple_GET_SIZE(update) == 3:
                relation = <object> PyTuple_GET_ITEM(update, 0)
                row = <object> PyTuple_GET_ITEM(update, 1)
                mo = <object> PyTuple_GET_ITEM(update, 2)
            else:
                relation, row, mo = update
            if not mo:
                continue  # m = 0 is a no-op (digest §8 item 3)
            p = PyDict_GetItem(plan, relation)
            if p is NULL:
                raise KeyError(relation)
            entries = <tuple> p
            if PyLong_Check(mo):
                m = PyLong_AsLongLongAndOverflow(mo, &ovf)
            if not PyLong_Check(mo) or ovf or m > C_LIMIT or m < -C_LIMIT or self.absmax > C_LIMIT:
                blocked = True
                nxt = k
                break
            if PyTuple_Check(row) and PyTuple_GET_SIZE(row) == 2:
                a = <object> PyTuple_GET_ITEM(row, 0)
                b = <object> PyTuple_GET_ITEM(row, 1)
            else:
                a, b = row
            aid = self._find(a)
            bid = self._find(b)
            ne = PyTuple_GET_SIZE(entries)
            w = 0
            for e in range(ne):
                code = <int> (<object> PyTuple_GET_ITEM(entries, e))
                slot = code >> 1
                if code & 1:
                    xid, yid = bid, aid
                else:
                    xid, yid = aid, bid
                # δQ = m · Σ_z K_j(y, z) · K_k(z, x); w += the smaller row it walked
                w += tk_delta(S, slot, xid, yid, m, &acc)
                # K_i(x, y) += m
                if aid < 0:
                    aid = self._intern(a)
                if bid < 0:
                    bid = self._find(b)  # a == b by value: the id just made
                    if bid < 0:
                        bid = self._intern(b)
                if code & 1:
                    xid, yid = bid, aid
                else:
                    xid, yid = aid, bid
                nids = <uint32_t> PyList_GET_SIZE(self.values)
                res = tk_change(&S[slot], <uint32_t> xid, <uint32_t> yid, m, &self.absmax, nids)
                if res == 1:
                    size += 1
                    if size >= hi:
                        halt = True
                    if <Py_ssize_t> S[slot].f.v[xid].n >= hot:
                        hit = (slot, self.values[xid], <Py_ssize_t> S[slot].f.v[xid].n)
                        halt = True
                elif res == -1:
                    size -= 1
                    if size < lo:
                        halt = True
                elif res == -9:
                    count = _flush(count, &acc)
                    raise MemoryError()
            applied += 1
            if tk_acc_big(&acc):
                count = _flush(count, &acc)
            if track and work_step(&excess, &spent, w, rate, size):
                halt = True
            if halt:
                nxt = k + 1
                break
        count = _flush(count, &acc)
        if track:
            work[0] = excess
            work[2] = spent
        if PyList_GET_SIZE(self.values) > 4 * (S[0].size + S[1].size + S[2].size) + 4096:
            self.compact()
        return (nxt if stop > start else start), count, applied, hit, blocked

    def compact(self):
        """Renumber the ids over the values still stored (at most 2|D|), O(|D| + ids).

        :meth:`apply` calls it when more than ``4|D| + 4096`` values are
        numbered: at least |D|/2 updates lie between two calls, so it costs O(1)
        amortized per update and the space stays O(|D|).
        """
        cdef TriangleFirstOrder other = _rebuild(*self.__reduce__()[1])
        cdef tk_slot tmp
        cdef tk_part ptmp
        cdef tk_view vtmp
        cdef tk_imap itmp
        cdef int i
        for i in range(3):
            tmp = self.s[i]
            self.s[i] = other.s[i]
            other.s[i] = tmp
            ptmp = self.p[i]
            self.p[i] = other.p[i]
            other.p[i] = ptmp
            vtmp = self.v[i]
            self.v[i] = other.v[i]
            other.v[i] = vtmp
        self.ids, other.ids = other.ids, self.ids
        self.uncovered, other.uncovered = other.uncovered, self.uncovered
        itmp = self.ints
        self.ints = other.ints
        other.ints = itmp
        self.values, other.values = other.values, self.values
        self.absmax = other.absmax
        self.lst, other.lst = other.lst, self.lst
        self.version += 1

    def add(self, Py_ssize_t slot, x, y, m):
        """``K_slot(x, y) += m`` without counting (loading a state); O(1) amortized.

        Returns the change in distinct tuples (+1, 0 or -1); an OverflowError when
        ``|m|`` or the stored multiplicity would exceed ``LIMIT``.
        """
        cdef int64_t xid, yid, mm
        cdef int res
        if not 0 <= slot < 3:
            raise IndexError(slot)
        if self.partitioned:
            raise ValueError("the state is partitioned: apply_update keeps its views")
        if not m:
            return 0
        mm = int(m)
        if mm > C_LIMIT or mm < -C_LIMIT or self.absmax > C_LIMIT:
            raise OverflowError(f"multiplicity beyond {LIMIT} in the compiled state")
        xid = self._find(x)
        if xid < 0:
            xid = self._intern(x)
        yid = self._find(y)
        if yid < 0:
            yid = self._intern(y)
        res = tk_change(&self.s[slot], <uint32_t> xid, <uint32_t> yid, mm, &self.absmax, PyList_GET_SIZE(self.values))
        if res == -9:
            raise MemoryError()
        return res

    # -- reading -----------------------------------------------------------------------

    def get(self, Py_ssize_t slot, x, y):
        """``K_slot(x, y)`` in O(1) expected."""
        cdef int64_t xid = self._find(x), yid, m = 1
        cdef const tk_adj *r
        if xid < 0:
            return 0
        yid = self._find(y)
        r = tk_row(&self.s[slot].f, xid)
        if yid < 0 or r is NULL or not tk_has(r, <uint32_t> yid):
            return 0
        tk_mget(&self.s[slot].o, tk_pair(<uint32_t> xid, <uint32_t> yid), &m)
        return m

    def size(self, Py_ssize_t slot):
        """Distinct tuples of the slot, O(1)."""
        return self.s[slot].size

    def total(self):
        """|D| over the three slots, O(1)."""
        return self.s[0].size + self.s[1].size + self.s[2].size

    def nkeys(self, Py_ssize_t slot, bint forward):
        """Keys with a non-empty key set in one direction, O(1)."""
        return self.s[slot].f.keys if forward else self.s[slot].b.keys

    def nonunit(self, Py_ssize_t slot):
        """Stored tuples of multiplicity other than 1, O(1)."""
        return self.s[slot].o.n

    def max_degree(self, Py_ssize_t slot):
        """The largest forward degree ``max_x |K(x,·)|`` of the slot, O(ids)."""
        cdef uint32_t j, best = 0
        cdef tk_index *ix = &self.s[slot].f
        for j in range(ix.len):
            if ix.v[j].n > best:
                best = ix.v[j].n
        return best

    def degree(self, Py_ssize_t slot, bint forward, key):
        """``|K(key,·)|`` (forward) or ``|K(·,key)|``, O(1)."""
        cdef int64_t i = self._find(key)
        cdef const tk_adj *r = tk_row(&self.s[slot].f if forward else &self.s[slot].b, i)
        return 0 if r is NULL else r.n

    def row(self, Py_ssize_t slot, bint forward, key):
        """The key set of ``key`` in one direction as a new Python set (None when empty); O(degree)."""
        cdef int64_t i = self._find(key)
        cdef const tk_adj *r = tk_row(&self.s[slot].f if forward else &self.s[slot].b, i)
        cdef uint32_t j
        cdef list values = self.values
        if r is NULL:
            return None
        out = set()
        for j in range(r.n):
            out.add(values[r.mem[j]])
        return out

    def keys(self, Py_ssize_t slot, bint forward):
        """The keys with a non-empty key set in one direction, in id order; O(ids)."""
        cdef tk_index *ix = &self.s[slot].f if forward else &self.s[slot].b
        cdef uint32_t j
        return [self.values[j] for j in range(ix.len) if ix.v[j].n]

    def items(self, Py_ssize_t slot):
        """All ``(x, y, m)`` of the slot, by x in id order; O(|K|)."""
        cdef tk_index *ix = &self.s[slot].f
        cdef tk_mmap *o = &self.s[slot].o
        cdef uint32_t x, j, y
        cdef int64_t m
        cdef list values = self.values, out = []
        for x in range(ix.len):
            if not ix.v[x].n:
                continue
            for j in range(ix.v[x].n):
                y = ix.v[x].mem[j]
                m = 1
                tk_mget(o, tk_pair(x, y), &m)
                out.append((values[x], values[y], m))
        return out

    def other(self, Py_ssize_t slot):
        """``{(x, y): m}`` for the stored multiplicities other than 1; O(|K|) when any, else O(1)."""
        if not self.s[slot].o.n:
            return {}
        return {(x, y): m for x, y, m in self.items(slot) if m != 1}

    def nbytes(self):
        """Bytes of the C tables (tables, per-id headers, multiplicity maps), O(ids)."""
        cdef size_t n = 0
        cdef int i
        for i in range(3):
            n += tk_index_bytes(&self.s[i].f) + tk_index_bytes(&self.s[i].b) + tk_mmap_bytes(&self.s[i].o)
            n += tk_index_bytes(&self.p[i].hb) + self.p[i].hlen + tk_view_bytes(&self.v[i])
            if self.lst is not NULL:
                n += tk_groups_bytes(&self.lst.G[i])
        if self.lst is not NULL:
            n += tk_tmap_bytes(&self.lst.listing) + tk_tmap_bytes(&self.lst.pending)
        return n

    def state_bytes(self):
        """Bytes of the whole state: the C tables (:meth:`nbytes`), the C int map, and the value
        table (the dict of ids, the list of values and the values, sized on a sample of 32).
        O(ids) for :meth:`nbytes`, O(1) besides."""
        cdef Py_ssize_t n = PyList_GET_SIZE(self.values)
        cdef list sample = self.values[:: max(1, n // 32)][:32] if n else []
        per = sum([sys.getsizeof(v) for v in sample]) / len(sample) if sample else 0.0
        imap = sizeof(tk_ient) * (self.ints.mask + 1) if self.ints.t != NULL else 0
        return int(self.nbytes() + imap + sys.getsizeof(self.ids) + sys.getsizeof(self.values) + n * per)

    def nvalues(self):
        """Distinct values numbered so far (ids are not reused before a snapshot compacts them)."""
        return PyList_GET_SIZE(self.values)

    # -- snapshots ---------------------------------------------------------------------

    def __reduce__(self):
        """Pickle as the used values and, per slot, its ``(x, y)`` ids and multiplicities (O(|D|)); a
        partitioned state adds N and, per slot, eps, the cutoffs and its heavy keys (the views are
        recomputed from them when unpickled)."""
        cdef int i
        cdef tk_index *ix
        cdef tk_mmap *o
        cdef uint32_t x, j, y
        cdef int64_t m
        remap = {}
        values = []
        slots = []
        for i in range(3):
            ix = &self.s[i].f
            o = &self.s[i].o
            pairs = array("I")
            mults = array("q")
            for x in range(ix.len):
                if not ix.v[x].n:
                    continue
                for j in range(ix.v[x].n):
                    y = ix.v[x].mem[j]
                    m = 1
                    tk_mget(o, tk_pair(x, y), &m)
                    for v in (x, y):
                        if v not in remap:
                            remap[v] = len(values)
                            values.append(self.values[v])
                    pairs.append(remap[x])
                    pairs.append(remap[y])
                    mults.append(m)
            slots.append((pairs, mults))
        if not self.partitioned:
            return _rebuild, (self.occurrences, values, slots)
        parts = []
        for i in range(3):
            heavy = array("I")
            for x in range(min(self.s[i].f.len, self.p[i].hlen)):
                if self.s[i].f.v[x].n and self.p[i].heavy[x]:
                    heavy.append(remap[x])
            parts.append((self.p[i].eps, self.p[i].strict, self.p[i].up, self.p[i].down, heavy))
        if self.lst is NULL:
            return _rebuild, (self.occurrences, values, slots, (bool(self.selfjoin), self.N, parts))
        pending = []
        for (u0, u1, u2), d in self._pending_ids():
            for v in (u0, u1, u2):
                if v not in remap:  # a value of a pending change whose tuples are gone
                    remap[v] = len(values)
                    values.append(self.values[v])
            pending.append((remap[u0], remap[u1], remap[u2], d))
        listing = (bool(self.lst.track), pending)
        return _rebuild, (self.occurrences, values, slots, (bool(self.selfjoin), self.N, parts, listing))

    def _load(self, values, slots, partition=None):
        cdef int i
        cdef Py_ssize_t t
        cdef int res
        cdef int64_t m
        cdef uint32_t x
        cdef tk_ctx c
        if PyList_GET_SIZE(self.values):
            raise ValueError("_load needs an empty state")
        for v in values:
            self._intern(v)
        for i, (pairs, mults) in enumerate(slots):
            for t in range(len(mults)):
                m = mults[t]
                res = tk_change(&self.s[i], pairs[2 * t], pairs[2 * t + 1], m, &self.absmax, len(values))
                if res == -9:
                    raise MemoryError()
        if partition is None:
            return
        self.selfjoin, self.N, parts = partition[:3]
        self.partitioned = True
        for i, (eps, strict, up, down, heavy) in enumerate(parts):
            self.p[i].eps = eps
            self.p[i].strict, self.p[i].up, self.p[i].down = strict, up, down
            for x in heavy:
                if tk_hreserve(&self.p[i], x) < 0:
                    raise MemoryError()
                self.p[i].heavy[x] = 1
            if tk_build_hb(&self.s[i], &self.p[i], len(values)) < 0:
                raise MemoryError()
        self._ctx(&c)
        if tk_views(&c) < 0:
            raise MemoryError()
        if len(partition) > 3:
            track, pending = partition[3]
            self.enable_listing()
            self.set_tracking(track)
            for u0, u1, u2, d in pending:
                if tk_lput_pending(self.lst, u0, u1, u2, d >> 64, d & 0xFFFFFFFFFFFFFFFF) < 0:
                    raise MemoryError()

    # -- the partitioned state (IVM^eps §3-4; Appendix B for the self-join) --------------

    cdef void _ctx(self, tk_ctx *c):
        c.S = self.s
        c.P = self.p
        c.V = self.v
        c.selfjoin = self.selfjoin
        c.N = self.N
        c.absmax = &self.absmax
        c.nids = <uint32_t> PyList_GET_SIZE(self.values)
        c.minors = 0
        c.moved = 0
        c.L = self.lst

    def is_partitioned(self):
        """Whether the slots are heavy/light partitions with views (else first-order key sets), O(1)."""
        return bool(self.partitioned)

    def is_self_join(self):
        """Whether the state is the self-join's one partitioned relation (slot 0, view 0), O(1)."""
        return bool(self.selfjoin)

    def set_partitioned(self, bint on):
        """Enter or leave the partitioned mode, O(1).

        Entering leaves every key light (flags clear, views empty) until the
        caller's major rebalancing (:meth:`major`) partitions strictly; leaving
        needs every heavy part and view empty (all slots at eps = 1 after a major
        rebalancing), so the first-order :meth:`apply` runs on the same tables.
        """
        cdef int i
        if self.selfjoin and not on:
            raise ValueError("the self-join state is always partitioned")
        if not on:
            for i in range(3):
                if self.p[i].hkeys or self.v[i].n:
                    raise ValueError("heavy keys or view entries left: eps = 1 and a major rebalancing first")
        self.partitioned = on

    def eps(self, Py_ssize_t slot):
        """The slot's exponent (routing: eps = 0 sends a new key to the heavy part), O(1)."""
        return self.p[slot].eps

    def set_eps(self, Py_ssize_t slot, double eps):
        """Set the slot's exponent; the partition follows at the next major rebalancing, O(1)."""
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"eps must lie in [0, 1], got {eps}")
        self.p[slot].eps = eps

    def cutoffs(self, Py_ssize_t slot):
        """``(strict, up, down)``: the slot's integer degree cutoffs of theta = N^eps, O(1)."""
        return self.p[slot].strict, self.p[slot].up, self.p[slot].down

    def set_cutoffs(self, Py_ssize_t slot, int64_t strict, int64_t up, int64_t down):
        """Set the slot's cutoffs (:func:`ivm.engines.ivm_eps.partition.cutoffs` computes them), O(1)."""
        self.p[slot].strict, self.p[slot].up, self.p[slot].down = strict, up, down

    def threshold_base(self):
        """N of the size invariant ``⌊N/4⌋ ≤ |D| < N`` (Definition 7), O(1)."""
        return self.N

    def set_threshold_base(self, int64_t n):
        """Set N without rebalancing (preprocessing, Appendix A.3), O(1)."""
        if n < 1:
            raise ValueError(f"N must be at least 1, got {n}")
        self.N = n

    def major(self, int64_t n, cutoffs):
        """MajorRebalancing (Figure 4) with the new threshold base ``n``: each slot's ``(strict, up,
        down)`` from ``cutoffs``, strict partitions, every view recomputed; the count is unchanged.
        O(|D|^{1+min(eps,1-eps)}) (Proposition 11)."""
        cdef tk_ctx c
        cdef int i
        if not self.partitioned:
            raise ValueError("the state is not partitioned")
        if n < 1:
            raise ValueError(f"N must be at least 1, got {n}")
        self.version += 1
        self.N = n
        for i, (strict, up, down) in enumerate(cutoffs):
            self.p[i].strict, self.p[i].up, self.p[i].down = strict, up, down
        self._ctx(&c)
        if tk_major(&c) < 0:
            raise MemoryError()

    def apply_partitioned(
        self,
        updates,
        Py_ssize_t start,
        Py_ssize_t occ,
        count,
        Py_ssize_t hot=sys.maxsize,
        Py_ssize_t until=sys.maxsize,
    ):
        """OnUpdate of IVM^eps (Figure 4; Figure 5 for the self-join) for ``updates[start:]`` in order;
        O(N^max(eps,1-eps)) amortized per update (Theorem 3).

        ``occ`` is the first of ``updates[start]``'s slot occurrences still to
        apply (a relation of several atoms feeds its slots in turn).  Minor
        rebalancing runs here; the call returns to the caller, between two slot
        updates, when an event needs it:

        - ``EV_MAJOR``: the size invariant broke after a slot update (``value``:
          the new N; the caller runs :meth:`major` with its cutoffs);
        - ``EV_HIT``: a key of a slot at eps = 1 reached degree ``hot`` (the
          adaptive engine's skew test; ``value``: the degree);
        - ``EV_CHECK``: ``until`` updates were completed (the adaptive engine's
          check for fading skew);
        - ``EV_BLOCKED``: ``updates[next]`` has a multiplicity the state does not
          store (not an int of magnitude at most ``LIMIT``); nothing of it applied;
        - ``EV_DONE``: all applied.

        Returns ``(next update, next occurrence, count, updates completed,
        event, slot, key, value, minor rebalancings, tuples moved, touched,
        |D|)``; ``touched`` says whether any slot changed (the partition is then
        no longer the strict one of the last major rebalancing); |D| counts
        slot 0 alone in the self-join.
        """
        cdef Py_ssize_t stop = len(updates), k = start, e = occ, ne, applied = 0
        cdef tk_acc acc
        cdef tk_ctx c
        cdef object update, relation, row, mo, a, b, key = None
        cdef PyObject *p
        cdef tuple entries
        cdef int64_t m = 0, aid, bid, xid, yid, n = 0, value = 0, ev_x = -1
        cdef int ovf = 0, code, slot, res, event = 0, ev_slot = -1
        cdef bint touched = False
        cdef const tk_adj *r
        cdef dict plan = self.plan
        cdef PyObject **items = NULL
        if not self.partitioned:
            raise ValueError("the state is not partitioned: apply runs the first-order loop")
        self.version += 1
        if PyList_CheckExact(updates):
            items = (<PyListObject *> updates).ob_item
        self._ctx(&c)
        tk_acc_zero(&acc)
        while k < stop:
            if items is not NULL:
                tk_prefetch_input(items, stop, k, &self.ints, self.s, 1 if self.selfjoin else 3)
            update = updates[k]
            if PyTuple_Check(update) and PyTuple_GET_SIZE(update) == 3:
                relation = <object> PyTuple_GET_ITEM(update, 0)
                row = <object> PyTuple_GET_ITEM(update, 1)
                mo = <object> PyTuple_GET_ITEM(update, 2)
            else:
                relation, row, mo = update
            if e == 0:
                if not mo:
                    k += 1
                    continue  # m = 0 is a no-op (digest §8 item 3)
                if PyLong_Check(mo):
                    m = PyLong_AsLongLongAndOverflow(mo, &ovf)
                if not PyLong_Check(mo) or ovf or m > C_LIMIT or m < -C_LIMIT or self.absmax > C_LIMIT:
                    event = 4
                    break
            else:
                m = PyLong_AsLongLong(mo)
            p = PyDict_GetItem(plan, relation)
            if p is NULL:
                raise KeyError(relation)
            entries = <tuple> p
            if PyTuple_Check(row) and PyTuple_GET_SIZE(row) == 2:
                a = <object> PyTuple_GET_ITEM(row, 0)
                b = <object> PyTuple_GET_ITEM(row, 1)
            else:
                a, b = row
            aid = self._find(a)
            if aid < 0:
                aid = self._intern(a)
            bid = self._find(b)  # a == b by value: the id of a
            if bid < 0:
                bid = self._intern(b)
            ne = PyTuple_GET_SIZE(entries)
            while e < ne:
                code = <int> (<object> PyTuple_GET_ITEM(entries, e))
                slot = code >> 1
                if code & 1:
                    xid, yid = bid, aid
                else:
                    xid, yid = aid, bid
                c.nids = <uint32_t> PyList_GET_SIZE(self.values)
                res = tk_on_update(&c, slot, <uint32_t> xid, <uint32_t> yid, m, &acc, &n)
                touched = True
                e += 1
                if res < 0:
                    count = _flush(count, &acc)
                    _raise(res)
                if tk_acc_big(&acc):
                    count = _flush(count, &acc)
                if res == 1:
                    event, ev_slot, ev_x, value = 1, slot, xid, n
                    break
                if hot != sys.maxsize and self.p[slot].eps == 1.0:
                    r = tk_row(&self.s[slot].f, xid)
                    if r is not NULL and <Py_ssize_t> r.n >= hot:
                        event, ev_slot, ev_x, value = 2, slot, xid, r.n
                        break
            if event:
                break
            applied += 1
            e = 0
            k += 1
            if applied >= until:
                event = 3
                break
        count = _flush(count, &acc)
        if ev_x >= 0:
            key = self.values[ev_x]
        if PyList_GET_SIZE(self.values) > 4 * (self.s[0].size + self.s[1].size + self.s[2].size) + 4096:
            self.compact()
        n = self.s[0].size if self.selfjoin else self.s[0].size + self.s[1].size + self.s[2].size
        return k, e, count, applied, event, ev_slot, key, value, c.minors, c.moved, touched, n

    def apply_update(self, Py_ssize_t slot, bint heavy, x, y, m):
        """ApplyUpdate (Figure 3; Figure 5 corrected for the self-join) of ``δK_slot^r(x, y) = m`` on the
        part ``r`` given (heavy or light), without rebalancing: the preprocessing of Appendix A.3 with
        known degrees.  Returns δQ; O(N^max(eps,1-eps)).  An OverflowError when ``|m|`` or a stored
        multiplicity exceeds ``LIMIT``."""
        cdef tk_ctx c
        cdef tk_acc acc
        cdef int64_t xid, yid, mm
        cdef int res
        if not self.partitioned:
            raise ValueError("the state is not partitioned")
        if not 0 <= slot < 3:
            raise IndexError(slot)
        if not m:
            return 0
        mm = int(m)
        if mm > C_LIMIT or mm < -C_LIMIT or self.absmax > C_LIMIT:
            raise OverflowError(f"multiplicity beyond {LIMIT} in the compiled state")
        self.version += 1
        xid = self._find(x)
        if xid < 0:
            xid = self._intern(x)
        yid = self._find(y)
        if yid < 0:
            yid = self._intern(y)
        self._ctx(&c)
        tk_acc_zero(&acc)
        res = tk_papply(&c, <int> slot, <uint32_t> xid, <uint32_t> yid, mm, heavy, &acc)
        if res < -1:
            _raise(res)
        return _flush(0, &acc)

    # -- reading the partitions and views (introspection: O(size of the answer)) --------

    def is_heavy(self, Py_ssize_t slot, x):
        """Whether ``x`` is a heavy key of the slot, O(1)."""
        cdef int64_t i = self._find(x)
        return i >= 0 and tk_heavy(&self.p[slot], <uint32_t> i) and tk_row(&self.s[slot].f, i) is not NULL

    def hsize(self, Py_ssize_t slot):
        """Tuples in the slot's heavy part, O(1)."""
        return self.p[slot].hsize

    def hkeys(self, Py_ssize_t slot):
        """Keys of the slot's heavy part, O(1)."""
        return self.p[slot].hkeys

    def part_keys(self, Py_ssize_t slot, bint heavy):
        """The keys of one part, in id order; O(ids)."""
        cdef tk_index *ix = &self.s[slot].f
        cdef uint32_t j
        return [self.values[j] for j in range(ix.len) if ix.v[j].n and tk_heavy(&self.p[slot], j) == heavy]

    def part_row(self, Py_ssize_t slot, bint heavy, x):
        """``{y: K(x, y)}`` when ``x`` is a key of that part, else None; O(degree)."""
        cdef int64_t i = self._find(x)
        cdef const tk_adj *r = tk_row(&self.s[slot].f, i)
        cdef uint32_t j, y
        if r is NULL or tk_heavy(&self.p[slot], <uint32_t> i) != heavy:
            return None
        out = {}
        for j in range(r.n):
            y = r.mem[j]
            out[self.values[y]] = self._mult(slot, <uint32_t> i, y)
        return out

    cdef int64_t _mult(self, Py_ssize_t slot, uint32_t x, uint32_t y):
        cdef int64_t m = 1
        tk_mget(&self.s[slot].o, tk_pair(x, y), &m)
        return m

    def column_keys(self, Py_ssize_t slot, bint heavy):
        """The ``y`` with a non-empty column ``K^r(·, y)`` in one part, in id order; O(|K| + ids)."""
        cdef tk_index *ix = &self.s[slot].b
        cdef uint32_t j, t
        out = []
        for j in range(ix.len):
            for t in range(ix.v[j].n):
                if tk_heavy(&self.p[slot], ix.v[j].mem[t]) == heavy:
                    out.append(self.values[j])
                    break
        return out

    def part_column(self, Py_ssize_t slot, bint heavy, y):
        """``{x: K(x, y)}`` over the keys ``x`` of that part, None when empty; O(degree)."""
        cdef int64_t i = self._find(y)
        cdef const tk_adj *r = tk_row(&self.s[slot].b, i)
        cdef uint32_t j, x
        out = {}
        if r is NULL:
            return None
        for j in range(r.n):
            x = r.mem[j]
            if tk_heavy(&self.p[slot], x) == heavy:
                out[self.values[x]] = self._mult(slot, x, <uint32_t> i)
        return out or None

    def max_degrees(self, Py_ssize_t slot):
        """``(largest heavy degree, largest light degree)`` of the slot (0 for an empty part), O(ids)."""
        cdef tk_index *ix = &self.s[slot].f
        cdef uint32_t j, hi = 0, lo = 0
        for j in range(ix.len):
            if tk_heavy(&self.p[slot], j):
                hi = max(hi, ix.v[j].n)
            else:
                lo = max(lo, ix.v[j].n)
        return hi, lo

    def view_size(self, Py_ssize_t i):
        """Entries of view ``i``, O(1)."""
        return self.v[i].n

    def view_get(self, Py_ssize_t i, u, w):
        """``V[i](u, w)``, O(1) expected."""
        cdef int64_t a = self._find(u), b = self._find(w), hi
        cdef uint64_t lo
        if a < 0 or b < 0:
            return 0
        tk_vlookup(&self.v[i], tk_pair(<uint32_t> a, <uint32_t> b), &hi, &lo)
        return _int128(hi, lo)

    def view_dict(self, Py_ssize_t i):
        """View ``i`` as ``{u: {w: value}}`` (no zero entries), O(entries + table)."""
        cdef tk_view *v = &self.v[i]
        cdef uint64_t j, key, lo
        cdef int64_t hi
        cdef list values = self.values
        out = {}
        if v.keys is NULL:
            return out
        for j in range(v.mask + 1):
            key = v.keys[j]
            if key == TK_MEMPTY:
                continue
            tk_vslot(v, j, &hi, &lo)
            u = values[<uint32_t> (key >> 32)]
            row = out.get(u)
            if row is None:
                row = out[u] = {}
            row[values[<uint32_t> (key & 0xFFFFFFFF)]] = _int128(hi, lo)
        return out

    # -- triangle listing (IVM^eps Appendix E, Theorem 21) --------------------------------

    def enable_listing(self):
        """Keep the listing's views too: Q^L (the hhh and lll triangles), per slot the groups of
        ``W[i] = K_i^h·K_{i+1}^l`` by ``(x_i, x_{i+2})`` and ``F[i]`` (Figure 12), built from the
        current partitions, O(|D|^{3/2}); every later update maintains them (Figure 13)."""
        cdef tk_ctx c
        if not self.partitioned or self.selfjoin:
            raise ValueError("the listing needs the three partitioned slots of the triangle")
        if self.lst is not NULL:
            return
        self.lst = <tk_list *> calloc(1, sizeof(tk_list))
        if self.lst is NULL:
            raise MemoryError()
        self.lst.pending.valued = 1
        self.version += 1
        self._ctx(&c)
        if tk_lrebuild(&c, self.lst) < 0:
            raise MemoryError()

    def is_listing(self):
        """Whether the state keeps the listing's views, O(1)."""
        return self.lst is not NULL

    def set_tracking(self, bint on):
        """Record each update's answer changes for :meth:`drain` (``.delta``), or stop; O(1)."""
        if self.lst is NULL:
            raise ValueError("not a listing state")
        self.lst.track = on

    def listing_sizes(self):
        """``(|Q^L|, groups of the three W, pending changes)``, O(1)."""
        if self.lst is NULL:
            return 0, 0, 0
        L = self.lst
        return L.listing.n, L.G[0].n + L.G[1].n + L.G[2].n, L.pending.n

    cdef object _triple_value(self, uint32_t u0, uint32_t u1, uint32_t u2):
        """``K_0(u0,u1)·K_1(u1,u2)·K_2(u2,u0)``, a Python int."""
        return (<object> tk_kget(&self.s[0], u0, u1)) * tk_kget(&self.s[1], u1, u2) * tk_kget(&self.s[2], u2, u0)

    def answers(self, positions):
        """Every answer once with its multiplicity, ``((u_p for p in positions), m)``, with constant delay
        (Theorem 21): Q^L's triples, then for each slot the groups of F[i] and their members (values
        from the slots: ``W·K_{i+2}``).  A generator; it raises RuntimeError if the state changes
        while it runs (as iterating a changed dict does)."""
        cdef tk_list *L
        cdef uint64_t j
        cdef uint32_t u0, u1, u2, t, x, z, y
        cdef int64_t hi = 0
        cdef uint64_t lo = 0
        cdef Py_ssize_t p0, p1, p2
        cdef int64_t version = self.version
        cdef int i
        cdef uint32_t g, m
        p0, p1, p2 = positions
        L = self.lst
        if L is NULL:
            raise ValueError("not a listing state")
        j = 0
        while L.listing.k1 is not NULL and j <= L.listing.mask:
            if self.version != version:
                raise RuntimeError("the state changed during enumeration")
            L = self.lst
            if tk_tslot_used(&L.listing, j):
                tk_tsplit(&L.listing, j, &u0, &u1, &u2, &hi, &lo)
                ids = (u0, u1, u2)
                yield (self.values[ids[p0]], self.values[ids[p1]], self.values[ids[p2]]), self._triple_value(u0, u1, u2)
            j += 1
        for i in range(3):
            t = 0
            while True:
                if self.version != version:
                    raise RuntimeError("the state changed during enumeration")
                L = self.lst
                if t >= L.G[i].ntops:
                    break
                g = L.G[i].tops[t]
                x = <uint32_t> (L.G[i].pair[g] >> 32)
                z = <uint32_t> (L.G[i].pair[g] & 0xFFFFFFFF)
                for m in range(L.G[i].mem[g].n):
                    if self.version != version:
                        raise RuntimeError("the state changed during enumeration")
                    L = self.lst
                    y = L.G[i].mem[g].mem[m]
                    if i == 0:
                        u0, u1, u2 = x, y, z
                    elif i == 1:
                        u0, u1, u2 = z, x, y
                    else:
                        u0, u1, u2 = y, z, x
                    ids = (u0, u1, u2)
                    yield (self.values[ids[p0]], self.values[ids[p1]], self.values[ids[p2]]), self._triple_value(u0, u1, u2)
                t += 1

    cdef list _pending_ids(self):
        cdef tk_tmap *T = &self.lst.pending
        cdef uint64_t j
        cdef uint32_t u0, u1, u2
        cdef int64_t hi = 0
        cdef uint64_t lo = 0
        out = []
        if T.k1 is NULL:
            return out
        for j in range(T.mask + 1):
            if tk_tslot_used(T, j):
                tk_tsplit(T, j, &u0, &u1, &u2, &hi, &lo)
                out.append(((u0, u1, u2), _int128(hi, lo)))
        return out

    def drain(self, positions):
        """The net answer changes recorded since the previous drain, ``[(answer, change)]`` (answers as in
        :meth:`answers`), and the record cleared; O(changes)."""
        cdef Py_ssize_t p0, p1, p2
        if self.lst is NULL:
            raise ValueError("not a listing state")
        p0, p1, p2 = positions
        out = []
        for ids, d in self._pending_ids():
            out.append(((self.values[ids[p0]], self.values[ids[p1]], self.values[ids[p2]]), d))
        tk_tfree(&self.lst.pending)
        self.version += 1
        return out

    def listing_dict(self):
        """Q^L as ``{(u0, u1, u2): K_0·K_1·K_2}``, O(|Q^L| + table)."""
        cdef tk_tmap *T = &self.lst.listing
        cdef uint64_t j
        cdef uint32_t u0, u1, u2
        cdef int64_t hi = 0
        cdef uint64_t lo = 0
        cdef list values = self.values
        out = {}
        if T.k1 is NULL:
            return out
        for j in range(T.mask + 1):
            if tk_tslot_used(T, j):
                tk_tsplit(T, j, &u0, &u1, &u2, &hi, &lo)
                out[(values[u0], values[u1], values[u2])] = self._triple_value(u0, u1, u2)
        return out

    def groups_dict(self, Py_ssize_t i):
        """The groups of W[i] as ``{(x_i, x_{i+2}): {x_{i+1}: K_i(x_i,x_{i+1})·K_{i+1}(x_{i+1},x_{i+2})}}``,
        O(members + groups)."""
        cdef tk_groups *G = &self.lst.G[i]
        cdef uint32_t g, t, x, z, y
        cdef int j = 0 if i == 2 else i + 1
        out = {}
        for g in range(G.used):
            if not G.mem[g].n:
                continue
            x = <uint32_t> (G.pair[g] >> 32)
            z = <uint32_t> (G.pair[g] & 0xFFFFFFFF)
            row = out[(self.values[x], self.values[z])] = {}
            for t in range(G.mem[g].n):
                y = G.mem[g].mem[t]
                row[self.values[y]] = (<object> tk_kget(&self.s[i], x, y)) * tk_kget(&self.s[j], y, z)
        return out

    def tops_set(self, Py_ssize_t i):
        """F[i] as the set of its pairs ``(x_i, x_{i+2})``, O(|F[i]|)."""
        cdef tk_groups *G = &self.lst.G[i]
        cdef uint32_t t, g
        out = set()
        for t in range(G.ntops):
            g = G.tops[t]
            out.add((self.values[<uint32_t> (G.pair[g] >> 32)], self.values[<uint32_t> (G.pair[g] & 0xFFFFFFFF)]))
        return out
