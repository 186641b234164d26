"""Build the compiled kernels: every ``ivm/**/_*.pyx`` (Cython 3; the runtime's under ``ivm/processor/``), each an
optional extension.

Everything else is declared in ``pyproject.toml``; ``pip install -e '.[test,bench]'``
cythonizes and compiles the extensions with no extra step.  They are optional:
without a C compiler the install still succeeds and the engines run their Python
reference loops (``implementation="auto"`` falls back to them); ``ivm check``,
the start-up log and the metric ``ivm_kernel_compiled`` say so (``ivm/kernels.py``).
A new kernel is a new ``_name.pyx`` file beside the module that uses it; no edit here.

The extensions compile in parallel, one per CPU (``build_ext --parallel``), each cythonized when it is
built (one at a time: the Cython compiler is not thread-safe), so an sdist cythonizes nothing.

``$IVM_PREBUILT_KERNELS``, a folder holding compiled kernels (a checkout after
``pip install -e .``), lets a build reuse them instead of compiling: a kernel's
compiled module there is copied when its ``.pyx``, every ``.pxd`` of the two
packages and this file are byte for byte the ones being built and the module is
newer than all of them; any other kernel compiles.  The packaging test
(``tests/integration/test_wheel.py``) sets it to build a wheel from the sdist in
seconds; without the variable every build compiles.
"""

import os
import shutil
import sys
import threading
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PACKAGES = ("ivm",)

KERNELS = [
    Extension(
        ".".join(path.relative_to(ROOT).with_suffix("").parts),
        [str(path.relative_to(ROOT))],
        extra_compile_args=["-O3"],
        optional=True,
    )
    for path in sorted(path for package in PACKAGES for path in (ROOT / package).rglob("_*.pyx"))
]


class BuildKernels(build_ext):
    """``build_ext`` that cythonizes each kernel as it builds it, or copies it from ``$IVM_PREBUILT_KERNELS`` when
    it is the same build (see above)."""

    _cython = threading.Lock()

    def build_extension(self, ext: Extension) -> None:
        prebuilt = self._prebuilt(ext)
        if prebuilt is None:
            with self._cython:
                (generated,) = cythonize([ext], compiler_directives={"language_level": 3}, quiet=True)
            ext.sources = generated.sources  # the .c file: ext keeps what build_ext's finalize gave it
            super().build_extension(ext)
            return
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(prebuilt, target)
        print(f"reusing the compiled kernel {ext.name} from {prebuilt}", file=sys.stderr)

    def _prebuilt(self, ext: Extension) -> Path | None:
        folder = os.environ.get("IVM_PREBUILT_KERNELS")
        if not folder:
            return None
        other = Path(folder).resolve()
        if other == ROOT:
            return None  # the folder being built: nothing to compare with
        module = other / self.get_ext_filename(ext.name)
        source = Path(*ext.name.split(".")).with_suffix(".pyx")
        inputs = [source, Path("setup.py")]
        inputs += [p.relative_to(ROOT) for package in PACKAGES for p in (ROOT / package).rglob("*.pxd")]
        if not module.is_file():
            return None
        built = module.stat().st_mtime
        for name in inputs:
            mine, theirs = ROOT / name, other / name
            if not theirs.is_file() or mine.read_bytes() != theirs.read_bytes() or theirs.stat().st_mtime > built:
                return None
        return module


setup(
    ext_modules=KERNELS,
    cmdclass={"build_ext": BuildKernels},
    options={"build_ext": {"parallel": os.cpu_count() or 1}},
)
