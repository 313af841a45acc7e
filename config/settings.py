"""Toolcore settings, read from environment variables (docs: README "Settings").

Nothing set: SQLite in ``./data`` (WAL, IMMEDIATE transactions) and the in-memory channel
layer, so a newcomer needs nothing else. ``DATABASE_URL`` and ``REDIS_URL`` switch to
PostgreSQL (psycopg 3 with a pool) and Redis for team deployments.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from exc


def _env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "").strip()
    return [part.strip() for part in raw.split(",") if part.strip()] if raw else default


# Development defaults apply only while DEBUG is on (the default for a fresh checkout).
DEBUG = _env_bool("DEBUG", True)
_DEV_SECRET_KEY = "django-insecure-toolcore-development-only"
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = _DEV_SECRET_KEY
elif not DEBUG and (SECRET_KEY == _DEV_SECRET_KEY or len(SECRET_KEY) < 32):
    raise ImproperlyConfigured("SECRET_KEY must be a real secret (32+ characters) in production.")

ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", ["*"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS", [])

DATA_DIR = Path(os.environ.get("DATA_DIR", BASE_DIR / "data")).resolve()
TOOLCORE_WORKSPACE_ROOT = Path(
    os.environ.get("TOOLCORE_WORKSPACE_ROOT", BASE_DIR / "workspaces")
).resolve()

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
    "conversations",
    "tools",
    "projections",
]

MIDDLEWARE = [
    "conversations.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
if DATABASE_URL:
    _db = dj_database_url.parse(DATABASE_URL, conn_max_age=0)
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
        _db["OPTIONS"]["pool"] = {
            "min_size": _env_int("TOOLCORE_DB_POOL_MIN", 2),
            "max_size": _env_int("TOOLCORE_DB_POOL_MAX", 20),
            "timeout": 20,
        }
        # Per process, so concurrent test runs against one server do not collide.
        _db["TEST"] = {"NAME": f"test_{_db['NAME']}_{os.getpid()}"}
    DATABASES = {"default": _db}
else:
    # SQLite cannot create the folder of its file; the default lives in DATA_DIR.
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    _sqlite_options = {
        # IMMEDIATE takes the write lock at BEGIN, so concurrent writers queue instead of
        # failing on lock upgrade; WAL lets readers go on while one writer writes.
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "toolcore.sqlite3",
            "OPTIONS": _sqlite_options,
            # The test database is a file too, so tests exercise WAL and IMMEDIATE.
            # Per process, so concurrent test runs on one machine do not share a database.
            "TEST": {"NAME": str(DATA_DIR / f"test-toolcore-{os.getpid()}.sqlite3")},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channel layer --------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
# daphne's default websocket timeout is 86,400 s; groups must not expire before it.
WEBSOCKET_TIMEOUT_SECONDS = 86400
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [REDIS_URL],
                "capacity": 1500,
                "group_expiry": WEBSOCKET_TIMEOUT_SECONDS,
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1500}}
    }

# --- Toolcore -------------------------------------------------------------------------------
TOOLCORE_WORKERS = _env_int("TOOLCORE_WORKERS", 0 if REDIS_URL else 1)
TOOLCORE_CLAIM_LEASE = _env_int("TOOLCORE_CLAIM_LEASE", 30)
TOOLCORE_MAX_ATTEMPTS = _env_int("TOOLCORE_MAX_ATTEMPTS", 3)
TOOLCORE_PROMOTE_AFTER = _env_int("TOOLCORE_PROMOTE_AFTER", 30)
TOOLCORE_MAX_BODY = _env_int("TOOLCORE_MAX_BODY", 1024 * 1024)
_retention = os.environ.get("TOOLCORE_RETENTION_DAYS", "").strip()
TOOLCORE_RETENTION_DAYS = int(_retention) if _retention else None
# Django refuses bodies above this before parsing; keep it in step with TOOLCORE_MAX_BODY.
DATA_UPLOAD_MAX_MEMORY_SIZE = TOOLCORE_MAX_BODY

# --- Auth, i18n, static ---------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/admin/login/"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"

# --- Logging --------------------------------------------------------------------------------
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
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
        # API refusals are logged once by the API itself, with their error code.
        "django.request": {"filters": ["api_refusals"]},
    },
}
