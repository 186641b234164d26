"""Which compiled kernels this installation has, and whether they load.

The kernels are the Cython extensions ``_*.pyx`` of the package ``ivm``, the runtime
``ivm.processor`` included (``setup.py`` compiles every one it finds; the wheel ships their
sources beside the compiled modules).  Each is optional: a module that uses one imports it and, when that fails (no C
compiler at install time), runs its Python reference loop instead, 5-10x slower but with the same
results.  This module says which case holds, so a slow installation is visible: ``ivm run`` and
``ivm demo`` log it at start-up, ``ivm check`` and ``ivm status`` print it, and the processor
exports it as the metric ``ivm_kernel_compiled{kernel}`` (1 loaded, 0 missing).

Guarantee: a kernel is reported ``compiled`` exactly when ``import_module`` of its name loads an
extension module (a ``.so``/``.pyd`` file); that is the module the code importing it uses, since
both resolve the same name on the same ``sys.path``.  Under CI (``$CI`` set to ``1``, ``true`` or
``yes``) :func:`require_compiled` raises :class:`KernelsMissing` for a missing one, so a CI run
that lost its compiler fails rather than passing slowly.

>>> report = kernels()
>>> all(k.module.rpartition(".")[2].startswith("_") for k in report)
True
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

#: the packages whose ``_*.pyx`` files are kernels (setup.py's discovery)
KERNEL_PACKAGES = ("ivm",)


class KernelsMissing(RuntimeError):
    """Under CI, a kernel did not compile or does not load; the message names each and why."""


@dataclass(frozen=True)
class Kernel:
    """One kernel: its module name, whether its compiled extension loads, from where, or why not."""

    module: str
    compiled: bool
    path: str | None = None  # the loaded extension file
    error: str | None = None  # why it does not load (the ImportError's message)

    def as_json(self) -> dict[str, object]:
        return {"module": self.module, "compiled": self.compiled, "path": self.path, "error": self.error}


def discover(packages: tuple[str, ...] = KERNEL_PACKAGES) -> list[str]:
    """The module names of the kernels: every ``_*.pyx`` under the installed ``packages``, sorted.

    A package that is not importable is skipped (a caller may name its own).
    """
    names: set[str] = set()
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        for location in spec.submodule_search_locations:
            root = Path(location)
            for source in root.rglob("_*.pyx"):
                parts = source.relative_to(root).with_suffix("").parts
                names.add(".".join((package, *parts)))
    return sorted(names)


def kernels(packages: tuple[str, ...] = KERNEL_PACKAGES) -> list[Kernel]:
    """Each kernel of :func:`discover` with whether it loads (importing it, as its users do)."""
    found = []
    for name in discover(packages):
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            found.append(Kernel(name, False, error=str(err) or type(err).__name__))
            continue
        path = getattr(module, "__file__", None) or ""
        compiled = path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
        found.append(Kernel(name, compiled, path or None, None if compiled else f"not an extension module: {path}"))
    return found


@functools.cache
def _installed() -> tuple[Kernel, ...]:
    return tuple(kernels())


def installed_kernels() -> list[Kernel]:
    """:func:`kernels` of the default packages, found once per process (what loads does not change)."""
    return list(_installed())


def summary(report: list[Kernel]) -> str:
    """One line: how many kernels load and which do not.

    >>> summary([Kernel("ivm.a._k", True, "/x.so"), Kernel("ivm.b._j", False, error="No module named 'ivm.b._j'")])
    'compiled kernels: 1 of 2 loaded; missing (their Python loops run, 5-10x slower): ivm.b._j'
    >>> summary([Kernel("ivm.a._k", True, "/x.so")])
    'compiled kernels: all 1 loaded'
    """
    missing = [k.module for k in report if not k.compiled]
    if not report:
        return "compiled kernels: none found (no _*.pyx in the installed packages)"
    if not missing:
        return f"compiled kernels: all {len(report)} loaded"
    loaded = len(report) - len(missing)
    return (
        f"compiled kernels: {loaded} of {len(report)} loaded; "
        f"missing (their Python loops run, 5-10x slower): {', '.join(missing)}"
    )


def under_ci() -> bool:
    """Whether ``$CI`` says this is a CI run (``1``, ``true`` or ``yes``, any case)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_compiled(report: list[Kernel] | None = None, ci: bool | None = None) -> list[Kernel]:
    """The report; under CI (``ci``, default :func:`under_ci`) :class:`KernelsMissing` if a kernel is missing.

    >>> require_compiled([Kernel("ivm.b._j", False, error="No module named 'ivm.b._j'")], ci=True)
    Traceback (most recent call last):
    ...
    ivm.kernels.KernelsMissing: CI requires every compiled kernel; missing: ivm.b._j (No module named 'ivm.b._j')
    """
    report = installed_kernels() if report is None else report
    if under_ci() if ci is None else ci:
        missing = [f"{k.module} ({k.error})" for k in report if not k.compiled]
        if missing:
            raise KernelsMissing(f"CI requires every compiled kernel; missing: {', '.join(missing)}")
    return report
