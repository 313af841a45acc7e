"""A JSON field that stores exactly the compact JSON the server sends.

The project fixes JSON on the wire and in storage as ``json.dumps(value, ensure_ascii=False,
separators=(",", ":"))``. Django's ``JSONField`` writes ``", "``/``": "`` separators and
``\\uXXXX`` escapes, and PostgreSQL's ``jsonb`` re-serialises on the way out. This field stores
the compact text verbatim (``json`` on PostgreSQL, which keeps its input text; ``text`` on
SQLite), so a replay page can pass the stored text straight into a response without decoding
it, and byte budgets measured on stored text equal what is sent.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models


def dumps(value: Any) -> str:
    """The compact JSON text of ``value`` (docs/architecture.md, "Conventions")."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class CompactJSONField(models.JSONField):
    def db_type(self, connection):  # type: ignore[override]
        if connection.vendor == "postgresql":
            return "json"
        return super().db_type(connection)

    def get_db_prep_value(self, value, connection, prepared=False):  # type: ignore[override]
        if value is None:
            return None
        if hasattr(value, "as_sql"):
            return value
        return dumps(value)

    def from_db_value(self, value, expression, connection):  # type: ignore[override]
        # psycopg decodes ``json`` columns itself; SQLite hands back the text.
        if value is None or not isinstance(value, str):
            return value
        return json.loads(value)
