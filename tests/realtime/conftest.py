"""Fixtures of the websocket tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _websocket_test(_connections_given_back):
    """Every websocket test gives its thread's connection back (tests/conftest.py)."""
