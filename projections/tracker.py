"""The per-turn tracker: hosts that resend a call's whole output get append deltas on the wire.

Django-free (docs/projections.md, "`tool.updated`"). Per call it keeps the
bounded output, the raw length (code points) and the SHA-1 of the UTF-8 bytes of the raw text
sent so far: small state that can be stored in a ``ToolActivity`` row (``raw_length``,
``raw_sha1``, the output in the payload) and restored in any process.

Every operation answers the ``tool.updated`` fields to publish, or ``None`` for nothing:

- ``{"outputDelta": new_text}`` when the new text costs 1…16384 JSON bytes;
- ``{"output": bounded_output}``, the whole bounded output, when it costs more, or on a reset;
- ``{"status": "declined" | "cancelled"}`` from ``settle``, per call.

The caller adds ``toolCallId``, ``turnId``, ``rev`` and times. Folding the answers in order with
``apply_tool_update`` gives exactly ``bound_tool_output`` of the raw text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from projections.json_cost import json_cost
from projections.tool_output import TOOL_OUTPUT_MAX_BYTES, append_tool_output, bound_tool_output

# The SHA-1 of nothing: what an unseen call has sent so far.
EMPTY_SHA1 = hashlib.sha1(b"", usedforsecurity=False).hexdigest()


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _sha1(data: bytes = b"") -> Any:
    return hashlib.sha1(data, usedforsecurity=False)


# Hash in slices of this many code points: a small working set keeps a resend linear (one
# slice, encoding and digest of a whole 2 MiB text fall out of the CPU caches).
_HASH_SLICE = 1 << 16


def _hash_text(hasher: Any, text: str, start: int, stop: int) -> Any:
    """``hasher`` updated with the UTF-8 bytes of ``text[start:stop]``."""
    for i in range(start, stop, _HASH_SLICE):
        hasher.update(_encode(text[i : min(i + _HASH_SLICE, stop)]))
    return hasher


def _fits_delta(text: str) -> bool:
    # A text longer than the limit in code points costs more than it.
    return len(text) <= TOOL_OUTPUT_MAX_BYTES and json_cost(text) <= TOOL_OUTPUT_MAX_BYTES


class _CallMemory:
    """One call: bounded output, raw length and SHA-1 of the raw text sent so far.

    While the raw text's hash is being extended in this process, ``hasher`` holds it (an append
    then costs only the delta). A memory restored from storage has only the hex digest; an
    append to it cannot extend that, so ``raw_sha1`` becomes ``""`` (unknown) and the next
    resend resets, which is always correct, merely not a delta.
    """

    __slots__ = ("output", "raw_length", "_raw_sha1", "_hasher", "final")

    def __init__(
        self,
        output: dict[str, Any] | None = None,
        raw_length: int = 0,
        raw_sha1: str = EMPTY_SHA1,
        final: bool = False,
    ) -> None:
        self.output = output
        self.raw_length = raw_length
        self._raw_sha1 = raw_sha1
        self._hasher: Any = None
        self.final = final

    @property
    def raw_sha1(self) -> str:
        return self._hasher.hexdigest() if self._hasher is not None else self._raw_sha1

    def _extends(self, text: str) -> Any:
        """A SHA-1 object over ``text``'s first ``raw_length`` code points when they are the
        raw text sent so far, else ``None``."""
        n = self.raw_length
        if len(text) < n:
            return None
        if n == 0:  # the empty prefix always matches
            return _sha1()
        known = self.raw_sha1
        if not known:
            return None
        hasher = _hash_text(_sha1(), text, 0, n)
        return hasher if hasher.hexdigest() == known else None

    def _grow(self, new: str) -> dict[str, Any] | None:
        if not new:
            return None
        self.output = append_tool_output(self.output, new)
        self.raw_length += len(new)
        if _fits_delta(new):
            return {"outputDelta": new}
        return {"output": self.output}

    def replace(self, text: str) -> dict[str, Any] | None:
        hasher = self._extends(text)
        if hasher is None:
            self.output = bound_tool_output(text)
            self.raw_length = len(text)
            self._hasher = _hash_text(_sha1(), text, 0, len(text))
            return {"output": self.output}
        self._hasher = _hash_text(hasher, text, self.raw_length, len(text))
        new = text[self.raw_length :]
        return self._grow(new)

    def append(self, delta: str) -> dict[str, Any] | None:
        if not delta:
            return None
        if self._hasher is None and self.raw_length == 0:
            self._hasher = _sha1()
        if self._hasher is not None:
            self._hasher.update(_encode(delta))
        else:
            self._raw_sha1 = ""  # a stored digest cannot be extended
        return self._grow(delta)

    def to_memory(self) -> dict[str, Any]:
        return {"rawLength": self.raw_length, "rawSha1": self.raw_sha1, "output": self.output}

    @classmethod
    def from_memory(cls, memory: Mapping[str, Any] | None, final: bool = False) -> _CallMemory:
        if memory is None:
            return cls(final=final)
        return cls(
            output=memory.get("output"),
            raw_length=memory.get("rawLength", 0),
            raw_sha1=memory.get("rawSha1") or "",
            final=final,
        )


def track_replace(
    memory: Mapping[str, Any] | None, text: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One call's resend of its whole output: ``(new memory, update fields or None)``.

    ``memory`` is ``{"rawLength", "rawSha1", "output"}`` as this returned it last (``None`` for
    a call not seen yet; ``rawSha1`` ``""`` means unknown). When ``text`` extends the raw text
    sent so far (same SHA-1 over its first ``rawLength`` code points) the update is
    ``{"outputDelta": new part}``, or ``{"output": bounded}`` when the new part costs more than
    16384 JSON bytes, or ``None`` when nothing is new; otherwise it resets to
    ``{"output": bound_tool_output(text)}``. ``memory`` is not modified.
    """
    call = _CallMemory.from_memory(memory)
    update = call.replace(text)
    return call.to_memory(), update


def track_append(
    memory: Mapping[str, Any] | None, delta: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One call's new output text: ``(new memory, update fields or None)``.

    The update is ``{"outputDelta": delta}`` when it costs 1…16384 JSON bytes, the whole bounded
    output ``{"output": …}`` when it costs more, ``None`` for an empty delta. A stored SHA-1
    cannot be extended, so the new memory's ``rawSha1`` is ``""`` (unknown: the next
    ``track_replace`` resets) unless nothing had been sent before.
    """
    call = _CallMemory.from_memory(memory)
    update = call.append(delta)
    return call.to_memory(), update


class ToolCallTracker:
    """The per-turn memory of the outputs hosts send, per call id.

    ``replace`` and ``append`` answer the update fields to publish (module docstring); calls are
    remembered in the order first seen. A call marked final (``mark_final``, or settled by
    ``settle``) changes no more: its ``replace`` and ``append`` answer ``None``.
    """

    def __init__(self) -> None:
        self._calls: dict[str, _CallMemory] = {}

    def _call(self, call_id: str) -> _CallMemory:
        call = self._calls.get(call_id)
        if call is None:
            call = self._calls[call_id] = _CallMemory()
        return call

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._calls

    def observe(self, call_id: str) -> None:
        """Remembers a call that has sent no output yet, so ``settle`` covers it."""
        self._call(call_id)

    def replace(self, call_id: str, text: str) -> dict[str, Any] | None:
        """The host resent the whole output so far: ``{"outputDelta"}``, ``{"output"}`` or None.

        An extension of the raw text sent so far (same SHA-1 over its length) yields the new
        part as ``outputDelta`` (``None`` when empty; the whole bounded output when the new
        part costs more than 16384 JSON bytes); anything else resets: ``{"output":
        bound_tool_output(text)}``. Linear in the length of ``text``.
        """
        call = self._call(call_id)
        return None if call.final else call.replace(text)

    def append(self, call_id: str, delta: str) -> dict[str, Any] | None:
        """New output text: ``{"outputDelta": delta}`` when it costs ≤ 16384 JSON bytes, else
        ``{"output": whole bounded output}``; ``None`` for an empty delta."""
        call = self._call(call_id)
        return None if call.final else call.append(delta)

    def mark_final(self, call_id: str) -> None:
        """The call reached a final status: ``settle`` leaves it, later output is ignored."""
        self._call(call_id).final = True

    def settle(self, declined_ids: Iterable[str] = ()) -> list[tuple[str, dict[str, Any]]]:
        """End of turn: ``(call_id, {"status": …})`` for every seen, unfinished call.

        ``declined`` for the ids whose permission the user refused, ``cancelled`` for the rest,
        in the order the calls were first seen; they are final afterwards, so a second settle
        yields nothing.
        """
        declined = set(declined_ids)
        updates = []
        for call_id, call in self._calls.items():
            if call.final:
                continue
            call.final = True
            status = "declined" if call_id in declined else "cancelled"
            updates.append((call_id, {"status": status}))
        return updates

    def output(self, call_id: str) -> dict[str, Any] | None:
        """The bounded output of a call, as the fold of its updates holds it."""
        call = self._calls.get(call_id)
        return None if call is None else call.output

    def memory(self, call_id: str) -> dict[str, Any] | None:
        """``{"rawLength", "rawSha1", "output"}`` of a call, for ``track_replace`` elsewhere."""
        call = self._calls.get(call_id)
        return None if call is None else call.to_memory()

    def to_json(self) -> dict[str, Any]:
        """JSON-ready state: ``{"calls": [{"toolCallId", "rawLength", "rawSha1", "output",
        "final"}]}`` in first-seen order (a list, since ``jsonb`` does not keep key order)."""
        return {
            "calls": [
                {"toolCallId": call_id, **call.to_memory(), "final": call.final}
                for call_id, call in self._calls.items()
            ]
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCallTracker:
        """A tracker restored from ``to_json``'s answer, in this or another process."""
        tracker = cls()
        for item in data.get("calls", ()):
            tracker._calls[item["toolCallId"]] = _CallMemory.from_memory(
                item, final=bool(item.get("final", False))
            )
        return tracker
