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
    static size_t ivm_pages(size_t n) { return (n + 4095) & ~(size_t)4095; }
    static void ivm_advise(void* p, size_t n) {
    #if IVM_HAVE_MREMAP && defined(MADV_HUGEPAGE)
        if (n >= ((size_t)2 << 20)) madvise(p, ivm_pages(n), MADV_HUGEPAGE);
    #else
        (void)p; (void)n;
    #endif
    }
    /* n zeroed bytes (n > 0), NULL when out of memory */
    static void* ivm_alloc(size_t n) {
        if (n == 0) n = 1;
    #if IVM_HAVE_MREMAP
        if (n > IVM_SMALL) {
            void* p = mmap(NULL, ivm_pages(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
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
            q = mremap(p, ivm_pages(old), ivm_pages(n), MREMAP_MAYMOVE);
            if (q == MAP_FAILED) return NULL;
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
