"""Fixtures for the integration tests' own services (DESIGN §6).

The Schema Registry is a real Apicurio Registry started by the project's own
code (``ivm.processor.local.registry``); if it cannot start, the tests that need it
fail (never a skip).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ivm.processor.local.registry import SchemaRegistry

LOGS = Path(__file__).resolve().parents[2] / ".local" / "test-logs"


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[SchemaRegistry]:
    """A running Apicurio Registry (in-memory storage) for the whole session."""
    registry = SchemaRegistry.start(LOGS / f"registry-{uuid.uuid4().hex[:6]}")
    yield registry
    registry.stop()
