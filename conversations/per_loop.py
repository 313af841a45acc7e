"""One object per running event loop (daphne has one loop; each async test its own): the
process-wide watches of the turn barrier and of the websockets' credentials."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

_T = TypeVar("_T")


class PerLoop(Generic[_T]):
    """``get()`` answers the running loop's object, made by ``make`` on first use and dropped
    with the loop."""

    def __init__(self, make: Callable[[], _T]) -> None:
        self._make = make
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> _T:
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is None:
            found = self._by_loop[loop] = self._make()
        return found
