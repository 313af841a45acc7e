"""The databases of the end-to-end sites: copies of a template made once per test process.

A site's database used to be made by three ``manage.py`` commands (``migrate``,
``createsuperuser``, ``create_token``): three Django starts, about ten seconds of CPU, for the
same database every time. Each test process (each xdist worker) now makes it once, a *template*,
and every site gets a copy: the SQLite file copied with SQLite's backup API, or on PostgreSQL
``CREATE DATABASE … TEMPLATE``. A copy is as fresh as a database made for it: no site sees
another's rows, and what a test writes into its copy ends with it. The templates are removed
when the process ends.
"""

from __future__ import annotations

import atexit
import secrets
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

COPY_SECONDS = 60  # PostgreSQL refuses a copy while a backend (autovacuum) is on the template


@dataclass(frozen=True)
class Template:
    """A database made once (``url``) and what the sites copied from it need to know of it."""

    url: str
    facts: dict[str, object]


_templates: dict[str, Template] = {}


def template(name: str, build: Callable[[Path], Template]) -> Template:
    """The template ``name`` of this process, built (``build(folder)``) on first use: that
    takes several seconds (``manage.py`` commands), paid once per worker by its first site."""
    if name not in _templates:
        folder = Path(tempfile.mkdtemp(prefix=f"toolcore-site-template-{name}-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _templates[name] = build(folder)
        if _templates[name].url.startswith("postgres"):
            atexit.register(_postgres_drop, _templates[name].url)
    return _templates[name]


def database_copy(made: Template, folder: Path) -> tuple[str, Callable[[], None] | None]:
    """A copy of the template ``made`` (a file in ``folder``, or a new PostgreSQL database):
    its URL, and a function that drops it (``None`` for a file, gone with its folder)."""
    if made.url.startswith("sqlite"):
        target = folder / "db.sqlite3"
        source = sqlite3.connect(urlsplit(made.url).path)
        copy = sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            copy.close()
            source.close()
        return f"sqlite:///{target}", None
    return postgres_database(made.url, template=urlsplit(made.url).path.strip("/"))


def postgres_database(
    suite_url: str, *, template: str | None = None
) -> tuple[str, Callable[[], None]]:
    """A new database on the server of ``suite_url`` (empty, or a copy of ``template``): its URL
    and a function dropping it."""
    import psycopg
    from psycopg import errors, sql

    name = f"toolcore_e2e_{secrets.token_hex(6)}"
    url = urlunsplit(urlsplit(suite_url)._replace(path=f"/{name}"))
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    deadline = time.monotonic() + COPY_SECONDS
    with psycopg.connect(_admin_url(suite_url), autocommit=True) as conn:
        while True:
            try:
                conn.execute(statement)
                break
            except errors.ObjectInUse:  # "source database … is being accessed by other users"
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    return url, lambda: _postgres_drop(url)


def _admin_url(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/postgres"))


def _postgres_drop(url: str) -> None:
    import psycopg
    from psycopg import sql

    name = urlsplit(url).path.strip("/")
    with psycopg.connect(_admin_url(url), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
