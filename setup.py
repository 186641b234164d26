"""Build the compiled kernels: every ``ivm/**/_*.pyx`` and ``processor/**/_*.pyx`` (Cython 3), each an
optional extension.

Everything else is declared in ``pyproject.toml``; ``pip install -e '.[test,bench]'``
cythonizes and compiles the extensions with no extra step.  They are optional:
without a C compiler the install still succeeds and the engines run their Python
reference loops (``implementation="auto"`` falls back to them).  A new kernel is a
new ``_name.pyx`` file beside the module that uses it; no edit here.
"""

from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent

KERNELS = [
    Extension(
        ".".join(path.relative_to(ROOT).with_suffix("").parts),
        [str(path.relative_to(ROOT))],
        extra_compile_args=["-O3"],
        optional=True,
    )
    for path in sorted([*(ROOT / "ivm").rglob("_*.pyx"), *(ROOT / "processor").rglob("_*.pyx")])
]

setup(ext_modules=cythonize(KERNELS, language_level=3, quiet=True))
