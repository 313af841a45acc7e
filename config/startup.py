"""The database check made once when a process starts, before it serves or works.

``manage.py`` runs it for commands that use the database, ``config.asgi`` when it is imported.
A database that does not answer, does not exist or refuses the login stops the process within
seconds, with one line naming the variable and the cause (never the password), instead of a
20 s pool wait and a traceback at the first request.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

# libpq's floor, per address tried: a host name with two addresses still stops within 5 s.
CONNECT_TIMEOUT_SECONDS = 2

# Commands that run without the database (help, checks, code generation).
COMMANDS_WITHOUT_DATABASE = frozenset(
    {"help", "--help", "-h", "version", "--version", "check", "diffsettings", "makemigrations"}
)


def database_check_for_command(argv: Sequence[str]) -> None:
    """``database_check()`` unless ``argv`` runs a command that needs no database."""
    command = argv[1] if len(argv) > 1 else "help"
    if command not in COMMANDS_WITHOUT_DATABASE:
        database_check()


def database_check(alias: str = DEFAULT_DB_ALIAS) -> None:
    """Return once a connection to the database opened; else stop the process with one line.

    Skipped when ``DATABASE_CHECK_AT_START`` is off (the test settings: pytest-django manages
    the test database itself and blocks access while tests are collected).
    """
    if not settings.DATABASE_CHECK_AT_START:
        return
    db = settings.DATABASES[alias]
    variable = "DATABASE_URL" if settings.DATABASE_URL else "DATA_DIR"
    if db["ENGINE"] == "django.db.backends.postgresql":
        where = f'database "{db["NAME"]}" on {db["HOST"] or "localhost"}:{db["PORT"] or 5432}'
        failure = _postgresql_failure(alias)
    else:
        where = f"SQLite database {db['NAME']}"
        failure = _sqlite_failure(str(db["NAME"]))
    if failure is None:
        return
    password = db.get("PASSWORD") or ""
    if password:
        failure = failure.replace(password, "***")
    raise SystemExit(f"{variable}: cannot connect to {where}: {failure}")


def _postgresql_failure(alias: str) -> str | None:
    import psycopg  # here: the SQLite default need not pay for loading the driver at start

    # A direct connection, not the pool: the pool would retry for its whole timeout.
    params = connections[alias].get_connection_params()
    params["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
    try:
        psycopg.connect(**params).close()
    except psycopg.Error as exc:
        return _one_line(str(exc))
    return None


def _sqlite_failure(path: str) -> str | None:
    try:
        connection = sqlite3.connect(path, timeout=CONNECT_TIMEOUT_SECONDS)
        try:
            connection.execute("PRAGMA schema_version")  # opens (or creates) the file
        finally:
            connection.close()
    except sqlite3.Error as exc:
        return _one_line(str(exc))
    return None


def _one_line(message: str) -> str:
    """libpq's cause without its framing: ``FATAL:  database "x" does not exist``."""
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    _, found, cause = first.rpartition(" failed: ")
    cause = cause if found else first
    return " ".join(cause.removeprefix("FATAL:").split())
