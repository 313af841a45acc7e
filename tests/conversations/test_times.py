"""conversations/times.py: one way a time and a duration read, on the pages and in the admin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.template import Context, Template

from conversations.times import DASH, as_datetime, duration_text, when, when_html

NEW_YORK_WINTER = timezone(timedelta(hours=-5))


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (datetime(2026, 11, 29, 23, 43, 1, 123456, tzinfo=UTC), "2026-11-29 23:43:01 UTC"),
        # Whatever zone a time comes in, it reads in UTC.
        (datetime(2026, 11, 29, 18, 43, 1, tzinfo=NEW_YORK_WINTER), "2026-11-29 23:43:01 UTC"),
        ("2026-11-29T23:43:01.123Z", "2026-11-29 23:43:01 UTC"),  # the wire's form
        (datetime(2026, 11, 29, 23, 43, 1), "2026-11-29 23:43:01 UTC"),  # naive: UTC
        (None, DASH),
        ("", DASH),
        ("yesterday", DASH),
    ],
)
def test_when(value, shown):
    assert when(value) == shown


def test_when_html_is_a_time_element_with_the_wires_form():
    moment = datetime(2026, 11, 29, 18, 43, 1, 5000, tzinfo=NEW_YORK_WINTER)
    assert when_html(moment) == (
        '<time datetime="2026-11-29T23:43:01.005Z">2026-11-29 23:43:01 UTC</time>'
    )
    assert when_html(None) == DASH
    assert as_datetime("2026-11-29T23:43:01.005Z") == moment


def test_the_when_filter_of_the_pages_and_of_the_admin_is_the_same():
    moment = datetime(2026, 11, 29, 23, 43, 1, tzinfo=UTC)
    for library in ("times", "support_admin"):
        shown = Template(f"{{% load {library} %}}{{{{ moment|when }}}}").render(
            Context({"moment": moment})
        )
        assert shown == when_html(moment), library


@pytest.mark.parametrize(
    ("delta", "shown"),
    [
        (timedelta(milliseconds=23), "23 ms"),  # not "0 s"
        (timedelta(0), "0 ms"),
        (timedelta(microseconds=999_999), "999 ms"),  # cut, never rounded up to a second
        (timedelta(milliseconds=1_000), "1.0 s"),
        (timedelta(milliseconds=4_299), "4.2 s"),
        (timedelta(milliseconds=9_999), "9.9 s"),
        (timedelta(seconds=10), "10 s"),
        (timedelta(seconds=42, milliseconds=900), "42 s"),
        (timedelta(minutes=3, seconds=12), "3 min 12 s"),
        (timedelta(hours=2, minutes=5, seconds=59), "2 h 5 min"),
        (timedelta(days=3, hours=4, minutes=59), "3 d 4 h"),
        (timedelta(seconds=-1), DASH),
        (None, DASH),
    ],
)
def test_duration_text(delta, shown):
    assert duration_text(delta) == shown
