"""The settings of the test suite: the production settings, with DEBUG off as in production.

pytest loads this module (``DJANGO_SETTINGS_MODULE`` in ``pyproject.toml``). It only supplies a
test secret and host names when the environment has none, then reads ``config.settings`` as a
deployment does, so the suite runs the same checks a server runs at start.
"""

import os

from tests.isolation import THROTTLE_FOLDER, own_suite_environment

os.environ.setdefault("SECRET_KEY", "test-only-secret-" + "x" * 32)
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
# Failed credentials lock an address out after TOOLCORE_LOCKOUT_FAILURES of them. The suite
# sends many bad tokens and passwords from 127.0.0.1 on purpose (the API fuzzer's
# "authentication enforced", the socket credential tests): the limit is high enough for them
# (each test starts with no failure counted, tests/conftest.py), and the lockout stays on.
# tests/security/test_lockout.py sets a small limit and checks the lockout and its reset.
os.environ.setdefault("TOOLCORE_LOCKOUT_FAILURES", "1000")
# The suite's MCP test servers listen on 127.0.0.1, an address refused to MCP servers by
# default; tests/mcp/test_client_catalog.py turns the refusal back on to check it.
os.environ.setdefault("TOOLCORE_MCP_ALLOW_PRIVATE", "on")
# This process's own Redis databases and metrics folder (one each per xdist worker), chosen
# before config.settings reads the environment: tests/isolation.py.
own_suite_environment()

from config.settings import *  # noqa: E402, F403

# pytest-django creates and blocks the test database itself; the start-up check would connect
# to the configured one instead (and fail while tests are collected).
DATABASE_CHECK_AT_START = False
# No worker inside the test process (config.asgi starts TOOLCORE_WORKERS of them): tests that
# run calls start their own.
TOOLCORE_WORKERS = 0
# Without Redis the throttle counts in files: this worker's own folder (tests/isolation.py).
if not REDIS_URL:  # noqa: F405
    CACHES[THROTTLE_CACHE]["LOCATION"] = os.environ[THROTTLE_FOLDER]  # noqa: F405
# The in-memory layer made as strict as Redis: every message must survive JSON (tests/layers.py).
if not REDIS_URL:  # noqa: F405
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "tests.layers.JsonInMemoryChannelLayer",
            "CONFIG": {"capacity": 1500},
        }
    }
# Transactional tests end with a flush that empties PostgreSQL's tables by DELETE: about a
# second faster than TRUNCATE, each (tests/flushing/management/commands/flush.py).
INSTALLED_APPS = [*INSTALLED_APPS, "tests.flushing"]  # noqa: F405
