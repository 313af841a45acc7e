"""The ``configuration`` step of ``.ci/run``: each configuration's times and pytest's summary line.

The function is taken out of the script as it stands and run by bash with the script's own
``set -euo pipefail``, on commands that stand for the steps (a pytest run, lint, a failure)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _function() -> str:
    script = (ROOT / ".ci" / "run").read_text()
    found = re.search(
        r"^log=\$\(mktemp -d\)\n.*?^configuration\(\) \{.*?^\}\n", script, re.S | re.M
    )
    assert found, ".ci/run defines no configuration() step"
    return found.group(0)


def _run(steps: str) -> subprocess.CompletedProcess[str]:
    program = "set -euo pipefail\n" + _function() + steps + '\nprintf "%s\\n" "${figures[@]}"\n'
    return subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)


def test_a_step_without_a_pytest_summary_goes_on_to_the_next():
    # lint prints no summary line: the run went on to PostgreSQL before (it stopped after lint).
    done = _run(
        'configuration "lint" echo "All checks passed!"\n'
        'configuration "suite" bash -c \'echo "==== 3 passed, 1 skipped in 1.20s ===="\'\n'
    )
    assert done.returncode == 0, done.stderr
    figures = done.stdout.splitlines()[-2:]
    assert re.fullmatch(
        r"lint: \d+ s wall, \d+ s CPU \(wall [\d.]+ x CPU\); no pytest summary", figures[0]
    )
    assert figures[1].endswith("; 3 passed, 1 skipped in 1.20s"), figures[1]


def test_a_failing_step_fails_the_run_after_printing_its_figures():
    done = _run(
        'configuration "suite" bash -c \'echo "= 1 failed, 2 passed in 3.00s ="; exit 3\'\n'
        'echo "not reached"\n'
    )
    assert done.returncode == 3
    assert "not reached" not in done.stdout
    assert "== suite: " in done.stdout and "1 failed, 2 passed in 3.00s ==" in done.stdout
