"""The shard hosts' request path: the CPU cost of one message, pickles (before issue 39) vs ``wire.py``.

Per message kind, the sender's and the receiver's CPU time (``time.process_time``, so a machine loaded by
other work does not count): before, ``pickle.dumps`` + ``pickle.loads`` (``multiprocessing.connection``
authenticates the connection once, not the messages); now, ``wire.encode`` + the frame's HMAC on each side
+ ``wire.decode``.  Messages: a task's piece of 12,500 records (a 50,000-record batch over 4 slices), a
seal of 4 slices, and a response holding 10,000 changed groups.

    .venv/bin/python bench/host_wire.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import pickle
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from ivm.processor.pipeline import Record, RecordBatch
from ivm.processor.placement import wire
from ivm.processor.placement.slices import Piece, Seal, SliceResponse

SESSION = b"s" * 32


def messages() -> dict[str, Any]:
    rng = random.Random(7)
    n = 12_500
    batch = RecordBatch(
        ["ivm.E"] * n,
        [3] * n,
        list(range(10**6, 10**6 + n)),
        [rng.randbytes(8) for _ in range(n)],
        [rng.randbytes(22) for _ in range(n)],
        [1_700_000_000_000 + i for i in range(n)],
    )
    positions = {("ivm.E", p): 10**6 for p in range(8)}
    seals = [Seal(i, 40, positions, positions, {("ivm.E", 3): n}, positions) for i in range(4)]
    groups = {(rng.randrange(10**6),): rng.randrange(10**9) for _ in range(10_000)}
    dead = [(Record("ivm.E", 3, i, b"k", b"\x01bad", 5), "undecodable", "decode", None, "E") for i in range(20)]
    response = SliceResponse(1, 40, {"q": groups}, {"q": n}, {"q": {"tuples": 10**5, "seconds": 0.1}}, dead, False)
    return {"stage (12,500 records)": [Piece(1, 40, ("ivm.E", 3), batch, set())], "seal (4 slices)": seals,
            "response (10,000 groups)": [response]}  # fmt: skip


def cpu(step: Callable[[], Any], repeat: int) -> float:
    """The median CPU seconds of ``step``."""
    times = []
    for _ in range(repeat):
        started = time.process_time()
        step()
        times.append(time.process_time() - started)
    return statistics.median(times)


def old(message: Any) -> Any:
    return pickle.loads(pickle.dumps(("stage", message), protocol=pickle.HIGHEST_PROTOCOL))


def new(message: Any) -> Any:
    payload = wire.encode(("stage", message))
    wire._mac(SESSION, b"c", b"\0" * 8, payload)  # the sender's
    wire._mac(SESSION, b"c", b"\0" * 8, payload)  # the receiver's
    return wire.decode(payload), len(payload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"{'message':26} {'pickle ms':>10} {'wire ms':>10} {'ratio':>6} {'pickle MB':>10} {'wire MB':>8}")
    for name, message in messages().items():
        assert new(message)[0] == ("stage", message)
        before = cpu(lambda m=message: old(m), args.repeat)
        after = cpu(lambda m=message: new(m), args.repeat)
        size_old = len(pickle.dumps(("stage", message), protocol=pickle.HIGHEST_PROTOCOL)) / 1e6
        size_new = new(message)[1] / 1e6
        print(
            f"{name:26} {before * 1e3:10.2f} {after * 1e3:10.2f} {after / before:6.2f} {size_old:10.2f} {size_new:8.2f}"
        )


if __name__ == "__main__":
    main()
