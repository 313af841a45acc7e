"""A tool worker: picks up ``ready`` calls, runs their handlers, renews their leases, settles
them under its claim, and sweeps what dead workers left (docs/execution.md).

Any number of workers may run, in ``manage.py runworker_tools`` processes on any machine sharing
the database and ``DATA_DIR``, or inside the web process (``TOOLCORE_WORKERS``). Claims, leases
and fencing (docs/subsystems/claims_and_recovery.md) make that safe: a call is run by the one
worker whose claim holds, and a worker that lost its claim can never settle.

One asyncio loop runs the worker: handlers are tasks (several calls at once, up to
``concurrency``), processes are asyncio subprocesses. Database work (claims, settlement, the
activity fold) runs on a few threads of the worker's own, each giving its connection back.

Waking up. No polling interval on the hot path: the commit that makes a call ready wakes the
workers of its process at once (an in-process listener) and, on PostgreSQL, those of every other
process through a database notification delivered with that commit. A slow poll
(``POLL_SECONDS``) is only the safety net for a notification lost on a reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, connections
from django.utils import timezone

from conversations.api.outages import outage_noted
from conversations.errors import StaleClaim
from conversations.services import publish, runners
from conversations.services.activity import activity_fold
from conversations.services.claims import (
    Claim,
    Taken,
    claim_acquire_batch,
    claim_announce,
    claim_renew,
)
from conversations.services.recovery import recover_all
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import attempt_dir, conversation_dir
from tools.workspaces import owner_workspace_root

from .async_runs.watch import RUN, watch_run
from .base import CallContext, Handler, HandlerFamily, HandlerResult, ToolError, stopped_reason
from .host_pages import answer_pages, pages_channel
from .launches.services import launches_waiting
from .launches.watch import LAUNCH, launch_start
from .left_processes.watch import kill_left
from .logs import page_read
from .presence import worker_gone, worker_heartbeat
from .processes import environment_protect
from .watchers import Watchers

logger = logging.getLogger(__name__)

POLL_SECONDS = 5.0  # the safety net only: commits wake the workers
# After a failed pickup or sweep (a connection dropped, the database restarting), the next try
# comes this soon, not after the poll or the lease: the pool hands out only live connections,
# so it normally succeeds. Doubled after each failure in a row, up to the usual period.
RETRY_SECONDS = 0.2
DATABASE_THREADS_EXTRA = 2  # besides one per concurrent call: pickup and the sweep
# A run still going this long after its start is published in_progress even if it has not
# touched the database yet; one that ends sooner is published by its settlement.
ANNOUNCE_AFTER = 0.05
# A settlement whose database connection dropped is tried again this many times in all, after
# 0.5 s, then 1 s: well within a third of the default lease, while renewals keep the claim.
SETTLE_TRIES = 3
SETTLE_RETRY_SECONDS = 0.5


def worker_name() -> str:
    """``host:pid:suffix``: unique per worker, readable in the admin and the logs."""
    return f"{settings.TOOLCORE_HOST_NAME}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _fold(call_id: Any, turn_id: Any, fields: dict[str, Any]) -> None:
    with publish.atomic():
        activity_fold(
            tool_call_id=call_id,
            update={"toolCallId": str(call_id), "turnId": str(turn_id), **fields},
        )


class Worker:
    """Runs ready calls of the tools in ``handlers``, and of the tools of ``families`` (the MCP
    servers' tools: ``registry.FAMILIES``); ``await worker.run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        *,
        handlers: Mapping[str, Handler],
        families: Sequence[HandlerFamily] = (),
        name: str | None = None,
        concurrency: int | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.handlers = dict(handlers)
        self.families = tuple(families)
        self.name = name or worker_name()
        self.host = settings.TOOLCORE_HOST_NAME
        self.concurrency = concurrency or settings.TOOLCORE_WORKER_CONCURRENCY
        self.poll_seconds = poll_seconds
        self._database = ThreadPoolExecutor(
            max_workers=self.concurrency + DATABASE_THREADS_EXTRA,
            thread_name_prefix="toolcore-worker-db",
        )
        self._running: dict[str, asyncio.Task[None]] = {}
        self._announcing: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._launches_waiting = True  # look at start
        self.channel: str | None = None  # where it answers other hosts' log pages
        self.watchers = Watchers(db=self.db, host=self.host, worker=self.name)

    # --- from other threads ---------------------------------------------------------------

    def wake(self, tool_name: str | None = None) -> None:
        """A call became ready (any thread): pick up at once."""
        if self._loop is None or (tool_name is not None and self._handler(tool_name) is None):
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self._loop.call_soon_threadsafe(self._wake.set)

    def revoke(self, call_id: str) -> None:
        """The call's claim was taken (any thread): stop its run."""
        self._soon(self._stop_call, str(call_id))

    def kill_run(self, run_id: str) -> None:
        """An async run is to be killed (any thread): done if it is watched here."""
        self._soon(self.watchers.kill, RUN, str(run_id))

    def stop_launch(self, launch_id: str) -> None:
        """A launch is to be stopped (any thread): done if it is watched here."""
        self._soon(self.watchers.kill, LAUNCH, str(launch_id))

    def launch_waiting(self, _launch_id: str | None = None) -> None:
        """A launch waits for a worker (any thread): try to take the waiting ones."""
        self._soon(self._launch_waiting)

    def _launch_waiting(self) -> None:
        self._launches_waiting = True
        self._wake.set()

    def _soon(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(fn, *args)

    # --- the loop -------------------------------------------------------------------------

    async def db(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the worker's database threads, connection given back."""

        def job() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                connections.close_all()

        return await asyncio.get_running_loop().run_in_executor(self._database, job)

    async def run(self, stop: asyncio.Event) -> None:
        # Commands run as this process's user: they must not read its environment in /proc.
        environment_protect()
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        for channel, listener in self._listeners():
            runners.listen(channel, listener)
        background = [asyncio.create_task(self._sweep_every_lease())]
        if not settings.TOOLCORE_SHARED_WORKSPACES:  # pinned: log pages of this host's disk
            answering = await pages_channel()
            if answering is not None:
                layer, self.channel = answering
                background.append(asyncio.create_task(answer_pages(layer, self.channel, page_read)))
        # Alive before its first claim: a conversation it pins is then never pinned to a host
        # that another host's sweep finds without a sign of life (``presence.hosts_gone``).
        await self._heartbeat()
        background.append(asyncio.create_task(self._heartbeat_every_third_of_the_lease()))
        if connection.vendor == "postgresql":
            background.append(asyncio.create_task(self._listen_to_the_database()))
        logger.info(
            "worker started, %d calls at once; SIGTERM stops it",
            self.concurrency,
            extra={"worker": self.name},
        )
        retry = RETRY_SECONDS
        try:
            while not stop.is_set():
                self._wake.clear()
                wait = self.poll_seconds
                try:
                    await self._pick_up()
                    if self._launches_waiting:
                        self._launches_waiting = False
                        await self._start_launches()
                    retry = RETRY_SECONDS
                except Exception as exc:  # noqa: BLE001 - the database hiccupped: try again soon
                    outage_noted(exc, "worker")
                    logger.warning("pickup failed", extra={"worker": self.name}, exc_info=True)
                    wait, retry = min(retry, self.poll_seconds), retry * 2
                    self._launches_waiting = True
                woken = await _first_of(self._wake.wait(), stop.wait(), timeout=wait)
                if not woken:
                    self._launches_waiting = True  # the slow poll looks at launches too
        finally:
            for channel, listener in self._listeners():
                runners.unlisten(channel, listener)
            for task in background:
                task.cancel()
            await self._stop_all()
            await self.watchers.stop_all()
            await asyncio.gather(*background, return_exceptions=True)
            with contextlib.suppress(Exception):  # the database away: its heartbeat ages out
                await self.db(worker_gone, name=self.name)
            self._database.shutdown(wait=False)
            logger.info("worker stopped", extra={"worker": self.name})

    async def _pick_up(self) -> None:
        free = self.concurrency - len(self._running)
        if free <= 0:
            return
        claims = await self.db(self._claim, free)
        for claim in claims:
            key = str(claim.call_id)
            self._running[key] = asyncio.create_task(self._run(claim), name=f"call {key}")
        if len(claims) == free:
            self._wake.set()  # there may be more: look again once a slot frees

    def _handler(self, tool_name: str) -> Handler | None:
        """The handler of ``tool_name``: a core tool's, else its family's."""
        handler = self.handlers.get(tool_name)
        if handler is None:
            family = next((f for f in self.families if tool_name.startswith(f.prefix)), None)
            handler = None if family is None else family.handler
        return handler

    def _claim(self, limit: int) -> list[Claim]:
        """On a database thread: claim up to ``limit`` ready calls of the core tools and of the
        names the families may claim now."""
        names = list(self.handlers)
        for family in self.families:
            names.extend(family.claimable())
        # Pinned workspaces: only calls of conversations of this host or of none
        # (docs/deployment.md, "Pinned workspaces").
        host = None if settings.TOOLCORE_SHARED_WORKSPACES else self.host
        return claim_acquire_batch(
            tool_names=names, worker=self.name, limit=limit, announce=False, host=host
        )

    def _listeners(self) -> list[tuple[str, Callable[[str], None]]]:
        return [
            (runners.READY, self.wake),
            (runners.REVOKED, self.revoke),
            (runners.RUN_KILL, self.kill_run),
            (runners.LAUNCH, self.launch_waiting),
            (runners.LAUNCH_STOP, self.stop_launch),
        ]

    async def _start_launches(self) -> None:
        for launch_id in await self.db(launches_waiting, self.host):
            await launch_start(self.watchers, launch_id)

    def _stop_call(self, call_id: str) -> None:
        task = self._running.get(call_id)
        if task is not None:
            task.cancel()

    async def _stop_all(self) -> None:
        """Stop every run: their handlers kill their processes. Their claims are left to expire
        (recovery settles what ran, or runs a read-only tool again)."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *self._announcing, return_exceptions=True)

    # --- one call -------------------------------------------------------------------------

    def _log(self, claim: Claim) -> dict[str, Any]:
        return {"worker": self.name, "tool_call_id": claim.call_id, "claim_token": claim.token}

    async def _run(self, claim: Claim) -> None:
        key = str(claim.call_id)
        renewal: asyncio.Task[None] | None = None
        started = timezone.now()
        # The claim is published and folded in_progress once the run is underway, not on the
        # path to it: at the run's first database step (for bash, right after its process
        # started), when it suspends, or ANNOUNCE_AFTER into it; before anything it folds or
        # settles. A run that ends sooner is announced by its settlement (with its startedAt).
        # The announce is the run's first database step: one that failed fails the step that
        # waits for it (a command is then stopped, docs/reliability.md).
        announced: asyncio.Future[BaseException | None] | None = None
        # Done once this worker's part in settling the call is over, whatever came of it: a
        # promoted run's notice waits for it (it follows the response; async_run_finish checks
        # that too, in the database).
        settlement: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def announce() -> asyncio.Future[BaseException | None]:
            nonlocal announced
            if announced is None:
                announced = asyncio.ensure_future(self._announce(claim))
            return announced

        timer = asyncio.get_running_loop().call_later(ANNOUNCE_AFTER, announce)
        result: HandlerResult | None = None
        settled = False
        try:
            taken = claim.taken
            handler = self._handler(taken.tool_name) if taken is not None else None
            if taken is None or handler is None:
                return  # not ours after all
            ctx = self._context(claim, taken, announce, settlement)
            renewal = asyncio.create_task(self._renew(claim))
            if taken.lost_host:
                result = HandlerResult(outcome="failed", reason=self._workspace_lost(taken))
            else:
                result = await self._handle(handler, ctx, claim)
            timer.cancel()
            if result is None:
                return
            if result.suspended:
                await asyncio.shield(announce())
                return
            # A run never announced (it ended sooner, or its announce failed) folds its
            # startedAt with its end.
            unannounced = announced is None or await asyncio.shield(announced) is not None
            await self._settle(claim, result, started if unannounced else None)
            settled = True
        except StaleClaim:
            logger.info("call lost its claim before settling", extra=self._log(claim))
        except asyncio.CancelledError:
            # Its claim was taken (a cancel, recovery) or the worker stops: the handler killed
            # what it ran; whoever took the claim settles.
            logger.info("call stopped", extra=self._log(claim))
        except Exception:
            # A bug of the worker itself, not of the tool: the claim expires and recovery
            # decides (indeterminate, or a read-only tool runs again).
            logger.exception("worker failed on a call", extra=self._log(claim))
        finally:
            timer.cancel()
            if not settled and result is not None and result.async_run_id is not None:
                # A promoted command whose call this worker did not settle (a cancel or
                # recovery settled it, the worker stops, the settlement failed): it stops too.
                self.watchers.kill(RUN, str(result.async_run_id))
            if not settlement.done():
                settlement.set_result(None)
            if renewal is not None:
                renewal.cancel()
            self._running.pop(key, None)
            if self._wake is not None:
                self._wake.set()  # a slot is free

    async def _settle(self, claim: Claim, result: HandlerResult, started: Any) -> None:
        """Settle under the claim (``_settle_tries``). A promoted command runs on meanwhile, so
        its settlement is tried once: if it failed (the database), the run is killed and the
        call settles ``indeterminate`` with what it captured (docs/reliability.md). If another
        settled the call first (a cancel, recovery), ``_run`` kills the run."""
        run_id = result.async_run_id
        if run_id is None:
            await self._settle_tries(claim, result, started, SETTLE_TRIES)
            return
        try:
            await self._settle_tries(claim, result, started, 1)
        except StaleClaim:
            raise  # another settled the call first: _run kills the run
        except Exception as exc:  # noqa: BLE001 - the server's own error: stop, indeterminate
            logger.warning(
                "settling a promoted command failed; stopping it",
                extra=self._log(claim),
                exc_info=True,
            )
            files = await self.watchers.stop(RUN, str(run_id))
            # No result.json: the failed try may have written the promotion's.
            stopped = HandlerResult(
                outcome="indeterminate", reason=stopped_reason(exc), files=files
            )
            await self._settle_tries(claim, stopped, started, SETTLE_TRIES)

    async def _settle_tries(
        self, claim: Claim, result: HandlerResult, started: Any, tries: int
    ) -> None:
        """Settle under the claim; a database connection lost on the way (a restart, a
        terminated backend) is tried again, up to ``tries`` times, while the claim is still
        renewed. Safe: a settlement that did commit answers ``StaleClaim`` the next time, and
        its files are accepted again with the same bytes."""
        for tried in range(1, tries + 1):
            try:
                await self.db(
                    call_settle,
                    call_id=claim.call_id,
                    outcome=result.outcome,
                    guard=ClaimGuard(claim.token, claim.generation),
                    result=result.result,
                    text=result.text,
                    items=result.items,
                    item_count=result.item_count,
                    note=result.note,
                    process=result.process,
                    reason=result.reason,
                    files=result.files,
                    async_run_id=result.async_run_id,
                    started_at=started,
                    page=result.page,
                )
                return
            except (OperationalError, InterfaceError) as exc:
                outage_noted(exc, "worker")
                if tried == tries:
                    raise
                logger.warning(
                    "settlement lost its database connection; trying again",
                    extra=self._log(claim),
                    exc_info=True,
                )
                await asyncio.sleep(SETTLE_RETRY_SECONDS * tried)

    async def _handle(
        self, handler: Handler, ctx: CallContext, claim: Claim
    ) -> HandlerResult | None:
        try:
            return await handler(ctx)
        except ToolError as exc:
            return HandlerResult(outcome="failed", reason=exc.message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the tool failed: say so, settle failed
            logger.exception("handler raised", extra=self._log(claim))
            return HandlerResult(
                outcome="failed", reason=f"The tool failed unexpectedly ({type(exc).__name__})."
            )

    def _workspace_lost(self, taken: Taken) -> str:
        """Why the first call of a conversation released by recovery does not run."""
        return (
            f"The workspace of this conversation was on host {taken.lost_host!r}, which had no "
            f"live worker for more than {settings.TOOLCORE_HOST_GRACE} s: its files are lost. "
            f"The call did not run; the conversation's calls from now on run in a new, empty "
            f"workspace on host {self.host!r}."
        )

    async def _announce(self, claim: Claim) -> BaseException | None:
        """Publish the claim and fold the call ``in_progress``; the error when that failed."""
        task = asyncio.current_task()
        if task is not None:
            self._announcing.add(task)
        try:
            await self.db(claim_announce, [claim])
        except Exception as exc:  # noqa: BLE001 - the run's next database step raises it
            logger.warning("claim not announced", extra=self._log(claim), exc_info=True)
            return exc
        finally:
            self._announcing.discard(task)
        return None

    def _context(
        self,
        claim: Claim,
        row: Taken,
        announce: Callable[[], asyncio.Future[BaseException | None]],
        settlement: asyncio.Future[None],
    ) -> CallContext:
        async def announced() -> None:
            failed = await asyncio.shield(announce())
            if failed is not None:
                raise failed

        async def update(fields: dict[str, Any]) -> None:
            await announced()
            await self.db(_fold, claim.call_id, row.turn_id, fields)

        async def sync(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            await announced()
            return await self.db(fn, *args, **kwargs)

        return CallContext(
            call_id=claim.call_id,
            conversation_id=row.conversation_id,
            owner_id=row.owner_id,
            tool_name=row.tool_name,
            arguments=row.arguments if isinstance(row.arguments, dict) else {},
            generation=claim.generation,
            token=claim.token,
            worker=self.name,
            workspace=owner_workspace_root(row.owner_id) / row.workspace,
            managed_root=conversation_dir(row.conversation_id),
            attempt_dir=attempt_dir(row.conversation_id, claim.call_id, claim.generation),
            update=update,
            sync=sync,
            background=functools.partial(watch_run, self.watchers, after=settlement),
        )

    async def _renew(self, claim: Claim) -> None:
        """Renew the lease every third of it; a claim lost meanwhile stops the run."""
        every = settings.TOOLCORE_CLAIM_LEASE / 3
        while True:
            await asyncio.sleep(every)
            try:
                await self.db(
                    claim_renew,
                    call_id=claim.call_id,
                    token=claim.token,
                    generation=claim.generation,
                )
            except StaleClaim:
                self._stop_call(str(claim.call_id))
                return
            except Exception as exc:  # noqa: BLE001 - the database hiccupped: try again next time
                outage_noted(exc, "worker")
                logger.warning("lease renewal failed", extra=self._log(claim), exc_info=True)

    # --- sweeps and notifications ---------------------------------------------------------

    async def sweep(self) -> list[Any]:
        """One recovery sweep (docs/subsystems/claims_and_recovery.md)."""
        actions = await self.db(recover_all)
        for action in actions:
            logger.info("recovery: %s", action, extra={"worker": self.name})
        return actions

    async def _sweep_every_lease(self) -> None:
        retry = RETRY_SECONDS
        while True:
            wait = settings.TOOLCORE_CLAIM_LEASE
            try:
                await self.sweep()
                await kill_left(self.watchers)
                retry = RETRY_SECONDS
            except Exception as exc:  # noqa: BLE001 - the next sweep tries again, soon
                outage_noted(exc, "worker")
                logger.warning("recovery sweep failed", extra={"worker": self.name}, exc_info=True)
                wait, retry = min(retry, wait), retry * 2
            await asyncio.sleep(wait)

    async def _heartbeat_every_third_of_the_lease(self) -> None:
        """The worker's own heartbeat every third of the lease after the one at its start."""
        while True:
            await asyncio.sleep(settings.TOOLCORE_CLAIM_LEASE / 3)
            await self._heartbeat()

    async def _heartbeat(self) -> None:
        """The worker's own heartbeat (``presence.py``: alive, by host), with those of the runs
        and launches it watches."""
        try:
            await self.db(worker_heartbeat, name=self.name, host=self.host, channel=self.channel)
            await self.watchers.heartbeat()
        except Exception as exc:  # noqa: BLE001 - the next one tries again
            outage_noted(exc, "worker")
            logger.warning("heartbeat failed", extra={"worker": self.name}, exc_info=True)

    async def _listen_to_the_database(self) -> None:
        """PostgreSQL: ``LISTEN`` for calls made ready and claims taken by other processes."""
        import psycopg  # only on PostgreSQL

        params = _listen_params()
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(**params, autocommit=True) as conn:
                    listeners = dict(self._listeners())
                    for channel in listeners:
                        await conn.execute(f"LISTEN {channel}")
                    self._launch_waiting()  # whatever came while nobody listened
                    async for note in conn.notifies():
                        listener = listeners.get(note.channel)
                        if listener is not None:
                            listener(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - reconnect; the poll covers the gap
                logger.warning(
                    "database notifications lost; reconnecting",
                    exc_info=True,
                    extra={"worker": self.name},
                )
                await asyncio.sleep(1)


def _listen_params() -> dict[str, Any]:
    params = connections["default"].get_connection_params()
    keep = {"dbname", "user", "password", "host", "port", "sslmode", "options"}
    return {k: v for k, v in params.items() if k in keep and v not in (None, "")}


async def _first_of(*waits: Any, timeout: float) -> bool:
    """Wait for the first of ``waits``; False when ``timeout`` passed first."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        done, _ = await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        return bool(done)
    finally:
        for task in tasks:
            task.cancel()
