"""daphne's access log as log records (``config/access_log.py``), in the JSON form of every
other line with ``DEBUG`` off. A real daphne writing them: ``tests/ops/test_json_logs.py``."""

from __future__ import annotations

import json
import logging

import daphne.cli
import pytest

from config.access_log import AccessLog, access_log_install
from conversations.logging import JsonFormatter, PlainFormatter


def _records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "daphne.access"]


def test_an_http_answer_is_one_record_with_its_fields(caplog):
    caplog.set_level(logging.INFO, logger="daphne.access")
    details = {
        "path": "/readyz",
        "status": 200,
        "method": "GET",
        "client": "10.0.0.1:5000",
        "time_taken": 0.0123,
        "size": 83,
    }
    AccessLog(stream=None)("http", "complete", details)
    (record,) = _records(caplog)
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "INFO" and line["message"] == "GET /readyz 200 83B 12.3ms 10.0.0.1:5000"
    assert {k: line[k] for k in ("client", "method", "path", "status", "bytes", "duration_ms")} == {
        "client": "10.0.0.1:5000",
        "method": "GET",
        "path": "/readyz",
        "status": 200,
        "bytes": 83,
        "duration_ms": 12.3,
    }
    # A readable line says it once, in its message.
    assert PlainFormatter().format(record).endswith("GET /readyz 200 83B 12.3ms 10.0.0.1:5000")


@pytest.mark.parametrize(
    ("action", "step"),
    [
        ("connecting", "WSCONNECTING"),
        ("connected", "WSCONNECT"),
        ("rejected", "WSREJECT"),
        ("disconnected", "WSDISCONNECT"),
    ],
)
def test_each_websocket_step_is_one_record(caplog, action, step):
    caplog.set_level(logging.INFO, logger="daphne.access")
    AccessLog()("websocket", action, {"path": "/ws/conversations/", "client": None})
    (record,) = _records(caplog)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == f"{step} /ws/conversations/ -"
    assert (line["method"], line["path"], line["client"]) == (step, "/ws/conversations/", "-")


def test_daphnes_command_line_builds_this_access_log(monkeypatch):
    """It looks ``AccessLogGenerator`` up when it builds its server, after loading the app."""
    monkeypatch.setattr(daphne.cli, "AccessLogGenerator", daphne.cli.AccessLogGenerator)
    access_log_install()
    assert daphne.cli.AccessLogGenerator is AccessLog
