"""The bytes of an engine's state, for ``stats()["state_bytes"]`` and ``["bytes_per_tuple"]`` (issue 38).

Engines whose state is compiled (F-IVM's column stores, the q-hierarchical compact state, the
triangle's C tables) count their own allocations.  Every other engine keeps Python objects (dicts,
sets, tuples, ints), and :func:`deep_bytes` counts those: ``sys.getsizeof`` of every object
reachable from the engine's attributes, each object once (by identity), walking dicts, lists,
tuples, sets, deques, objects with a ``__dict__`` or ``__slots__``, and numpy arrays
(``getsizeof`` counts an array's own data; a view's base is counted once).  Not counted: objects
the interpreter shares with everything else (classes, functions, modules, ``None``, ``True``,
``False``, the small ints -5..256 CPython caches, the engine's query), so the figure is what the
state adds to the process.  It is a lower bound of the allocator's footprint (``getsizeof`` is the
object, not its malloc padding or the arena's free space), the measure the Python reference of the
q-hierarchical engine has always reported.

The walk is O(state), so :class:`Gauge` re-measures only when the number of stored tuples moved by
an eighth (or 256) since the last measurement: ``stats()`` stays amortized O(1) per update, and the
figure lags the state by at most that much.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

import numpy as np

_SMALL = range(-5, 257)
_SHARED = (type, ModuleType, FunctionType, BuiltinFunctionType, MethodType)
_LEAVES = frozenset({float, str, bytes, complex})


def deep_bytes(roots: Iterable[Any], skip: Iterable[Any] = ()) -> int:
    """``sys.getsizeof`` summed over every object reachable from ``roots``, each once; O(objects).

    ``skip``: objects not to count nor enter (shared with something counted elsewhere).

    >>> deep_bytes([{(1, 2): 1}]) == sys.getsizeof({(1, 2): 1}) + sys.getsizeof((1, 2))
    True
    >>> deep_bytes([[10**30, 10**30]]) > deep_bytes([[1, 2]])
    True
    """
    seen: set[int] = {id(x) for x in skip}
    total = 0
    stack = list(roots)
    size = sys.getsizeof
    while stack:
        obj = stack.pop()
        key = id(obj)
        if key in seen:
            continue
        seen.add(key)
        t = type(obj)
        if t is int:
            if obj not in _SMALL:
                total += size(obj)
            continue
        if t in _LEAVES:
            total += size(obj)
            continue
        if obj is None or t is bool or isinstance(obj, _SHARED):
            continue
        if isinstance(obj, np.ndarray):
            total += size(obj)  # (an array that owns its data counts it here; a view counts its base below)
            if obj.base is not None:
                stack.append(obj.base)
            if obj.dtype == object:
                stack.extend(obj.ravel().tolist())
            continue
        total += size(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            stack.extend(obj)
        else:
            attrs = getattr(obj, "__dict__", None)
            if attrs is not None:
                stack.append(attrs)
            for cls in t.__mro__:
                for name in cls.__dict__.get("__slots__", ()):
                    if name in ("__dict__", "__weakref__"):
                        continue
                    value = getattr(obj, name, None)
                    if value is not None:
                        stack.append(value)
    return total


class Gauge:
    """An amortized measurement of a state's bytes (see the module docstring)."""

    __slots__ = ("bytes", "tuples")

    def __init__(self) -> None:
        self.tuples = -1
        self.bytes = 0

    def __reduce__(self) -> tuple[type[Gauge], tuple[()]]:
        return (Gauge, ())  # a snapshot carries no measurement: the restored state is measured afresh

    def read(self, tuples: int, measure: Callable[[], int]) -> dict[str, int | float]:
        """``state_bytes`` and ``bytes_per_tuple`` for a state of ``tuples`` stored tuples; ``measure()`` runs
        when ``tuples`` moved by more than ``max(256, tuples / 8)`` since the last run (or never ran)."""
        if self.tuples < 0 or abs(tuples - self.tuples) > max(256, self.tuples // 8):
            self.bytes = int(measure())
            self.tuples = tuples
        return {"state_bytes": self.bytes, "bytes_per_tuple": round(self.bytes / tuples, 1) if tuples else 0.0}


def engine_bytes(engine: Any, exclude: Iterable[str] = ()) -> int:
    """:func:`deep_bytes` of ``engine``'s attributes except its query, its gauge and ``exclude``d names."""
    attrs = getattr(engine, "__dict__", {})
    roots = [v for k, v in attrs.items() if k not in ("query", "_gauge", *exclude)]
    return deep_bytes(roots, skip=[attrs.get("query")])


def state_memory(engine: Any, tuples: int, exclude: Iterable[str] = ()) -> dict[str, int | float]:
    """``state_bytes`` / ``bytes_per_tuple`` of an engine with Python state, amortized by its :class:`Gauge`
    (kept on the engine as ``_gauge``; a restored engine measures afresh)."""
    gauge = engine.__dict__.get("_gauge")
    if gauge is None:
        gauge = engine.__dict__["_gauge"] = Gauge()
    return gauge.read(tuples, lambda: engine_bytes(engine, exclude))  # type: ignore[no-any-return]
