"""How the suite runs in parallel: a pytest plugin (``-p tests.parallel`` in pyproject.toml).

``make test`` starts pytest-xdist workers with ``--dist loadgroup``: a test marked
``xdist_group(name)`` runs in the same worker as every other test of that group, one after the
other; the others go to whichever worker is free. This plugin gives the groups: the tests that
share a module's or a package's set-up, and the suites that must not run beside each other.
docs/development.md tells the rest (what each worker owns: tests/isolation.py).
"""

from __future__ import annotations

import importlib.metadata

import pytest

# Fixtures set up once for several tests of a module or a package (a live site, a browser).
SHARED_SCOPES = {"module": 1, "package": 0}
# Suites that load the machine or kill its servers on purpose: one group, so that no two of them
# ever run at once (each asserts what a server does under the load or the fault it makes).
ALONE_MARKERS = ("load", "faults")
ALONE_GROUP = "alone"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tests that share a module- or package-scoped fixture of the suite run in one xdist
    worker (``--dist loadgroup``), so that its set-up (a daphne site, a browser) is made once,
    not once in each worker that happens to get one of them. The load and fault suites are one
    group, ``alone``; a test marked with a group of its own keeps it."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        if any(item.get_closest_marker(name) for name in ALONE_MARKERS):
            group = ALONE_GROUP
        else:
            group = _shared_setup_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config):
    """A parallel run whose groups would be lost stops at once: pytest 9.2's structured node
    ids silently undo xdist 3.8's ``--dist loadgroup`` (pytest-dev/pytest-xdist#1386), and
    every shared set-up would then be made once in each worker (pyproject.toml pins pytest)."""
    if config.getoption("numprocesses", None) and config.getoption("dist", "") == "loadgroup":
        pytest_version = _version("pytest")
        xdist_version = _version("pytest-xdist")
        if pytest_version >= (9, 2) and xdist_version <= (3, 8, 0):
            raise pytest.UsageError(
                f"pytest {'.'.join(map(str, pytest_version))} with pytest-xdist "
                f"{'.'.join(map(str, xdist_version))} ignores xdist_group "
                "(pytest-dev/pytest-xdist#1386): install pytest<9.2, as pyproject.toml says"
            )


def _version(distribution: str) -> tuple[int, ...]:
    numbers = importlib.metadata.version(distribution).split(".")
    return tuple(int(n) for n in numbers[:3] if n.isdigit())


def _shared_setup_group(item) -> str:
    """The module or package whose shared fixtures ``item`` uses ("" for none): the widest."""
    widest = ""
    for definitions in item._fixtureinfo.name2fixturedefs.values():
        for definition in definitions:
            order = SHARED_SCOPES.get(definition.scope)
            if order is None or not definition.baseid.startswith("tests"):
                continue  # function or session scope, or a plugin's fixture
            # A package's fixture: the folder of its conftest.py; a module's: the test's module.
            where = definition.baseid if order == 0 else item.nodeid.split("::")[0]
            if not widest or len(where) < len(widest):
                widest = where
    return widest
