"""The admin refuses whoever is not staff (docs/admin.md): every URL under ``/admin/``, taken
from the URL configuration itself (so a model registered or a custom view added tomorrow is in
the table), asked with GET and POST by an anonymous browser and by a logged-in user who is not
staff, is a redirect to the login page and changes nothing."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import URLPattern, URLResolver

from tests.conversations.api_helpers import build_world, world_state
from tests.factories import UserFactory

OPEN = {"admin/login/", "admin/logout/"}  # the way in and out: nobody needs to be staff
_GROUP = re.compile(r"\(\?P<\w+>[^)]*\)|<(?:\w+:)?\w+>")


def admin_paths() -> list[str]:
    """Every URL of the admin site, each parameter filled with an id that names nothing."""
    found: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            text = prefix + str(pattern.pattern).lstrip("^").rstrip("$")
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, text)
            elif isinstance(pattern, URLPattern):
                found.extend(_filled(text))

    walk(admin.site.urls[0], "admin/")
    return sorted(set(found))


def _filled(text: str) -> list[str]:
    """``text`` with each parameter filled: every alternative of a choice (``approve|deny``),
    ``{id}`` for an object (the test puts a real call's id there), 1 for a number."""
    match = _GROUP.search(text)
    if match is None:
        return [text.replace("\\", "")]
    group = match.group()
    inner = re.fullmatch(r"\(\?P<\w+>([^)]*)\)", group)
    if inner and re.fullmatch(r"[\w|]+", inner.group(1)) and "|" in inner.group(1):
        samples = inner.group(1).split("|")
    elif "int" in group or "content_type_id" in group:
        samples = ["1"]
    elif "<url>" in group:
        samples = ["no/such/page/"]
    else:
        samples = ["{id}"]
    head, tail = text[: match.start()], text[match.end() :]
    return [path for sample in samples for path in _filled(head + sample + tail)]


PATHS = admin_paths()


def test_the_table_holds_every_model_and_the_custom_views():
    for model in admin.site._registry:
        name = f"admin/{model._meta.app_label}/{model._meta.model_name}/"
        assert name in PATHS, name
    custom = [p for p in PATHS if not re.search(r"/(add|change|delete|history)/$|/\{id\}/$", p)]
    assert len(PATHS) > 4 * len(admin.site._registry) and custom, PATHS


@pytest.fixture
def visitors(db):
    plain = UserFactory(is_staff=False)
    logged_in = Client()
    logged_in.force_login(plain)
    inactive_staff = UserFactory(is_staff=True, is_active=False)
    dormant = Client()
    dormant.force_login(inactive_staff)
    return {"anonymous": Client(), "not staff": logged_in, "inactive staff": dormant}


@pytest.mark.django_db
def test_every_admin_url_is_refused_to_non_staff(visitors, user):
    world = build_world(user)
    before = world_state(world)
    for path in PATHS:
        if path in OPEN:
            continue
        for who, client in visitors.items():
            for method in ("get", "post"):
                response = getattr(client, method)("/" + path.replace("{id}", world.open_id))
                assert response.status_code == 302, (who, method, path, response.status_code)
                assert response["Location"].startswith("/admin/login/"), (who, method, path)
    assert world_state(world) == before
