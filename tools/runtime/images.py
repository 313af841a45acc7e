"""Images a tool returns, which become ``image`` assets of its response: the media types kept
as files, their extensions, and the check that the bytes are what they claim. Shared by the
host tool port (``host/services.py``) and the MCP servers' results (``mcp/results.py``)."""

from __future__ import annotations

# Image media types kept as files, and the extension of their files (``looks_like`` checks how
# their bytes begin).
IMAGE_TYPES: dict[str, str] = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
}


def looks_like(media_type: str, data: bytes) -> bool:
    """Whether ``data`` begins as an image of ``media_type`` does (its signature)."""
    if media_type == "image/png":
        return data.startswith(b"\x89PNG\r\n\x1a\n")
    if media_type == "image/jpeg":
        return data.startswith(b"\xff\xd8\xff")
    if media_type == "image/gif":
        return data.startswith((b"GIF87a", b"GIF89a"))
    return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
