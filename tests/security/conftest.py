"""The hostile-input suite (docs/security.md): every test here carries the ``security`` marker,
so ``pytest -m security`` runs it alone and ``pytest -m "not security"`` leaves it out."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE not in Path(str(item.path)).parents:
            continue
        item.add_marker(pytest.mark.security)
        if inspect.iscoroutinefunction(getattr(item, "function", None)):
            item.fixturenames.append("_connections_given_back")


@pytest.fixture
async def _connections_given_back():
    """An async test's own sync calls share one thread: its connection goes back after the
    test (on PostgreSQL a connection kept open would outlive the test database)."""
    yield
    await sync_to_async(connections.close_all)()
