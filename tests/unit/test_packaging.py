"""The package as users install it (issue 40): the base install's imports, the shipped files read through
``importlib.resources`` wherever the process runs, the state folder outside the installed package, and the
report of the compiled kernels.  ``tests/unit/test_wheel.py`` builds and installs the real wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ivm.kernels
import ivm.resources
from ivm.kernels import Kernel, KernelsMissing, discover, kernels, require_compiled, summary
from ivm.processor.cli import EXTRA_MODULES, main
from ivm.processor.local import stack
from ivm.query.schemas import load_avro_schemas, registered_schemas

ROOT = Path(__file__).resolve().parents[2]

#: Run in a child: every module of an extra refuses to import, as on a base install (`pip install ivm-kafka`).
BASE_INSTALL = """
import importlib.abc, sys
EXTRAS = {extras!r}
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in EXTRAS:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, NotInstalled())
"""


def base_install(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter without the extras' modules, from a folder that is not the checkout."""
    program = BASE_INSTALL.format(extras=sorted(EXTRA_MODULES)) + textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("IVM_SCHEMAS", None)
    return subprocess.run(
        [sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=300, cwd="/", env=env
    )


def test_base_install_imports_the_library_and_runs_ivm_help() -> None:
    done = base_install(
        """
        import sys
        import ivm
        view = ivm.maintain("Q() :- R(a,b), S(b,c), T(c,a)")
        view.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 1), 1), ("R", (4, 2), 1), ("T", (3, 4), 1)])
        print("triangles", view.result())
        from ivm.processor.cli import main
        try:
            main(["--help"])
        except SystemExit as stop:
            print("help exit", stop.code)
        heavy = sorted(m for m in sys.modules if m.partition(".")[0] in EXTRAS)
        print("heavy", heavy)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "triangles 2" in done.stdout
    assert "help exit 0" in done.stdout and "check" in done.stdout and "run" in done.stdout
    assert "heavy []" in done.stdout


def test_base_install_names_the_missing_extra_in_one_line() -> None:
    done = base_install(
        """
        import sys
        from ivm.processor.cli import main
        sys.exit(main(["check", "-c", sys.argv[1]]))
        """,
        str(ROOT / "config" / "demo.toml"),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == (
        "ivm check: needs pydantic, of the 'processor' extra, which this install lacks: "
        "pip install 'ivm-kafka[processor]'"
    )


def test_the_produce_parser_offers_what_the_producer_reads() -> None:
    from ivm.processor.commands import produce as command
    from ivm.processor.kafka import produce

    assert command.FORMATS == produce.FORMATS and command.SEPARATORS == produce.SEPARATORS


def test_every_extra_module_is_declared_in_pyproject() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    declared = " ".join(extras["processor"] + extras["bench"]).replace("-", "_").lower()
    names = {"yaml": "pyyaml", "pydantic_core": "pydantic"}  # a module of another distribution's name
    for module in EXTRA_MODULES:
        assert names.get(module, module) in declared, module


# --- the shipped files ---------------------------------------------------------------------------------


def test_shipped_files_are_read_through_the_package_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IVM_SCHEMAS", raising=False)
    monkeypatch.delenv("IVM_DATA", raising=False)
    monkeypatch.chdir(tmp_path)  # no schemas/ here: the old default ./schemas found nothing
    registered = registered_schemas()
    assert registered == load_avro_schemas(ROOT / "schemas")
    assert {k: registered[k] for k in "RST"} == {"R": ["A", "B"], "S": ["B", "C"], "T": ["C", "A"]}
    package = Path(ivm.resources.__file__).parent
    assert ivm.resources.schemas_dir() == (package / "schemas").resolve()  # a checkout: the linked folder itself
    assert (ivm.resources.schemas_dir() / "control.avsc").read_bytes() == (
        ROOT / "schemas" / "control.avsc"
    ).read_bytes()
    assert ivm.resources.example_config().read_text() == (ROOT / "config" / "demo.toml").read_text()
    assert (ivm.resources.data_dir() / "graphs" / "facebook_combined.edges.gz").is_file()
    assert sorted(p.name for p in (ivm.resources.monitoring_dir() / "rules").glob("*.yml")) == sorted(
        p.name for p in (ROOT / "monitoring" / "rules").glob("*.yml")
    )
    from ivm.processor.codecs.avro import schemas_dir
    from ivm.processor.data import sample_graph

    assert schemas_dir() == ivm.resources.schemas_dir()
    assert sample_graph().is_relative_to((package / "data").resolve())  # through the package (cwd is tmp_path)


def test_the_environment_overrides_the_shipped_schemas_and_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "relations").mkdir()
    record = {
        "type": "record",
        "name": "E",
        "fields": [{"name": "X", "type": "long"}, {"name": "mult", "type": "long"}],
    }
    (tmp_path / "relations" / "E.avsc").write_text(json.dumps(record))
    monkeypatch.setenv("IVM_SCHEMAS", str(tmp_path))
    monkeypatch.setenv("IVM_DATA", str(tmp_path / "data"))
    assert registered_schemas() == {"E": ["X"]}
    from ivm.processor.data import sample_graph

    assert sample_graph() == tmp_path / "data" / "graphs" / "facebook_combined.edges.gz"


def test_a_name_that_is_not_shipped_is_refused() -> None:
    with pytest.raises(ivm.resources.ResourceError, match="is not shipped"):
        ivm.resources.shipped("tests/conftest.py")
    with pytest.raises(ivm.resources.ResourceError, match="is missing"):
        ivm.resources.shipped("schemas/nothing.avsc")


def test_package_data_declares_every_shipped_file() -> None:
    """What pyproject.toml's package data lists is what the checkout's folders hold: a new dashboard, rule or
    schema that no pattern covers would be missing from the wheel."""
    import fnmatch
    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    listed = patterns["ivm.resources"]
    package = Path(ivm.resources.__file__).parent
    for folder in ivm.resources.FOLDERS:
        assert (package / folder).resolve() == (ROOT / folder).resolve(), folder  # the checkout's link
        for path in (ROOT / folder).rglob("*"):
            if path.is_file():
                name = f"{folder}/{path.relative_to(ROOT / folder)}"
                assert any(fnmatch.fnmatch(name, p) and name.count("/") == p.count("/") for p in listed), name


# --- where state goes --------------------------------------------------------------------------------


def test_state_goes_to_the_checkouts_local_folder_or_the_users_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IVM_LOCAL", raising=False)
    assert stack.in_checkout()
    assert stack.local_dir() == ROOT / ".local"
    installed = tmp_path / "site-packages"  # no pyproject.toml beside the package: an installed wheel
    installed.mkdir()
    monkeypatch.setattr(stack, "project_root", lambda: installed)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    assert stack.local_dir() == tmp_path / "home" / ".local" / "state" / "ivm-kafka"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert stack.local_dir() == tmp_path / "xdg" / "ivm-kafka"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")  # the XDG rule: only an absolute path counts
    assert stack.local_dir() == tmp_path / "home" / ".local" / "state" / "ivm-kafka"
    monkeypatch.setenv("IVM_LOCAL", str(tmp_path / "mine"))
    assert stack.local_dir() == tmp_path / "mine"


# --- the compiled kernels ----------------------------------------------------------------------------


def test_kernels_are_the_pyx_files_setup_py_compiles() -> None:
    expected = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for package in ("ivm", "processor")
        for p in (ROOT / package).rglob("_*.pyx")
    )
    assert discover() == expected
    assert len(expected) >= 10 and "ivm.engines._qhier_kernel" in expected


def test_each_kernel_is_reported_as_it_loads() -> None:
    report = kernels()
    for k in report:
        assert k.compiled == (k.module in sys.modules and str(sys.modules[k.module].__file__).endswith(".so")), k
        assert (k.path is not None) == k.compiled and (k.error is None) == k.compiled
    if ivm.kernels.under_ci():  # CI builds every kernel: a missing one fails here, never skips
        assert all(k.compiled for k in report), summary(report)
    missing = kernels(("tests",))  # no kernels there
    assert missing == []


def test_a_kernel_that_does_not_load_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ivm.kernels.importlib.import_module

    def without_qhier(name: str):
        if name == "ivm.engines._qhier_kernel":
            raise ImportError(f"No module named {name!r}")
        return real(name)

    monkeypatch.setattr(ivm.kernels.importlib, "import_module", without_qhier)
    report = kernels()
    (missing,) = [k for k in report if not k.compiled and k.module == "ivm.engines._qhier_kernel"]
    assert missing.error == "No module named 'ivm.engines._qhier_kernel'"
    assert "missing (their Python loops run, 5-10x slower): " in summary(report)
    assert "ivm.engines._qhier_kernel" in summary(report)
    with pytest.raises(KernelsMissing, match=r"ivm\.engines\._qhier_kernel \(No module named"):
        require_compiled(report, ci=True)
    assert require_compiled(report, ci=False) == report


@pytest.mark.parametrize(("value", "ci"), [("true", True), ("1", True), ("YES", True), ("", False), ("false", False)])
def test_ci_is_read_from_the_environment(value: str, ci: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", value)
    assert ivm.kernels.under_ci() is ci


def test_the_metric_says_which_kernels_load() -> None:
    from prometheus_client import generate_latest

    from ivm.processor.operations.metrics import Metrics

    metrics = Metrics()
    metrics.observe_kernels([Kernel("ivm.a._k", True, "/k.so"), Kernel("ivm.b._j", False, error="absent")])
    text = generate_latest(metrics.registry).decode()
    assert 'ivm_kernel_compiled{kernel="ivm.a._k"} 1.0' in text
    assert 'ivm_kernel_compiled{kernel="ivm.b._j"} 0.0' in text
    for k in kernels():  # a new Metrics exports the installation's own at once
        assert f'ivm_kernel_compiled{{kernel="{k.module}"}} {float(k.compiled)}' in text


def test_ivm_check_prints_the_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "-c", str(ivm.resources.example_config())]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == summary(kernels())
    assert f"schema:   {(ivm.resources.schemas_dir() / 'relations' / 'R.avsc').resolve()}" in out


def test_ivm_status_renders_the_kernels() -> None:
    from ivm.processor.commands.status import kernels_document, render_text

    document = kernels_document()
    assert [k["module"] for k in document] == discover()
    status = {
        "pipeline": "p",
        "process": {"summary": "never ran here"},
        "last_committed_batch": None,
        "total_lag": 0,
        "state_dir": "/s",
        "snapshots": [],
        "kernels": [Kernel("ivm.a._k", True, "/k.so").as_json(), Kernel("ivm.b._j", False, error="x").as_json()],
    }
    assert render_text(status)[-1] == (
        "compiled kernels: 1 of 2 loaded; missing (their Python loops run, 5-10x slower): ivm.b._j (this installation)"
    )


def test_ivm_run_fails_under_ci_when_a_kernel_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ivm.processor.commands import run

    monkeypatch.setattr(ivm.kernels, "_installed", lambda: (Kernel("ivm.b._j", False, error="absent"),))
    monkeypatch.setenv("CI", "true")
    assert run.kernels_at_start() is False
    assert capsys.readouterr().err.strip() == "ivm run: CI requires every compiled kernel; missing: ivm.b._j (absent)"
    monkeypatch.setenv("CI", "")
    assert run.kernels_at_start() is True
