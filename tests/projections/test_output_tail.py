"""A bash card's preview read from the end of its output file equals the preview of the whole
output, in memory bounded whatever the file's size."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.transcript import (
    TAIL_LINE_KEEP_BYTES,
    count_lines,
    output_tail,
    project_transcript,
)

ARGS = {"command": "make test"}

pieces = st.lists(
    st.one_of(
        st.sampled_from([b"\n", b"\r\n", b"\r", b"", b"\xff", b"\xc3", b"\xe2\x82\xac"]),
        st.binary(max_size=40),
        st.text(max_size=30).map(str.encode),
    ),
    max_size=40,
)


def preview_of(data: bytes) -> dict:
    return project_transcript(
        tool_name="bash", arguments=ARGS, result_text=data.decode("utf-8", "replace")
    )


def preview_from_tail(path) -> dict:
    text, lines = output_tail(path)
    return project_transcript(
        tool_name="bash", arguments=ARGS, result_text=text, result_lines=lines
    )


@settings(max_examples=300, deadline=None)
@given(pieces)
def test_the_tail_preview_is_the_whole_outputs(tmp_path_factory, parts):
    data = b"".join(parts)
    path = tmp_path_factory.mktemp("out") / "output.txt"
    path.write_bytes(data)
    assert preview_from_tail(path) == preview_of(data)
    assert output_tail(path)[1] == count_lines(data.decode("utf-8", "replace"))


def test_a_large_output_with_long_lines(tmp_path):
    lines = [f"line {i} ".encode() * (i % 7) for i in range(200_000)]
    lines[-2] = "é".encode() * (TAIL_LINE_KEEP_BYTES)  # longer than what a line keeps
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "output.txt"
    path.write_bytes(data)
    preview = preview_from_tail(path)
    assert preview == preview_of(data)
    assert preview["previewOverflow"]["hidden"] == 200_000 - len(preview["resultPreview"])


def test_an_empty_output(tmp_path):
    path = tmp_path / "output.txt"
    path.write_bytes(b"")
    assert output_tail(path) == ("", 0)
    assert preview_from_tail(path)["resultPreview"] == []
