"""The files the distribution ships beside its code, read through :mod:`importlib.resources`.

``ivm-kafka`` ships, as package data of this package:

- ``schemas/``: the Avro schemas of the output topics (``result``, ``delta``, ``model``, ``progress``,
  ``dead_letter``, ``control``) and the example relations ``relations/{R,S,T}.avsc``;
- ``config/demo.toml``: the example pipeline configuration (``ivm demo``, ``ivm check``);
- ``data/``: the sample graph (SNAP ego-Facebook, its licence and citation in ``data/README.md``);
- ``monitoring/``: the Grafana dashboards, the Prometheus alert rules and scrape configuration.

In a checkout the four folders are symbolic links to the repository's top-level ``schemas/``,
``config/``, ``data/`` and ``monitoring/`` (the files are kept, edited and reviewed there); a wheel or
an sdist holds copies, so a checkout (editable or not) and an installed wheel read the same names
from the same place: ``importlib.resources.files("ivm.resources")``.  ``$IVM_SCHEMAS`` and
``$IVM_DATA`` override the schemas and the data folder (a deployment's own schemas, a data volume).

Guarantee: every function returns a real folder or file on the file system (pip installs packages
as files); a package imported from a zip archive is refused with :class:`ResourceError` naming the
cause, rather than returning a path nothing can open.

>>> (schemas_dir() / "control.avsc").is_file() or "IVM_SCHEMAS" in os.environ
True
>>> example_config().name
'demo.toml'
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

__all__ = ["ResourceError", "data_dir", "example_config", "monitoring_dir", "schemas_dir", "shipped"]

#: the shipped folders, as named under this package
FOLDERS = ("schemas", "config", "data", "monitoring")


class ResourceError(RuntimeError):
    """A shipped file is missing or not on the file system; the message names it and the cause."""


def shipped(name: str, check: bool = True) -> Path:
    """The shipped file or folder ``name`` (``"schemas"``, ``"config/demo.toml"``), as a path.

    Raises :class:`ResourceError` for a name that is not shipped, a package not installed as files, or
    (``check``) a path that does not exist.  The folder functions below do not check: they are computed at
    import (``ivm --help`` imports every command), and what reads a missing file names it then.

    >>> shipped("schemas/relations/R.avsc").name
    'R.avsc'
    """
    if name.partition("/")[0] not in FOLDERS:
        raise ResourceError(f"{name!r} is not shipped: the package data are the folders {', '.join(FOLDERS)}")
    root = files(__name__)
    if not isinstance(root, Path):
        raise ResourceError(
            f"the package {__name__} is not installed as files ({type(root).__name__}): "
            "install the wheel with pip, or set IVM_SCHEMAS and IVM_DATA"
        )
    path = root / name
    if check and not path.exists():
        raise ResourceError(
            f"{path} is missing: the installed package lacks its package data "
            "(a wheel built without it?) or the checkout's symbolic link is broken"
        )
    # a checkout links the top-level folders here: the real path, as every other path the config dumps or prints
    return path.resolve() if path.exists() else path


def schemas_dir() -> Path:
    """``$IVM_SCHEMAS`` or the shipped ``schemas/`` folder: the output topics' and the example relations' schemas."""
    env = os.environ.get("IVM_SCHEMAS")
    return Path(env) if env else shipped("schemas", check=False)


def data_dir() -> Path:
    """``$IVM_DATA`` or the shipped ``data/`` folder (the sample graph)."""
    env = os.environ.get("IVM_DATA")
    return Path(env) if env else shipped("data", check=False)


def monitoring_dir() -> Path:
    """The shipped ``monitoring/`` folder: ``grafana/dashboards/*.json``, ``rules/*.yml``, ``prometheus.yml``."""
    return shipped("monitoring", check=False)


def example_config() -> Path:
    """The example pipeline configuration ``config/demo.toml`` (relations R, S, T; the triangle count).

    Its relation schemas are named relative to its folder (``../schemas/relations/R.avsc``), so the shipped
    copy finds the shipped schemas.
    """
    return shipped("config/demo.toml")
