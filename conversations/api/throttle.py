"""Failed credentials, counted per client address (docs/security.md, "Failed logins and tokens").

Two counters per address, each locking the address out of its own kind of check:

- **failed logins** on ``/accounts/login/`` and ``/admin/login/``: django-axes counts them in the
  database (its ``AccessAttempt`` rows; settings ``AXES_*``) and refuses a locked address before
  the password is checked. ``login_unlock_at`` says when its lockout ends, for the page.
- **failed bearer-token checks** on the REST API and on websocket handshakes: counted here, in
  the ``throttle`` cache (Redis when ``REDIS_URL`` is set, so every process shares it; files
  under ``DATA_DIR/throttle`` otherwise, which every process of the host shares, the
  ``throttle_reset`` command included). A token that authenticates costs nothing here: only a refused
  one reads and writes the counter.

Both follow the same rule: ``TOOLCORE_LOCKOUT_FAILURES`` failures, each within
``TOOLCORE_LOCKOUT_MINUTES`` of the one before, lock the address for ``TOOLCORE_LOCKOUT_MINUTES``
from the failure that reached the limit; tries while locked are refused and not counted.

The address is the one the ASGI server established: with ``daphne --proxy-headers`` the
proxy's ``X-Forwarded-For``, which the proxy must set to the address it saw
(docs/deployment.md). Nothing here reads a forwarding header itself.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.db.models import Sum
from django.utils import timezone

logger = logging.getLogger(__name__)

UNKNOWN_ADDRESS = "unknown"  # no client address (a unix socket): one token counter for all
_FAILURES_KEY = "token-failures:{address}"
_LOCKED_KEY = "token-locked:{address}"


@dataclass(frozen=True)
class Lockout:
    """An address locked out of a kind of check until ``until``."""

    address: str
    until: datetime

    @property
    def retry_after(self) -> int:
        """Whole seconds until the lockout ends, at least 1 (``Retry-After``)."""
        left = (self.until - timezone.now()).total_seconds()
        return max(1, math.ceil(left))


def cooloff() -> timedelta:
    return timedelta(minutes=settings.TOOLCORE_LOCKOUT_MINUTES)


def _address(value: Any) -> str | None:
    try:
        return str(ipaddress.ip_address(str(value).strip()))
    except ValueError:
        return None


def client_address(request: Any) -> str | None:
    """The client's address of an HTTP request: ``REMOTE_ADDR``, which Django's ASGI handler
    takes from the server (``daphne --proxy-headers``: the proxy's ``X-Forwarded-For``); None
    when there is none or it is no IP address (axes then counts the request under none). Also
    axes' ``AXES_CLIENT_IP_CALLABLE``."""
    return _address(request.META.get("REMOTE_ADDR", ""))


def scope_address(scope: dict[str, Any]) -> str | None:
    """The client's address of a websocket handshake, as ``client_address`` reads a request."""
    client = scope.get("client")
    return _address(client[0]) if client else None


def _cache() -> Any:
    return caches[settings.THROTTLE_CACHE]


def _locked(cache: Any, address: str) -> Lockout | None:
    stamp = cache.get(_LOCKED_KEY.format(address=address))
    if stamp is None:
        return None
    until = datetime.fromtimestamp(stamp, tz=UTC)
    return Lockout(address, until) if until > timezone.now() else None


def _counted(cache: Any, key: str, window: int) -> int:
    """This failure counted: the failures so far in the window, this one included. Each one
    keeps the count for another ``window`` seconds."""
    if cache.add(key, 1, timeout=window):
        return 1
    try:
        count = cache.incr(key)
    except ValueError:  # it ran out between the two calls
        cache.add(key, 1, timeout=window)
        return 1
    cache.touch(key, timeout=window)
    return count


def token_failure(address: str | None) -> Lockout | None:
    """Count a failed bearer-token check from ``address``; the lockout when the address is
    locked (already, or by this failure), else None.

    When the cache cannot be reached (Redis away), the failure is logged and not counted: the
    request is refused as unauthenticated anyway, and a throttle that fails closed would refuse
    every client for a cache outage."""
    address = address or UNKNOWN_ADDRESS
    cache = _cache()
    try:
        locked = _locked(cache, address)
        if locked is not None:
            return locked  # not counted: the lockout ends when it said it would
        window = int(cooloff().total_seconds())
        key = _FAILURES_KEY.format(address=address)
        if _counted(cache, key, window) < settings.TOOLCORE_LOCKOUT_FAILURES:
            return None
        until = timezone.now() + cooloff()
        cache.add(_LOCKED_KEY.format(address=address), until.timestamp(), timeout=window)
        cache.delete(key)
    except Exception:  # noqa: BLE001 - the cache backend's own errors (Redis unreachable)
        logger.warning("failed token check from %s not counted", address, exc_info=True)
        return None
    logger.warning(
        "%s locked out after %s failed token checks",
        address,
        settings.TOOLCORE_LOCKOUT_FAILURES,
    )
    return Lockout(address, until)


def token_lockout_text(lockout: Lockout) -> str:
    """What a locked-out client is told: the REST error's message, the websocket's error frame."""
    return (
        f"Too many failed token checks from {lockout.address}: refused until "
        f"{lockout.until.astimezone(UTC):%H:%M:%S} UTC (in {lockout.retry_after} s)."
    )


def token_reset(address: str) -> bool:
    """Forget ``address``'s failed token checks and lift its lockout; whether it had any."""
    cache = _cache()
    keys = [_FAILURES_KEY.format(address=address), _LOCKED_KEY.format(address=address)]
    had = any(cache.get(key) is not None for key in keys)
    cache.delete_many(keys)
    return had


def login_unlock_at(request: Any, credentials: dict[str, Any] | None = None) -> datetime | None:
    """When the login lockout of this request's address (and username, by
    ``TOOLCORE_LOCKOUT_BY``) ends, read from axes' rows; None when it is not locked.

    axes counts each (username, address, user agent) in a row whose time is its last failure,
    and a row counts while that time is within the cool-off. The lockout ends when the rows
    still counting drop below the limit: when the row that brought the newest ones to the limit
    runs out."""
    from axes.helpers import get_client_parameters, get_client_username
    from axes.models import AccessAttempt

    now = timezone.now()
    username = get_client_username(request, credentials)
    address = client_address(request)
    ends = []
    for filters in get_client_parameters(username, address, "", request, credentials):
        rows = AccessAttempt.objects.filter(**filters, attempt_time__gte=now - cooloff())
        total = 0
        for time, failures in rows.order_by("-attempt_time").values_list(
            "attempt_time", "failures_since_start"
        ):
            total += failures
            if total >= settings.TOOLCORE_LOCKOUT_FAILURES:
                ends.append(time + cooloff())
                break
    return max(ends) if ends else None


def login_failures(address: str) -> int:
    """Failed logins from ``address`` still counting (for the admin and the reset command)."""
    from axes.models import AccessAttempt

    rows = AccessAttempt.objects.filter(
        ip_address=address, attempt_time__gte=timezone.now() - cooloff()
    )
    return rows.aggregate(total=Sum("failures_since_start"))["total"] or 0
