"""``python manage.py runworker_tools``: a process of tool workers (docs/execution.md)."""

from __future__ import annotations

import asyncio
import signal

from django.conf import settings
from django.core.management.base import BaseCommand

from tools.runtime.registry import FAMILIES, HANDLERS
from tools.runtime.worker import Worker
from tools.sandbox import sandbox_require


class Command(BaseCommand):
    help = (
        "Run tool workers until SIGINT or SIGTERM: they pick up ready calls of the core tools, "
        "run them, and sweep what dead workers left. Start any number, on any machine sharing "
        "the database and DATA_DIR."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--concurrency",
            type=int,
            default=settings.TOOLCORE_WORKER_CONCURRENCY,
            help="Calls run at once (default TOOLCORE_WORKER_CONCURRENCY).",
        )
        parser.add_argument("--name", default=None, help="Worker name (default host:pid:suffix).")

    def handle(self, *args, **options):
        if options["concurrency"] < 1:
            self.stderr.write("--concurrency: must be 1 or more")
            raise SystemExit(2)
        sandbox_require()  # no usable sandbox (DEBUG off): one line naming the setting, exit 1
        asyncio.run(self._main(options["concurrency"], options["name"]))

    async def _main(self, concurrency: int, name: str | None) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        worker = Worker(handlers=HANDLERS, families=FAMILIES, concurrency=concurrency, name=name)
        # Its start is the log line "worker started" (JSON with DEBUG off, as every line a
        # service writes), not text of its own on stdout.
        await worker.run(stop)
