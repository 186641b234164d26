"""Update streams with known patterns (003 §5.3, from the proofs of Hu & Wang).

- :func:`windowed_stream`: random inserts through windows; one shared window
  gives joint FIFO, one window per relation per-relation FIFO only;
- :func:`break_fifo`: occasionally delete a live tuple other than the queue
  head, making a stream arbitrary (it exercises the monitors);
- :func:`hook_omv_stream`: the FIFO stream of Thm 3.9 (OMv) for Q_hook, every
  lifespan of length 2n², with the query times at which the answer is ``M v_i``;
- :func:`ex28_stream`: the nesting of Ex. 2.8 for Q_hier, on which the
  height-3 tree flips one tuple's status many times and the height-2 tree once.

Streams are lists of :class:`~ivm.updates.Update` (set semantics: every insert
is of an absent tuple, every delete of a present one).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from ivm.patterns.windows import CountWindow, TimeWindow, Windows
from ivm.query.model import Query
from ivm.updates import Update


def windowed_stream(
    query: Query,
    rng: random.Random,
    inserts: int,
    domain: int,
    window: int | Mapping[str, int],
) -> list[Update]:
    """``inserts`` random inserts of absent tuples over the query's relations, each
    followed by the expirations of a :class:`CountWindow`: one window of size
    ``window`` shared by all relations (joint FIFO) or, with a mapping, one per
    relation (each FIFO, not jointly).
    """
    relations = dict(query.relations)
    names = sorted(relations)
    if isinstance(window, int):
        shared = CountWindow(window)
        windows = Windows(dict.fromkeys(names, shared))
    else:
        windows = Windows({r: CountWindow(window[r], [r]) for r in names})
    live: set[tuple[str, tuple]] = set()
    out: list[Update] = []
    for t in range(inserts):
        for _ in range(20):
            rel = rng.choice(names)
            row = tuple(rng.randrange(domain) for _ in range(relations[rel]))
            if (rel, row) not in live:
                break
        else:
            continue
        update = Update(rel, row, 1)
        for expired in windows.admit(update, t):
            live.discard((expired.relation, expired.row))
            out.append(expired)
        live.add((rel, row))
        out.append(update)
    return out


def break_fifo(stream: Sequence[Update], rng: random.Random, rate: float, start: int = 0) -> list[Update]:
    """The stream with, after position ``start``, an extra delete of a random live tuple
    that is not its relation's oldest (probability ``rate`` per update); later
    updates of that tuple are dropped or re-based so the stream stays valid."""
    order: dict[str, dict[tuple, None]] = {}
    gone: set[tuple[str, tuple]] = set()
    out: list[Update] = []
    for k, u in enumerate(stream):
        key = (u.relation, u.row)
        queue = order.setdefault(u.relation, {})
        if u.mult > 0:
            gone.discard(key)
            queue[u.row] = None
            out.append(u)
        elif key in gone:
            gone.discard(key)  # we deleted it already
        else:
            queue.pop(u.row, None)
            out.append(u)
        if k >= start and rng.random() < rate:
            rel = rng.choice(sorted(order))
            rows = list(order[rel])
            if len(rows) > 1:
                row = rng.choice(rows[1:])
                del order[rel][row]
                gone.add((rel, row))
                out.append(Update(rel, row, -1))
    return out


def hook_omv_stream(
    matrix: Sequence[Sequence[int]], vectors: Sequence[Sequence[int]]
) -> tuple[list[Update], list[int]]:
    """Thm 3.9: the OMv reduction for Q_hook = π_x1 R1(x1,x2) ⋈ R2(x2,x3) ⋈ R3(x3).

    With n = len(matrix) and 1-based i, j: R1(i,j) for M_ij = 1 lives on
    [n²+in−j, 3n²+in−j]; R3(i) on [in, in+2n²]; R2(j,i) for (v_i)_j = 1 on
    [2n²+in−j, 4n²+in−j].  Every lifespan has length 2n², so the stream is
    (jointly) FIFO.  Ties: at one timestamp deletes come before inserts, in
    insertion order.  Returns the stream and, per i, the stream position (all
    events before time in+2n²) at which the answer is {x1 : (M v_i)_x1 = 1}.
    """
    n = len(matrix)
    events: list[tuple[int, int, int, Update]] = []  # (time, 0 delete / 1 insert, seq, update)
    seq = 0

    def life(start: int, length: int, relation: str, row: tuple[int, ...]) -> None:
        nonlocal seq
        events.append((start, 1, seq, Update(relation, row, 1)))
        events.append((start + length, 0, seq, Update(relation, row, -1)))
        seq += 1

    for i in range(1, n + 1):
        for j in range(1, n + 1):
            if matrix[i - 1][j - 1]:
                life(n * n + i * n - j, 2 * n * n, "R1", (i, j))
    for i in range(1, n + 1):
        life(i * n, 2 * n * n, "R3", (i,))
        for j in range(1, n + 1):
            if vectors[i - 1][j - 1]:
                life(2 * n * n + i * n - j, 2 * n * n, "R2", (j, i))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    stream = [e[3] for e in events]
    probes = []
    for i in range(1, n + 1):
        t = i * n + 2 * n * n
        # the answer at time t: after every event strictly before t (deletes at t come first, so stop there)
        probes.append(sum(1 for e in events if e[0] < t))
    return stream, probes


def ex28_stream(m: int, width: int = 1) -> list[Update]:
    """Ex. 2.8 generalized, for Q_hier = π_∅ R1(x1,x2) ⋈ R2(x2,w...) ⋈ R3(x1).

    R3(a_1..a_m) arrive, then ``width`` tuples R2(b, w) (``width = 1``: R2(b)
    unary unless the caller's query is wider), then R1(a_i, b) and the
    expiration of R3(a_i) alternate.  Deletes happen in insertion order (a FIFO
    prefix), yet on the height-3 tree R2 ← R1 ← R3 the key b of R1 flips 2m
    times and every flip fans out to the ``width`` R2-tuples; on the height-2
    tree (R1 on top) every update costs O(1).
    """
    out = [Update("R3", (f"a{i}",), 1) for i in range(m)]
    out += [Update("R2", ("b",) if width == 1 else ("b", w), 1) for w in range(width)]
    for i in range(m):
        out.append(Update("R1", (f"a{i}", "b"), 1))
        out.append(Update("R3", (f"a{i}",), -1))
    return out


__all__ = ["TimeWindow", "break_fifo", "ex28_stream", "hook_omv_stream", "windowed_stream"]
