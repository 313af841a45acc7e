"""Where an MCP server's URL may point: not at the host itself or its link-local neighbours
(docs/mcp.md, "Adding a server").

A URL whose host resolves to a loopback (``127.0.0.0/8``, ``::1``), link-local
(``169.254.0.0/16``, the clouds' metadata endpoint among them, ``fe80::/10``) or unspecified
(``0.0.0.0``, ``::``) address lets whoever registers a server make the workers and the web
process send requests to the host's own services. It is refused, at registration and again
at every connection (a name may resolve elsewhere later), unless
``TOOLCORE_MCP_ALLOW_PRIVATE`` is on. Other private networks (``10/8``, ``192.168/16``…) are
where a team's servers live: they are allowed.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


class AddressRefused(Exception):
    """The URL's host is, or resolves to, an address an MCP server may not have."""


def _refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return address.is_loopback or address.is_link_local or address.is_unspecified


def url_address_check(url: str) -> None:
    """``AddressRefused`` naming the host when ``url``'s host is or resolves to a refused
    address (``TOOLCORE_MCP_ALLOW_PRIVATE`` off). A name that does not resolve is not refused
    here: the connection says it cannot reach it."""
    if settings.TOOLCORE_MCP_ALLOW_PRIVATE:
        return
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            found = socket.getaddrinfo(host, parts.port or 443, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return
        addresses = [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in found]
    for address in addresses:
        if _refused(address):
            shown = host if literal is not None else f"{host} ({address})"
            raise AddressRefused(
                f"The URL's host {shown} is a loopback, link-local or unspecified address; "
                "set TOOLCORE_MCP_ALLOW_PRIVATE=on to allow MCP servers there."
            )
