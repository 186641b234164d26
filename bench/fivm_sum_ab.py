"""One A/B measurement of F-IVM on the TPC-H SUM group-by of ``bench/fivm.py`` (b), for the checkout on PYTHONPATH.

``Q(nation, SUM(price * disc)) :- C(cust, nation), O(okey, cust, prio), L(okey, line, price, disc)``
over ``tpchgen-cli``'s customer, orders and lineitem (``--sf``, 0.01 by default), 15% deletes,
applied in batches of ``--batch`` updates from an empty state, ``--repeats`` passes in this
process.  Prints one line: the median updates/s by wall clock and by CPU time, each pass's
wall rate, the process's peak RSS, the load average and the result's checksum (equal across
checkouts).  Run it in fresh processes taking turns, ``PYTHONPATH`` set to each checkout
(``bench.fivm.tpch`` and ``ivm`` are imported from there), e.g.::

    for co in /tmp/base /work/main; do PYTHONPATH=$co .venv/bin/python bench/fivm_sum_ab.py; done
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--floats", action="store_true", help="price and discount as floats (dollars, fractions): a float SUM"
    )
    args = ap.parse_args()
    sys.argv = sys.argv[:1]
    import bench.fivm as fivm_bench
    import ivm
    from ivm.engines.fivm.engine import FIVM

    with tempfile.TemporaryDirectory() as tmp:
        query, stream = fivm_bench.tpch(args.sf, 1, Path(tmp))
    if args.floats:  # L(okey, line, price, disc): cents and percent as dollars and fractions
        stream = [(r, (*row[:2], row[2] / 100, row[3] / 100), m) if r == "L" else (r, row, m) for r, row, m in stream]
    walls, cpus, result = [], [], None
    for _ in range(args.repeats):
        engine = FIVM(query)
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(0, len(stream), args.batch):
            engine.apply(stream[i : i + args.batch])
        walls.append(len(stream) / (time.perf_counter() - wall))
        cpus.append(len(stream) / (time.process_time() - cpu))
        result = engine.result()
    checksum = sum(result.values()) if hasattr(result, "values") else result
    print(
        f"{Path(ivm.__file__).parent.parent}  wall {statistics.median(walls):,.0f}/s  "
        f"cpu {statistics.median(cpus):,.0f}/s  passes {[round(w) for w in walls]}  "
        f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB  "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}  "
        f"implementation {getattr(engine, 'implementation', '-')}  checksum {checksum}",
        flush=True,
    )


if __name__ == "__main__":
    main()
