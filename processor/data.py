"""The sample data shipped in the repository's ``data/`` folder (``data/README.md``).

``data/graphs/facebook_combined.edges.gz`` is SNAP ego-Facebook: 4,039 nodes,
88,234 undirected edges, 1,612,010 triangles.  ``ivm demo``, the benchmarks and
the unit tests read it from here, so a clone of the repository is all they need.
"""

from __future__ import annotations

from pathlib import Path

FACEBOOK_EDGES = 88_234
FACEBOOK_TRIANGLES = 1_612_010


def data_dir() -> Path:
    """``$IVM_DATA`` or the shipped ``data/`` folder (:func:`ivm.resources.data_dir`)."""
    from ivm.resources import data_dir as shipped_data

    return shipped_data()


def sample_graph() -> Path:
    """The facebook edge list (gzipped, one ``u v`` line per undirected edge, ``#`` comment lines).

    >>> sample_graph().name
    'facebook_combined.edges.gz'
    """
    return data_dir() / "graphs" / "facebook_combined.edges.gz"


def facebook_edges() -> list[tuple[int, int]]:
    """The 88,234 undirected edges ``(u, v)`` of the facebook graph, in file order."""
    from ivm.processor.kafka.produce import read_edges

    path = sample_graph()
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the package data lacks it (or set IVM_DATA)")
    return list(read_edges(path))
