"""Every entry point refuses to start on a setting it cannot use: one line, no traceback, fast.

Each test runs a real process (``manage.py``, daphne, ``django.setup()``, the ASGI module) with a
controlled environment and the production settings module.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from config.startup import CONNECT_TIMEOUT_SECONDS
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
DAPHNE = str(Path(sys.executable).with_name("daphne"))
REAL_KEY = "k" * 50
PASSWORD = "hunter2-not-for-logs"
# "At once": before any retry or connect timeout. A start takes 1 to 3 s here, up to 7 s on a
# machine loaded by a parallel run; a start that retried or waited for a timeout would not end
# within this bound.
AT_ONCE_SECONDS = 15
SECRET_KEY_LINE = "SECRET_KEY: must be set to a real secret of 32+ characters when DEBUG is off"
SETTINGS_VARIABLES = {
    "DATABASE_URL",
    "REDIS_URL",
    "SECRET_KEY",
    "DEBUG",
    "ALLOWED_HOSTS",
    "CSRF_TRUSTED_ORIGINS",
    "LOG_LEVEL",
}

ENTRY_POINTS = {
    "manage.py migrate": [PYTHON, "manage.py", "migrate", "--no-input"],
    "manage.py recover": [PYTHON, "manage.py", "recover"],
    "manage.py seed_demo": [PYTHON, "manage.py", "seed_demo"],
    "manage.py help": [PYTHON, "manage.py", "help"],
    "daphne": [DAPHNE, "-b", "127.0.0.1", "-p", "0", "config.asgi:application"],
    "django.setup()": [PYTHON, "-c", "import django; django.setup()"],
}
SETUP = ENTRY_POINTS["django.setup()"]
IMPORT_ASGI = [PYTHON, "-c", "import config.asgi"]


def _start(
    tmp_path: Path, argv: list[str], **env: str
) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``argv`` in the project with only ``env`` set among the settings variables."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in SETTINGS_VARIABLES and not k.startswith("TOOLCORE_")
    }
    clean.update(DJANGO_SETTINGS_MODULE="config.settings", DATA_DIR=str(tmp_path / "data"), **env)
    started = time.monotonic()
    result = subprocess.run(
        argv, cwd=ROOT, env=clean, capture_output=True, text=True, timeout=30, check=False
    )
    return result, time.monotonic() - started


def _refusal(result: subprocess.CompletedProcess) -> str:
    """The single line a refusal prints, checked to be the whole of stderr."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _production(**env: str) -> dict[str, str]:
    return {"SECRET_KEY": REAL_KEY, "ALLOWED_HOSTS": "toolcore.example.com", **env}


@pytest.mark.parametrize("entry_point", list(ENTRY_POINTS))
def test_debug_is_off_unless_set_so_every_entry_point_needs_a_real_secret_key(
    tmp_path, entry_point
):
    result, _ = _start(tmp_path, ENTRY_POINTS[entry_point])
    assert _refusal(result) == SECRET_KEY_LINE


@pytest.mark.parametrize("key", ["", "short", "django-insecure-toolcore-development-only"])
def test_a_short_or_development_secret_key_is_refused(tmp_path, key):
    result, _ = _start(tmp_path, SETUP, SECRET_KEY=key, ALLOWED_HOSTS="toolcore.example.com")
    assert _refusal(result) == SECRET_KEY_LINE


@pytest.mark.parametrize("entry_point", ["manage.py migrate", "daphne"])
@pytest.mark.parametrize("hosts", ["", " , "])
def test_an_empty_allowed_hosts_is_refused_with_debug_off(tmp_path, entry_point, hosts):
    result, _ = _start(
        tmp_path, ENTRY_POINTS[entry_point], SECRET_KEY=REAL_KEY, ALLOWED_HOSTS=hosts
    )
    assert _refusal(result) == (
        "ALLOWED_HOSTS: must list the host names this server answers to when DEBUG is off"
    )


def test_debug_on_runs_with_the_development_defaults(tmp_path):
    probe = "import django; django.setup(); from django.conf import settings as s; "
    result, _ = _start(
        tmp_path, [PYTHON, "-c", probe + "print(s.DEBUG, s.ALLOWED_HOSTS)"], DEBUG="1"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True ['*']"


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("TOOLCORE_RETENTION_DAYS", "abc", "must be a whole number, not 'abc'"),
        ("TOOLCORE_RETENTION_DAYS", "-3", "must be 1 or more, not -3"),
        ("TOOLCORE_WORKERS", "two", "must be a whole number, not 'two'"),
        ("TOOLCORE_MAX_BODY", "0", "must be 1 or more, not 0"),
        ("TOOLCORE_LOCKOUT_FAILURES", "0", "must be 1 or more, not 0"),
        ("TOOLCORE_LOCKOUT_MINUTES", "soon", "must be a whole number, not 'soon'"),
        ("TOOLCORE_LOCKOUT_BY", "user", "must be address or address_username, not 'user'"),
        ("DEBUG", "maybe", "must be 1/0, true/false, yes/no or on/off, not 'maybe'"),
        ("LOG_LEVEL", "loud", "must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not 'loud'"),
        (
            "DATABASE_URL",
            f"mysql://toolcore:{PASSWORD}@db.example/toolcore",
            "mysql:// is not supported; use postgres:// or sqlite://",
        ),
        (
            "DATABASE_URL",
            f"postgres://toolcore:{PASSWORD}@db.example:port/toolcore",
            "is not a URL like postgres://USER@HOST:5432/NAME",
        ),
    ],
)
def test_a_setting_that_cannot_be_read_stops_with_one_line_naming_it(
    tmp_path, variable, value, line
):
    result, _ = _start(tmp_path, SETUP, **_production(**{variable: value}))
    assert _refusal(result) == f"{variable}: {line}"


def test_purge_refuses_an_unreadable_retention_before_doing_anything(tmp_path):
    result, _ = _start(
        tmp_path,
        [PYTHON, "manage.py", "purge"],
        **_production(TOOLCORE_RETENTION_DAYS="abc"),
    )
    assert _refusal(result) == "TOOLCORE_RETENTION_DAYS: must be a whole number, not 'abc'"
    assert not (tmp_path / "data" / "toolcore.sqlite3").exists()


def _postgres_server() -> tuple[str, str, int]:
    """(user, host, port) of a PostgreSQL server that answers, from DATABASE_URL or the default."""
    url = os.environ.get("DATABASE_URL", "")
    parts = urlsplit(url if url.startswith("postgres") else "postgres://postgres@127.0.0.1:5432/")
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        if url.startswith("postgres"):  # promised by DATABASE_URL (the CI's second run): a failure
            pytest.fail(f"DATABASE_URL names {host}:{port}, where no PostgreSQL server answers")
        pytest.skip(f"needs a PostgreSQL server on {host}:{port} (the CI's second run has one)")
    return parts.username or "postgres", host, port


@pytest.mark.parametrize(
    "argv",
    [ENTRY_POINTS["manage.py migrate"], ENTRY_POINTS["manage.py recover"], IMPORT_ASGI],
    ids=["migrate", "recover", "asgi"],
)
def test_a_database_that_refuses_connections_stops_the_process_at_once(tmp_path, argv):
    port = free_port()
    url = f"postgres://toolcore:{PASSWORD}@127.0.0.1:{port}/toolcore"
    result, seconds = _start(tmp_path, argv, **_production(DATABASE_URL=url))
    line = _refusal(result)
    assert line == (
        f'DATABASE_URL: cannot connect to database "toolcore" on 127.0.0.1:{port}: '
        "Connection refused"
    )
    assert PASSWORD not in result.stderr + result.stdout
    assert seconds < AT_ONCE_SECONDS


def test_a_database_that_does_not_exist_stops_the_process_at_once(tmp_path):
    user, host, port = _postgres_server()
    url = f"postgres://{user}:{PASSWORD}@{host}:{port}/toolcore_no_such_database"
    result, seconds = _start(
        tmp_path, ENTRY_POINTS["manage.py migrate"], **_production(DATABASE_URL=url)
    )
    line = _refusal(result)
    assert line.startswith('DATABASE_URL: cannot connect to database "toolcore_no_such_database"')
    assert line.endswith('database "toolcore_no_such_database" does not exist')
    assert PASSWORD not in result.stderr + result.stdout
    assert seconds < AT_ONCE_SECONDS


def test_a_database_that_does_not_answer_stops_the_asgi_app_within_seconds(tmp_path):
    # What starting costs on this machine now (the same start, refused at once), so that the
    # bound below holds on a loaded machine and still tells the connect timeout from a hang.
    refused = f"postgres://toolcore:{PASSWORD}@127.0.0.1:{free_port()}/toolcore"
    _, start_seconds = _start(tmp_path, IMPORT_ASGI, **_production(DATABASE_URL=refused))
    # A socket that accepts TCP connections but never speaks: a hung server or a proxy.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        url = f"postgres://toolcore:{PASSWORD}@127.0.0.1:{port}/toolcore"
        result, seconds = _start(tmp_path, IMPORT_ASGI, **_production(DATABASE_URL=url))
    line = _refusal(result)
    assert line.startswith(
        f'DATABASE_URL: cannot connect to database "toolcore" on 127.0.0.1:{port}'
    )
    assert "timeout" in line
    # One connect timeout, not a hang (the run's own timeout is 30 s): 10 s over it is room
    # for two starts that a loaded machine slows unevenly.
    assert seconds < start_seconds + CONNECT_TIMEOUT_SECONDS + 10


def test_commands_that_need_no_database_run_without_one(tmp_path):
    url = f"postgres://toolcore:{PASSWORD}@127.0.0.1:{free_port()}/toolcore"
    result, _ = _start(tmp_path, [PYTHON, "manage.py", "check"], **_production(DATABASE_URL=url))
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_a_good_configuration_starts_the_asgi_app(tmp_path):
    # The suite's own database: SQLite in a fresh DATA_DIR, or the PostgreSQL server of the run.
    url = os.environ.get("DATABASE_URL", "")
    env = _production(**({"DATABASE_URL": url} if url else {}))
    result, _ = _start(
        tmp_path, [PYTHON, "-c", "import config.asgi; print(config.asgi.application)"], **env
    )
    assert result.returncode == 0, result.stderr
    assert "ProtocolTypeRouter" in result.stdout
    if not url:
        assert (tmp_path / "data" / "toolcore.sqlite3").exists()


def test_a_process_that_never_connects_to_an_mcp_server_does_not_load_the_sdk(tmp_path):
    # The SDK costs more than a second of imports: a command or a worker pays it only with
    # its first connection to a server (the MCP endpoint's daphne loads it with config.asgi).
    loaded = (
        "import sys, django; django.setup()\n"
        "from django.core.management import call_command\n"
        "from tools.runtime import registry, worker\n"
        "call_command('check', verbosity=0)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"
    )
    result, _ = _start(tmp_path, [PYTHON, "-c", loaded], **_production())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
    served, _ = _start(
        tmp_path,
        [PYTHON, "-c", "import sys, config.asgi; print('mcp' in sys.modules)"],
        **_production(),
    )
    assert served.stdout.strip() == "True", served.stderr
