"""Build the compiled first-order kernel (``ivm/engines/_first_order_kernel.pyx``, Cython 3).

Everything else is declared in ``pyproject.toml``; ``pip install -e '.[test,bench]'``
cythonizes and compiles the extension with no extra step.  The extension is
optional: without a C compiler the install still succeeds and the engines run
the Python reference loop (``implementation="auto"`` falls back to it).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

KERNEL = Extension(
    "ivm.engines._first_order_kernel",
    ["ivm/engines/_first_order_kernel.pyx"],
    extra_compile_args=["-O3"],
    optional=True,
)

setup(ext_modules=cythonize([KERNEL], language_level=3, quiet=True))
