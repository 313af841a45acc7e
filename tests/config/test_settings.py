"""Settings read from the environment: what each variable switches (refusals: test_startup)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({'debug': s.DEBUG, 'engine': s.DATABASES['default']['ENGINE'], "
    "'layer': s.CHANNEL_LAYERS['default']['BACKEND'], 'options': str(s.DATABASES['default'].get('OPTIONS')), "
    "'max_age': s.DATABASES['default'].get('CONN_MAX_AGE'), "
    "'capacity': s.CHANNEL_LAYERS['default'].get('CONFIG', {}).get('capacity'), "
    "'expiry': s.CHANNEL_LAYERS['default'].get('CONFIG', {}).get('group_expiry')}))"
)


def _settings(tmp_path, probe: str = PROBE, **env):
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS"}
        and not k.startswith("TOOLCORE_LOCKOUT_")  # tests/settings.py sets a high limit
    }
    clean.update(DJANGO_SETTINGS_MODULE="config.settings", DATA_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=clean, capture_output=True, text=True
    )


@pytest.mark.parametrize("key", [None, "short", "django-insecure-toolcore-development-only"])
def test_production_refuses_to_start_without_a_real_secret_key(tmp_path, key):
    env = {"ALLOWED_HOSTS": "toolcore.example.com"}
    result = _settings(tmp_path, **(env if key is None else {**env, "SECRET_KEY": key}))
    assert result.returncode != 0
    assert result.stderr.startswith("SECRET_KEY: ") and "Traceback" not in result.stderr


def test_debug_on_and_nothing_else_set_means_sqlite_wal_immediate_and_the_in_memory_layer(
    tmp_path,
):
    result = _settings(tmp_path, DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert '"debug": true' in result.stdout
    assert '"engine": "django.db.backends.sqlite3"' in result.stdout
    assert "channels.layers.InMemoryChannelLayer" in result.stdout
    assert (
        "'transaction_mode': 'IMMEDIATE'" in result.stdout and "journal_mode=WAL" in result.stdout
    )


def test_a_sqlite_database_url_gets_wal_and_immediate_too(tmp_path):
    result = _settings(tmp_path, DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path}/other.sqlite3")
    assert result.returncode == 0, result.stderr
    assert '"engine": "django.db.backends.sqlite3"' in result.stdout
    assert (
        "'transaction_mode': 'IMMEDIATE'" in result.stdout and "journal_mode=WAL" in result.stdout
    )


def test_database_and_redis_urls_switch_to_postgresql_with_a_pool_and_redis(tmp_path):
    result = _settings(
        tmp_path,
        SECRET_KEY="k" * 50,
        ALLOWED_HOSTS="toolcore.example.com",
        DATABASE_URL="postgres://u@db.example:5432/toolcore",
        REDIS_URL="redis://cache.example:6379/0",
    )
    assert result.returncode == 0, result.stderr
    assert '"debug": false' in result.stdout
    assert '"engine": "django.db.backends.postgresql"' in result.stdout
    assert "config.layers.RedisChannelLayer" in result.stdout
    assert "'pool':" in result.stdout and '"max_age": 0' in result.stdout
    assert '"capacity": 1500' in result.stdout and '"expiry": 86400' in result.stdout


POOL_PROBE = (
    "import django; django.setup(); from django.db import connection; "
    "from psycopg_pool import ConnectionPool; "
    "print(connection.pool._check == ConnectionPool.check_connection)"
)


def test_the_postgresql_pool_checks_each_connection_before_handing_it_out(tmp_path):
    """A connection the server closed while it sat in the pool (``pg_terminate_backend``, a
    restart) is found dead at checkout and replaced, not handed to a request (the pool is made
    without connecting: nothing listens at ``db.example``)."""
    result = _settings(
        tmp_path,
        POOL_PROBE,
        SECRET_KEY="k" * 50,
        ALLOWED_HOSTS="toolcore.example.com",
        DATABASE_URL="postgres://u@db.example:5432/toolcore",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


COOKIES_PROBE = (
    "import django; django.setup(); from django.conf import settings as s; "
    "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE)"
)


@pytest.mark.parametrize(("value", "secure"), [(None, "False False"), ("1", "True True")])
def test_secure_cookies_send_the_session_and_csrf_cookies_over_https_only(tmp_path, value, secure):
    env = {"SECRET_KEY": "k" * 50, "ALLOWED_HOSTS": "toolcore.example.com"}
    if value is not None:
        env["TOOLCORE_SECURE_COOKIES"] = value
    result = _settings(tmp_path, probe=COOKIES_PROBE, **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == secure


THROTTLE_PROBE = (
    "import django; django.setup(); from django.conf import settings as s; "
    "c = s.CACHES[s.THROTTLE_CACHE]; "
    "print(c['BACKEND'].rsplit('.', 1)[1], c.get('LOCATION'), s.AXES_FAILURE_LIMIT, "
    "int(s.AXES_COOLOFF_TIME.total_seconds()), s.AXES_LOCKOUT_PARAMETERS)"
)


@pytest.mark.parametrize(
    ("env", "printed"),
    [
        ({}, "FileBasedCache {data}/throttle 5 900 ['ip_address']"),
        (
            {
                "REDIS_URL": "redis://cache.example:6379/0",
                "TOOLCORE_LOCKOUT_FAILURES": "10",
                "TOOLCORE_LOCKOUT_MINUTES": "60",
                "TOOLCORE_LOCKOUT_BY": "address_username",
            },
            "RedisCache redis://cache.example:6379/0 10 3600 [['ip_address', 'username']]",
        ),
    ],
)
def test_the_lockout_settings_and_where_failed_tokens_are_counted(tmp_path, env, printed):
    """5 failures and 15 minutes by default, per address; failed token checks counted in
    Redis when REDIS_URL is set (shared by every process), else in files under DATA_DIR (shared
    by the host's processes: ``manage.py throttle_reset`` reaches the server's counts)."""
    base = {"SECRET_KEY": "k" * 50, "ALLOWED_HOSTS": "toolcore.example.com"}
    result = _settings(tmp_path, probe=THROTTLE_PROBE, **base, **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == printed.format(data=tmp_path)


METRICS_PROBE = (
    "import django, os; django.setup(); from django.conf import settings as s; "
    "print(s.TOOLCORE_HOST_NAME, s.TOOLCORE_METRICS_DIR, os.environ['PROMETHEUS_MULTIPROC_DIR'], "
    "[str(n) for n in s.TOOLCORE_METRICS_ALLOW])"
)


def _metrics_settings(tmp_path, **env):
    """A process's settings with the metrics variables of ``env`` only (an empty
    ``TOOLCORE_METRICS_DIR`` is the default: not the suite's folder)."""
    return _settings(tmp_path, METRICS_PROBE, **{"DEBUG": "1", "TOOLCORE_METRICS_DIR": "", **env})


def test_the_metrics_folder_is_per_host_under_data_dir_and_set_before_prometheus_loads(tmp_path):
    result = _metrics_settings(tmp_path, TOOLCORE_HOST_NAME="web-1")
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "metrics" / "web-1"
    assert result.stdout.split() == [
        "web-1",
        str(folder),
        str(folder),
        "['127.0.0.0/8',",
        "'::1/128']",
    ]
    assert folder.is_dir()


def test_the_metrics_settings_are_read(tmp_path):
    folder = tmp_path / "elsewhere"
    result = _metrics_settings(
        tmp_path,
        TOOLCORE_METRICS_DIR=str(folder),
        TOOLCORE_METRICS_ALLOW="10.1.2.3, 192.168.0.0/16",
    )
    assert result.returncode == 0, result.stderr
    assert f" {folder} {folder} ['10.1.2.3/32', '192.168.0.0/16']" in result.stdout


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"TOOLCORE_METRICS_ALLOW": "10.0.0.0/8,not-a-network"},
            "TOOLCORE_METRICS_ALLOW: must list",
        ),
        ({"TOOLCORE_METRICS_TOKEN": "short"}, "TOOLCORE_METRICS_TOKEN: must be 16+ characters"),
        ({"TOOLCORE_HOST_NAME": "a/b"}, "TOOLCORE_HOST_NAME: must be at most 255 characters"),
        ({"TOOLCORE_METRICS_DIR": "/proc/toolcore-metrics"}, "TOOLCORE_METRICS_DIR: cannot use"),
    ],
)
def test_metrics_settings_that_cannot_be_used_stop_the_process(tmp_path, env, line):
    result = _metrics_settings(tmp_path, **env)
    assert result.returncode == 1
    assert result.stderr.startswith(line) and "Traceback" not in result.stderr


def test_a_host_grace_shorter_than_the_lease_stops_the_process(tmp_path):
    """Workers beat every third of the lease: a shorter grace would release a live host."""
    result = _settings(tmp_path, DEBUG="1", TOOLCORE_HOST_GRACE="20", TOOLCORE_CLAIM_LEASE="30")
    assert result.returncode == 1
    assert result.stderr.startswith(
        "TOOLCORE_HOST_GRACE: must be at least TOOLCORE_CLAIM_LEASE (30 s)"
    )
    assert "Traceback" not in result.stderr
    same = _settings(tmp_path, DEBUG="1", TOOLCORE_HOST_GRACE="30", TOOLCORE_CLAIM_LEASE="30")
    assert same.returncode == 0, same.stderr


def _storage_settings(tmp_path, **env):
    probe = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(sorted(s.ASSET_STORAGE.items()))"
    )
    return _settings(tmp_path, probe=probe, DEBUG="1", **env)


def test_the_asset_storage_is_local_unless_set_and_s3_names_its_bucket_and_prefix(tmp_path):
    result = _storage_settings(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[('backend', 'local')]"
    result = _storage_settings(
        tmp_path,
        TOOLCORE_ASSET_STORAGE="s3://toolcore-assets/prod/a/",
        TOOLCORE_S3_ENDPOINT_URL="http://127.0.0.1:8333",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "[('backend', 's3'), ('bucket', 'toolcore-assets'), "
        "('endpoint_url', 'http://127.0.0.1:8333'), ('prefix', 'prod/a')]"
    )


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"TOOLCORE_ASSET_STORAGE": "/srv/assets"}, "TOOLCORE_ASSET_STORAGE: must be local or s3"),
        ({"TOOLCORE_ASSET_STORAGE": "s3://"}, "TOOLCORE_ASSET_STORAGE: must be local or s3"),
        ({"TOOLCORE_ASSET_STORAGE": "s3://Bad_Bucket/x"}, "TOOLCORE_ASSET_STORAGE: 'Bad_Bucket'"),
        ({"TOOLCORE_ASSET_STORAGE": "s3://assets/a/../b"}, "TOOLCORE_ASSET_STORAGE: the prefix"),
        (
            {"TOOLCORE_ASSET_STORAGE": "s3://assets/p", "TOOLCORE_S3_ENDPOINT_URL": "ftp://x"},
            "TOOLCORE_S3_ENDPOINT_URL: must be an http:// or https:// URL",
        ),
        (
            {"TOOLCORE_S3_ENDPOINT_URL": "http://127.0.0.1:8333"},
            "TOOLCORE_S3_ENDPOINT_URL: is set, but TOOLCORE_ASSET_STORAGE is not",
        ),
        (
            {"TOOLCORE_ASSET_STORAGE": "s3://assets/p", "AWS_ACCESS_KEY_ID": "k"},
            "AWS_SECRET_ACCESS_KEY: AWS_ACCESS_KEY_ID and it are set together",
        ),
    ],
)
def test_asset_storage_settings_that_cannot_be_used_stop_the_process(tmp_path, env, line):
    env.setdefault("AWS_SECRET_ACCESS_KEY", "")
    env.setdefault("AWS_ACCESS_KEY_ID", "")
    result = _storage_settings(tmp_path, **env)
    assert result.returncode == 1
    assert result.stderr.startswith(line), result.stderr
    assert "Traceback" not in result.stderr
