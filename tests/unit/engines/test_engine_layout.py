"""The engines' layout (issue 38): one folder per engine with its kernels beside it, no import circles.

- no kernel (``_*.pyx``/``.pxd``) at the root of ``ivm/engines/``: each sits in its engine's folder;
- ``qhier/engine.py`` never imports ``qhier/compact.py`` (the compact engine registers itself in
  ``qhier/registry.py``), and ``ivm_eps/engine.py`` never imports the variants it becomes (they register
  in ``ivm_eps/variants.py``): checked on the source, function-level imports included;
- the registries answer what registered, and refuse an unknown name by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ivm
from ivm.engines.ivm_eps import IVMEps, IVMEpsListing, IVMEpsSelfJoin, IVMEpsTriangle
from ivm.engines.ivm_eps.variants import variant
from ivm.engines.qhier import registry
from ivm.engines.qhier.compact import QHierCompactEngine, compact_available
from ivm.engines.qhier.engine import QHierEngine

ENGINES_DIR = Path(ivm.__file__).parent / "engines"


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (``from a import b`` counts ``a`` and ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_kernel_at_the_root_of_engines() -> None:
    assert not [p.name for p in ENGINES_DIR.glob("_*.p*") if p.suffix in (".pyx", ".pxd")]
    folders = {p.parent.name for p in ENGINES_DIR.rglob("_*.pyx")}
    assert {"qhier", "first_order", "fivm"} <= folders


def test_the_reference_qhier_engine_does_not_import_the_compact_one() -> None:
    imports = imported_modules(ENGINES_DIR / "qhier" / "engine.py")
    assert "ivm.engines.qhier.compact" not in imports and "ivm.engines.qhier.registry" in imports
    assert "ivm.engines.qhier.engine" in imported_modules(ENGINES_DIR / "qhier" / "compact.py")


def test_the_ivm_eps_entry_point_does_not_import_its_variants() -> None:
    imports = imported_modules(ENGINES_DIR / "ivm_eps" / "engine.py")
    for variant_module in ("listing", "self_join", "triangle"):
        assert f"ivm.engines.ivm_eps.{variant_module}" not in imports, variant_module
    assert "ivm.engines.ivm_eps.variants" in imports


def test_the_registries_build_what_registered() -> None:
    query = ivm.parse("Q(x) :- R(x,y), S(x)")
    assert registry.implementation("compact") == (QHierCompactEngine, compact_available)
    assert type(QHierEngine(query, implementation="python")) is QHierEngine
    if compact_available():
        assert type(QHierEngine(query)) is QHierCompactEngine
    with pytest.raises(LookupError, match="'columnar'"):
        registry.implementation("columnar")
    assert (variant("count"), variant("self_join"), variant("listing")) == (
        IVMEpsTriangle,
        IVMEpsSelfJoin,
        IVMEpsListing,
    )
    assert type(IVMEps(ivm.parse("Q() :- E(a,b), E(b,c), E(c,a)"))) is IVMEpsSelfJoin
    assert type(IVMEps(ivm.parse("Q(a,b,c) :- R(a,b), S(b,c), T(c,a)"))) is IVMEpsListing
    assert type(IVMEps(ivm.parse("Q() :- R(a,b), S(b,c), T(c,a)"))) is IVMEpsTriangle
    with pytest.raises(LookupError, match="'star'"):
        variant("star")  # type: ignore[arg-type]
