"""With ``DEBUG`` off every line a web process and a worker write is one JSON object: daphne's
access lines (HTTP and websocket), a ``Host`` that ``ALLOWED_HOSTS`` does not list (one
WARNING, no traceback, and a JSON 400 from ``/readyz`` and the API), the worker's start.

Real processes (``tests/realtime/daphne_helpers.py``: daphne as the deployment guide starts
it, ``manage.py runworker_tools``), their stdout and stderr read as written.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.realtime.daphne_helpers import Daphne, site, ws_connect
from tests.waits import wait_for

pytestmark = pytest.mark.e2e

UNLISTED = "unlisted.example"
WAIT_SECONDS = 30  # bounds a hang: a loaded machine writes the lines late


def _get(server: Daphne, path: str, host: str | None = None) -> tuple[int, str, str]:
    """Status, content type and body of a GET (a 4xx too)."""
    request = urllib.request.Request(server.http_url + path)
    if host is not None:
        request.add_header("Host", host)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers["Content-Type"], refused.read().decode()


def _records(process: Daphne) -> list[dict[str, Any]]:
    """Every line the process wrote, each parsed: one JSON object a line, or the test fails."""
    records = []
    for line in process.stderr().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"a line that is not JSON: {line!r}")
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message"} <= record.keys(), line
        records.append(record)
    return records


async def test_every_line_of_a_web_process_and_a_worker_is_one_json_object(tmp_path):
    with site(tmp_path, LOG_LEVEL="INFO") as made:
        server = made.daphne()
        worker = made.tool_worker()

        assert _get(server, "/readyz")[0] == 200
        ws = await ws_connect(server, made.token)
        await ws.close()
        for path in ("/readyz", "/api/v1/conversations"):
            status, content_type, body = _get(server, path, host=UNLISTED)
            assert (status, content_type) == (400, "application/json"), body
            assert json.loads(body)["error"]["code"] == "bad_request"
        status, content_type, _ = _get(server, "/", host=UNLISTED)
        assert (status, content_type.split(";")[0]) == (400, "text/html")
        assert _get(server, "/healthz", host=UNLISTED)[:2] == (200, "application/json")

        def logged(process: Daphne, text: str) -> bool:
            return any(text in r["message"] for r in _records(process))

        wait_for(
            lambda: logged(server, "WSDISCONNECT /ws/conversations/"),
            timeout=WAIT_SECONDS,
            every=0.1,
            what="the websocket's close logged",
        )
        wait_for(
            lambda: logged(worker, "worker started"),
            timeout=WAIT_SECONDS,
            every=0.1,
            what="the worker's start logged",
        )
        server.stop()
        worker.stop()

        web = _records(server)
        access = [r for r in web if r["logger"] == "daphne.access"]
        assert {"method": "GET", "path": "/readyz", "status": 200} in [
            {k: r.get(k) for k in ("method", "path", "status")} for r in access
        ]
        steps = [r["method"] for r in access if r["path"] == "/ws/conversations/"]
        assert steps[:2] == ["WSCONNECTING", "WSCONNECT"] and steps[-1] == "WSDISCONNECT"
        refused = [r for r in web if r["logger"] == "django.security.DisallowedHost"]
        assert len(refused) == 3, refused  # /readyz, the API, the page: one line each
        assert all(r["level"] == "WARNING" and "exception" not in r for r in refused)
        assert all(UNLISTED in r["message"] for r in refused)
        assert not [r for r in web if r["level"] in ("ERROR", "CRITICAL")]

        started = [r for r in _records(worker) if r["message"].startswith("worker started")]
        assert len(started) == 1 and started[0]["worker"]
        assert "calls at once" in started[0]["message"]
