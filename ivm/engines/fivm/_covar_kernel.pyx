# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A batch's covariance delta up a leaf-to-root path in C: lift, group, store, product, marginalize.

F-IVM's delta rule (Fig. 7) for float payloads of the covariance ring sized per view (§6.2):
at each view V on the path of a changed relation, ``δV = ⊕_X (δV_j ⊗ ⊗_{i≠j} V_i ⊗ g_X)``.
:class:`Path` runs it for a whole batch (§4's batch updates) when every plan on the path is
*direct* (each sibling found by primary key, a projection of the child's key) and every stored
view on it is keyed by at most one variable whose values are int64 codes (a
:class:`~ivm.engines.fivm.columnar.ColumnStore` in int mode): per delta row one hash probe per
sibling, the product over disjoint supports by blocks, and the sum per output key in a hash
table, then ``V += δV`` in the view's own arrays.  The Python and numpy paths
(:mod:`ivm.engines.fivm.columnar`) compute the same sums and are its references.

Payloads are rows ``(c, s, Q)`` of ``1 + k + k(k+1)/2`` doubles: the count, ``s`` over the view's
support (children's blocks in order, then the view's lifted variables) and the packed upper
triangle of the symmetric ``Q``.  The product of factors ``f`` (the child's delta, the siblings,
the lifting ``g_X = (1, x, x xᵀ)``) over disjoint supports is, division-free, with
``w_f = Π_{g≠f} c_g`` and ``K_fg = Π_{h≠f,g} c_h``::

    c = Π c_f,   s_f = w_f s_f,   Q_ff = w_f Q_f,   Q_fg = K_fg s_f s_gᵀ,

formed directly in the packed triangle (the lifting's own block is ``w x xᵀ``); at the view over a
leaf alone (no sibling, every support variable lifted there) the product is just ``m · (1, x, x xᵀ)``,
added by a loop built for AVX2/FMA (``ivm_lift``).  Rows of a batch that repeat the previous row's
output key (a batch in key order) reuse its group without a hash probe.  Cost per delta row
and view: #siblings probes and O(k²) multiply-adds in tight loops (contiguous runs of the
triangle), O(F²) scalar work for F factors; per view O(#groups) store probes.  At a view with one output key (the root of a Boolean
query) the cross blocks are summed as runs ``(Ŝ_i / P) Ŝ_j`` over the rows, in a loop built for AVX2 and
FMA when the CPU has them (no BLAS call, so no thread of a BLAS library competes with the stream).  A group whose
delta is exactly 0 is dropped; a stored payload whose count is 0 and whose entries are within
1e-7 of 0 is deleted (§9 item 1), as the numpy path does.
"""

from libc.math cimport fabs, fma, isfinite, ldexp
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

import numpy as np

from ivm.engines.fivm._int_index cimport Int64Index
from ivm.rings._exact_kernel cimport SCRATCH, _compress, _two_sum_grow


cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define IVM_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 1)
    #else
    #define IVM_PREFETCH(p) ((void)0)
    #endif
    """
    void IVM_PREFETCH(const void* p) noexcept nogil


cdef extern from *:
    """
    /* G's triangle += Σ_r Sc_r[i] · Sh_r[start_i ..] for every support row i (the runs of the cross
       blocks of a level with one output key): the same loop built for AVX2 + FMA where the compiler
       and the CPU have them (chosen once at run time), plain otherwise. */
    #define IVM_RUNS_BODY                                                              \
        for (Py_ssize_t r = 0; r < nm; r++) {                                          \
            const double* sh = Sh + r * k;                                            \
            const double* sc = Sc + r * k;                                             \
            for (Py_ssize_t i = 0; i < k; i++) {                                       \
                const double x = sc[i];                                                \
                double* dst = G + off[i];                                              \
                const double* src = sh + start[i];                                     \
                const Py_ssize_t len = k - start[i];                                   \
                for (Py_ssize_t j = 0; j < len; j++) dst[j] += x * src[j];             \
            }                                                                          \
        }
    static void ivm_runs_plain(double* G, const double* Sh, const double* Sc, Py_ssize_t nm, Py_ssize_t k,
                               const Py_ssize_t* start, const Py_ssize_t* off) { IVM_RUNS_BODY }
    #if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    __attribute__((target("avx2,fma")))
    static void ivm_runs_avx2(double* G, const double* Sh, const double* Sc, Py_ssize_t nm, Py_ssize_t k,
                              const Py_ssize_t* start, const Py_ssize_t* off) { IVM_RUNS_BODY }
    static int ivm_has_avx2 = -1;
    static void ivm_runs(double* G, const double* Sh, const double* Sc, Py_ssize_t nm, Py_ssize_t k,
                         const Py_ssize_t* start, const Py_ssize_t* off) {
        if (ivm_has_avx2 < 0) {
            __builtin_cpu_init();
            ivm_has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        }
        if (ivm_has_avx2) ivm_runs_avx2(G, Sh, Sc, nm, k, start, off);
        else ivm_runs_plain(G, Sh, Sc, nm, k, start, off);
    }
    #else
    #define ivm_runs ivm_runs_plain
    #endif
    """
    void ivm_runs(double* G, const double* Sh, const double* Sc, Py_ssize_t nm, Py_ssize_t k,
                  const Py_ssize_t* start, const Py_ssize_t* off) noexcept nogil


cdef extern from *:
    """
    /* G += m · (1, x, x xᵀ) for one row of k lifted values x (the packed upper triangle row by row):
       the view over a leaf alone.  Built for AVX2 + FMA where the compiler and the CPU have them; G and x
       never overlap (x is the batch's lifted values, G the group's payload), so no aliasing checks. */
    #define IVM_LIFT_BODY                                                              \
        double* Q = G + 1 + k;                                                         \
        G[0] += m;                                                                     \
        for (Py_ssize_t a = 0; a < k; a++) {                                           \
            const double y = m * x[a];                                                 \
            const Py_ssize_t len = k - a;                                              \
            const double* src = x + a;                                                 \
            G[1 + a] += y;                                                             \
            for (Py_ssize_t j = 0; j < len; j++) Q[j] += y * src[j];                   \
            Q += len;                                                                  \
        }
    static void ivm_lift_plain(double* __restrict G, const double* __restrict x, double m, Py_ssize_t k) { IVM_LIFT_BODY }
    #if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    #include <immintrin.h>
    /* four entries of a triangle row per fused multiply-add; the rows are short (k - a entries), so the
       loop is written out instead of left to the vectorizer (whose set-up per row cost more than it saved) */
    __attribute__((target("avx2,fma")))
    static void ivm_lift_avx2(double* __restrict G, const double* __restrict x, double m, Py_ssize_t k) {
        double* Q = G + 1 + k;
        G[0] += m;
        for (Py_ssize_t a = 0; a < k; a++) {
            const double y = m * x[a];
            const Py_ssize_t len = k - a;
            const double* src = x + a;
            const __m256d vy = _mm256_set1_pd(y);
            Py_ssize_t j = 0;
            G[1 + a] += y;
            for (; j + 4 <= len; j += 4)
                _mm256_storeu_pd(Q + j, _mm256_fmadd_pd(vy, _mm256_loadu_pd(src + j), _mm256_loadu_pd(Q + j)));
            for (; j < len; j++) Q[j] += y * src[j];
            Q += len;
        }
    }
    static void ivm_lift(double* G, const double* x, double m, Py_ssize_t k) {
        if (ivm_has_avx2 < 0) {
            __builtin_cpu_init();
            ivm_has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        }
        if (ivm_has_avx2) ivm_lift_avx2(G, x, m, k);
        else ivm_lift_plain(G, x, m, k);
    }
    #else
    #define ivm_lift ivm_lift_plain
    #endif
    """
    void ivm_lift(double* G, const double* x, double m, Py_ssize_t k) noexcept nogil


cdef enum:
    MAX_FACTORS = 64
    AHEAD = 8  # rows ahead whose index slots and payload rows are prefetched (random accesses overlap)

cdef double FLOAT_ZERO = 1e-7


cdef inline uint64_t mix(uint64_t x) noexcept nogil:
    x ^= x >> 30
    x *= <uint64_t>0xbf58476d1ce4e5b9
    x ^= x >> 27
    x *= <uint64_t>0x94d049bb133111eb
    x ^= x >> 31
    return x


cdef inline int64_t probe(Int64Index index, int64_t key) noexcept:
    """``index``'s row of ``key`` (-1 if absent): :meth:`Int64Index._get` inlined (the key itself in a
    direct index; the same hash and probing in a hash table)."""
    if index.dense != NULL:
        if <uint64_t>key < <uint64_t>index.dense_cap:
            return index.dense[key] - 1
        return -1
    cdef uint64_t i = mix(<uint64_t>key) & index.mask
    cdef const int64_t* slots = index.slots
    while slots[2 * i + 1] != 0:  # (a slot keeps row + 1; 0: empty)
        if slots[2 * i] == key:
            return slots[2 * i + 1] - 1
        i = (i + 1) & index.mask
    return -1


cdef inline void prefetch_slot(Int64Index index, int64_t key) noexcept:
    if index.dense != NULL:
        if <uint64_t>key < <uint64_t>index.dense_cap:
            IVM_PREFETCH(&index.dense[key])
        return
    IVM_PREFETCH(&index.slots[2 * (mix(<uint64_t>key) & index.mask)])


cdef inline void prefetch_row(const double* row, Py_ssize_t W) noexcept:
    """Every cache line of a payload row of ``W`` doubles."""
    cdef Py_ssize_t w = 0
    while w < W:
        IVM_PREFETCH(row + w)
        w += 8
    IVM_PREFETCH(row + W - 1)


cdef inline Py_ssize_t row_start(Py_ssize_t k, Py_ssize_t i) noexcept nogil:
    """Position of ``Q[i, i]`` in the packed upper triangle of a ``k × k`` matrix."""
    return i * k - i * (i - 1) // 2


cdef class Level:
    """One view of a path: its direct plan compiled (F-IVM Fig. 7), its store (or ``None``) and its siblings.

    ``sib_src[s]`` / ``out_src`` say which of the child's codes keys sibling ``s`` / the view
    (-1: the empty key, code 0); ``lift_src`` which of the child's values the view lifts.  Factors in
    plan order: the child's delta, the siblings, the lifting; ``blocks[f] = (offset, size)`` in the
    view's support.
    """

    cdef public object store
    cdef public list siblings
    cdef public bint arity_out
    cdef public Py_ssize_t out_val  # which of the child's values is the view key's value (-1: its code)
    cdef Py_ssize_t nsib, out_src, nlift, k, T, W, child_k, nf, nsized
    cdef bint leaf_lift  # the view over a leaf alone: its delta is m · g_X, every support variable lifted here
    cdef Py_ssize_t sib_src[MAX_FACTORS]
    cdef Py_ssize_t lift_src[MAX_FACTORS]
    cdef Py_ssize_t f_off[MAX_FACTORS]
    cdef Py_ssize_t f_size[MAX_FACTORS]
    cdef Py_ssize_t sized[MAX_FACTORS]  # factors of non-zero size, by offset
    # per support row i: where its run of products starts (the column after a stored factor's own
    # block, or i itself in the lifting's block) and that entry's place in the packed triangle
    cdef Py_ssize_t* run_start
    cdef Py_ssize_t* run_off

    def __cinit__(self, *args, **kwargs):
        self.run_start = self.run_off = NULL

    def __dealloc__(self):
        free(self.run_start)
        free(self.run_off)

    def __init__(self, store, list siblings, sib_src, Py_ssize_t out_src, lift_src, Py_ssize_t k,
                 Py_ssize_t child_k, blocks, bint arity_out, Py_ssize_t out_val=-1):
        cdef Py_ssize_t i, f
        self.out_val = out_val
        self.store = store
        self.siblings = siblings
        self.nsib = len(siblings)
        self.nlift = len(lift_src)
        self.nf = len(blocks)
        if self.nsib != len(sib_src) or self.nf != 1 + self.nsib + (1 if self.nlift else 0) or self.nf > MAX_FACTORS:
            raise ValueError("a level's factors do not match its siblings and liftings")
        self.out_src = out_src
        self.arity_out = arity_out
        self.k = k
        self.T = k * (k + 1) // 2
        self.W = 1 + k + self.T
        self.child_k = child_k
        for i in range(self.nsib):
            self.sib_src[i] = sib_src[i]
        for i in range(self.nlift):
            self.lift_src[i] = lift_src[i]
        for f in range(self.nf):
            self.f_off[f] = blocks[f][0]
            self.f_size[f] = blocks[f][1]
        order = sorted((f for f in range(self.nf) if blocks[f][1]), key=lambda f: blocks[f][0])
        self.nsized = len(order)
        for i in range(self.nsized):
            self.sized[i] = order[i]
        if blocks[0][1] != child_k or (self.nlift and blocks[self.nf - 1][1] != self.nlift):
            raise ValueError("a level's blocks do not match the child's support and the liftings")
        self.leaf_lift = (
            self.nsib == 0 and child_k == 0 and self.nlift == k and k > 0 and self.f_off[self.nf - 1] == 0
        )
        self.run_start = <Py_ssize_t*> malloc((k + 1) * sizeof(Py_ssize_t))
        self.run_off = <Py_ssize_t*> malloc((k + 1) * sizeof(Py_ssize_t))
        if self.run_start == NULL or self.run_off == NULL:
            raise MemoryError()
        cdef Py_ssize_t a, o, kf, row, start
        for i in range(self.nsized):
            f = self.sized[i]
            o = self.f_off[f]
            kf = self.f_size[f]
            for a in range(kf):
                row = o + a
                start = o + kf if f <= self.nsib else row
                self.run_start[row] = start
                self.run_off[row] = 1 + k + row_start(k, row) + (start - row)

    @property
    def width(self) -> int:
        return self.W


cdef void accumulate(Level L, double* G, const double* child, const double** sib, const double* lift,
                     double* Shat) noexcept:
    """``G += δV_j ⊗ ⊗ V_i ⊗ g_X`` for one delta row: the block product (module docstring), in place.

    With ``P = Π c_f ≠ 0`` (float payloads; counts are integers, so ``w_f = P / c_f`` is exact) the
    off-diagonal blocks of a row ``i`` of the triangle are one contiguous run, ``(Ŝ_i / P) Ŝ_j`` for
    ``Ŝ = [w_f s_f]_f`` (as :func:`~ivm.engines.fivm.columnar._float_product`); a stored factor's own
    block is ``w_f Q_f`` and the lifting's is ``Ŝ_i Ŝ_j / P = w x_i x_j``.  With ``P = 0`` the
    division-free rule, block by block.  ``Shat``: scratch of ``k`` doubles.
    """
    cdef double c[MAX_FACTORS]
    cdef const double* s[MAX_FACTORS]
    cdef const double* q[MAX_FACTORS]
    cdef double pre[MAX_FACTORS + 1]
    cdef double suf[MAX_FACTORS + 1]
    cdef double u = 1.0, wi, coef, x, P, invP
    cdef Py_ssize_t f, i, j, a, b, m = L.nsized, k = L.k, o, kf, og, kg, S0 = 1, Q0 = 1 + L.k, end
    cdef double* dst
    cdef const double* src
    cdef const double* si
    cdef const double* sj
    if L.leaf_lift:  # δV = m · (1, x, x xᵀ) over the lifted values alone: one row of the triangle per x_a
        if child[0] != 0.0:
            ivm_lift(G, lift, child[0], k)
        return
    # the factors' counts, vectors and packed matrices
    c[0] = child[0]
    s[0] = child + 1
    q[0] = child + 1 + L.child_k
    for f in range(L.nsib):  # a sibling's block size is its support size
        c[1 + f] = sib[f][0]
        s[1 + f] = sib[f] + 1
        q[1 + f] = sib[f] + 1 + L.f_size[1 + f]
    if L.nlift:
        f = L.nf - 1
        c[f] = 1.0
        s[f] = lift
        q[f] = NULL
    # u: the counts of factors without support; pre/suf: prefix and suffix products of the others
    for f in range(L.nf):
        if L.f_size[f] == 0:
            u *= c[f]
    pre[0] = u
    for i in range(m):
        pre[i + 1] = pre[i] * c[L.sized[i]]
    P = pre[m]
    G[0] += P
    if P != 0.0:
        invP = 1.0 / P
        for i in range(m):
            f = L.sized[i]
            o = L.f_off[f]
            wi = P / c[f]
            si = s[f]
            for a in range(L.f_size[f]):
                Shat[o + a] = wi * si[a]
                G[S0 + o + a] += Shat[o + a]
        for i in range(m):
            f = L.sized[i]
            o = L.f_off[f]
            kf = L.f_size[f]
            end = o + kf
            if q[f] != NULL:  # a stored factor: its own block w_f Q_f, then the run of later blocks
                wi = P / c[f]
                for a in range(kf):
                    dst = G + Q0 + row_start(k, o + a)
                    src = q[f] + row_start(kf, a)
                    for b in range(kf - a):
                        dst[b] += wi * src[b]
                    x = Shat[o + a] * invP
                    dst = dst + (end - o - a)
                    for j in range(k - end):
                        dst[j] += x * Shat[end + j]
            else:  # the lifting: its own block and the later ones in one run
                for a in range(kf):
                    x = Shat[o + a] * invP
                    dst = G + Q0 + row_start(k, o + a)
                    for j in range(k - o - a):
                        dst[j] += x * Shat[o + a + j]
        return
    suf[m] = 1.0
    for i in range(m - 1, -1, -1):
        suf[i] = c[L.sized[i]] * suf[i + 1]
    for i in range(m):
        f = L.sized[i]
        o = L.f_off[f]
        kf = L.f_size[f]
        wi = pre[i] * suf[i + 1]
        si = s[f]
        for a in range(kf):
            G[S0 + o + a] += wi * si[a]
        if q[f] != NULL:  # a stored factor's own block: w_f Q_f, row by row of the triangles
            for a in range(kf):
                dst = G + Q0 + row_start(k, o + a)
                src = q[f] + row_start(kf, a)
                for b in range(kf - a):
                    dst[b] += wi * src[b]
        else:  # the lifting's own block: w x xᵀ
            for a in range(kf):
                x = wi * si[a]
                dst = G + Q0 + row_start(k, o + a)
                for b in range(kf - a):
                    dst[b] += x * si[a + b]
    for i in range(m):
        f = L.sized[i]
        o = L.f_off[f]
        kf = L.f_size[f]
        si = s[f]
        coef = pre[i]  # K_fg = pre_i · Π_{i<h<j} c_h · suf_{j+1}
        for j in range(i + 1, m):
            og = L.f_off[L.sized[j]]
            kg = L.f_size[L.sized[j]]
            sj = s[L.sized[j]]
            wi = coef * suf[j + 1]
            for a in range(kf):
                x = wi * si[a]
                dst = G + Q0 + row_start(k, o + a) + (og - o - a)
                for b in range(kg):
                    dst[b] += x * sj[b]
            coef *= c[L.sized[j]]


cdef bint split_row(Level L, double* G, const double* child, const double** sib, const double* lift,
                    double* Shat, double* scaled) noexcept:
    """:func:`accumulate` for a level with one output key, leaving the off-diagonal blocks to :c:func:`ivm_runs`.

    When ``P ≠ 0``: adds ``c``, ``s`` and the stored factors' own blocks ``w_f Q_f`` to ``G`` and writes
    this row's ``Ŝ`` and ``Ŝ / P`` (their products ``(Ŝ_i / P) Ŝ_j``, summed over the rows, are the other
    blocks, and the lifting's own block ``w x_i x_j``); returns True.  Otherwise adds the whole product (division-free) and returns
    False.
    """
    cdef double c[MAX_FACTORS]
    cdef double u = 1.0, wi, P, invP
    cdef Py_ssize_t f, i, a, b, m = L.nsized, k = L.k, o, kf, Q0 = 1 + L.k
    cdef double* dst
    cdef const double* src
    cdef const double* si
    c[0] = child[0]
    for f in range(L.nsib):
        c[1 + f] = sib[f][0]
    if L.nlift:
        c[L.nf - 1] = 1.0
    for f in range(L.nf):
        u *= c[f]
    P = u
    if P == 0.0:
        accumulate(L, G, child, sib, lift, Shat)
        return False
    G[0] += P
    invP = 1.0 / P
    for i in range(m):
        f = L.sized[i]
        o = L.f_off[f]
        kf = L.f_size[f]
        wi = P / c[f]
        if f == 0:
            si = child + 1
        elif f <= L.nsib:
            si = sib[f - 1] + 1
        else:
            si = lift
        for a in range(kf):
            Shat[o + a] = wi * si[a]
            scaled[o + a] = Shat[o + a] * invP
            G[1 + o + a] += Shat[o + a]
        if f <= L.nsib:  # a stored factor (the child's delta or a sibling): its own block w_f Q_f
            src = si + kf
            for a in range(kf):
                dst = G + Q0 + row_start(k, o + a)
                for b in range(kf - a):
                    dst[b] += wi * src[b]
                src += kf - a
    return True


cdef bint exactly_zero(const double* row, Py_ssize_t W) noexcept nogil:
    cdef Py_ssize_t w
    for w in range(W):
        if row[w] != 0.0:
            return False
    return True


cdef bint near_zero(const double* row, Py_ssize_t W, bint tolerance) noexcept nogil:
    """A stored payload is 0: count 0 and every entry 0 (within 1e-7 for float payloads, §9 item 1)."""
    cdef Py_ssize_t w
    if row[0] != 0.0:
        return False
    for w in range(1, W):
        if tolerance:
            if row[w] > FLOAT_ZERO or row[w] < -FLOAT_ZERO:
                return False
        elif row[w] != 0.0:
            return False
    return True


cdef Py_ssize_t store_add(object store, const int64_t* codes, double* G, Py_ssize_t ng, Py_ssize_t W,
                          int64_t* rows) except -1:
    """``V += δV`` for ``ng`` distinct codes: new keys at free rows (latest freed first) or at the top,
    zero payloads deleted.  Two passes: every code's row (probes prefetched ahead; the arrays grown
    once, by :meth:`ColumnStore.reserve`, if the new keys need it), then the additions (rows
    prefetched ahead).  ``rows``: scratch of ``ng``.  Returns the keys deleted."""
    cdef Int64Index index = store.codes
    if index is None:
        raise ValueError("the compiled kernel needs a store in int mode")
    cdef Py_ssize_t nfree = store.nfree, top = store.top, g, w, deleted = 0, fresh = 0
    cdef int64_t r
    cdef bint tolerance = store.tolerance
    cdef double* row
    cdef const double* d
    for g in range(ng):
        if g + AHEAD < ng:
            prefetch_slot(index, codes[g + AHEAD])
        r = probe(index, codes[g])
        rows[g] = r
        if r < 0:
            fresh += 1
    if fresh > nfree:
        store.reserve(fresh - nfree)  # room at the top for the new keys that free rows do not take
    if store.free.shape[0] < nfree + ng:
        store.reserve_free(ng)  # room on the free stack for every key that may go
    cdef double[:, ::1] A = store.A
    cdef int64_t[::1] keycode = store.keycode
    cdef int64_t[::1] free_rows = store.free
    if A.shape[1] != W or A.shape[0] < top + max(fresh - nfree, 0) or free_rows.shape[0] < nfree + ng:
        raise ValueError("the store has no room for this delta")
    if fresh:
        index._reserve(fresh)
        for g in range(ng):
            if rows[g] < 0:
                if nfree > 0:
                    nfree -= 1
                    r = free_rows[nfree]
                else:
                    r = top
                    top += 1
                index._put(codes[g], r)
                keycode[r] = codes[g]
                rows[g] = r
    for g in range(ng):
        if g + AHEAD < ng:
            prefetch_row(&A[rows[g + AHEAD], 0], W)
        r = rows[g]
        row = &A[r, 0]
        d = G + g * W
        for w in range(W):
            row[w] += d[w]
        if row[0] == 0.0 and near_zero(row, W, tolerance):
            index._delete(codes[g])
            memset(row, 0, W * sizeof(double))
            free_rows[nfree] = r
            nfree += 1
            deleted += 1
    store.nfree = nfree
    store.top = top
    return deleted


cdef void* room(void** buffer, Py_ssize_t* capacity, Py_ssize_t need, size_t item) except NULL:
    """``buffer`` with room for ``need`` items (grown by ``realloc`` to at least twice its size)."""
    cdef Py_ssize_t new
    cdef void* grown
    if need <= capacity[0] and buffer[0] != NULL:
        return buffer[0]
    new = max(need, 2 * capacity[0], 64)
    grown = realloc(buffer[0], new * item)
    if grown == NULL:
        raise MemoryError()
    buffer[0] = grown
    capacity[0] = new
    return grown


cdef class Path:
    """The levels from a leaf's parent to the root; :meth:`run` takes a batch's delta at the leaf.

    Its scratch memory (payload and code buffers per level, the grouping table, the rows of the
    matrix product) lives in C and is reused from batch to batch, so a small batch costs no array
    allocation.
    """

    cdef public list levels
    cdef double* pay[2]
    cdef Py_ssize_t pay_cap[2]
    cdef int64_t* gcodes[2]
    cdef Py_ssize_t gcodes_cap[2]
    cdef double* vals
    cdef Py_ssize_t vals_cap
    cdef double* gvals  # the value of each group's key (a level's ``out_val``, else the code)
    cdef Py_ssize_t gvals_cap
    cdef int64_t* sib_rows
    cdef Py_ssize_t sib_rows_cap
    cdef int64_t* map_code
    cdef int64_t* map_group
    cdef Py_ssize_t map_cap, map_cap2
    cdef double* Sh
    cdef double* Sc
    cdef Py_ssize_t Sh_cap, Sc_cap
    cdef double* Shat
    cdef Py_ssize_t Shat_cap
    cdef int64_t* rows
    cdef Py_ssize_t rows_cap

    def __cinit__(self, list levels):
        self.pay[0] = self.pay[1] = NULL
        self.pay_cap[0] = self.pay_cap[1] = 0
        self.gcodes[0] = self.gcodes[1] = NULL
        self.gcodes_cap[0] = self.gcodes_cap[1] = 0
        self.vals = NULL
        self.gvals = NULL
        self.gvals_cap = 0
        self.sib_rows = NULL
        self.map_code = self.map_group = NULL
        self.Sh = self.Sc = self.Shat = NULL
        self.rows = NULL
        self.vals_cap = self.sib_rows_cap = self.map_cap = self.map_cap2 = 0
        self.Sh_cap = self.Sc_cap = self.Shat_cap = self.rows_cap = 0

    def __init__(self, list levels):
        self.levels = levels

    def __dealloc__(self):
        free(self.pay[0])
        free(self.pay[1])
        free(self.gcodes[0])
        free(self.gcodes[1])
        free(self.vals)
        free(self.gvals)
        free(self.sib_rows)
        free(self.map_code)
        free(self.map_group)
        free(self.Sh)
        free(self.Sc)
        free(self.Shat)
        free(self.rows)

    def run(self, codes, values, mults, bint want=True):
        """Propagate the leaf delta (rows: ``codes`` int64 ``(n, K)``, lifted ``values`` double ``(n, L)``,
        multiplicities ``mults`` ``(n,)``) up the path.  Returns the root's delta as ``(codes, counts)``
        (empty when it died out on the way), or ``None`` unless ``want``."""
        cdef const int64_t[:, ::1] cc = np.ascontiguousarray(codes, dtype=np.int64)
        cdef const double[:, ::1] cv = np.ascontiguousarray(values, dtype=np.float64)
        cdef const double[::1] cm = np.ascontiguousarray(mults, dtype=np.float64).reshape(-1)
        cdef Level L
        cdef Py_ssize_t n = cc.shape[0], i, s, ng = 0, g, W, size, nsib, t, Kc, Lc, Wc, out = 0, level = 0, nm, last = 0
        cdef int64_t code, r
        cdef uint64_t h, mask = 0
        cdef const double* sib[MAX_FACTORS]
        cdef double lift[MAX_FACTORS]
        cdef const double* sib_data[MAX_FACTORS]
        cdef Py_ssize_t sib_W[MAX_FACTORS]
        cdef const int64_t* cur_codes
        cdef const double* cur_vals
        cdef const double* cur_pay
        cdef double* G
        cdef int64_t* gc
        cdef Int64Index index
        cdef double[:, ::1] A
        cdef bint skip, single
        cdef double dummy = 0.0
        cdef int64_t zero_code = 0
        if cv.shape[0] != n or cm.shape[0] != n:
            raise ValueError("codes, values and multiplicities differ in length")
        Kc, Lc, Wc = cc.shape[1], cv.shape[1], 1
        cur_codes = &cc[0, 0] if n and Kc else &zero_code
        cur_vals = &cv[0, 0] if n and Lc else &dummy
        cur_pay = &cm[0] if n else &dummy
        for L in self.levels:
            if n == 0:
                break
            out = level % 2
            level += 1
            W = L.W
            nsib = L.nsib
            single = L.out_src < 0
            G = <double*> room(<void**>&self.pay[out], &self.pay_cap[out], (1 if single else n) * W, sizeof(double))
            gc = <int64_t*> room(<void**>&self.gcodes[out], &self.gcodes_cap[out], n, sizeof(int64_t))
            self.Shat = <double*> room(<void**>&self.Shat, &self.Shat_cap, L.k + 1, sizeof(double))
            # every sibling's row for every delta row (-1: absent, the row joins nothing)
            self.sib_rows = <int64_t*> room(<void**>&self.sib_rows, &self.sib_rows_cap, max(nsib, 1) * n, sizeof(int64_t))
            for s in range(nsib):
                store = L.siblings[s]
                index = store.codes
                if index is None:
                    raise ValueError("the compiled kernel needs sibling stores in int mode")
                A = store.A
                sib_W[s] = A.shape[1]
                sib_data[s] = &A[0, 0] if A.shape[0] > 0 else NULL
                t = L.sib_src[s]
                if t < 0:
                    r = probe(index, 0)
                    for i in range(n):
                        self.sib_rows[s * n + i] = r
                    continue
                for i in range(n):
                    if i + AHEAD < n:
                        prefetch_slot(index, cur_codes[(i + AHEAD) * Kc + t])
                    self.sib_rows[s * n + i] = probe(index, cur_codes[i * Kc + t])
            if not single:
                size = 16
                while size < 2 * n:
                    size *= 2
                mask = size - 1
                self.map_code = <int64_t*> room(<void**>&self.map_code, &self.map_cap, size, sizeof(int64_t))
                self.map_group = <int64_t*> room(<void**>&self.map_group, &self.map_cap2, size, sizeof(int64_t))
                memset(self.map_group, 0xFF, size * sizeof(int64_t))
                self.gvals = <double*> room(<void**>&self.gvals, &self.gvals_cap, n, sizeof(double))
            else:
                memset(G, 0, W * sizeof(double))
                if L.k:
                    self.Sh = <double*> room(<void**>&self.Sh, &self.Sh_cap, n * L.k, sizeof(double))
                    self.Sc = <double*> room(<void**>&self.Sc, &self.Sc_cap, n * L.k, sizeof(double))
            ng = 0
            nm = 0
            last = 0
            for i in range(n):
                if i + AHEAD < n:
                    for s in range(nsib):
                        r = self.sib_rows[s * n + i + AHEAD]
                        if r >= 0:
                            prefetch_row(sib_data[s] + r * sib_W[s], sib_W[s])
                skip = False
                for s in range(nsib):
                    r = self.sib_rows[s * n + i]
                    if r < 0:
                        skip = True
                        break
                    sib[s] = sib_data[s] + r * sib_W[s]
                if skip:
                    continue
                if not single:
                    code = cur_codes[i * Kc + L.out_src]
                    if ng and code == gc[last]:  # a run of one key (a batch in key order): its group again
                        g = last
                    else:
                        h = mix(<uint64_t>code) & mask
                        while self.map_group[h] != -1 and self.map_code[h] != code:
                            h = (h + 1) & mask
                        if self.map_group[h] == -1:
                            self.map_code[h] = code
                            self.map_group[h] = ng
                            gc[ng] = code
                            self.gvals[ng] = cur_vals[i * Lc + L.out_val] if L.out_val >= 0 else <double>code
                            memset(G + ng * W, 0, W * sizeof(double))
                            ng += 1
                        g = self.map_group[h]
                        last = g
                else:
                    if ng == 0:
                        gc[0] = 0
                        ng = 1
                    g = 0
                for s in range(L.nlift):
                    lift[s] = cur_vals[i * Lc + L.lift_src[s]]
                if single and L.k:
                    if split_row(L, G, cur_pay + i * Wc, sib, lift, self.Sh + nm * L.k, self.Sc + nm * L.k):
                        nm += 1
                else:
                    accumulate(L, G + g * W, cur_pay + i * Wc, sib, lift, self.Shat)
            if nm:  # the cross blocks: rank-one runs into the triangle (vectorized where the CPU allows)
                ivm_runs(G, self.Sh, self.Sc, nm, L.k, L.run_start, L.run_off)
            # drop groups whose delta is exactly 0 (they change nothing)
            t = 0
            for g in range(ng):
                if exactly_zero(G + g * W, W):
                    continue
                if t != g:
                    gc[t] = gc[g]
                    if not single:
                        self.gvals[t] = self.gvals[g]
                    memcpy(G + t * W, G + g * W, W * sizeof(double))
                t += 1
            ng = t
            if ng and L.store is not None:
                self.rows = <int64_t*> room(<void**>&self.rows, &self.rows_cap, ng, sizeof(int64_t))
                store_add(L.store, gc, G, ng, W, self.rows)
            # this level's delta is the next level's input: its key's code (and value) per row
            self.vals = <double*> room(<void**>&self.vals, &self.vals_cap, max(ng, 1), sizeof(double))
            for g in range(ng):
                self.vals[g] = <double>gc[g] if single else self.gvals[g]
            Kc = Lc = 1 if L.arity_out else 0
            Wc = W
            cur_codes = gc
            cur_vals = self.vals
            cur_pay = G
            n = ng
        if not want:
            return None
        if n == 0 or level < len(self.levels):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        out_codes = np.empty(n, dtype=np.int64)
        out_counts = np.empty(n, dtype=np.float64)
        cdef int64_t[::1] oc = out_codes
        cdef double[::1] ocn = out_counts
        for g in range(n):
            oc[g] = cur_codes[g]
            ocn[g] = cur_pay[g * Wc]
        return out_codes, out_counts


# ------------------------------------------------------------------ exact cells (issue 36)
#
# :class:`ExactPath` is :class:`Path` with exact payload cells: every cell (count, s, Q entry) is a
# floating-point expansion (Shewchuk 1997 §2) of at most ``nc`` doubles, stored in place of the one
# double of the float path (a store in exact mode keeps ``W · nc`` doubles a row, cell by cell, each
# cell's components non-overlapping, increasing in magnitude, zero-padded at the end).  A cell whose
# value is a double (TwoSum / FMA-TwoProduct errors 0: counts, ints, data with few significant bits)
# is one component; others keep the error terms as further components.  Sums are Grow-Expansion with
# zero elimination and Compress (``_exact_kernel.pxd``), products pairwise TwoProduct, so no value is
# ever rounded.  Whatever does not fit (a sum or a product over- or underflowing the double range, a
# cell needing more than ``nc`` components) makes :meth:`ExactPath.run` return ``False`` before it has
# changed any store: it computes every level's delta first and writes the stores only once every new
# cell is known to fit.  The engine then moves the path's stores to the reference representation
# (Python numbers in object arrays, :mod:`ivm.rings.exact`) and takes the numpy path, so the exact
# value is never lost.  The count stays an exact integer (its components are integral doubles).

cdef enum:
    NCG = 8  # components of a cell of a level's delta (scratch, between levels)
    MAX_LEVELS = 64

#: 2^-969: a product at least this large has an exactly representable FMA error (no underflow)
cdef double EXACT_PRODUCT_SAFE = ldexp(1.0, -969)
#: 2^53: a double at least this large read off an int key code may not be the key's value
cdef double EXACT_INT_LIMIT = ldexp(1.0, 53)
cdef double EXACT_ONE = 1.0


cdef inline int cell_len(const double* c, int w) noexcept nogil:
    """The components of a cell of width ``w`` (zero-padded at the end)."""
    cdef int n = 0
    while n < w and c[n] != 0.0:
        n += 1
    return n


cdef inline bint _roomy(double* h, int* n) noexcept:
    """Whether the scratch expansion ``h`` (``n`` components) leaves room to grow: compressed once it nears
    ``SCRATCH``; False when even compressed it does not."""
    if n[0] > SCRATCH - 4:
        n[0] = _compress(h, n[0])
        return n[0] <= SCRATCH - 4
    return True


cdef inline bint _grow_product(double* h, int* n, double a, double b) noexcept:
    """``h += a · b`` exactly: the FMA TwoProduct's error and product grown into the scratch expansion
    ``h``; False when the product over- or underflows (its error would not be exact) or ``h`` has no room."""
    cdef double p = a * b, e
    if not isfinite(p) or fabs(p) < EXACT_PRODUCT_SAFE:
        return False
    e = fma(a, b, -p)
    if e != 0.0 and not _two_sum_grow(h, n, e):
        return False
    if not _two_sum_grow(h, n, p):
        return False
    return _roomy(h, n)


cdef inline int _fit(double* h, int n, int width) noexcept:
    """``n`` once ``h`` is compressed to at most ``width`` components, or -1 when it does not fit."""
    if n > width:
        n = _compress(h, n)
        if n > width:
            return -1
    return n


cdef inline void _store(double* cell, const double* h, int n, int w) noexcept:
    """A cell of width ``w`` holding the expansion ``h`` of ``n <= w`` components, zero-padded."""
    cdef int i
    for i in range(n):
        cell[i] = h[i]
    for i in range(n, w):
        cell[i] = 0.0


cdef int exp_mul(const double* a, int na, const double* b, int nb, double* out, int width) noexcept:
    """``out = a · b`` exactly as an expansion of at most ``width`` components (increasing magnitude):
    every pair of components by the FMA TwoProduct, the partials grown into one expansion (Shewchuk
    §2, as ``_exact_kernel._mul``).  -1 when a product over- or underflows (its error would not be
    exact) or the result needs more than ``width`` components."""
    cdef int i, j, nh = 0
    cdef double p, e
    if na == 0 or nb == 0:
        return 0
    if na == 1 and nb == 1:
        p = a[0] * b[0]
        if not isfinite(p) or fabs(p) < EXACT_PRODUCT_SAFE:
            return -1
        e = fma(a[0], b[0], -p)
        if e == 0.0:
            out[0] = p
            return 1
        if width < 2:
            return -1
        out[0] = e
        out[1] = p
        return 2
    cdef double h[SCRATCH]
    for i in range(na):
        for j in range(nb):
            if not _grow_product(h, &nh, a[i], b[j]):
                return -1
    nh = _fit(h, nh, width)
    for i in range(nh):
        out[i] = h[i]
    return nh


cdef bint cell_add(double* cell, int w, const double* t, int nt) noexcept:
    """``cell += t`` exactly (``cell``: ``w`` components, zero-padded; ``t``: an expansion of ``nt``);
    False when the sum overflows or needs more than ``w`` components (``cell`` is then unchanged)."""
    cdef double h[SCRATCH]
    cdef int n, i
    cdef double a, b, s, bv, av, err
    if nt == 0:
        return True
    n = cell_len(cell, w)
    if n == 0 and nt <= w:
        for i in range(nt):
            cell[i] = t[i]
        return True
    if n == 1 and nt == 1:  # the common case: TwoSum
        a = cell[0]
        b = t[0]
        s = a + b
        if not isfinite(s):
            return False
        bv = s - a
        av = s - bv
        err = (a - av) + (b - bv)
        if err == 0.0:
            cell[0] = s
            return True
        if w < 2:
            return False
        if s == 0.0:  # (cannot happen with err != 0)
            cell[0] = err
            return True
        cell[0] = err
        cell[1] = s
        return True
    for i in range(n):
        h[i] = cell[i]
    for i in range(nt):
        if not _two_sum_grow(h, &n, t[i]) or not _roomy(h, &n):
            return False
    n = _fit(h, n, w)
    if n < 0:
        return False
    _store(cell, h, n, w)
    return True


cdef bint add_product(double* cell, const double* x, int nx, const double* cy, int wy) noexcept:
    """``cell (NCG wide) += x · y`` for an expansion ``x`` and a stored cell ``y`` (width ``wy``): each pair
    of components by the FMA TwoProduct, both parts grown straight into the cell's expansion (no expansion
    of the product in between); False when a product over- or underflows or the cell would need more than
    ``NCG`` components (the cell is then unchanged)."""
    cdef double h[SCRATCH]
    cdef int ny = cell_len(cy, wy), n, i, j
    if nx == 0 or ny == 0:
        return True
    n = cell_len(cell, NCG)
    for i in range(n):
        h[i] = cell[i]
    for i in range(nx):
        for j in range(ny):
            if not _grow_product(h, &n, x[i], cy[j]):
                return False
    n = _fit(h, n, NCG)
    if n < 0:
        return False
    _store(cell, h, n, NCG)
    return True


cdef bint accumulate_exact(Level L, double* G, const double* child, int cw, const double** sib, const int* sw,
                           const double* lift) noexcept:
    """``G += δV_j ⊗ ⊗ V_i ⊗ g_X`` for one delta row, exactly (the division-free rule of
    :func:`accumulate`: ``c = Π c_f``, ``s_f = w_f s_f``, ``Q_ff = w_f Q_f``, ``Q_fg = K_fg s_f s_gᵀ``).
    ``G``: the group's cells (``NCG`` wide); ``child``: the child's cells (``cw`` wide; at the first level
    the multiplicity alone); ``sib[s]``: sibling rows (``sw[s]`` wide); ``lift``: the lifted doubles.
    False when some cell does not fit (the caller gives up the batch before writing any store)."""
    cdef const double* cp[MAX_FACTORS]  # each factor's count cell
    cdef int cwid[MAX_FACTORS]
    cdef const double* sp[MAX_FACTORS]  # its first s cell (the lifting: the lifted doubles)
    cdef const double* qp[MAX_FACTORS]  # its first Q cell, NULL for the lifting
    cdef int wid[MAX_FACTORS]
    cdef double pre[MAX_FACTORS + 1][NCG]
    cdef int npre[MAX_FACTORS + 1]
    cdef double suf[MAX_FACTORS + 1][NCG]
    cdef int nsuf[MAX_FACTORS + 1]
    cdef double u[NCG]
    cdef double w[NCG]
    cdef double coef[NCG]
    cdef double tmp[NCG]
    cdef double x[SCRATCH]
    cdef int nu, nw, ncoef, nx, nc, f, g, i, j, a, b, m = L.nsized, k = L.k, o, kf, og, kg, ntmp
    cdef Py_ssize_t S0 = 1, Q0 = 1 + L.k
    cdef const double* cell
    cp[0] = child
    cwid[0] = cw
    sp[0] = child + cw
    qp[0] = child + (1 + L.child_k) * cw
    wid[0] = cw
    for f in range(L.nsib):
        cp[1 + f] = sib[f]
        cwid[1 + f] = sw[f]
        sp[1 + f] = sib[f] + sw[f]
        qp[1 + f] = sib[f] + (1 + L.f_size[1 + f]) * sw[f]
        wid[1 + f] = sw[f]
    if L.nlift:
        f = L.nf - 1
        cp[f] = &EXACT_ONE
        cwid[f] = 1
        sp[f] = lift
        qp[f] = NULL
        wid[f] = 1
    if L.leaf_lift:  # δV = m · (1, x, x xᵀ): the product of the multiplicity and each x_a, then by x_b
        nc = cell_len(child, cw)
        if nc == 0:
            return True
        if not cell_add(G, NCG, child, nc):
            return False
        for a in range(k):
            if lift[a] == 0.0:
                continue
            nx = exp_mul(child, nc, &lift[a], 1, x, SCRATCH - 4)
            if nx < 0 or not cell_add(G + (S0 + a) * NCG, NCG, x, nx):
                return False
            for b in range(k - a):
                if not add_product(G + (Q0 + row_start(k, a) + b) * NCG, x, nx, &lift[a + b], 1):
                    return False
        return True
    # u: the counts of factors without support; pre/suf: prefix and suffix products of the others
    u[0] = 1.0
    nu = 1
    for f in range(L.nf):
        if L.f_size[f] == 0:
            nu = exp_mul(u, nu, cp[f], cell_len(cp[f], cwid[f]), tmp, NCG)
            if nu < 0:
                return False
            for a in range(nu):
                u[a] = tmp[a]
    for a in range(nu):
        pre[0][a] = u[a]
    npre[0] = nu
    for i in range(m):
        f = L.sized[i]
        npre[i + 1] = exp_mul(pre[i], npre[i], cp[f], cell_len(cp[f], cwid[f]), pre[i + 1], NCG)
        if npre[i + 1] < 0:
            return False
    if not cell_add(G, NCG, pre[m], npre[m]):
        return False
    if npre[m] == 0 and m == 0:
        return True
    suf[m][0] = 1.0
    nsuf[m] = 1
    for i in range(m - 1, -1, -1):
        f = L.sized[i]
        nsuf[i] = exp_mul(cp[f], cell_len(cp[f], cwid[f]), suf[i + 1], nsuf[i + 1], suf[i], NCG)
        if nsuf[i] < 0:
            return False
    for i in range(m):
        f = L.sized[i]
        o = L.f_off[f]
        kf = L.f_size[f]
        nw = exp_mul(pre[i], npre[i], suf[i + 1], nsuf[i + 1], w, NCG)
        if nw < 0:
            return False
        if nw == 0:
            continue
        for a in range(kf):
            if not add_product(G + (S0 + o + a) * NCG, w, nw, sp[f] + a * wid[f], wid[f]):
                return False
        if qp[f] != NULL:  # a stored factor's own block: w_f Q_f, row by row of the triangles
            for a in range(kf):
                for b in range(kf - a):
                    cell = qp[f] + (row_start(kf, a) + b) * wid[f]
                    if not add_product(G + (Q0 + row_start(k, o + a) + b) * NCG, w, nw, cell, wid[f]):
                        return False
        else:  # the lifting's own block: w x xᵀ
            for a in range(kf):
                nx = exp_mul(w, nw, sp[f] + a, cell_len(sp[f] + a, 1), x, SCRATCH - 4)
                if nx < 0:
                    return False
                for b in range(kf - a):
                    if not add_product(G + (Q0 + row_start(k, o + a) + b) * NCG, x, nx, sp[f] + a + b, 1):
                        return False
    for i in range(m):
        f = L.sized[i]
        o = L.f_off[f]
        kf = L.f_size[f]
        ncoef = npre[i]  # K_fg = pre_i · Π_{i<h<j} c_h · suf_{j+1}
        for a in range(ncoef):
            coef[a] = pre[i][a]
        for j in range(i + 1, m):
            g = L.sized[j]
            og = L.f_off[g]
            kg = L.f_size[g]
            nw = exp_mul(coef, ncoef, suf[j + 1], nsuf[j + 1], w, NCG)
            if nw < 0:
                return False
            if nw:
                for a in range(kf):
                    cell = sp[f] + a * wid[f]
                    nx = exp_mul(w, nw, cell, cell_len(cell, wid[f]), x, SCRATCH - 4)
                    if nx < 0:
                        return False
                    if nx == 0:
                        continue
                    for b in range(kg):
                        if not add_product(G + (Q0 + row_start(k, o + a) + (og - o - a) + b) * NCG, x, nx,
                                           sp[g] + b * wid[g], wid[g]):
                            return False
            ntmp = exp_mul(coef, ncoef, cp[g], cell_len(cp[g], cwid[g]), tmp, NCG)
            if ntmp < 0:
                return False
            ncoef = ntmp
            for a in range(ncoef):
                coef[a] = tmp[a]
    return True


cdef inline bint cells_zero(const double* row, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if row[i] != 0.0:
            return False
    return True


cdef class ExactPath:
    """:class:`Path` with exact cells (the section's comment above): the levels from a leaf's parent to the
    root; :meth:`run` takes a batch's delta at the leaf, computes every level's delta, then writes the
    stores (in exact mode: ``store.nc`` components a cell) only if every new cell fits."""

    cdef public list levels
    cdef double* G[MAX_LEVELS]
    cdef Py_ssize_t G_cap[MAX_LEVELS]
    cdef int64_t* gc[MAX_LEVELS]
    cdef Py_ssize_t gc_cap[MAX_LEVELS]
    cdef double* gv[MAX_LEVELS]
    cdef Py_ssize_t gv_cap[MAX_LEVELS]
    cdef double* R[MAX_LEVELS]
    cdef Py_ssize_t R_cap[MAX_LEVELS]
    cdef int64_t* rows[MAX_LEVELS]
    cdef Py_ssize_t rows_cap[MAX_LEVELS]
    cdef Py_ssize_t ng[MAX_LEVELS]
    cdef int64_t* sib_rows
    cdef Py_ssize_t sib_rows_cap
    cdef int64_t* map_code
    cdef int64_t* map_group
    cdef Py_ssize_t map_cap, map_cap2

    def __cinit__(self, list levels):
        cdef int i
        for i in range(MAX_LEVELS):
            self.G[i] = NULL
            self.gc[i] = NULL
            self.gv[i] = NULL
            self.R[i] = NULL
            self.rows[i] = NULL
            self.G_cap[i] = self.gc_cap[i] = self.gv_cap[i] = self.R_cap[i] = self.rows_cap[i] = 0
        self.sib_rows = self.map_code = self.map_group = NULL
        self.sib_rows_cap = self.map_cap = self.map_cap2 = 0

    def __init__(self, list levels):
        if len(levels) > MAX_LEVELS:
            raise ValueError(f"a compiled path has at most {MAX_LEVELS} levels")
        self.levels = levels

    def __dealloc__(self):
        cdef int i
        for i in range(MAX_LEVELS):
            free(self.G[i])
            free(self.gc[i])
            free(self.gv[i])
            free(self.R[i])
            free(self.rows[i])
        free(self.sib_rows)
        free(self.map_code)
        free(self.map_group)

    def run(self, codes, values, mults, bint want=True):
        """:meth:`Path.run` with exact cells: ``mults`` are integral doubles of magnitude at most 2^53 and
        ``values`` finite doubles (the caller checks both).  Returns ``False`` (no store changed) when some
        cell does not fit, else the root's delta as ``(codes, counts)`` (counts: Python ints), or ``None``
        unless ``want``."""
        cdef const int64_t[:, ::1] cc = np.ascontiguousarray(codes, dtype=np.int64)
        cdef const double[:, ::1] cv = np.ascontiguousarray(values, dtype=np.float64)
        cdef const double[::1] cm = np.ascontiguousarray(mults, dtype=np.float64).reshape(-1)
        cdef Level L
        cdef Py_ssize_t n = cc.shape[0], i, s, g, W, stride, size, nsib, t, Kc, Lc, Wc, level = 0, last = 0, nlev
        cdef Py_ssize_t w, rstride, nfree, top, fresh, deleted
        cdef int cw = 1, nc
        cdef int64_t code, r
        cdef uint64_t h, mask = 0
        cdef const double* sib[MAX_FACTORS]
        cdef int sw[MAX_FACTORS]
        cdef double lift[MAX_FACTORS]
        cdef const double* sib_data[MAX_FACTORS]
        cdef Py_ssize_t sib_W[MAX_FACTORS]
        cdef const int64_t* cur_codes
        cdef const double* cur_vals
        cdef const double* cur_pay
        cdef double* Gp
        cdef double* dst
        cdef double* row
        cdef const double* src
        cdef int64_t* gcp
        cdef Int64Index index
        cdef double[:, ::1] A
        cdef int64_t[::1] keycode
        cdef int64_t[::1] free_rows
        cdef bint skip, single
        cdef double dummy = 0.0
        cdef int64_t zero_code = 0
        if cv.shape[0] != n or cm.shape[0] != n:
            raise ValueError("codes, values and multiplicities differ in length")
        Kc, Lc, Wc = cc.shape[1], cv.shape[1], 1
        cur_codes = &cc[0, 0] if n and Kc else &zero_code
        cur_vals = &cv[0, 0] if n and Lc else &dummy
        cur_pay = &cm[0] if n else &dummy
        nlev = 0
        # phase 1: every level's delta, in scratch (no store is written)
        for L in self.levels:
            if n == 0:
                break
            level = nlev
            nlev += 1
            W = L.W
            stride = W * NCG
            nsib = L.nsib
            single = L.out_src < 0
            Gp = <double*> room(<void**>&self.G[level], &self.G_cap[level], (1 if single else n) * stride, sizeof(double))
            gcp = <int64_t*> room(<void**>&self.gc[level], &self.gc_cap[level], n, sizeof(int64_t))
            room(<void**>&self.gv[level], &self.gv_cap[level], n, sizeof(double))
            self.sib_rows = <int64_t*> room(<void**>&self.sib_rows, &self.sib_rows_cap, max(nsib, 1) * n, sizeof(int64_t))
            for s in range(nsib):
                store = L.siblings[s]
                index = store.codes
                if index is None or store.nc <= 0:
                    raise ValueError("the exact kernel needs sibling stores in int mode with exact cells")
                A = store.A
                sib_W[s] = A.shape[1]
                sw[s] = store.nc
                sib_data[s] = &A[0, 0] if A.shape[0] > 0 else NULL
                t = L.sib_src[s]
                if t < 0:
                    r = probe(index, 0)
                    for i in range(n):
                        self.sib_rows[s * n + i] = r
                    continue
                for i in range(n):
                    self.sib_rows[s * n + i] = probe(index, cur_codes[i * Kc + t])
            if not single:
                size = 16
                while size < 2 * n:
                    size *= 2
                mask = size - 1
                self.map_code = <int64_t*> room(<void**>&self.map_code, &self.map_cap, size, sizeof(int64_t))
                self.map_group = <int64_t*> room(<void**>&self.map_group, &self.map_cap2, size, sizeof(int64_t))
                memset(self.map_group, 0xFF, size * sizeof(int64_t))
            else:
                memset(Gp, 0, stride * sizeof(double))
            g = 0
            t = 0  # groups
            last = 0
            for i in range(n):
                skip = False
                for s in range(nsib):
                    r = self.sib_rows[s * n + i]
                    if r < 0:
                        skip = True
                        break
                    sib[s] = sib_data[s] + r * sib_W[s]
                if skip:
                    continue
                if not single:
                    code = cur_codes[i * Kc + L.out_src]
                    if t and code == gcp[last]:
                        g = last
                    else:
                        h = mix(<uint64_t>code) & mask
                        while self.map_group[h] != -1 and self.map_code[h] != code:
                            h = (h + 1) & mask
                        if self.map_group[h] == -1:
                            self.map_code[h] = code
                            self.map_group[h] = t
                            gcp[t] = code
                            self.gv[level][t] = cur_vals[i * Lc + L.out_val] if L.out_val >= 0 else <double>code
                            memset(Gp + t * stride, 0, stride * sizeof(double))
                            t += 1
                        g = self.map_group[h]
                        last = g
                else:
                    if t == 0:
                        gcp[0] = 0
                        self.gv[level][0] = 0.0
                        t = 1
                    g = 0
                for s in range(L.nlift):
                    lift[s] = cur_vals[i * Lc + L.lift_src[s]]
                    if level > 0 and fabs(lift[s]) >= EXACT_INT_LIMIT:
                        return False  # (a key's value read off its code: exact below 2^53 only)
                if not accumulate_exact(L, Gp + g * stride, cur_pay + i * Wc, cw, sib, sw, lift):
                    return False
            # drop groups whose delta is exactly 0 (they change nothing)
            s = 0
            for g in range(t):
                if cells_zero(Gp + g * stride, stride):
                    continue
                if s != g:
                    gcp[s] = gcp[g]
                    self.gv[level][s] = self.gv[level][g]
                    memcpy(Gp + s * stride, Gp + g * stride, stride * sizeof(double))
                s += 1
            self.ng[level] = s
            Kc = Lc = 1 if L.arity_out else 0
            Wc = stride
            cw = NCG
            cur_codes = gcp
            cur_vals = self.gv[level]
            cur_pay = Gp
            n = s
        # phase 2: each store's new rows, in scratch; give up (nothing written) if a cell does not fit
        for level in range(nlev):
            L = self.levels[level]
            if L.store is None or self.ng[level] == 0:
                continue
            store = L.store
            index = store.codes
            nc = store.nc
            if index is None or nc <= 0:
                raise ValueError("the exact kernel needs stores in int mode with exact cells")
            W = L.W
            stride = W * NCG
            rstride = W * nc
            A = store.A
            if A.shape[1] != rstride:
                raise ValueError("a store's rows do not match the level's exact cells")
            self.R[level] = <double*> room(<void**>&self.R[level], &self.R_cap[level], self.ng[level] * rstride,
                                           sizeof(double))
            self.rows[level] = <int64_t*> room(<void**>&self.rows[level], &self.rows_cap[level], self.ng[level],
                                               sizeof(int64_t))
            for g in range(self.ng[level]):
                r = probe(index, self.gc[level][g])
                self.rows[level][g] = r
                dst = self.R[level] + g * rstride
                if r >= 0:
                    memcpy(dst, &A[r, 0], rstride * sizeof(double))
                else:
                    memset(dst, 0, rstride * sizeof(double))
                src = self.G[level] + g * stride
                for w in range(W):
                    if not cell_add(dst + w * nc, nc, src + w * NCG, cell_len(src + w * NCG, NCG)):
                        return False
        # commit: new keys get rows, every row its new cells, rows that became 0 are deleted (§9 item 1)
        for level in range(nlev):
            L = self.levels[level]
            if L.store is None or self.ng[level] == 0:
                continue
            store = L.store
            index = store.codes
            nc = store.nc
            rstride = L.W * nc
            nfree = store.nfree
            top = store.top
            fresh = 0
            for g in range(self.ng[level]):
                if self.rows[level][g] < 0:
                    fresh += 1
            if fresh > nfree:
                store.reserve(fresh - nfree)
            if store.free.shape[0] < nfree + self.ng[level]:
                store.reserve_free(self.ng[level])
            A = store.A
            keycode = store.keycode
            free_rows = store.free
            if fresh:
                index._reserve(fresh)
                for g in range(self.ng[level]):
                    if self.rows[level][g] < 0:
                        if nfree > 0:
                            nfree -= 1
                            r = free_rows[nfree]
                        else:
                            r = top
                            top += 1
                        index._put(self.gc[level][g], r)
                        keycode[r] = self.gc[level][g]
                        self.rows[level][g] = r
            deleted = 0
            for g in range(self.ng[level]):
                r = self.rows[level][g]
                row = &A[r, 0]
                src = self.R[level] + g * rstride
                if cells_zero(src, rstride):
                    index._delete(self.gc[level][g])
                    memset(row, 0, rstride * sizeof(double))
                    free_rows[nfree] = r
                    nfree += 1
                    deleted += 1
                else:
                    memcpy(row, src, rstride * sizeof(double))
            store.nfree = nfree
            store.top = top
        if not want:
            return None
        if n == 0 or nlev < len(self.levels):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
        out_codes = np.empty(n, dtype=np.int64)
        out_counts = np.empty(n, dtype=object)
        for g in range(n):
            out_codes[g] = cur_codes[g]
            total = 0
            for w in range(cell_len(cur_pay + g * Wc, NCG)):
                total += int(cur_pay[g * Wc + w])
            out_counts[g] = total
        return out_codes, out_counts
