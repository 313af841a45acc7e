"""What runs a call once it is ``ready``: registered by the execution runtime at start.

The durable core never imports the runtime (handlers, workers, capture). The runtime registers
a runner per tool name from its ``AppConfig.ready()``; the core hands a call that became
``ready`` to the runner of its tool after the commit that made it ready, and recovery hands
over the ``ready`` calls a crash left behind. A tool without a runner waits for a worker or a
host to claim it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Runner = Callable[[Any], bool]
"""Takes the id of a ``ready`` call; True when it ran the call (claimed it and went on)."""

_RUNNERS: dict[str, Runner] = {}


def runner_register(*, tool_name: str, runner: Runner) -> None:
    """Run ``tool_name``'s calls with ``runner`` as soon as they are ready (the last one
    registered for a tool wins)."""
    _RUNNERS[tool_name] = runner


def runner_tools() -> frozenset[str]:
    """The tools whose ready calls run at once."""
    return frozenset(_RUNNERS)


def call_ready_run(*, call_id: Any, tool_name: str) -> bool:
    """Hand a ``ready`` call to its tool's runner, after the commit that made it ready; False
    when the tool has none or the runner did not take the call (someone else did)."""
    runner = _RUNNERS.get(tool_name)
    return runner is not None and runner(call_id)
