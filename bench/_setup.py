"""Shared set-up of the benches: Django on a throw-away database (created and destroyed here),
the ways other processes reach it (a URL, a libpq string, their environment), and a
conversation with an open turn to run things in.

Importing it sets the benches' environment (``DATA_DIR`` a temporary folder unless given, DEBUG
off, warnings only): import it before Django is set up.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
if "DATA_DIR" not in os.environ:  # worker processes of the benches are given their parent's
    os.environ["DATA_DIR"] = tempfile.mkdtemp(prefix="toolcore-bench-")
os.environ.setdefault("TOOLCORE_WORKSPACE_ROOT", os.path.join(os.environ["DATA_DIR"], "workspaces"))
# Measure what production runs: DEBUG off (no query log), warnings only on the console.
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECRET_KEY", "bench-" + "x" * 40)
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")


def django_on_bench_database():
    """Set Django up and create a fresh database (the test database of the settings)."""
    import django

    django.setup()
    from django.db import connection

    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    return connection


def drop_bench_database(connection) -> None:
    name = connection.settings_dict["NAME"]
    connection.creation.destroy_test_db(name, verbosity=0)


def remove_bench_data_dir(data_dir: Path) -> None:
    """Remove ``data_dir`` if it is the temporary one made above (never a folder given)."""
    if data_dir.name.startswith("toolcore-bench-") and data_dir.parent == Path(
        tempfile.gettempdir()
    ):
        shutil.rmtree(data_dir, ignore_errors=True)


def database_url(connection: Any) -> str:
    """A ``DATABASE_URL`` of the bench database, for the processes the benches start."""
    from urllib.parse import quote

    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    auth = quote(db["USER"] or "postgres", safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"], safe="")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def conninfo(connection: Any) -> str:
    """A libpq connection string to the bench database (PostgreSQL; psycopg, outside Django)."""
    from psycopg.conninfo import make_conninfo

    params = connection.get_connection_params()
    keep = {"dbname", "user", "password", "host", "port"}
    return make_conninfo(**{k: v for k, v in params.items() if k in keep and v not in (None, "")})


def process_env(connection: Any, **extra: str) -> dict[str, str]:
    """The environment of a process the benches start (a worker, daphne): this one's, on the
    bench database and the bench's folders, DEBUG off, warnings only; then ``extra``."""
    from django.conf import settings

    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(connection),
        DATA_DIR=str(settings.DATA_DIR),
        TOOLCORE_WORKSPACE_ROOT=str(settings.TOOLCORE_WORKSPACE_ROOT),
        DEBUG="0",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def conversation_with_turn(user: Any, title: str) -> tuple[Any, str]:
    """A conversation of ``user`` with an open turn (a user message posted); the turn's id."""
    from conversations.services.conversations import conversation_create
    from conversations.services.messages import message_post

    conversation = conversation_create(owner=user, title=title)
    posted = message_post(
        conversation_id=conversation.pk,
        message_id=f"u-{uuid.uuid4().hex}",
        role="user",
        content=[{"type": "text", "text": "bench"}],
    )
    return conversation, posted.body["turnId"]
