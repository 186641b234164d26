"""Relation attributes from registered Avro schemas (DESIGN §4).

A relation's update record is an Avro record with the relation's attributes
plus a ``mult`` field; the relation's attributes are the record's fields other
than ``mult``, in order, and its name is the record's ``name`` (or the file
name without ``.avsc``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MULT_FIELD = "mult"


def avro_attributes(schema: dict) -> tuple[str, list[str]]:
    """The relation name and attribute list of one Avro record schema.

    >>> avro_attributes({"type": "record", "name": "R",
    ...                  "fields": [{"name": "A", "type": "long"}, {"name": "mult", "type": "long"}]})
    ('R', ['A'])
    """
    if schema.get("type") != "record":
        raise ValueError(f"an update schema is an Avro record, got type {schema.get('type')!r}")
    return schema["name"], [f["name"] for f in schema.get("fields", []) if f["name"] != MULT_FIELD]


def load_avro_schemas(path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Relation name -> attributes, from one ``.avsc`` file or every ``.avsc`` under a directory.

    Records whose fields have no ``mult`` (output topics) are skipped.
    """
    root = Path(path)
    files = sorted(root.rglob("*.avsc")) if root.is_dir() else [root]
    found: dict[str, list[str]] = {}
    for file in files:
        schema = json.loads(file.read_text())
        for record in schema if isinstance(schema, list) else [schema]:
            if not isinstance(record, dict) or record.get("type") != "record":
                continue
            if not any(f.get("name") == MULT_FIELD for f in record.get("fields", [])):
                continue
            name, attrs = avro_attributes(record)
            found[name] = attrs
    return found


def registered_schemas() -> dict[str, list[str]]:
    """The relations registered in ``$IVM_SCHEMAS`` or, by default, the shipped ``schemas/`` folder
    (:func:`ivm.resources.schemas_dir`: the example relations R, S, T), wherever the process runs from.

    >>> registered_schemas()["R"] if "IVM_SCHEMAS" not in os.environ else ["A", "B"]
    ['A', 'B']
    """
    from ivm.resources import schemas_dir

    path = schemas_dir()
    return load_avro_schemas(path) if path.exists() else {}
