# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compact first-order state for the triangle count (IVM^eps App. A.1, §1.1), compiled.

The three slots ``K_0(u0,u1), K_1(u1,u2), K_2(u2,u0)`` of the triangle (the
partition at eps = 1: every key light) are kept in C, not as Python dicts of
sets:

- every value of the stream gets a dense ``uint32`` id: a Python dict
  value -> id (authoritative: values equal in Python, such as ``1``, ``1.0``
  and ``True``, share one id), a list id -> value, and for exact ints a C
  ``int64 -> id`` map in front of the dict (one probe, no Python object read);
- per slot and direction, an array indexed by id of key sets: for a key ``x``
  the ids ``{y : K(x,y) ≠ 0}`` in a dense array (scans have no empty slots),
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
(:mod:`ivm.engines.first_order`).  Space is O(|D|): ids no longer stored are
renumbered away once they outnumber ``4|D| + 4096`` (:meth:`TriangleFirstOrder.compact`).
"""

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.ref cimport PyObject
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

from array import array
import sys

cdef extern from "Python.h":
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
       bs: a bitset of the ids below 64*nw (NULL unless the key is dense), probed branch-free. */
    typedef struct { uint32_t *mem; uint64_t *bs; uint32_t n; uint32_t nw; uint8_t bits; uint8_t small; } tk_adj;
    /* one direction of one slot: tables indexed by id; keys = number of ids with a non-empty table */
    typedef struct { tk_adj *v; uint32_t len; int64_t keys; } tk_index;
    /* the multiplicities other than 1: (x << 32 | y) -> m, linear probing */
    typedef struct { uint64_t *keys; int64_t *vals; uint64_t mask; uint64_t n; } tk_mmap;
    typedef struct { tk_index f, b; tk_mmap o; int64_t size; } tk_slot;
    typedef struct { __int128 v; } tk_acc;

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
        if (bits == 0) {
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
        free(a->mem);
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
                a->small = old ? 2 * old : 2;
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
            free(a->mem);
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
        tk_adj *v = (tk_adj *)realloc(ix->v, len * sizeof(tk_adj));
        if (v == NULL) return -1;
        memset(v + ix->len, 0, (len - ix->len) * sizeof(tk_adj));
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
            free(ix->v[j].mem);
            free(ix->v[j].bs);
        }
        free(ix->v);
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
            tk_ient *t = (tk_ient *)calloc(cap, sizeof(tk_ient));
            if (t == NULL) return -1;
            if (m->t != NULL) {
                for (j = 0; j <= m->mask; j++) {
                    if (m->t[j].id1) {
                        uint64_t i = tk_mix((uint64_t)m->t[j].key) & (cap - 1);
                        while (t[i].id1) i = (i + 1) & (cap - 1);
                        t[i] = m->t[j];
                    }
                }
                free(m->t);
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
        free(m->t);
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

    /* m · Σ_z K_j(y,z)·K_k(z,x) added to acc (slot i's update of (x, y); ids < 0: unknown value) */
    static void tk_delta(tk_slot *S, int i, int64_t x, int64_t y, int64_t m, tk_acc *acc) {
        int j = i == 2 ? 0 : i + 1, k = i == 0 ? 2 : i - 1;
        const tk_adj *out = tk_row(&S[j].f, y), *into = tk_row(&S[k].b, x);
        if (out == NULL || into == NULL) return;
        const tk_mmap *oj = &S[j].o, *ok = &S[k].o;
        int out_small = out->n <= into->n;
        const tk_adj *small = out_small ? out : into, *big = out_small ? into : out;
        if (oj->n == 0 && ok->n == 0) {
            acc->v += (__int128)m * tk_common(small, big);
            return;
        }
        /* weighted: the smaller's ids, multiplicities from the maps (default 1) */
        __int128 d = 0;
        uint32_t t;
        for (t = 0; t < small->n; t++) {
            uint32_t z = small->mem[t];
            if (!tk_has(big, z)) continue;
            int64_t a = 1, b = 1;
            tk_mget(oj, tk_pair((uint32_t)y, z), &a);
            tk_mget(ok, tk_pair(z, (uint32_t)x), &b);
            d += (__int128)a * b;
        }
        acc->v += (__int128)m * d;
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
            if (a->mem) n += a->bits ? (size_t)6 << a->bits : (size_t)4 * a->small;
            n += (size_t)8 * a->nw;
        }
        return n;
    }
    static size_t tk_mmap_bytes(const tk_mmap *o) { return o->keys ? (size_t)16 * (o->mask + 1) : 0; }
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
    void tk_delta(tk_slot *S, int i, int64_t x, int64_t y, int64_t m, tk_acc *acc)
    int tk_change(tk_slot *s, uint32_t x, uint32_t y, int64_t m, int64_t *absmax, uint32_t nids)
    void tk_acc_zero(tk_acc *a)
    int tk_acc_nonzero(const tk_acc *a)
    int tk_acc_big(const tk_acc *a)
    int64_t tk_acc_hi(const tk_acc *a)
    uint64_t tk_acc_lo(const tk_acc *a)
    size_t tk_index_bytes(const tk_index *ix)
    size_t tk_mmap_bytes(const tk_mmap *o)


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
    return count + (hi << 64) + lo


def _rebuild(occurrences, values, slots):
    """Unpickle a :class:`TriangleFirstOrder` (see its ``__reduce__``); O(|D|)."""
    state = TriangleFirstOrder(occurrences)
    state._load(values, slots)
    return state


cdef class TriangleFirstOrder:
    """The three key-set slots of first-order triangle IVM in compact C tables (module docstring).

    ``occurrences`` maps each relation to its ``[(slot, flipped)]`` in cycle
    order (a relation of a self-join feeds several slots, in turn: the
    telescoping delta rule of :mod:`ivm.engines.first_order`).  Space is
    O(|D|): per stored tuple and direction 4 bytes in the array, up to 8 more
    in the position table and, for dense keys, a bitset of at most 4 words per
    id held; 32 bytes per id, slot and direction; 16 per entry of the int map
    and per multiplicity other than 1.
    """

    cdef tk_slot s[3]
    cdef tk_imap ints
    cdef dict ids
    cdef list values
    cdef dict plan
    cdef object occurrences
    cdef int64_t absmax

    def __cinit__(self, occurrences):
        cdef int i
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
        self.absmax = 1
        self.occurrences = {r: [(int(i), bool(f)) for i, f in occs] for r, occs in occurrences.items()}
        self.plan = {r: tuple(2 * int(i) + bool(f) for i, f in occs) for r, occs in occurrences.items()}

    def __dealloc__(self):
        cdef int i
        for i in range(3):
            tk_index_free(&self.s[i].f)
            tk_index_free(&self.s[i].b)
            tk_mfree(&self.s[i].o)
        tk_ifree(&self.ints)

    # -- ids ---------------------------------------------------------------------------

    cdef inline int64_t _find(self, object v) except -2:
        """The id of ``v`` or -1: exact ints in the C map first, then the dict (equal values of
        other types, e.g. 1.0 for 1, share the id, as in a Python set)."""
        cdef PyObject *p
        cdef int ovf = 0
        cdef long long k
        cdef int64_t i
        if PyLong_CheckExact(v):
            k = PyLong_AsLongLongAndOverflow(v, &ovf)
            if not ovf:
                i = tk_iget(&self.ints, k)
                if i >= 0:
                    return i
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
                raise MemoryError()
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
    ):
        """First-order IVM (IVM^eps §1.1) of ``updates[start:]`` in order; O(min(deg)) per update.

        The same contract as :func:`ivm.engines.first_order.apply_first_order_python`
        (stops after the update that makes |D| reach ``hi`` or fall below ``lo``
        or a key reach degree ``hot``), returning ``(index of the next update,
        count, non-zero updates applied, (slot, key, degree) or None,
        blocked)``; ``blocked`` is True when ``updates[next]`` was not applied
        because a multiplicity is not an int of magnitude at most ``LIMIT``
        (nothing of it was applied: the caller continues on Python slots).
        """
        cdef Py_ssize_t stop = len(updates), k, nxt, applied = 0, size = 0, ne, e
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
        tk_acc_zero(&acc)
        size = S[0].size + S[1].size + S[2].size
        nxt = stop
        for k in range(start, stop):
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
            for e in range(ne):
                code = <int> (<object> PyTuple_GET_ITEM(entries, e))
                slot = code >> 1
                if code & 1:
                    xid, yid = bid, aid
                else:
                    xid, yid = aid, bid
                # δQ = m · Σ_z K_j(y, z) · K_k(z, x)
                tk_delta(S, slot, xid, yid, m, &acc)
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
            if halt:
                nxt = k + 1
                break
        count = _flush(count, &acc)
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
        cdef tk_imap itmp
        cdef int i
        for i in range(3):
            tmp = self.s[i]
            self.s[i] = other.s[i]
            other.s[i] = tmp
        self.ids, other.ids = other.ids, self.ids
        itmp = self.ints
        self.ints = other.ints
        other.ints = itmp
        self.values, other.values = other.values, self.values
        self.absmax = other.absmax

    def add(self, Py_ssize_t slot, x, y, m):
        """``K_slot(x, y) += m`` without counting (loading a state); O(1) amortized.

        Returns the change in distinct tuples (+1, 0 or -1); an OverflowError when
        ``|m|`` or the stored multiplicity would exceed ``LIMIT``.
        """
        cdef int64_t xid, yid, mm
        cdef int res
        if not 0 <= slot < 3:
            raise IndexError(slot)
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
        """Pickle as the used values and, per slot, its ``(x, y)`` ids and multiplicities (O(|D|))."""
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
        return _rebuild, (self.occurrences, values, slots)

    def _load(self, values, slots):
        cdef int i
        cdef Py_ssize_t t
        cdef int res
        cdef int64_t m
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
