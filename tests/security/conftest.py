"""The hostile-input suite (docs/security.md): every test here carries the ``security`` marker,
so ``pytest -m security`` runs it alone and ``pytest -m "not security"`` leaves it out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.security)
