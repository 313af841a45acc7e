# Toolcore: `make run` serves the app, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
STAMP := $(VENV)/.installed
# Each `make run` starts the demo conversation afresh (its bash call awaiting approval again), so
# the README's walkthrough can be repeated; `make run DEMO=keep` keeps the one there is.
DEMO ?= reset

.PHONY: run test test-stress test-assets two-hosts lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Development: DEBUG on (the development secret key, any host, the demo user and token).
run: $(STAMP)
	DEBUG=1 $(BIN)/python manage.py migrate --no-input
	DEBUG=1 $(BIN)/python manage.py seed_demo $(if $(filter keep,$(DEMO)),,--reset)
	@echo "Toolcore on http://$(HOST):$(PORT)/  (log in as demo; admin: /admin/, API docs: /api/v1/docs)"
	DEBUG=1 $(BIN)/daphne -e tcp:port=$(PORT):interface=$(HOST):backlog=1024 config.asgi:application

# The suite runs in parallel, in PYTEST_WORKERS pytest-xdist workers: one more than the cores, at
# most four (three on two cores, measured best: its tests wait for the processes they start);
# `make test PYTEST_WORKERS=1` runs it in one process, `PYTEST_WORKERS=auto` one per core. docs/development.md says how the
# suite is organised, how to run a part of it and how to find a slow or flaky test.
# PYTEST_ARGS adds pytest arguments: a part of the suite (`make test PYTEST_ARGS=tests/tools`), -k, -x, …
PYTEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n + 1 < 4 ? n + 1 : 4 )))
PYTEST_ARGS ?=
PYTEST := $(BIN)/python -m pytest -rs $(if $(filter 0 1,$(PYTEST_WORKERS)),-n 0,-n $(PYTEST_WORKERS))

# The browser tests (tests/browser/) need Debian's Chromium; without it they are skipped.
# -rs: the summary names every skipped test and why (no Chromium, no PostgreSQL, …).
test: $(STAMP)
	@test -x /usr/bin/chromium || echo "Chromium not found at /usr/bin/chromium: browser tests skipped (apt-get install chromium)"
	$(PYTEST) $(PYTEST_ARGS)

# The SQLite suite under a CPU hog on every core, every failure listed (tests/stress.sh;
# STRESS_RUNS=3 for three runs).
test-stress: $(STAMP)
	tests/stress.sh

# The tests of assets (settlement's files, ranges, lines, digests, integrity, retention, orphans)
# with the assets in an S3-compatible store: SeaweedFS, started by the suite (tests/conftest.py).
ASSET_TESTS := tests/storage tests/conversations/test_api_assets.py \
	tests/security/test_tampered_assets.py tests/conversations/test_integrity.py \
	tests/conversations/test_retention.py tests/conversations/test_settlement.py \
	tests/conversations/test_host_images.py tests/conversations/test_admin.py \
	tests/conversations/test_async_runs.py tests/faults/test_disk_full.py tests/tools/test_bash.py \
	tests/mcp/test_client_calls.py::test_images_become_assets_and_resources_are_listed
# With PostgreSQL + Redis (DATABASE_URL, REDIS_URL) it also runs the two-host suite (tests/hosts/):
# the third configuration of .ci/run.
test-assets: $(STAMP)
	TOOLCORE_TEST_ASSET_STORAGE=s3 $(PYTEST) $(ASSET_TESTS) tests/hosts

# Two hosts on this machine with no shared directory (tests/hosts/): two daphnes and two workers,
# each pair with its own DATA_DIR, workspace root and TOOLCORE_HOST_NAME. Needs PostgreSQL and
# Redis (skipped, saying so, without them), e.g.
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/0 make two-hosts
two-hosts: $(STAMP)
	$(PYTEST) -m hosts tests/hosts

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Every bench/*.py, then one table; writes bench/results.json and refreshes docs/performance.md.
# SQLite and the in-memory layer unless DATABASE_URL / REDIS_URL say otherwise (the worker
# figures need PostgreSQL and are skipped without it).
bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) data/test-toolcore-*.sqlite3*
