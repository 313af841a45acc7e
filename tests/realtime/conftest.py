"""Fixtures of the websocket tests."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connections


@pytest.fixture(autouse=True)
async def _connections_given_back():
    """The test's own sync calls share one thread: its connection goes back after each test
    (on PostgreSQL a pooled connection kept checked out would outlive the test database)."""
    yield
    await sync_to_async(connections.close_all)()
