"""Durable state of conversations: the event log, unfinished calls, claims, assets, activity, tokens.

Models hold data and invariants (database constraints); the services in
``conversations/services/`` are the only writers.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q, TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from projections.vocabulary import CALL_STATES

from .fields import CompactJSONField


def choices_of(qualname: str, values: tuple[str, ...]) -> type[models.TextChoices]:
    """The ``TextChoices`` of a vocabulary written once as a tuple: a member per value
    (``"awaiting_approval"`` is ``AWAITING_APPROVAL``, labelled "Awaiting Approval"), as the class
    statement would make it; ``qualname`` is where it lives (``"ToolCall.State"``)."""
    members = [(value.upper(), value) for value in values]
    return models.TextChoices(
        qualname.rpartition(".")[2], members, module=__name__, qualname=qualname
    )


def json_text(path: str) -> Cast:
    """A JSON key as text, the one expression both the indexes below and the queries that use
    them write (``KT`` alone compares as JSON on SQLite; PostgreSQL's ``json`` has no ``=``)."""
    return Cast(KT(path), output_field=TextField())


class TimeStamped(models.Model):
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class Conversation(TimeStamped):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True, default="")
    # Relative to TOOLCORE_WORKSPACE_ROOT/<owner id>/; default: the conversation id.
    workspace = models.CharField(max_length=1024)
    last_sequence = models.PositiveBigIntegerField(default=0)
    # The worker host whose local disk holds the workspace (TOOLCORE_HOST_NAME), pinned by the
    # claim of its first call run by a worker; "" while none ran, or without pinning
    # (TOOLCORE_SHARED_WORKSPACES). Its later calls are claimed only by that host's workers.
    host = models.CharField(max_length=255, blank=True, default="")
    # A host that went away with the workspace (released by recovery, host = ""): the next
    # call claimed settles failed naming it, and the conversation starts again elsewhere.
    lost_host = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="conv_owner_recent"),
            # The recovery sweep's pinned hosts, and a release's conversations.
            models.Index(fields=["host"], name="conv_pinned_host", condition=~Q(host="")),
        ]

    def __str__(self) -> str:
        return self.title or str(self.id)


class Turn(TimeStamped):
    class Status(models.TextChoices):
        OPEN = "open"
        ENDED = "ended"

    class Origin(models.TextChoices):
        USER = "user"
        COMMAND = "command"
        # Opened by an MCP client's tools/call (docs/mcp.md); ends when its last call settles.
        MCP = "mcp", "MCP"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    ordinal = models.PositiveIntegerField()
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN)
    origin = models.CharField(max_length=8, choices=Origin.choices, default=Origin.USER)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=16, blank=True, default="")
    # A user !command's idempotency key and text (origin = command only).
    input_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL is "no key" in the unique constraint
    command = models.TextField(blank=True, default="")
    include_in_context = models.BooleanField(default=True)

    class Meta:
        ordering = ["conversation", "ordinal"]
        indexes = [
            # The admin's turn list (newest first) filtered by status or origin.
            models.Index(fields=["status", "created_at"], name="turn_status_recent"),
            models.Index(fields=["origin", "created_at"], name="turn_origin_recent"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "ordinal"], name="turn_ordinal_unique"),
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(status="open"),
                name="turn_one_open_per_conversation",
            ),
            models.UniqueConstraint(
                fields=["conversation", "input_id"],
                condition=Q(input_id__isnull=False),
                name="turn_command_input_unique",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["open", "ended"]), name="turn_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(status="open", ended_at__isnull=True)
                | Q(status="ended", ended_at__isnull=False),
                name="turn_ended_at_iff_ended",
            ),
        ]

    def __str__(self) -> str:
        return f"turn {self.ordinal} of {self.conversation_id}"


EVENT_TYPES = (
    "user_message",
    "assistant_message",
    "tool_call_response",
    "async_bash_event",
    "turn_ended",
)
ASSET_KINDS = (
    "payload",
    "report",
    "image",
    "stdout",
    "stderr",
    "output",
    "overflow_recovery",
    "arguments",
)


class ConversationEvent(models.Model):
    Type = choices_of("ConversationEvent.Type", EVENT_TYPES)

    # No index of its own: the unique (conversation, sequence) leads with it.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    sequence = models.PositiveBigIntegerField()
    type = models.CharField(max_length=32, choices=Type.choices)
    turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    tool_call_id = models.UUIDField(null=True, blank=True)
    # The client's messageId of a message event: the idempotency key of message posting.
    message_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL is "no key" in the unique constraint
    payload = CompactJSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "sequence"]
        indexes = [
            # History's message stream: the messages (the only events with a messageId), newest
            # first, without stepping over the responses and notices between them.
            models.Index(
                fields=["conversation", "-sequence"],
                condition=Q(message_id__isnull=False),
                name="event_messages",
            ),
            # The admin's event list (newest first) filtered by type.
            models.Index(fields=["type", "id"], name="event_type_id"),
            # Responses by outcome, newest first: the admin's outcome filter and the support
            # console's failed and indeterminate calls of the last 24 hours.
            models.Index(
                json_text("payload__outcome"),
                "created_at",
                condition=Q(type="tool_call_response"),
                name="event_response_outcome",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "sequence"], name="event_sequence_unique"
            ),
            # One response per call is a database fact.
            models.UniqueConstraint(
                fields=["tool_call_id"],
                condition=Q(tool_call_id__isnull=False),
                name="event_one_response_per_call",
            ),
            models.UniqueConstraint(
                fields=["conversation", "message_id"],
                condition=Q(message_id__isnull=False),
                name="event_message_id_unique",
            ),
            models.CheckConstraint(condition=Q(sequence__gte=1), name="event_sequence_positive"),
            models.CheckConstraint(condition=Q(type__in=EVENT_TYPES), name="event_type_valid"),
        ]

    def __str__(self) -> str:
        return f"#{self.sequence} {self.type}"


class ToolCall(TimeStamped):
    """An unfinished call. The row exists only until the call settles into an event."""

    State = choices_of("ToolCall.State", CALL_STATES)

    class Origin(models.TextChoices):
        MODEL = "model"
        USER = "user"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="tool_calls"
    )
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="tool_calls")
    assistant_event = models.ForeignKey(
        ConversationEvent,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="tool_calls",
    )
    provider_call_id = models.CharField(max_length=255, blank=True, default="")
    content_index = models.PositiveIntegerField(null=True, blank=True)
    origin = models.CharField(max_length=8, choices=Origin.choices, default=Origin.MODEL)
    tool_name = models.CharField(max_length=256, db_index=True)
    arguments = CompactJSONField(default=dict)
    state = models.CharField(max_length=24, choices=State.choices, default=State.SUPERVISING)
    # The fencing number: +1 on every claim.
    generation = models.PositiveIntegerField(default=0)
    attempt = models.PositiveIntegerField(default=1)
    supervision = CompactJSONField(null=True, blank=True)
    interaction = CompactJSONField(null=True, blank=True)
    resolution = CompactJSONField(null=True, blank=True)
    # The interaction a resolution answered, kept for the response once the call moved on.
    resolved_interaction = CompactJSONField(null=True, blank=True)
    resolution_request_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL: not resolved
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    permission_refused = models.BooleanField(default=False)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["assistant_event", "content_index"], name="call_block_unique"
            ),
            models.CheckConstraint(
                condition=Q(state__in=list(CALL_STATES)), name="call_state_valid"
            ),
            # interaction is set exactly when the call awaits a person.
            models.CheckConstraint(
                condition=(
                    Q(state__in=["awaiting_approval", "awaiting_input"], interaction__isnull=False)
                    | (
                        ~Q(state__in=["awaiting_approval", "awaiting_input"])
                        & Q(interaction__isnull=True)
                    )
                ),
                name="call_interaction_iff_awaiting",
            ),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="call_attempt_positive"),
        ]
        indexes = [
            models.Index(fields=["state", "tool_name"], name="call_state_tool"),
            models.Index(fields=["turn", "state"], name="call_turn_state"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.id} ({self.state})"


class ExecutionClaim(models.Model):
    """Exists exactly while its call is ``running``: who runs it, under which generation."""

    call = models.OneToOneField(
        ToolCall, primary_key=True, on_delete=models.CASCADE, related_name="claim"
    )
    token = models.UUIDField(default=uuid.uuid4, unique=True)
    worker = models.CharField(max_length=255)
    generation = models.PositiveIntegerField()
    acquired_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)
    # The process group a worker started for this call, so that a sweep on the same host can
    # kill what a dead worker left running: the host, the group id, and the leader's start time
    # (clock ticks since boot), which tells a recycled pid from ours.
    host = models.CharField(max_length=255, blank=True, default="")
    pgid = models.IntegerField(null=True, blank=True)
    process_start = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"claim g{self.generation} by {self.worker}"


class Asset(models.Model):
    Kind = choices_of("Asset.Kind", ASSET_KINDS)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="assets")
    # No foreign key: the unfinished row is gone once the call settles.
    tool_call_id = models.UUIDField(null=True, blank=True, db_index=True)
    event = models.ForeignKey(
        ConversationEvent, null=True, blank=True, on_delete=models.CASCADE, related_name="assets"
    )
    kind = models.CharField(max_length=24, choices=Kind.choices)
    path = models.CharField(max_length=1024, help_text="Relative to DATA_DIR.")
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    media_type = models.CharField(max_length=127, default="application/octet-stream")
    truncated = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [
            # The admin's asset list, newest first, whole or by kind or truncated.
            models.Index(fields=["created_at"], name="asset_recent"),
            models.Index(fields=["kind", "created_at"], name="asset_kind_recent"),
            models.Index(
                fields=["created_at"], condition=Q(truncated=True), name="asset_truncated_recent"
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=ASSET_KINDS), name="asset_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.path}"


class ToolActivity(TimeStamped):
    """The folded ``tool.updated`` state of one call, kept after settlement (projections/fold.py)."""

    tool_call_id = models.UUIDField(unique=True)
    # No index of its own: ``activity_recent`` (conversation, -ordinal) leads with it.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="activities", db_index=False
    )
    # No index of its own: ``activity_turn_recent`` (turn, -ordinal) leads with it.
    turn = models.ForeignKey(
        Turn,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="activities",
        db_index=False,
    )
    ordinal = models.PositiveBigIntegerField(help_text="Order of the call in its conversation.")
    # The conversation's last sequence when the call was created: its card comes right after
    # that event in history (a model call's is its assistant message). Taken with the
    # conversation locked, like ``ordinal``, so both grow together.
    after_sequence = models.PositiveBigIntegerField(default=0)
    rev = models.PositiveIntegerField(default=0)
    state_json = CompactJSONField(default=dict)
    payload_json = CompactJSONField(default=dict)
    payload_bytes = models.PositiveIntegerField(default=0)
    raw_length = models.PositiveBigIntegerField(default=0)
    raw_sha1 = models.CharField(max_length=40, blank=True, default="")
    # Derived from state_json["status"] on every write; indexed for the recovery sweep.
    is_final = models.BooleanField(default=False, db_index=True)
    # The worker of the call's last claim: the claim row goes at settlement, this stays.
    worker = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        verbose_name_plural = "tool activities"
        ordering = ["conversation", "ordinal"]
        indexes = [
            models.Index(fields=["conversation", "-ordinal"], name="activity_recent"),
            # A snapshot's cards: the latest turn's newest calls.
            models.Index(fields=["turn", "-ordinal"], name="activity_turn_recent"),
            # The admin's activity list (newest first) filtered by status.
            models.Index(json_text("state_json__status"), F("id"), name="activity_status_id"),
        ]

    def __str__(self) -> str:
        return f"activity {self.tool_call_id} rev {self.rev}"


class CommandExit(models.Model):
    """How a call's command ended: its exit code, the signal that killed it, or its timeout.

    Written once, in the transaction that learns it: the settlement of a command that ran to its
    end in the foreground, or the end of the async run a command became. The response event
    keeps these only in its complete result (an asset), and its payload and the ``tool.updated``
    state have fixed keys, so this row is what the cards, the API's details and the admin read
    (``conversations/exits.py``). A run found ``lost`` has no row: how it ended is unknown.
    """

    # The call's id (no foreign key: its row is gone once it settled).
    tool_call_id = models.UUIDField(primary_key=True)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="command_exits"
    )
    # The background run the command became (its end is the run's end); null in the foreground.
    async_run_id = models.UUIDField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.CharField(max_length=16, blank=True, default="")
    timed_out = models.BooleanField(default=False)
    timeout_seconds = models.FloatField(null=True, blank=True)
    # Derived when written: exit 0, no signal, no timeout. The console lists the others.
    succeeded = models.BooleanField()
    created_at = models.DateTimeField(auto_now_add=True, help_text="When the command ended.")

    class Meta:
        verbose_name = "command exit"
        verbose_name_plural = "command exits"
        ordering = ["-created_at"]
        indexes = [
            # The admin's list, newest first, whole or by success (the support console's
            # non-zero exits of the last 24 hours).
            models.Index(fields=["created_at"], name="exit_recent"),
            models.Index(fields=["succeeded", "created_at"], name="exit_succeeded_recent"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(succeeded=True, exit_code=0, signal="", timed_out=False)
                    | (Q(succeeded=False) & ~Q(exit_code=0, signal="", timed_out=False))
                ),
                name="exit_succeeded_derived",
            ),
            models.CheckConstraint(
                condition=Q(exit_code__isnull=False) | ~Q(signal="") | Q(timed_out=True),
                name="exit_known",
            ),
        ]

    def __str__(self) -> str:
        return f"exit of {self.tool_call_id}"


class ApiToken(models.Model):
    class Scope(models.TextChoices):
        HOST = "host"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, default="")
    # SHA-256 hex of the token; the token itself is shown once and never stored.
    digest = models.CharField(max_length=64, unique=True)
    scopes = CompactJSONField(default=list, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name or 'token'} of {self.user}"

    def has_scope(self, scope: str) -> bool:
        return scope in (self.scopes or [])


class McpSession(models.Model):
    """An MCP client's session (docs/mcp.md): opened by its ``initialize``, named by the
    ``Mcp-Session-Id`` header of every later request, ended by its ``DELETE``. Held here, not in
    one process's memory, so any daphne serves its next request. One session is one
    conversation of its user."""

    # The opaque ``Mcp-Session-Id``: 43 URL-safe random characters (``secrets.token_urlsafe``).
    id = models.CharField(primary_key=True, max_length=64, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_sessions"
    )
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="mcp_sessions"
    )
    # What the client said at initialize: ``clientInfo`` and ``capabilities`` as sent.
    client_info = CompactJSONField(default=dict, blank=True)
    capabilities = CompactJSONField(default=dict, blank=True)
    protocol_version = models.CharField(max_length=32)
    # The request ids (as JSON text) of ``tools/call`` requests the client cancelled before
    # their call existed: the call, once made, is cancelled at once. The last
    # ``CANCELLED_KEPT`` only (``services/mcp_sessions.py``).
    cancelled_requests = CompactJSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Written at most once a minute (``services/mcp_sessions.py``), so requests stay reads.
    last_seen_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "MCP session"

    def __str__(self) -> str:
        name = (self.client_info or {}).get("name") or "client"
        return f"MCP session of {name} ({self.user})"

    @property
    def elicitation(self) -> bool:
        """Whether the client declared the ``elicitation`` capability (form mode: the only
        mode before 2025-11-25, where an empty object means form)."""
        declared = (self.capabilities or {}).get("elicitation")
        if not isinstance(declared, dict):
            return False
        return not declared or "form" in declared
