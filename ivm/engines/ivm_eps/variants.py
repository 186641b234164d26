"""The engines behind the name ``ivm_eps``, by the shape they maintain, below the entry point (issue 38).

:class:`~ivm.engines.ivm_eps.engine.IVMEps` becomes, in its constructor, the engine that fits the
query (IVM^eps §3 Theorem 3, Appendix B, Appendix E Theorem 21); those engines subclass it.  So that
the entry point does not import its own subclasses (a circle), each registers itself here under its
shape when its module is imported, and the entry point looks the shape up.  The package
``ivm.engines.ivm_eps`` imports every variant, so all are registered before an engine can be built.
Guarantee: :func:`variant` returns exactly the registered class; a shape nobody registered is a
:class:`LookupError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

#: the shapes: the triangle count over three atoms, the direct self-join over one edge relation, listing
Shape = Literal["count", "self_join", "listing"]
SHAPES: tuple[str, ...] = ("count", "self_join", "listing")

_VARIANTS: dict[str, type[Any]] = {}

T = TypeVar("T", bound=type)


def register(shape: Shape) -> Callable[[T], T]:
    """A class decorator: the decorated engine maintains queries of ``shape``.  O(1)."""
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")

    def add(cls: T) -> T:
        _VARIANTS[shape] = cls
        return cls

    return add


def variant(shape: Shape) -> type[Any]:
    """The engine registered for ``shape``.

    >>> import ivm.engines.ivm_eps
    >>> variant("self_join").__name__
    'IVMEpsSelfJoin'
    """
    try:
        return _VARIANTS[shape]
    except KeyError:
        raise LookupError(
            f"no IVM^eps engine is registered for the shape {shape!r} (registered: {sorted(_VARIANTS)}); "
            "import ivm.engines.ivm_eps, which registers them"
        ) from None
