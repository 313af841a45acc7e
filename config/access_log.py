"""daphne's access log through Python logging, so it has the form of every other log line (one
JSON object per line with ``DEBUG`` off, a readable line with it on).

daphne's command line writes its access log itself, as plain text on stdout: it builds its
``AccessLogGenerator`` (handed the stream) after it imported the application, which is when
``config.asgi`` calls ``access_log_install``: from then on the name the command line builds from
is this class, which writes nothing to the stream and logs instead. ``-v 0`` still turns the log
off (daphne then builds none). ``tests/ops/test_json_logs.py`` runs a real daphne and checks
every line it writes.
"""

from __future__ import annotations

import logging
from typing import Any

from projections.units import cut_text

logger = logging.getLogger("daphne.access")

# daphne's words for the steps of a websocket, as its own access log has them.
_WEBSOCKET_STEPS = {
    "connecting": "WSCONNECTING",
    "connected": "WSCONNECT",
    "rejected": "WSREJECT",
    "disconnected": "WSDISCONNECT",
}


class AccessLog:
    """daphne's action logger (``action_logger(protocol, action, details)``): one INFO record
    per HTTP answer and per websocket step, with ``client``, ``method``, ``path`` and, for
    HTTP, ``status``, ``bytes`` and ``duration_ms`` as fields of the record."""

    def __init__(self, stream: Any = None) -> None:
        # daphne hands the stream it would have written to; nothing is written there.
        del stream

    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        client = details.get("client") or "-"
        path = cut_text(str(details.get("path", "")))
        if protocol == "http" and action == "complete":
            status, size = details.get("status"), details.get("size")
            duration_ms = round(float(details.get("time_taken") or 0) * 1000, 1)
            method = details.get("method", "-")
            logger.info(
                "%s %s %s %sB %sms %s",
                method,
                path,
                status,
                size,
                duration_ms,
                client,
                extra={
                    "client": client,
                    "method": method,
                    "path": path,
                    "status": status,
                    "bytes": size,
                    "duration_ms": duration_ms,
                },
            )
        elif protocol == "websocket" and action in _WEBSOCKET_STEPS:
            step = _WEBSOCKET_STEPS[action]
            logger.info(
                "%s %s %s",
                step,
                path,
                client,
                extra={"client": client, "method": step, "path": path},
            )


def access_log_install() -> None:
    """Have daphne's command line build this access log instead of its own (it looks the name
    up when it builds its server, after importing the application)."""
    try:
        import daphne.cli
    except ImportError:  # served by another ASGI server: it keeps its own access log
        return
    daphne.cli.AccessLogGenerator = AccessLog  # type: ignore[attr-defined,misc]
