"""Deprecated alias: the runtime is now :mod:`ivm.processor`, its modules grouped by concern.

``import processor.X`` (and ``from processor.X import ...``) still works from a checkout of the repository for
one release, with a :class:`DeprecationWarning` naming the new module; the installed package (the wheel, the
sdist) does not carry this alias, so nothing named ``processor`` is installed beside other distributions.  The
alias hands out the very module objects of :mod:`ivm.processor` (``processor.job is ivm.processor.job``), so
patches and ``isinstance`` checks see one module, not a copy.

Old name -> new name: :data:`MOVED`.  Planned removal: the release after the one that introduced
``ivm.processor``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: ``processor.<old>`` -> ``ivm.processor.<new>``; a module below a moved package keeps its path under it
MOVED = {
    "bootstrap": "bootstrap",
    "cli": "cli",
    "config": "config",
    "control": "control",
    "data": "data",
    "demo": "demo",
    "job": "job",
    "pipeline": "pipeline",
    "planning": "planning",
    "publish": "publish",
    "submit": "submit",
    "codec": "codecs.avro",
    "wire": "codecs.confluent",
    "varint": "codecs.varint",
    "_varint_kernel": "codecs._varint_kernel",
    "kafka_clients": "kafka.clients",
    "topics": "kafka.topics",
    "sink": "kafka.sink",
    "produce": "kafka.produce",
    "subscribe": "kafka.subscribe",
    "deadletters": "kafka.deadletters",
    "relations": "state.relations",
    "_admit_kernel": "state._admit_kernel",
    "snapshots": "state.snapshots",
    "recovery": "state.recovery",
    "leftovers": "state.leftovers",
    "collector": "state.collector",
    "metrics": "operations.metrics",
    "heartbeat": "operations.heartbeat",
    "logs": "operations.logs",
    "progress": "operations.progress",
    "placement": "placement",
    "local": "local",
    "commands": "commands",
}


def new_name(old: str) -> str | None:
    """``processor.a.b`` -> ``ivm.processor.<MOVED[a]>.b``, or ``None`` when ``a`` never was a module."""
    head, _, rest = old.removeprefix("processor.").partition(".")
    if head not in MOVED:
        return None
    return ".".join(part for part in ("ivm.processor", MOVED[head], rest) if part)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``processor.*`` to the module of its new name, keeping that module's own spec."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("processor."):
            return None
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=False)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_name(spec.name)
        assert new is not None
        warnings.warn(f"{spec.name} is deprecated: import {new}", DeprecationWarning, stacklevel=4)
        module = importlib.import_module(new)
        self._spec = module.__spec__  # the import system sets the alias's spec on it; exec_module puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec


if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Alias())
