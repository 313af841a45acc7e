"""``GET /metrics``: Prometheus' text format, for a scraper allowed by address or bearer token
(docs/deployment.md, "Metrics").

What it answers: the metrics every process of this host recorded (their files in
``TOOLCORE_METRICS_DIR``, added up: ``config/metrics_files.py``) and those read from the
database now (``conversations.metrics.DatabaseCollector``).

Who may read it, checked before anything else:

1. a client whose address is in ``TOOLCORE_METRICS_ALLOW`` (default: loopback), the address the
   ASGI server established (``daphne --proxy-headers``: the proxy's ``X-Forwarded-For``);
2. else a client sending ``Authorization: Bearer <TOOLCORE_METRICS_TOKEN>``; a wrong token is
   401 and counts against the address like a wrong API token (429 once locked out);
3. else 401 when a token is configured (``WWW-Authenticate: Bearer``), 403 when none is.

Refusals have the API's error body (``{"error": {"code", "message"}}``). A middleware answers
it, right after ``/healthz``'s and before the ``Host`` check: a scraper asks by address, and
the access rules above are this endpoint's own.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from config.metrics_files import METRICS_FILE_HEADER_BYTES, metrics_files_read, metrics_folder
from conversations.api.auth import bearer_of
from conversations.api.middleware import SyncAndAsyncMiddleware
from conversations.api.responses import json_response
from conversations.api.throttle import client_address, token_failure, token_lockout_text
from conversations.errors import error_body
from conversations.metrics import DatabaseCollector

logger = logging.getLogger(__name__)

METRICS_PATH = "/metrics"


class _ProcessFiles(MultiProcessCollector):
    """Every process's files, read while no archive runs (``metrics_files_read``).

    A file too short to hold its header is skipped: prometheus_client creates a file, then
    sizes it, and a process that is between the two (or was killed there) has recorded
    nothing in it yet. Read as is, it failed every scrape with a ``struct.error`` (500) until
    the next process start archived it."""

    def collect(self):
        with metrics_files_read():
            files = [
                str(path)
                for path in Path(self._path).glob("*.db")
                if _size(path) >= METRICS_FILE_HEADER_BYTES
            ]
            return list(self.merge(files, accumulate=True))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # archived meanwhile
        return 0


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    _ProcessFiles(registry, path=str(metrics_folder()))
    registry.register(DatabaseCollector())
    return registry


def _allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is in ``TOOLCORE_METRICS_ALLOW`` (an IPv4 client of a dual-stack
    socket, ``::ffff:127.0.0.1``, is judged as its IPv4 address)."""
    mapped = getattr(address, "ipv4_mapped", None)
    address = mapped or address
    return any(address in network for network in settings.TOOLCORE_METRICS_ALLOW)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the client may read the metrics, else the refusal (401, 403 or 429)."""
    address = client_address(request)
    if address is not None and _allowed(ipaddress.ip_address(address)):
        return None
    token = settings.TOOLCORE_METRICS_TOKEN
    sent = bearer_of(request)
    if token and sent is not None and hmac.compare_digest(sent.encode(), token.encode()):
        return None
    if sent is not None:
        lockout = token_failure(address)
        if lockout is not None:
            response = json_response(error_body("throttled", token_lockout_text(lockout)), 429)
            response["Retry-After"] = str(lockout.retry_after)
            return response
    if token:
        message = "A bearer token is required (TOOLCORE_METRICS_TOKEN)."
        response = json_response(error_body("unauthorized", message), 401)
        response["WWW-Authenticate"] = "Bearer"
        return response
    message = "Not allowed from this address (TOOLCORE_METRICS_ALLOW)."
    return json_response(error_body("forbidden", message), 403)


def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = _refusal(request)
    if refused is not None:
        logger.warning("%s %s %s refused", request.method, METRICS_PATH, refused.status_code)
        return refused
    if request.method not in ("GET", "HEAD"):
        response = json_response(error_body("method_not_allowed", "Method not allowed."), 405)
        response["Allow"] = "GET, HEAD"
        return response
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


class MetricsMiddleware(SyncAndAsyncMiddleware):
    """Answers ``/metrics`` before the ``Host`` check (its access rules are its own, above)."""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        return metrics_view(request) if request.path_info == METRICS_PATH else None
