"""Toolcore settings, read from environment variables (docs: README "Settings").

Nothing set: SQLite in ``./data`` (WAL, IMMEDIATE transactions) and the in-memory channel
layer, so a newcomer needs nothing else. ``DATABASE_URL`` and ``REDIS_URL`` switch to
PostgreSQL (psycopg 3 with a pool) and Redis for team deployments.

A variable that cannot be used stops the process while this module is imported, which every entry
point does first (``manage.py``, daphne, ``django.setup()``): one line on stderr naming the
variable and the cause, exit status 1, no traceback. ``DEBUG`` is off unless set; with it off, a
real ``SECRET_KEY`` and a non-empty ``ALLOWED_HOSTS`` are required.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
from datetime import timedelta
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import dj_database_url

from config.metrics_files import metrics_files_prepare

BASE_DIR = Path(__file__).resolve().parent.parent


def _refuse(name: str, cause: str) -> NoReturn:
    """Stop the process with one line naming the variable (SystemExit prints no traceback)."""
    raise SystemExit(f"{name}: {cause}")


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() in _TRUE | _FALSE:
        return raw.lower() in _TRUE
    _refuse(name, f"must be 1/0, true/false, yes/no or on/off, not {raw!r}")


def _env_int(name: str, default: int | None, minimum: int | None = None) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        _refuse(name, f"must be a whole number, not {raw!r}")
    if minimum is not None and value < minimum:
        _refuse(name, f"must be {minimum} or more, not {value}")
    return value


def _env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "").strip()
    return [part.strip() for part in raw.split(",") if part.strip()] if raw else default


# Off unless set, so a deployment that forgets it is not in development mode; `make run` sets it
# on. Development values (the key below, any host) apply only while it is on.
DEBUG = _env_bool("DEBUG", False)
SECRET_KEY_MIN_LENGTH = 32
_DEV_SECRET_KEY = "django-insecure-toolcore-development-only"
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if DEBUG:
    SECRET_KEY = SECRET_KEY or _DEV_SECRET_KEY
elif not SECRET_KEY or SECRET_KEY == _DEV_SECRET_KEY or len(SECRET_KEY) < SECRET_KEY_MIN_LENGTH:
    _refuse(
        "SECRET_KEY",
        f"must be set to a real secret of {SECRET_KEY_MIN_LENGTH}+ characters when DEBUG is off",
    )

ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", ["*"] if DEBUG else [])
if not DEBUG and not ALLOWED_HOSTS:
    _refuse("ALLOWED_HOSTS", "must list the host names this server answers to when DEBUG is off")
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS", [])
# Behind a TLS proxy: the session and CSRF cookies are sent over HTTPS only (docs/deployment.md).
TOOLCORE_SECURE_COOKIES = _env_bool("TOOLCORE_SECURE_COOKIES", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = TOOLCORE_SECURE_COOKIES

DATA_DIR = Path(os.environ.get("DATA_DIR", BASE_DIR / "data")).resolve()
TOOLCORE_WORKSPACE_ROOT = Path(
    os.environ.get("TOOLCORE_WORKSPACE_ROOT", BASE_DIR / "workspaces")
).resolve()

# --- Asset storage (docs/subsystems/settings.md, "Asset storage") ------------------------------
# Where settled calls' files are kept and served from: unset (or "local") keeps them in DATA_DIR;
# s3://BUCKET/PREFIX puts them in an S3-compatible object store (conversations/storage/s3.py).
# Credentials and region are boto3's own (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_DEFAULT_REGION, a profile or an instance role); TOOLCORE_S3_ENDPOINT_URL names a store
# other than AWS (path-style addressing then, which every S3-compatible store answers).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
TOOLCORE_ASSET_STORAGE = os.environ.get("TOOLCORE_ASSET_STORAGE", "").strip() or "local"
TOOLCORE_S3_ENDPOINT_URL = os.environ.get("TOOLCORE_S3_ENDPOINT_URL", "").strip()
ASSET_STORAGE: dict[str, str] = {"backend": "local"}
if TOOLCORE_ASSET_STORAGE != "local":
    _store = urlsplit(TOOLCORE_ASSET_STORAGE)
    _prefix = _store.path.strip("/")
    if _store.scheme != "s3" or not _store.netloc or _store.query or _store.fragment:
        _refuse("TOOLCORE_ASSET_STORAGE", "must be local or s3://BUCKET/PREFIX")
    if not _BUCKET.match(_store.netloc) or ".." in _store.netloc:
        _refuse(
            "TOOLCORE_ASSET_STORAGE",
            f"{_store.netloc!r} is not a bucket name (3-63 of a-z, 0-9, '.', '-')",
        )
    if any(part in ("", ".", "..") for part in _prefix.split("/")) and _prefix:
        _refuse("TOOLCORE_ASSET_STORAGE", f"the prefix {_prefix!r} has an empty, . or .. part")
    if bool(os.environ.get("AWS_ACCESS_KEY_ID")) != bool(os.environ.get("AWS_SECRET_ACCESS_KEY")):
        _refuse("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID and it are set together or not at all")
    ASSET_STORAGE = {
        "backend": "s3",
        "bucket": _store.netloc,
        "prefix": _prefix,
        "endpoint_url": TOOLCORE_S3_ENDPOINT_URL,
    }
if TOOLCORE_S3_ENDPOINT_URL:
    _endpoint = urlsplit(TOOLCORE_S3_ENDPOINT_URL)
    if _endpoint.scheme not in ("http", "https") or not _endpoint.hostname:
        _refuse("TOOLCORE_S3_ENDPOINT_URL", "must be an http:// or https:// URL of the store")
    if TOOLCORE_ASSET_STORAGE == "local":
        _refuse("TOOLCORE_S3_ENDPOINT_URL", "is set, but TOOLCORE_ASSET_STORAGE is not s3://…")

# The name of this machine in what workers record (process groups, heartbeats) and in the
# default metrics folder: two hosts must not share one (docs/deployment.md).
TOOLCORE_HOST_NAME = os.environ.get("TOOLCORE_HOST_NAME", "").strip() or socket.gethostname()
if len(TOOLCORE_HOST_NAME) > 255 or "/" in TOOLCORE_HOST_NAME:
    _refuse("TOOLCORE_HOST_NAME", "must be at most 255 characters, without '/'")

# --- Metrics (docs/deployment.md, "Metrics") --------------------------------------------------
# Every process of a host records into this folder (prometheus_client's multiprocess mode,
# config/metrics_files.py); /metrics adds them up. Local to the host: on a shared DATA_DIR the
# default names a folder per host.
TOOLCORE_METRICS_DIR = Path(
    os.environ.get("TOOLCORE_METRICS_DIR", "").strip() or DATA_DIR / "metrics" / TOOLCORE_HOST_NAME
).resolve()
try:
    # Now, before anything imports prometheus_client: it picks its mode when imported.
    metrics_files_prepare(TOOLCORE_METRICS_DIR)
except OSError as exc:
    _refuse("TOOLCORE_METRICS_DIR", f"cannot use {TOOLCORE_METRICS_DIR}: {exc.strerror or exc}")
# Who may read /metrics: a client from one of these networks, or one sending this bearer token.
TOOLCORE_METRICS_TOKEN = os.environ.get("TOOLCORE_METRICS_TOKEN", "").strip()
METRICS_TOKEN_MIN_LENGTH = 16
if TOOLCORE_METRICS_TOKEN and len(TOOLCORE_METRICS_TOKEN) < METRICS_TOKEN_MIN_LENGTH:
    _refuse("TOOLCORE_METRICS_TOKEN", f"must be {METRICS_TOKEN_MIN_LENGTH}+ characters")
_metrics_allow = _env_list("TOOLCORE_METRICS_ALLOW", ["127.0.0.0/8", "::1/128"])
try:
    # "none": no address is enough, only the token.
    TOOLCORE_METRICS_ALLOW = [
        ipaddress.ip_network(network, strict=False)
        for network in _metrics_allow
        if network.lower() != "none"
    ]
except ValueError as exc:
    _refuse("TOOLCORE_METRICS_ALLOW", f"must list networks like 10.0.0.0/8 or ::1 ({exc})")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",
    "axes",
    "conversations",
    "tools",
    "projections",
]

MIDDLEWARE = [
    # First: every answer counted by its status class (/metrics).
    "conversations.api.middleware.AnswerCountMiddleware",
    # Then /healthz and /metrics answer before anything validates the Host header (a probe or a
    # scraper asks by address); /metrics checks its own access (TOOLCORE_METRICS_*).
    "conversations.api.health.HealthzMiddleware",
    "config.metrics.MetricsMiddleware",
    # Then a Host not in ALLOWED_HOSTS: one warning and a 400 (JSON for the API and /readyz).
    "conversations.api.hosts.AllowedHostMiddleware",
    "conversations.api.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a login refused for a locked address into its page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
_ENGINES = {"django.db.backends.postgresql", "django.db.backends.sqlite3"}
if DATABASE_URL:
    # Messages name the scheme only: the URL may hold a password.
    try:
        _db = dj_database_url.parse(DATABASE_URL, conn_max_age=0)
    except Exception:  # noqa: BLE001 - the parser's errors would print the URL
        _refuse("DATABASE_URL", "is not a URL like postgres://USER@HOST:5432/NAME")
    if _db["ENGINE"] not in _ENGINES:
        scheme = urlsplit(DATABASE_URL).scheme
        _refuse("DATABASE_URL", f"{scheme}:// is not supported; use postgres:// or sqlite://")
    if not _db["NAME"]:
        _refuse("DATABASE_URL", "names no database (postgres://USER@HOST:5432/NAME)")
    if _db["ENGINE"] == "django.db.backends.postgresql":
        # A pool needs CONN_MAX_AGE = 0: connections go back to the pool at the end of a
        # request instead of being closed.
        _db["CONN_MAX_AGE"] = 0
        # Server-side binding plus a prepare threshold: statements run repeatedly are prepared
        # once per connection, so PostgreSQL stops re-planning them (planning the settlement
        # read alone costs 1.5 ms here). Behind PgBouncer in transaction mode, set
        # TOOLCORE_DB_PREPARE=0.
        _db.setdefault("OPTIONS", {})["server_side_binding"] = True
        if _env_bool("TOOLCORE_DB_PREPARE", True):
            _db["OPTIONS"]["prepare_threshold"] = 5
        _pool_min = _env_int("TOOLCORE_DB_POOL_MIN", 2, minimum=0)
        _db["OPTIONS"]["pool"] = {
            "min_size": _pool_min,
            "max_size": _env_int(
                "TOOLCORE_DB_POOL_MAX", max(20, _pool_min), minimum=_pool_min or 1
            ),
            "timeout": 20,
        }
        # Every connection the pool hands out is checked first (psycopg_pool's
        # ``ConnectionPool.check_connection``: one empty query) and replaced when the server
        # closed it meanwhile (``pg_terminate_backend``, a restart, a failover), so a dead pooled
        # connection costs no request an error. Django 5.2 passes the pool that ``check`` itself
        # when this is on (a ``check`` in ``OPTIONS["pool"]`` would be given twice).
        _db["CONN_HEALTH_CHECKS"] = True
        # Per process, so concurrent test runs against one server do not collide.
        _db["TEST"] = {"NAME": f"test_{_db['NAME']}_{os.getpid()}"}
    DATABASES = {"default": _db}
else:
    # SQLite cannot create the folder of its file; the default lives in DATA_DIR.
    try:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _refuse("DATA_DIR", f"cannot create {DATA_DIR}: {exc.strerror}")
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "toolcore.sqlite3",
            # The test database is a file too, so tests exercise WAL and IMMEDIATE.
            # Per process, so concurrent test runs on one machine do not share a database.
            "TEST": {"NAME": str(DATA_DIR / f"test-toolcore-{os.getpid()}.sqlite3")},
        }
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Whichever way SQLite is chosen (the default, or a sqlite:// DATABASE_URL): IMMEDIATE
    # takes the write lock at BEGIN, so concurrent writers queue instead of failing on lock
    # upgrade (settlement relies on it); WAL lets readers go on while one writer writes.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# manage.py and the ASGI app connect once at start and stop with one line when that fails
# (config/startup.py). The test settings turn it off: pytest-django manages the database.
DATABASE_CHECK_AT_START = True

# --- Channel layer --------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
# daphne's default websocket timeout is 86,400 s; groups must not expire before it.
WEBSOCKET_TIMEOUT_SECONDS = 86400
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "config.layers.RedisChannelLayer",  # a pool that waits
            "CONFIG": {
                "hosts": [REDIS_URL],
                "capacity": 1500,
                "group_expiry": WEBSOCKET_TIMEOUT_SECONDS,
            },
        },
        # Live conversation events: one subscription a process per conversation, fanned out to
        # its sockets in memory (config/layers.py). Without it (the in-memory default) they
        # go through the default layer.
        "live": {
            "BACKEND": "config.layers.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        },
    }
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1500}}
    }

# --- Toolcore -------------------------------------------------------------------------------
TOOLCORE_WORKERS = _env_int("TOOLCORE_WORKERS", 0 if REDIS_URL else 1, minimum=0)
# Calls one worker runs at once (each a handler task; processes are asyncio subprocesses).
TOOLCORE_WORKER_CONCURRENCY = _env_int("TOOLCORE_WORKER_CONCURRENCY", 4, minimum=1)
TOOLCORE_CLAIM_LEASE = _env_int("TOOLCORE_CLAIM_LEASE", 30, minimum=1)
# Workspaces pinned to a host (docs/deployment.md, "Pinned workspaces"): off, every host may run
# any conversation's calls, when the workspace root is shared (NFS), and on SQLite, whose one
# file is one machine's. On: a conversation's calls run on the host of its first one, and a host
# without a live worker for TOOLCORE_HOST_GRACE seconds gives its conversations up.
TOOLCORE_SHARED_WORKSPACES = _env_bool(
    "TOOLCORE_SHARED_WORKSPACES", DATABASES["default"]["ENGINE"].endswith("sqlite3")
)
TOOLCORE_HOST_GRACE = _env_int("TOOLCORE_HOST_GRACE", 300, minimum=1)
if TOOLCORE_HOST_GRACE < TOOLCORE_CLAIM_LEASE:
    # A live worker beats every third of the lease: a shorter grace would release the
    # conversations of a host that is alive, between two of its heartbeats.
    _refuse(
        "TOOLCORE_HOST_GRACE",
        f"must be at least TOOLCORE_CLAIM_LEASE ({TOOLCORE_CLAIM_LEASE} s): a live host's "
        "workers beat every third of the lease, and a shorter grace would give away the "
        "conversations of a host that is alive",
    )
TOOLCORE_MAX_ATTEMPTS = _env_int("TOOLCORE_MAX_ATTEMPTS", 3, minimum=1)
TOOLCORE_PROMOTE_AFTER = _env_int("TOOLCORE_PROMOTE_AFTER", 30, minimum=0)
# The command sandbox (tools/sandbox.py, docs/security.md "The command sandbox"): bubblewrap
# around every command, or off by an explicit choice.
TOOLCORE_SANDBOX = os.environ.get("TOOLCORE_SANDBOX", "").strip().lower() or "bwrap"
if TOOLCORE_SANDBOX not in ("bwrap", "off"):
    _refuse("TOOLCORE_SANDBOX", f"must be bwrap or off, not {TOOLCORE_SANDBOX!r}")
TOOLCORE_SANDBOX_NETWORK = _env_bool("TOOLCORE_SANDBOX_NETWORK", False)
TOOLCORE_SANDBOX_HIDE = [Path(p) for p in _env_list("TOOLCORE_SANDBOX_HIDE", [])]
for _hidden in TOOLCORE_SANDBOX_HIDE:
    if not _hidden.is_absolute() or _hidden == Path("/"):
        _refuse("TOOLCORE_SANDBOX_HIDE", f"lists absolute paths other than /, not {str(_hidden)!r}")
# What each sandboxed command may use (tools/sandbox_limits.py, docs/security.md "Resource
# limits"): processes (a pids cgroup), memory in bytes (a memory cgroup, else RLIMIT_AS), file
# size in bytes (RLIMIT_FSIZE); 0 sets no limit. On cgroup v2, the folder delegated to Toolcore
# in which the command cgroups are made.
TOOLCORE_SANDBOX_PROCESSES = _env_int("TOOLCORE_SANDBOX_PROCESSES", 1024, minimum=0)
TOOLCORE_SANDBOX_MEMORY = _env_int("TOOLCORE_SANDBOX_MEMORY", 4 * 1024**3, minimum=0)
TOOLCORE_SANDBOX_FILE_SIZE = _env_int("TOOLCORE_SANDBOX_FILE_SIZE", 8 * 1024**3, minimum=0)
TOOLCORE_SANDBOX_CGROUP = os.environ.get("TOOLCORE_SANDBOX_CGROUP", "").strip() or None
if TOOLCORE_SANDBOX_CGROUP is not None and not Path(TOOLCORE_SANDBOX_CGROUP).is_absolute():
    _refuse("TOOLCORE_SANDBOX_CGROUP", f"must be an absolute path, not {TOOLCORE_SANDBOX_CGROUP!r}")
# Seconds an MCP server has to answer one tool call (docs/mcp.md); then it is told to stop.
TOOLCORE_MCP_CALL_TIMEOUT = _env_int("TOOLCORE_MCP_CALL_TIMEOUT", 60, minimum=1)
# An MCP server's URL that resolves to a loopback, link-local or unspecified address (the host's
# own services, a cloud's metadata endpoint) is refused unless this is on (docs/mcp.md).
TOOLCORE_MCP_ALLOW_PRIVATE = _env_bool("TOOLCORE_MCP_ALLOW_PRIVATE", False)
TOOLCORE_MAX_BODY = _env_int("TOOLCORE_MAX_BODY", 1024 * 1024, minimum=1)
# Unset keeps everything; a negative age would make `purge` delete every ended conversation.
TOOLCORE_RETENTION_DAYS = _env_int("TOOLCORE_RETENTION_DAYS", None, minimum=1)
# Websockets: a subscription idle this long gets a ``head`` frame (and the server checks for a
# lost last event); credentials are re-checked this often (a revoked token's sockets close).
TOOLCORE_WS_HEAD_SECONDS = _env_int("TOOLCORE_WS_HEAD_SECONDS", 30, minimum=1)
TOOLCORE_WS_AUTH_CHECK_SECONDS = _env_int("TOOLCORE_WS_AUTH_CHECK_SECONDS", 10, minimum=1)
# tools/call requests one user may have waiting at once in one server process (docs/mcp.md); the
# next is answered with a JSON-RPC error saying why, and no call is made.
TOOLCORE_MCP_MAX_WAITING = _env_int("TOOLCORE_MCP_MAX_WAITING", 20, minimum=1)
# An MCP tools/call that waits tells its client what it waits for this often (docs/mcp.md).
TOOLCORE_MCP_PROGRESS_SECONDS = _env_int("TOOLCORE_MCP_PROGRESS_SECONDS", 5, minimum=1)
# Threads of a server process that run HTTP requests' synchronous work (views, middleware), one
# request each at a time (config/http.py); each may hold a database connection while it does.
# Few on purpose: they share the process's one interpreter lock with the event loop that serves
# the websockets, and more of them starve it (docs/performance.md, "Load").
TOOLCORE_HTTP_THREADS = _env_int("TOOLCORE_HTTP_THREADS", 2, minimum=1)
# Django refuses bodies above this before parsing; keep it in step with TOOLCORE_MAX_BODY.
DATA_UPLOAD_MAX_MEMORY_SIZE = TOOLCORE_MAX_BODY

# --- Throttling failed credentials (docs/security.md, "Failed logins and tokens") -------------
# TOOLCORE_LOCKOUT_FAILURES failed logins (pages and admin), or failed bearer-token checks
# (REST and websocket handshakes), from one client address, each within
# TOOLCORE_LOCKOUT_MINUTES of the one before, lock that address out of that kind of check for
# TOOLCORE_LOCKOUT_MINUTES. Logins are counted in the database by django-axes; token checks
# in the "throttle" cache (Redis with REDIS_URL, else files in DATA_DIR/throttle shared by the
# host's processes; docs/decisions.md).
TOOLCORE_LOCKOUT_FAILURES = _env_int("TOOLCORE_LOCKOUT_FAILURES", 5, minimum=1)
TOOLCORE_LOCKOUT_MINUTES = _env_int("TOOLCORE_LOCKOUT_MINUTES", 15, minimum=1)
# Bytes of command lines the shell grammar may read for one user in a minute, over all their
# messages and typed commands (a line answered from the parse cache costs nothing): more is 429
# until the minute ends (docs/security.md, "What reading commands may cost").
TOOLCORE_PARSE_BYTES_PER_MINUTE = _env_int(
    "TOOLCORE_PARSE_BYTES_PER_MINUTE", 4 * 1024 * 1024, minimum=64 * 1024
)
# "address": a locked address may not log in as anyone (the default: a password guesser cannot
# move on to the next user); "address_username": only the username that failed is locked at
# that address (for many people behind one NAT address).
_LOCKOUT_BY = {"address": ["ip_address"], "address_username": [["ip_address", "username"]]}
TOOLCORE_LOCKOUT_BY = os.environ.get("TOOLCORE_LOCKOUT_BY", "").strip() or "address"
if TOOLCORE_LOCKOUT_BY not in _LOCKOUT_BY:
    _refuse(
        "TOOLCORE_LOCKOUT_BY", f"must be address or address_username, not {TOOLCORE_LOCKOUT_BY!r}"
    )
THROTTLE_CACHE = "throttle"
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    THROTTLE_CACHE: (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "toolcore-throttle",
            # A Redis that hangs must not hold a refused request: the throttle lets it go.
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
        if REDIS_URL
        # Without Redis, files under DATA_DIR: every process of the host shares them, so
        # ``manage.py throttle_reset`` reaches the server's counts (docs/decisions.md).
        else {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(DATA_DIR / "throttle"),
            "OPTIONS": {"MAX_ENTRIES": 10_000},
        }
    ),
}
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked address before the password
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = TOOLCORE_LOCKOUT_FAILURES
AXES_COOLOFF_TIME = timedelta(minutes=TOOLCORE_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = _LOCKOUT_BY[TOOLCORE_LOCKOUT_BY]
# The address the ASGI server established (daphne --proxy-headers: the proxy's X-Forwarded-For),
# never a header axes would read itself, which a client could set.
AXES_CLIENT_IP_CALLABLE = "conversations.api.throttle.client_address"
# Tries while locked are not counted, so the lockout ends when its page says it does; a
# successful login does not wipe the count (else one valid account resets a guesser's budget).
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = False
AXES_DISABLE_ACCESS_LOG = True  # a successful login writes nothing
AXES_ENABLE_ADMIN = False  # the admin lists failed logins its own way (conversations/admin)
AXES_LOCKOUT_CALLABLE = "conversations.web.login_locked_out"
AXES_HTTP_RESPONSE_CODE = 429
# Logs name the address (support staff look for it), never the username typed: a password
# typed into the username field must not reach the logs.
AXES_SENSITIVE_PARAMETERS = ["username"]

# --- Auth, i18n, static ---------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# The web pages' login (the admin keeps its own at /admin/login/).
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
# The web pages' scripts and styles (no build step, no CDN); config.asgi serves them.
STATICFILES_DIRS = [BASE_DIR / "static"]

# --- Logging --------------------------------------------------------------------------------
_log_level = os.environ.get("LOG_LEVEL", "").strip()
LOG_LEVEL = _log_level.upper() or "INFO"
if LOG_LEVEL not in logging.getLevelNamesMapping():
    _refuse("LOG_LEVEL", f"must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {_log_level!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "conversations.logging.JsonFormatter"},
        "plain": {"()": "conversations.logging.PlainFormatter"},
    },
    "filters": {"api_refusals": {"()": "conversations.logging.ApiRefusalFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain" if DEBUG else "json"},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "daphne": {"level": "WARNING"},
        # Its access log (config/access_log.py): one line a request or websocket step, at INFO.
        "daphne.access": {"level": LOG_LEVEL},
        "django.channels.server": {"level": "WARNING"},
        # django-axes: each failure and lockout is a warning; its per-attempt chatter is not.
        "axes": {"level": "WARNING"},
        # The MCP SDK serves /mcp/ statelessly: it logs every request's transport at INFO.
        "mcp": {"level": "WARNING"},
        # API refusals are logged once by the API itself, with their error code.
        "django.request": {"filters": ["api_refusals"]},
    },
}
