"""No server secret in a tool's environment (docs/execution.md): every environment variable the
server reads (found in ``config/settings.py``, so a new setting is covered the day it is added),
the usual secret-bearing names, and every variable of this very process are set to a canary;
neither ``tool_environment`` (bash calls, async runs, launches) nor a real ``bash`` call run by a
worker shows any of them. Only ``TOOLCORE_ENV_<NAME>`` passes, as ``<NAME>``, by the operator's
choice."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.tools.worker_helpers import model_call, response_of, running_worker, wait_for
from tools.runtime.capture import ENV_PREFIX, tool_environment
from tools.runtime.registry import HANDLERS

SETTINGS = Path(__file__).resolve().parents[2] / "config" / "settings.py"
# What the shell itself sets, and what a command is given on purpose (docs/execution.md).
OWN = {"PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_", "OLDPWD"}
USUAL_SECRETS = [
    "DJANGO_SETTINGS_MODULE",
    "PGPASSWORD",
    "PGHOST",
    "PGUSER",
    "PGPASSFILE",
    "REDIS_PASSWORD",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "TOOLCORE_TOKEN",
    "SSH_AUTH_SOCK",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "LD_PRELOAD",
]


def server_variables() -> list[str]:
    """The names ``config/settings.py`` reads, the usual secret names, and this process's."""
    source = SETTINGS.read_text()
    read = set(
        re.findall(r'(?:_env_\w+|environ\.get|environ\[|getenv)\(?\s*"([A-Z][A-Z0-9_]+)"', source)
    )
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ALLOWED_HOSTS"} <= read, read
    names = read | set(USUAL_SECRETS) | set(os.environ)
    return sorted(n for n in names if n not in OWN and not n.startswith(ENV_PREFIX))


def canary(name: str) -> str:
    return f"canary-{name.lower()}-7f3a"


@pytest.mark.parametrize("name", server_variables())
def test_no_server_variable_reaches_a_tools_environment(tmp_path, name):
    env = tool_environment(tmp_path, environ={**os.environ, name: canary(name)})
    assert name not in env and canary(name) not in env.values(), name
    assert set(env) == {"PATH", "LANG", "HOME", "TERM"} | {
        k.removeprefix(ENV_PREFIX)
        for k in os.environ
        if k.startswith(ENV_PREFIX) and k != ENV_PREFIX
    }


def test_only_the_operators_toolcore_env_variables_pass(tmp_path):
    env = tool_environment(
        tmp_path,
        environ={"TOOLCORE_ENV_GREETING": "hi", "TOOLCORE_ENV_": "x", "SECRET_KEY": "s" * 40},
    )
    assert env == {
        "PATH": env["PATH"],
        "LANG": "C.UTF-8",
        "HOME": str(tmp_path),
        "TERM": "dumb",
        "GREETING": "hi",
    }


@pytest.mark.django_db(transaction=True)
def test_a_real_bash_call_sees_none_of_them(user, monkeypatch):
    """End to end: every canary set in the server's environment at once, ``env`` run by a
    worker as a model's ``bash`` call."""
    names = server_variables()
    for name in names:
        if name not in (
            "HOME",
            "PATH",
            "TMPDIR",
            "DJANGO_SETTINGS_MODULE",
            "PYTHONPATH",
            "LD_PRELOAD",
        ):
            monkeypatch.setenv(name, canary(name))  # the process keeps working with these
    with running_worker(handlers=HANDLERS):
        _, _, call_id = model_call(user, "bash", {"command": "env"})
        payload = wait_for(lambda: response_of(call_id))
    text = payload["modelContent"][0]["text"]
    shown = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}
    leaked = sorted(name for name in names if name in shown or canary(name) in text)
    assert leaked == [], leaked
    assert shown <= OWN, shown
