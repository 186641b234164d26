"""The q-hierarchical engine's implementations by name, below both of them (issue 38).

:class:`~ivm.engines.qhier.engine.QHierEngine` is the reference (``implementation="python"``);
:class:`~ivm.engines.qhier.compact.QHierCompactEngine` keeps the same structure (Berkholz et al.,
PODS'17, Thm 3.2) in the typed arrays of the compiled ``_qhier_kernel``.  The reference picks the
implementation in its constructor and reads compact snapshots back; the compact engine subclasses
the reference.  So that neither module imports the other in a circle, the compact engine
*registers* itself here when its module is imported (the package ``ivm.engines.qhier`` imports
both, so the registration has happened before any user can build an engine), and this module
holds the one function both need, :func:`python_state` (a compact snapshot in the reference's
format).  Guarantee: :func:`implementation` answers exactly what was registered; an unregistered
name is a :class:`LookupError` naming it, never a silent fallback.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from ivm.updates import Row

#: codes at or above this are interned values (index ``code - TAG`` in a compact snapshot's ``values``)
TAG = 1 << 62

_REGISTERED: dict[str, tuple[type[Any], Callable[[], bool]]] = {}


def register(name: str, engine: type[Any], available: Callable[[], bool]) -> None:
    """Make ``engine`` the class ``implementation=name`` builds; ``available()`` says whether it can run here
    (its kernel is compiled), which ``"auto"`` asks at each construction.  O(1)."""
    _REGISTERED[name] = (engine, available)


def implementation(name: str) -> tuple[type[Any], Callable[[], bool]]:
    """The class registered as ``name`` and its availability test; a :class:`LookupError` if none is.

    >>> import ivm.engines.qhier
    >>> implementation("compact")[0].__name__
    'QHierCompactEngine'
    """
    try:
        return _REGISTERED[name]
    except KeyError:
        raise LookupError(
            f"no q-hierarchical implementation {name!r} is registered (registered: {sorted(_REGISTERED)}); "
            "import ivm.engines.qhier, which registers them"
        ) from None


def python_state(state: dict[str, Any]) -> dict[str, Any]:
    """A compact snapshot's state in the reference's format (``base`` as dicts); O(state), pure Python.

    >>> s = {"relations": [("R", 2, array("q", [1, TAG]).tobytes(), array("q", [3]).tobytes())], "values": ["a"]}
    >>> python_state(s)["base"]
    {'R': {(1, 'a'): 3}}
    """
    values = state["values"]
    base: dict[str, dict[Row, int]] = {}
    for name, arity, codes_bytes, mults_bytes in state["relations"]:
        codes, mults = array("q"), array("q")
        codes.frombytes(codes_bytes)
        mults.frombytes(mults_bytes)
        decoded = [c if c < TAG else values[c - TAG] for c in codes]
        base[name] = {tuple(decoded[i * arity : (i + 1) * arity]): m for i, m in enumerate(mults)}
    out = {k: v for k, v in state.items() if k not in ("relations", "values", "implementation")}
    out["base"] = base
    return out
