"""SQL written by hand where the ORM costs too much, one sibling module per database.

``postgresql.py`` and ``sqlite.py`` define the same functions with the same signatures
(``event_insert``, ``settlement_write``, ``replay_rows``, ``claim_ready``, ``claim_renew``,
``repeatable_read``, ``notify``, and the database's clock: ``now`` as an expression, ``clock``
as a value, by which leases and heartbeats are written and judged); ``common.py`` holds what
both share. The module is chosen once, from the
connection's vendor, the way Django picks a session backend: the flow never asks which database
it runs on.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from types import ModuleType

from django.db import connection


@cache
def vendor_sql() -> ModuleType:
    """``conversations.sql.postgresql`` on PostgreSQL, ``conversations.sql.sqlite`` else."""
    name = "postgresql" if connection.vendor == "postgresql" else "sqlite"
    return import_module(f"{__name__}.{name}")
