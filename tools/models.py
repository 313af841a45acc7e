"""Permission rules, background shell commands, workbench launches, the workers alive, and the
MCP servers Toolcore is a client of."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class PermissionRule(models.Model):
    class Decision(models.TextChoices):
        ALLOW = "allow"
        ASK = "ask"
        DENY = "deny"

    class Source(models.TextChoices):
        ADMIN = "admin"
        APPROVAL = "approval"

    # Null: a global rule (only the admin makes those).
    conversation = models.ForeignKey(
        "conversations.Conversation",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="permission_rules",
    )
    tool_name = models.CharField(max_length=256)
    pattern = models.CharField(
        max_length=1024,
        blank=True,
        default="",
        help_text="Glob on the command or path; empty matches all.",
    )
    decision = models.CharField(max_length=8, choices=Decision.choices)
    reason = models.CharField(max_length=500, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.ADMIN)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tool_name", "pattern"]
        indexes = [models.Index(fields=["tool_name", "conversation"], name="rule_tool_conv")]
        constraints = [
            models.CheckConstraint(
                condition=Q(decision__in=["allow", "ask", "deny"]), name="rule_decision_valid"
            ),
        ]

    def __str__(self) -> str:
        scope = "global" if self.conversation_id is None else f"conversation {self.conversation_id}"
        return f"{self.decision} {self.tool_name} {self.pattern or '*'} ({scope})"


class ProcessStatus(models.TextChoices):
    RUNNING = "running"
    EXITED = "exited"
    KILLED = "killed"
    LOST = "lost"


class ProcessRecord(models.Model):
    """What a background process's row holds whatever started it (a call or the workbench)."""

    status = models.CharField(
        max_length=8, choices=ProcessStatus.choices, default=ProcessStatus.RUNNING
    )
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.CharField(max_length=16, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # Who watches the process: its host, its group and the leader's start time (clock ticks
    # since boot: a recycled pid is never taken for it), and the watcher's heartbeat. A
    # running row whose heartbeat is older than the lease lost its watcher: it becomes lost.
    host = models.CharField(max_length=255, blank=True, default="")
    pgid = models.IntegerField(null=True, blank=True)
    process_start = models.BigIntegerField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


# The lifecycle fields of a ProcessRecord, shown the same way for async runs and launches (their
# admins).
PROCESS_FIELDS = ("status", "exit_code", "signal", "pid", "started_at", "finished_at")


class AsyncRun(ProcessRecord):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="async_runs"
    )
    tool_call_id = models.UUIDField(db_index=True)
    command = models.TextField()
    cwd = models.CharField(max_length=1024)
    # Where its capture files are, relative to DATA_DIR: the attempt folder of the call that
    # started it (the files become the run's and are registered as assets when it ends).
    folder = models.CharField(max_length=1024, blank=True, default="")
    # Sequence of its async_bash_event; null while running.
    notice_sequence = models.PositiveBigIntegerField(null=True, blank=True)
    acknowledged = models.BooleanField(default=False)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(
                fields=["conversation", "acknowledged", "notice_sequence"], name="run_queue"
            ),
            # The admin's list (newest first), whole or by status (the support console's lost
            # runs) or acknowledgement.
            models.Index(fields=["started_at"], name="run_recent"),
            models.Index(fields=["status", "started_at"], name="run_status_recent"),
            models.Index(fields=["acknowledged", "started_at"], name="run_acknowledged_recent"),
        ]

    def __str__(self) -> str:
        return f"async run {self.id} ({self.status})"


class Launch(ProcessRecord):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="launches"
    )
    name = models.CharField(max_length=200)
    command = models.TextField()
    cwd = models.CharField(max_length=1024, blank=True, default="")
    # The host whose disk holds ``cwd`` when it lies in a conversation's workspace pinned to
    # one (docs/deployment.md, "Pinned workspaces"): only its workers take the launch. "" for
    # any host.
    workspace_host = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["-started_at"]
        verbose_name_plural = "launches"
        permissions = [("run_commands", "Can approve execute tools and start launches")]
        indexes = [
            # The admin's list (newest first), whole or by status.
            models.Index(fields=["started_at"], name="launch_recent"),
            models.Index(fields=["status", "started_at"], name="launch_status_recent"),
        ]

    def __str__(self) -> str:
        return f"launch {self.name} ({self.status})"


class LeftProcess(models.Model):
    """A process group a dead worker left running (its claim expired, its run or launch was
    found lost): the sweep of a worker on ``host`` kills it, if the leader pid still has
    ``process_start`` (clock ticks since boot; a recycled pid is never killed), then forgets it.
    Recorded wherever recovery ran, so the host's own sweep finds it later."""

    host = models.CharField(max_length=255, db_index=True)
    pgid = models.IntegerField()
    process_start = models.BigIntegerField()
    label = models.CharField(max_length=300)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        verbose_name_plural = "left processes"

    def __str__(self) -> str:
        return f"group {self.pgid} on {self.host} ({self.label})"


class McpServer(models.Model):
    """An MCP server Toolcore is a client of (docs/mcp.md): its tools join the catalog as
    ``mcp__<name>__<tool>`` and the tool workers run them. Written by
    ``tools/runtime/mcp/services.py`` only.

    ``environment`` and ``headers`` map each name to its value sealed with a key derived from
    ``SECRET_KEY`` (``tools/runtime/mcp/secrets.py``): names are shown, values never.
    ``version`` grows with every change of the row or its tools: the processes' catalogs see a
    change by it (``tools/runtime/mcp/specs.py``)."""

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (a command)"
        HTTP = "http", "Streamable HTTP (a URL)"

    name = models.CharField(
        max_length=64,
        unique=True,
        help_text="Letters, digits, - and single _ ; part of the names of its tools.",
    )
    transport = models.CharField(max_length=8, choices=Transport.choices)
    command = models.CharField(max_length=1024, blank=True, default="")
    arguments = models.JSONField(default=list, blank=True)
    environment = models.JSONField(default=dict, blank=True)
    url = models.CharField(max_length=2048, blank=True, default="")
    headers = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    # Null: every owner's conversations; else only this owner's.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="mcp_servers",
    )
    version = models.PositiveBigIntegerField(default=0)
    tools_listed_at = models.DateTimeField(null=True, blank=True)
    # Why the last listing of its tools failed; empty after one that worked.
    tools_error = models.CharField(max_length=1000, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"
        constraints = [
            models.CheckConstraint(
                condition=Q(transport__in=["stdio", "http"]), name="mcp_server_transport_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"MCP server {self.name}"


class McpTool(models.Model):
    """One tool of an MCP server, as it last listed it (``tools/list``)."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=128)
    description = models.TextField(blank=True, default="")
    input_schema = models.JSONField(default=dict)
    annotations = models.JSONField(default=dict, blank=True)
    refreshed_at = models.DateTimeField()

    class Meta:
        ordering = ["server", "name"]
        verbose_name = "MCP tool"
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.server.name}/{self.name}"


class WorkerHeartbeat(models.Model):
    """A tool worker while it runs (``tools/runtime/presence.py``): its host and the last time
    it said it was alive, every third of the lease, by the database's clock. A worker stopped in
    order marks its row stopped (its last heartbeat the time it stopped: a host's grace runs
    from it); a dead one's row stays as it was, its heartbeat ageing. Both go a day later.
    ``/metrics`` counts the live ones per host (``toolcore_workers_alive``)."""

    name = models.CharField(max_length=255, primary_key=True)
    host = models.CharField(max_length=255)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField(db_index=True)
    # Its channel on the channel layer, where a web process of another host asks it for a log
    # page of its host's disk (``tools/runtime/host_pages.py``); "" when it answers none.
    channel = models.CharField(max_length=255, blank=True, default="")
    # When it stopped in order; None while it runs (or when it died without a word).
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["host", "name"]
        verbose_name = "worker"

    def __str__(self) -> str:
        return self.name
