"""The runtime's namespace (issue 40): ``ivm.processor`` grouped by concern, no import circles in it, the engine
library independent of it, and the deprecated alias ``processor`` handing out the very same modules."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "ivm" / "processor"


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """Every runtime module -> the runtime modules it imports, at module level or inside a function."""
    modules = {_module_name(p): p for p in RUNTIME.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_circles_finds_a_circle() -> None:
    """The detector itself: the two circles the runtime had before the regrouping."""
    graph = {"job": {"placement.driver"}, "placement.driver": {"job", "pipeline"}, "pipeline": {"planning"},
             "planning": {"pipeline"}, "config": set()}  # fmt: skip
    assert sorted(circles(graph)) == [["job", "placement.driver"], ["pipeline", "planning"]]


def test_the_runtime_has_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) > 40 and "ivm.processor.state.snapshots" in graph["ivm.processor.placement.driver"]
    assert circles(graph) == []


def test_the_engine_library_never_imports_the_runtime() -> None:
    for path in (ROOT / "ivm").rglob("*.py"):
        if RUNTIME in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            assert not any(n == "ivm.processor" or n.startswith("ivm.processor.") for n in names), path


def test_each_concern_has_its_folder() -> None:
    expected = {
        "codecs": {"avro", "confluent", "varint"},
        "kafka": {"clients", "topics", "sink", "produce", "subscribe", "deadletters"},
        "state": {"relations", "snapshots", "recovery", "leftovers", "collector"},
        "operations": {"metrics", "heartbeat", "logs", "progress"},
    }
    for folder, modules in expected.items():
        assert {p.stem for p in (RUNTIME / folder).glob("*.py")} - {"__init__"} >= modules, folder
        assert (RUNTIME / folder / "__init__.py").read_text().startswith('"""'), folder


def test_the_deprecated_alias_gives_the_same_modules() -> None:
    import ivm.processor.codecs.avro
    import ivm.processor.job

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = importlib.import_module("processor.job")
        from processor.codec import RelationCodec  # type: ignore[import-not-found]
        from processor.placement.routing import slice_count  # type: ignore[import-not-found]
    assert job is ivm.processor.job and job.__spec__.name == "ivm.processor.job"
    assert RelationCodec is ivm.processor.codecs.avro.RelationCodec
    assert slice_count.__module__ == "ivm.processor.placement.routing"
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert "processor.codec is deprecated: import ivm.processor.codecs.avro" in messages
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("processor.no_such_module")


def test_every_old_name_resolves() -> None:
    import processor  # type: ignore[import-not-found]

    for old, new in processor.MOVED.items():
        assert processor.new_name(f"processor.{old}") == f"ivm.processor.{new}"
        assert importlib.util.find_spec(f"ivm.processor.{new}") is not None, new


def test_the_alias_is_not_packaged() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'include = ["ivm*"]' in pyproject
    # a fresh interpreter that imports the library and the runtime never touches the alias
    code = "import sys, ivm, ivm.processor.job; print('processor' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
