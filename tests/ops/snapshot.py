"""What a restore must bring back, as plain JSON: the rows of the durable core and, for each
asset, the size and SHA-256 of its file as found under ``DATA_DIR`` now.

Used in the test process (the original) and by ``python -m tests.ops.snapshot`` in a process
pointed at a restored copy (``DATABASE_URL``, ``DATA_DIR``), so both sides read the same way.
"""

from __future__ import annotations

import json
from typing import Any


def snapshot() -> dict[str, Any]:
    from django.core.serializers.json import DjangoJSONEncoder
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from conversations.models import (
        Asset,
        Conversation,
        ConversationEvent,
        ExecutionClaim,
        ToolActivity,
        ToolCall,
    )
    from conversations.storage import absolute_from_data, sha256_file

    def rows(model: Any, *order: str) -> list[dict[str, Any]]:
        return list(model.objects.order_by(*order).values())

    assets = rows(Asset, "pk")
    for asset in assets:
        path = absolute_from_data(asset["path"])
        found = path.is_file()
        asset["file_size"] = path.stat().st_size if found else None
        asset["file_sha256"] = sha256_file(path) if found else None
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    state = {
        "conversations": rows(Conversation, "pk"),
        "events": rows(ConversationEvent, "conversation_id", "sequence"),
        "calls": rows(ToolCall, "pk"),
        "claims": rows(ExecutionClaim, "pk"),
        "activities": rows(ToolActivity, "pk"),
        "assets": assets,
        "unapplied_migrations": len(plan),
    }
    # Plain JSON on both sides: UUIDs, times and decimals as the encoder writes them.
    return json.loads(json.dumps(state, cls=DjangoJSONEncoder))


if __name__ == "__main__":
    import django

    django.setup()
    print(json.dumps(snapshot()))
