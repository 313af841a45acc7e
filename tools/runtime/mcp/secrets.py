"""The secret values of MCP servers (environment variables, HTTP header values), sealed at rest.

They must be sent to the server, so unlike API tokens (kept as digests) they are stored
encrypted: Fernet (AES-128-CBC + HMAC-SHA256) under a key derived from ``SECRET_KEY`` with
Django's ``salted_hmac`` (salt ``toolcore.mcp-secret``), as the host port derives its claim
tokens. Keys of ``SECRET_KEY_FALLBACKS`` still open what they sealed, so a key rotation does not
lose them; a value sealed under a key that is gone cannot be opened (``SecretUnreadable``) and
must be set again. Values are never shown back: the admin and the logs name them only.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.utils.crypto import salted_hmac

KEY_SALT = "toolcore.mcp-secret"


class SecretUnreadable(Exception):
    """A sealed value no configured key opens (``SECRET_KEY`` changed without a fallback)."""


def _fernet(secret: str) -> Fernet:
    digest = salted_hmac(KEY_SALT, "mcp-secrets", secret=secret, algorithm="sha256").digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def _keys() -> MultiFernet:
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([_fernet(s) for s in secrets])


def secret_seal(value: str) -> str:
    """``value`` sealed under the current key, as text for a JSON column."""
    return _fernet(settings.SECRET_KEY).encrypt(value.encode()).decode("ascii")


def secret_open(sealed: str) -> str:
    """The value ``secret_seal`` sealed; ``SecretUnreadable`` when no key opens it."""
    try:
        return _keys().decrypt(sealed.encode("ascii")).decode()
    except (InvalidToken, ValueError, UnicodeError) as exc:
        raise SecretUnreadable from exc


def secrets_open(sealed: Mapping[str, str]) -> dict[str, str]:
    """Each name of ``sealed`` with its value opened."""
    return {name: secret_open(value) for name, value in sealed.items()}
