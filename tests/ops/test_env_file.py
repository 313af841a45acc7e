"""The env file's rule, one and the same in the example, the deployment guide and the units.

It holds ``SECRET_KEY`` and the database password, and ``toolcore`` is the user every command a
tool runs is: root only (``0600``), read by systemd as root, and hidden from the units'
processes (``InaccessiblePaths=``). These tests read the shipped files, so a guide or an example
that drifts from the units fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV_FILE = "/etc/toolcore/toolcore.env"
EXAMPLE = ROOT / "deploy" / "toolcore.env.example"
GUIDE = ROOT / "docs" / "deployment.md"
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))


def _settings(unit: Path) -> dict[str, list[str]]:
    """A unit's ``Key=value`` lines (keys may repeat, as ``ExecStart=`` does)."""
    found: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith(("#", ";", "[")):
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def _header(path: Path) -> str:
    """The leading comment block of the example file, as one line of text."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


def test_the_example_says_root_only_mode_0600():
    header = _header(EXAMPLE)
    assert "mode 0600" in header and "owner root" in header
    assert "0640" not in header and "group toolcore" not in header
    assert "never make it readable by toolcore" in header


def test_the_guide_installs_it_root_only_and_never_group_readable():
    guide = GUIDE.read_text()
    installs = [line for line in guide.splitlines() if "install" in line and ENV_FILE in line]
    assert installs, "the guide has no step that installs the env file"
    for line in installs:
        assert re.search(r"-m 0600\b", line) and "-o root -g root" in line, line
    assert "0640" not in guide
    assert "`root:root`, mode `0600`" in guide
    assert "InaccessiblePaths=/etc/toolcore" in guide


def test_every_unit_that_reads_it_runs_as_toolcore_and_hides_it():
    readers = [unit for unit in UNITS if ENV_FILE in _settings(unit).get("EnvironmentFile", [])]
    assert {unit.name for unit in readers} == {
        "toolcore-web@.service",
        "toolcore-worker@.service",
        "toolcore-purge.service",
    }
    for unit in readers:
        settings = _settings(unit)
        assert settings.get("User") == ["toolcore"], unit.name
        assert "/etc/toolcore" in settings.get("InaccessiblePaths", []), unit.name
