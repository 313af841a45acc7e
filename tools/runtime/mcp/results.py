"""What an MCP server's answer to ``tools/call`` becomes: the text the projections summarise,
``result.json``, and image files (docs/mcp.md).

- text content: the text, blocks joined by a newline;
- images of the kept types (PNG, JPEG, GIF, WebP) whose bytes are what they claim: files
  ``images/<n>.<ext>`` of the attempt folder, ``image`` assets of the response, as a host's
  images are (``tools/runtime/images.py``); named in the text by that path;
- embedded resources: their URI and type listed in the text, a text resource's text after it;
  binary contents and audio are named with their size, not kept;
- resource links: listed in the text (name, URI, type, description);
- no text at all, but structured content: that content as JSON text.

``result.json`` holds the server's whole answer, each image by its file instead of its bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

import mcp_types as types

from conversations.storage import write_exclusive
from projections.units import clean_json, clean_text

from ..base import AttemptFile, HandlerResult
from ..images import IMAGE_TYPES, looks_like

FAILED_WITHOUT_TEXT = "The MCP server reported an error without a message."


def _bytes_of(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _resource_line(resource: Any) -> list[str]:
    mime = f" ({resource.mime_type})" if getattr(resource, "mime_type", None) else ""
    if isinstance(resource, types.TextResourceContents):
        return [f"[resource {resource.uri}{mime}]", resource.text]
    size = len(_bytes_of(resource.blob) or b"")
    return [f"[resource {resource.uri}{mime}: {size:,} bytes of binary content, not kept]"]


def result_of(
    answer: types.CallToolResult, *, server: str, tool: str, folder: Path
) -> HandlerResult:
    """The handler's result for the server's ``answer`` (``isError`` settles ``failed`` with
    the server's text); images are written into ``folder`` (blocking: run on a thread)."""
    texts: list[str] = []
    blocks: list[Any] = []
    files: list[AttemptFile] = []
    for block in answer.content:
        dumped = block.model_dump(by_alias=True, mode="json", exclude_none=True)
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ImageContent):
            data = _bytes_of(block.data)
            extension = IMAGE_TYPES.get(block.mime_type)
            dumped.pop("data", None)
            if data and extension and looks_like(block.mime_type, data):
                name = f"images/{len(files) + 1}.{extension}"
                write_exclusive(folder / name, data)
                files.append(
                    AttemptFile(path=folder / name, kind="image", media_type=block.mime_type)
                )
                dumped["file"] = name
                texts.append(f"[image {name} ({block.mime_type}, {len(data):,} bytes)]")
            else:
                size = len(data or b"")
                texts.append(
                    f"[image ({block.mime_type}, {size:,} bytes) not kept: not a PNG, JPEG, GIF or WebP image]"
                )
        elif isinstance(block, types.AudioContent):
            dumped.pop("data", None)
            size = len(_bytes_of(block.data) or b"")
            texts.append(f"[audio ({block.mime_type}, {size:,} bytes) not kept]")
        elif isinstance(block, types.EmbeddedResource):
            if isinstance(block.resource, types.BlobResourceContents):
                dumped["resource"].pop("blob", None)
            texts.extend(_resource_line(block.resource))
        elif isinstance(block, types.ResourceLink):
            mime = f" ({block.mime_type})" if block.mime_type else ""
            about = f": {block.description}" if block.description else ""
            texts.append(f"[resource link {block.name} {block.uri}{mime}{about}]")
        blocks.append(dumped)
    structured = answer.structured_content
    if not texts and structured is not None:
        texts.append(json.dumps(structured, ensure_ascii=False, indent=2))
    result: dict[str, Any] = {
        "server": server,
        "tool": tool,
        "isError": bool(answer.is_error),
        "content": blocks,
    }
    if structured is not None:
        result["structuredContent"] = structured
    text = clean_text("\n".join(texts)) if texts else None
    failed = bool(answer.is_error)
    return HandlerResult(
        outcome="failed" if failed else "completed",
        result=clean_json(result),
        text=text,
        reason=FAILED_WITHOUT_TEXT if failed and text is None else None,
        files=files,
    )
