# Large blocks of zeroed memory that grow without a copy: the C helpers shared by the compiled kernels
# (``_arena.pyx``, ``_row_table.pyx``, ``_int_index.pyx``); header-only, no module of its own.
#
# A block of at most IVM_SMALL bytes is calloc'ed and grown by realloc (its new bytes zeroed); a larger
# one is an anonymous mapping (mmap: the kernel hands out zeroed pages as they are first touched, so
# nothing is memset) grown by mremap, which moves the page tables instead of copying the bytes
# (Linux); blocks of 2 MB and more are marked for transparent huge pages (fewer page faults).  Where
# mremap is missing the large blocks are calloc'ed and realloc'ed too.  Callers keep each block's
# size in bytes and hand it back to grow and free it.  Growing a block of n bytes costs O(1) page
# table work per page moved (O(n) bytes copied only below IVM_SMALL or without mremap).
#
# A mapping of 2 MB or more starts at a 2 MB boundary and spans whole 2 MB units (IVM_HUGE), and it grows
# in place when the address space after it is free, else moves (mremap) to a fresh 2 MB boundary: each
# 2 MB unit is then wholly inside the mapping when it is first touched, so the kernel backs it with one
# huge page (one fault) instead of 512 pages.  A mapping at an arbitrary address, as mremap picks when
# it moves a block, would leave every unit that straddles the old and the new end, and with it most of
# a block grown in many small steps, on 4 kB pages (measured: an array grown by halves and eighths
# to 41 MB, 9,445 faults against 1,031 on 2 MB boundaries).  Smaller blocks stay on 4 kB pages: a
# whole 2 MB unit for each would zero more than the faults it saves cost (measured on the Housing
# stream: 1.8k faults instead of 43k, no less system time).
cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    #define IVM_SMALL ((size_t)1 << 18)
    #if defined(__linux__) && defined(MREMAP_MAYMOVE)
    #define IVM_HAVE_MREMAP 1
    #else
    #define IVM_HAVE_MREMAP 0
    #endif
    #define IVM_HUGE ((size_t)2 << 20)
    /* the bytes mapped for a block of n bytes: whole 4 kB pages, whole 2 MB units from 2 MB on */
    static size_t ivm_pages(size_t n) {
        if (n >= IVM_HUGE) return (n + IVM_HUGE - 1) & ~(IVM_HUGE - 1);
        return (n + 4095) & ~(size_t)4095;
    }
    static void ivm_advise(void* p, size_t n) {
    #if IVM_HAVE_MREMAP && defined(MADV_HUGEPAGE)
        if (ivm_pages(n) >= IVM_HUGE) madvise(p, ivm_pages(n), MADV_HUGEPAGE);
    #else
        (void)p; (void)n;
    #endif
    }
    #if IVM_HAVE_MREMAP
    /* len bytes of fresh address space (PROT_NONE, nothing committed) starting at a 2 MB boundary, or
       MAP_FAILED: IVM_HUGE more than needed are reserved and the parts before and after it unmapped */
    static void* ivm_reserve_aligned(size_t len) {
        char* p = (char*)mmap(NULL, len + IVM_HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        char* q;
        if (p == (char*)MAP_FAILED) return MAP_FAILED;
        q = (char*)(((size_t)p + IVM_HUGE - 1) & ~(IVM_HUGE - 1));
        if (q > p) munmap(p, (size_t)(q - p));
        if (p + len + IVM_HUGE > q + len) munmap(q + len, (size_t)(p + len + IVM_HUGE - (q + len)));
        return q;
    }
    /* a zeroed read-write mapping of len bytes (ivm_pages), at a 2 MB boundary when len is 2 MB or more */
    static void* ivm_map(size_t len) {
        void* p;
        if (len >= IVM_HUGE) {
            p = ivm_reserve_aligned(len);
            void* q;
            if (p == MAP_FAILED) return MAP_FAILED;
            q = mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            if (q == MAP_FAILED) munmap(p, len);
            return q;
        }
        return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    #endif
    /* n zeroed bytes (n > 0), NULL when out of memory */
    static void* ivm_alloc(size_t n) {
        if (n == 0) n = 1;
    #if IVM_HAVE_MREMAP
        if (n > IVM_SMALL) {
            void* p = ivm_map(ivm_pages(n));
            if (p == MAP_FAILED) return NULL;
            ivm_advise(p, n);
            return p;
        }
    #endif
        return calloc(n, 1);
    }
    static void ivm_free(void* p, size_t n) {
        if (p == NULL) return;
    #if IVM_HAVE_MREMAP
        if ((n == 0 ? 1 : n) > IVM_SMALL) { munmap(p, ivm_pages(n)); return; }
    #endif
        (void)n;
        free(p);
    }
    /* p (old bytes, NULL when old is 0) grown to n bytes, the first old bytes kept and the rest zeroed;
       NULL when out of memory (p is then still valid) */
    static void* ivm_grow(void* p, size_t old, size_t n) {
        void* q;
        if (p == NULL) return ivm_alloc(n);
        if (n <= old) return p;
    #if IVM_HAVE_MREMAP
        if (old == 0) old = 1;
        if (old > IVM_SMALL) {
            size_t from = ivm_pages(old), to = ivm_pages(n);
            if (to == from) return p;  /* (the mapping already spans n bytes) */
            /* in place when the address space after the block is free, else to a fresh 2 MB boundary */
            q = mremap(p, from, to, 0);
            if (q == MAP_FAILED) {
                if (to < IVM_HUGE) {
                    q = mremap(p, from, to, MREMAP_MAYMOVE);
                } else {
                    void* at = ivm_reserve_aligned(to);
                    if (at == MAP_FAILED) return NULL;
                    q = mremap(p, from, to, MREMAP_MAYMOVE | MREMAP_FIXED, at);
                    if (q == MAP_FAILED) munmap(at, to);
                }
                if (q == MAP_FAILED) return NULL;
            }
            ivm_advise(q, n);
            return q;  /* the pages past the old mapping are fresh, hence zero */
        }
        if (n > IVM_SMALL) {
            q = ivm_alloc(n);
            if (q == NULL) return NULL;
            memcpy(q, p, old);
            free(p);
            return q;
        }
    #endif
        q = realloc(p, n);
        if (q == NULL) return NULL;
        memset((char*)q + old, 0, n - old);
        return q;
    }
    """
    void* ivm_alloc(size_t n) noexcept nogil
    void ivm_free(void* p, size_t n) noexcept nogil
    void* ivm_grow(void* p, size_t old, size_t n) noexcept nogil
