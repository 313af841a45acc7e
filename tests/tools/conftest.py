"""Fixtures of the runtime's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.workspaces import owner_workspace_root


@pytest.fixture
def workspace() -> Path:
    """A conversation's workspace where the runtime puts one: below an owner's root (the
    suite's workspace root is the test's own)."""
    path = owner_workspace_root(1) / "sandboxed"
    path.mkdir(parents=True, exist_ok=True)
    return path
