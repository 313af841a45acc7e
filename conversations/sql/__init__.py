"""SQL written by hand where the ORM costs too much, one sibling module per database.

``postgresql.py`` and ``sqlite.py`` each offer the functions of ``interface.VendorSQL``, with
the same signatures, and return its rows; ``common.py`` holds what both share. The module is
chosen once, from the connection's vendor, the way Django picks a session backend: the flow
never asks which database it runs on.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import cast

from django.db import connection

from .interface import VendorSQL


@cache
def vendor_sql() -> VendorSQL:
    """``conversations.sql.postgresql`` on PostgreSQL, ``conversations.sql.sqlite`` else: a
    module offering ``VendorSQL`` (``tests/conversations/test_vendor_sql.py`` checks both)."""
    name = "postgresql" if connection.vendor == "postgresql" else "sqlite"
    return cast(VendorSQL, import_module(f"{__name__}.{name}"))
