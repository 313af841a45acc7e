"""Claim tokens of host claims, derived so that a holder's lost claim can be told from a probe.

The host port answers a call that is not a host call held by the asker exactly as a missing one
(404), so that ids cannot be probed; yet a host whose claim was lost (it expired and recovery
took the call, or the call was cancelled or settled meanwhile) should learn 409 ``stale_claim``.
The claim row goes with the claim, so the proof that a presented claim was once the asker's is
in the token itself: a host claim's token is the first 128 bits of
HMAC-SHA256(a key derived from ``SECRET_KEY``, "<call id>/<generation>/<holder>"), with the UUID
version and variant bits set. Only the server can make one, and a made-up, another holder's or
a worker's token never equals it. Nothing is stored for it.

``holder`` names who asked for the claim: ``token:<id>`` for an API token, ``user:<id>`` for a
browser session. Tokens made under a key listed in ``SECRET_KEY_FALLBACKS`` are recognised too,
so a key rotation does not turn a host's late answer into a 404.
"""

from __future__ import annotations

import hmac
from typing import Any
from uuid import UUID

from django.conf import settings
from django.utils.crypto import salted_hmac

KEY_SALT = "toolcore.host-claim-token"


def holder_name(*, api_token_id: Any = None, user_id: Any = None) -> str:
    """Who holds host claims: the API token when the request came with one, else the user."""
    return f"token:{api_token_id}" if api_token_id is not None else f"user:{user_id}"


def _derived(call_id: UUID, generation: int, holder: str, secret: str) -> UUID:
    value = f"{call_id}/{generation}/{holder}"
    digest = salted_hmac(KEY_SALT, value, secret=secret, algorithm="sha256").digest()
    return UUID(bytes=digest[:16], version=4)


def host_claim_token(*, call_id: UUID, generation: int, holder: str) -> UUID:
    """The token of the claim ``holder`` takes on ``call_id`` at ``generation``."""
    return _derived(call_id, generation, holder, settings.SECRET_KEY)


def host_claim_token_issued(*, call_id: UUID, generation: int, holder: str, token: UUID) -> bool:
    """Whether ``token`` is the one the host port gave ``holder`` for ``call_id`` at
    ``generation`` (compared in constant time), under the current key or a fallback."""
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    issued = False
    for secret in secrets:
        expected = _derived(call_id, generation, holder, secret)
        issued |= hmac.compare_digest(expected.bytes, token.bytes)
    return issued
