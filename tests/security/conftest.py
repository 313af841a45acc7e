"""The hostile-input suite (docs/security.md): every test here carries the ``security`` marker,
so ``pytest -m security`` runs it alone and ``pytest -m "not security"`` leaves it out."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE not in Path(str(item.path)).parents:
            continue
        item.add_marker(pytest.mark.security)
        if inspect.iscoroutinefunction(getattr(item, "function", None)):
            item.fixturenames.append("_connections_given_back")  # tests/conftest.py
