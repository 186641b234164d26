"""The memory floor under the q-hierarchical engine's per-update time: a C loop with the star's cache misses.

``bench/qhier.py`` measures the compact engine's time per single update from
10^4 to 10^7 tuples.  Its growth has a floor that no layout removes: an update
reads and writes the row of the tuple's item, a random row of a table of
O(N) bytes, so once the state outgrows the caches every update pays at least
that cache miss, and a deletion from a fit-list (002 §6.4) also writes the
item's two list neighbours, random rows named by the first one (a second,
dependent miss).  This script compiles (with the system C compiler) and runs a
loop that does exactly those accesses on tables of the compact state's sizes
for the star query ``Q(x,y) :- R(x,y), S(x,z), T(x)`` of ``bench/qhier.py``,
and nothing else:

- per update a relation uniformly among R, S, T and a deletion or an insert;
- the x item (a 96-byte row among sqrt(N), the table the kernel keeps for x);
- R (a free leaf: 32-byte rows in an inline hash table at most 70% full): a
  deletion reads the row, then its fit-list neighbours (two rows it names); an
  insert reads the probed slot and the head of x's fit-list (named by x's row);
- S (a bound leaf: 24-byte rows, inline): one row;
- T: the x item only.

``--serial`` puts a fence after each update (``lfence``: no overlap between
updates, as between two ``apply([u])`` calls with the interpreter in between);
without it the CPU overlaps consecutive updates' misses, as a batch with
prefetching can.  The tables are anonymous mappings advised for transparent
huge pages, like the kernel's (``--no-huge-pages``: 4 KB pages).

The floor of the engine's exponent follows: t(N) >= t(10^4) + (C(N) - C(10^4)),
with t(10^4) the engine's measured time at 10^4 (``--base-us``) and C the loop's
ns per update; the least-squares slope of log t against log N over the sizes is
printed.

Run::

    .venv/bin/python bench/qhier_floor.py --base-us 0.32          # serialized and overlapped, 10^4 .. 10^7
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

C_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>
typedef struct { int32_t parent, support; int64_t val; int32_t prev, next; int64_t mult; } leaf32;
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static int huge = 1;
static void *table(size_t n) {
    void *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(p, 0, n);
    return p;
}
static uint64_t s = 88172645463325252ULL;
static inline uint64_t rnd(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
int main(int argc, char **argv) {
    size_t n = strtoull(argv[1], 0, 10);
    int serial = atoi(argv[2]);
    long iters = atol(argv[3]);
    huge = atoi(argv[4]);
    size_t d = 1, slots = 16;
    while ((d + 1) * (d + 1) <= n) d++;
    size_t per = (n - d) / 2;
    while (slots * 7 < per * 10) slots *= 2;
    leaf32 *R = table(slots * sizeof(leaf32));
    char *S = table(slots * 24);
    char *X = table(d * 96);
    for (size_t i = 0; i < slots; i++) { R[i].prev = rnd() % slots; R[i].next = rnd() % slots; }
    for (size_t x = 0; x < d; x++) *(int32_t *)(X + x * 96 + 88) = rnd() % slots;   /* x's fit-list head */
    int64_t acc = 0;
    for (int pass = 0; pass < 2; pass++) {   /* the first pass warms the caches and the TLB */
        double t0 = cpu();
        for (long k = 0; k < iters; k++) {
            uint64_t r = rnd();
            int rel = r % 3, del = (r >> 2) & 1;
            size_t i = (r >> 8) % slots, x = (r >> 40) % d;
            char *xrow = X + x * 96;
            acc += xrow[0];
            if (rel == 0) {
                if (del) { leaf32 *p = &R[i]; acc += R[p->prev].mult + R[p->next].mult; p->mult = acc; }
                else { acc += R[i].mult + R[*(int32_t *)(xrow + 88)].mult; R[i].mult = acc; }
            } else if (rel == 1) {
                acc += S[i * 24]; S[i * 24] = (char)acc;
            }
            if (serial) _mm_lfence();
        }
        double mb = (slots * (sizeof(leaf32) + 24) + d * 96) / 1e6;
        if (pass) printf("%zu %.2f %.1f\n", n, mb, (cpu() - t0) / iters * 1e9);
    }
    return (int)(acc & 1) * 0;
}
"""


def slope(points: list[tuple[float, float]]) -> float:
    pts = [(math.log(n), math.log(t)) for n, t in points]
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-us", type=float, default=None, help="the engine's µs per update at 10^4")
    parser.add_argument("--min-exp", type=float, default=4)
    parser.add_argument("--max-exp", type=float, default=7)
    parser.add_argument("--iters", type=int, default=4_000_000, help="updates per measurement")
    parser.add_argument("--no-huge-pages", action="store_true")
    args = parser.parse_args(argv)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("no C compiler (cc, gcc) on PATH", file=sys.stderr)
        return 1
    print("command: " + " ".join([Path(sys.executable).name, *sys.argv]))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  (cpus: {os.cpu_count()})")
    exps = [args.min_exp + 0.5 * i for i in range(int((args.max_exp - args.min_exp) * 2) + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "floor.c", Path(tmp) / "floor"
        src.write_text(C_SOURCE)
        subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
        rows = []
        for e in exps:
            n = round(10**e)
            row = [n]
            for serial in (1, 0):
                out = subprocess.run(
                    [str(exe), str(n), str(serial), str(args.iters), "0" if args.no_huge_pages else "1"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()
                row += [float(out[1]), float(out[2])]
            rows.append(row)
            print(
                f"N {n:>9}  tables {row[1]:8.1f} MB   serialized {row[2]:6.1f} ns/update   overlapped {row[4]:6.1f}"
                f"  (load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    for label, col in (("serialized (single updates)", 2), ("overlapped (batches)", 4)):
        base = rows[0][col]
        print(f"{label}: +{rows[-1][col] - base:.1f} ns per update from N={rows[0][0]} to N={rows[-1][0]}")
        if args.base_us:
            floor = [(r[0], args.base_us + (r[col] - base) / 1e3) for r in rows]
            print(
                f"  floor with t(10^4) = {args.base_us:.3f} µs: t(10^7) >= {floor[-1][1]:.3f} µs, "
                f"exponent >= {slope(floor):.3f}"
            )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
