"""Builders of the process-contract tests (tests/projections/test_process_*.py), and the rules.

``project_process`` (exported by ``projections.result``) turns the captured output file of a
process into the text the model reads: the output itself when it is small, else a summary of at
most 16 lines and 4,000 UTF-8 bytes that names the file. Every expected text in those tests was
worked out by hand from the contract's rules; each test quotes or paraphrases the rule it shows.
docs/projections.md describes the implementation and the points the contract leaves open.

The rules, in short:

* Lines: ``k`` newlines make ``k`` lines when the text ends with one, else ``k + 1``; ``\\r\\n``
  is one break and a lone ``\\r`` is none; a trailing ``\\r`` is removed from every line of a
  summary. Text is decoded as UTF-8 with replacement and U+0000 becomes U+FFFD.
* Inline: the decoded file (``(no output)`` when empty), then, when a status is needed (timed
  out, signalled, or exit code not 0), a newline unless the text ends with one and the status
  sentence. It is the result when capture did not stop and it has <= 84 lines and <= 12,000
  bytes.
* Summary: ``{status} Output: {L} lines, {SIZE}.`` (+ the capture sentence), ``Showing …``, the
  head (first 2 lines), the last <= 8 diagnostic lines among lines 3 … L-3, the last
  ``3 + (8 - D)`` lines not already shown, each ``N: text`` cut to a cap C (largest <= 1,000
  keeping the summary <= 4,000 bytes), then ``Full output: PATH (…).``.

The streaming pass is tuned (chunk size) by patching ``projections.process``.
"""

from __future__ import annotations

import os
from pathlib import Path

MIB = 1024 * 1024
FULL = "(read it with offset/limit or grep it; do not rerun the command)."
# The summary's last line is "Full output: " (13) + path + " " + FULL (1 + 65): 79 + path bytes.
PATH_CHARS = 200  # so with the default path the last line is 279 bytes


def write(tmp_path: Path, data: bytes, length: int = PATH_CHARS, name: str = "output.txt") -> str:
    """Write ``data`` to an absolute path of exactly ``length`` (ASCII) characters; return it.

    The path's line shares the summary's 4,000 bytes, so a fixed length makes the budget, and
    with it every expected text, the same on every machine.
    """
    folder = str(tmp_path)
    room = length - len(folder) - len("/" + name)
    assert room >= 2 and folder.isascii(), folder
    while room:
        part = min(room - 1, 200)
        if room - 1 - part == 1:  # a 1-character remainder would be a "/" with no name
            part -= 1
        folder += "/" + "p" * part
        room -= part + 1
    os.makedirs(folder, exist_ok=True)
    path = f"{folder}/{name}"
    assert len(path) == length and os.path.isabs(path)
    Path(path).write_bytes(data)
    return path


def summary(path: str, *lines: str) -> str:
    """The summary's lines joined by ``\\n`` (no trailing newline), the path line last."""
    return "\n".join([*lines, f"Full output: {path} {FULL}"])


def numbered(first: int, last: int, text: str = "line {}") -> list[str]:
    """Entries ``N: text`` for lines ``first`` … ``last`` whose text is ``text.format(N)``."""
    return [f"{n}: {text.format(n)}" for n in range(first, last + 1)]
