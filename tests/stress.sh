#!/usr/bin/env bash
# The whole SQLite suite while a CPU hog keeps every core busy (`make test-stress`): proof that no
# test needs a quiet machine. Every failure of every run is listed at the end, and the script
# exits 1 if there was one (docs/development.md, "Under load").
#
#   tests/stress.sh               one run
#   STRESS_RUNS=3 tests/stress.sh three runs, one after the other, under the same hog
#   STRESS_HOGS=4 tests/stress.sh four busy processes instead of one per core
#   STRESS_ARGS=tests/tools tests/stress.sh   a part of the suite (pytest arguments)
#
# The hog is stress-ng (Debian's package) when installed, else a Python busy loop per core; it
# runs at the suite's own priority, so the suite gets about half of each core. Each run's JUnit
# report goes to test-output/stress/run-N.xml (TOOLCORE_TEST_OUTPUT moves test-output).
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${STRESS_RUNS:-1}
hogs=${STRESS_HOGS:-$(nproc)}
output="${TOOLCORE_TEST_OUTPUT:-test-output}/stress"
mkdir -p "$output"
# The SQLite configuration, whatever this shell has set.
unset DATABASE_URL REDIS_URL TOOLCORE_TEST_ASSET_STORAGE

hog_pids=()
stop_hogs() {
  if [ ${#hog_pids[@]} -gt 0 ]; then
    kill "${hog_pids[@]}" 2>/dev/null
    wait "${hog_pids[@]}" 2>/dev/null
  fi
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM
if command -v stress-ng >/dev/null; then
  stress-ng --cpu "$hogs" --quiet &
  hog_pids+=($!)
  hog="stress-ng --cpu $hogs"
else
  for _ in $(seq "$hogs"); do
    python3 -c 'while True: pass' &
    hog_pids+=($!)
  done
  hog="$hogs Python busy loops"
fi
echo "== CPU hog: $hog on $(nproc) cores =="

status=0
for run in $(seq "$runs"); do
  report="$output/run-$run.xml"
  rm -f "$report"
  echo "== stress run $run of $runs =="
  started=$(date +%s)
  make test PYTEST_ARGS="--junitxml=$report ${STRESS_ARGS:-}" || status=1
  echo "== stress run $run: $(( $(date +%s) - started )) s wall =="
done

# Every failure and error of every run, from the JUnit reports.
python3 - "$output" "$runs" <<'PY' || status=1
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

folder, runs = Path(sys.argv[1]), int(sys.argv[2])
found = 0
for run in range(1, runs + 1):
    report = folder / f"run-{run}.xml"
    if not report.exists():
        print(f"run {run}: no report (the run did not finish)")
        found += 1
        continue
    for case in ET.parse(report).iter("testcase"):
        for kind in ("failure", "error"):
            for problem in case.findall(kind):
                found += 1
                message = (problem.get("message") or "").splitlines()[:1]
                print(f"run {run}: {kind.upper()} {case.get('classname')}::{case.get('name')}")
                print(f"    {message[0][:300] if message else ''}")
print(f"== {found} failures under load in {runs} run(s) ==")
sys.exit(1 if found else 0)
PY
exit $status
