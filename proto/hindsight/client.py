"""The typed async client of hindsight's gRPC API, shared by the CLI, the MCP gateway, the load tests and
the tests.

    async with HindsightClient("127.0.0.1:50051") as client:
        written = await client.write("acme", "用户偏好靠窗座位", tier="semantic", kind="preference",
                                     subject="user-7")
        found = await client.recall("acme", "靠窗")

Every call has a deadline (`timeout_s`, per client or per call). Every call is retried by gRPC on
UNAVAILABLE with backoff (service config): reads are idempotent, and every mutating call carries an
idempotency key (the caller's, or a fresh one per call), so a retry never applies twice.
`api_key` (from `hindsight tenants create`) is sent as `authorization: Bearer ...`; `tls`
(`hindsight.tls.ClientTls`) switches to TLS: the CA that proves the servers and, for servers that require
client certificates (mTLS), the client's own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal

import grpc
from google.protobuf import field_mask_pb2, struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hindsight.consistency import ReadYourWrites
from hindsight.tls import ClientTls, open_channel
from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight.v1 import webhooks_pb2 as hooks_pb
from hindsight.v1 import webhooks_pb2_grpc as hooks_grpc

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TARGET",
    "HindsightClient",
    "KindName",
    "StatusName",
    "TierName",
    "kind_value",
    "memory_input",
    "new_idempotency_key",
    "role_value",
    "status_value",
    "tier_value",
]

DEFAULT_TARGET = "127.0.0.1:50051"
TierName = Literal["working", "episodic", "semantic"]
KindName = Literal["fact", "preference", "event", "task", "summary", "instruction"]
StatusName = Literal["active", "pending", "superseded", "expired", "deleted"]

_SERVICE = "hindsight.v1.MemoryService"
# When most calls fail (a long outage), stop retrying instead of multiplying the load: each failure costs
# a token, each success gives back 0.1; retries pause below half of 10. In every channel's service config.
RETRY_THROTTLING = {"maxTokens": 10, "tokenRatio": 0.1}
# Errors after which watch() reconnects from its last cursor: the server went (or restarted), was full,
# or ended a stream whose reader was idle.
_WATCH_RESUMABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
    }
)
# Reads are idempotent and mutating calls carry idempotency keys: gRPC retries them all itself when a
# server is briefly unreachable (UNAVAILABLE: the call did not run, or its key makes a rerun harmless) or
# sheds the call (RESOURCE_EXHAUSTED: over the tenant's share). A server's grpc-retry-pushback-ms says
# when; the throttling below stops the retries of a caller whose calls are mostly refused.
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": _SERVICE}],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "1s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
                },
            }
        ],
        "retryThrottling": RETRY_THROTTLING,
    }
)
# An idle channel pings every 30 s and gives a peer 10 s to answer, so a connection that a load
# balancer or NAT silently dropped is found before a call waits on it. The memory server accepts pings
# this often (hindsight_server/rpc/server.py); a client pinging faster would be sent GOAWAY.
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000


def channel_options(service_config: str) -> tuple[tuple[str, int | str], ...]:
    """A channel's options to the memory servers, with its own service config (retries, balancing):
    the shared client's and the MCP gateway's channels alike."""
    return (
        ("grpc.service_config", service_config),
        ("grpc.enable_retries", 1),
        ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    )


CHANNEL_OPTIONS = channel_options(_SERVICE_CONFIG)


def _enum_value(enum: Any, prefix: str, name: str) -> int:
    try:
        return int(enum.Value(f"{prefix}_{name.upper()}"))
    except ValueError:
        names = enum.DESCRIPTOR.values_by_name
        valid = [n.removeprefix(f"{prefix}_").lower() for n in names if not n.endswith("UNSPECIFIED")]
        raise ValueError(f"unknown {prefix.lower()} {name!r}; one of {', '.join(valid)}") from None


def tier_value(name: str) -> pb.Tier.ValueType:
    return pb.Tier.ValueType(_enum_value(pb.Tier, "TIER", name))


def kind_value(name: str) -> pb.Kind.ValueType:
    return pb.Kind.ValueType(_enum_value(pb.Kind, "KIND", name))


def status_value(name: str) -> pb.Status.ValueType:
    return pb.Status.ValueType(_enum_value(pb.Status, "STATUS", name))


def new_idempotency_key() -> str:
    """A fresh key for one logical call: its retries reuse it, so the server applies it once."""
    return uuid.uuid4().hex


def role_value(name: str) -> pb.Role.ValueType:
    return pb.Role.ValueType(_enum_value(pb.Role, "ROLE", name))


def _struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(values))
    return struct


def _set_time(message: Any, field: str, value: datetime | None) -> None:
    if value is not None:
        getattr(message, field).FromDatetime(value.astimezone(UTC))


def memory_input(
    content: str,
    *,
    tier: str,
    kind: str,
    subject: str = "",
    agent_id: str = "",
    session_id: str = "",
    intent: str = "",
    entities: Mapping[str, Any] | None = None,
    confidence: float | None = None,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    expires_at: datetime | None = None,
    occurred_at: datetime | None = None,
    idempotency_key: str = "",
    visibility: str = "",
) -> pb.MemoryInput:
    message = pb.MemoryInput(
        content=content,
        tier=tier_value(tier),
        kind=kind_value(kind),
        subject=subject,
        agent_id=agent_id,
        session_id=session_id,
        intent=intent,
        idempotency_key=idempotency_key or new_idempotency_key(),
    )
    if visibility:
        message.visibility = pb.Visibility.ValueType(_enum_value(pb.Visibility, "VISIBILITY", visibility))
    if entities:
        message.entities.CopyFrom(_struct(entities))
    if confidence is not None:
        message.confidence = confidence
    _set_time(message, "valid_from", valid_from)
    _set_time(message, "valid_to", valid_to)
    _set_time(message, "expires_at", expires_at)
    _set_time(message, "occurred_at", occurred_at)
    return message


def _token_refused(error: grpc.aio.AioRpcError) -> bool:
    """The server refused the read's consistency token itself (not the read)."""
    refusals = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION)
    return error.code() in refusals and (error.details() or "").startswith("min_consistency_token")


# The default deadline of the calls whose work grows with the data (an import batch, an erasure).
LONG_CALL_S = 300.0


class HindsightClient:
    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        timeout_s: float = 5.0,
        metadata: Sequence[tuple[str, str]] = (),
        channel: grpc.aio.Channel | None = None,
        api_key: str = "",
        tls: ClientTls | None = None,
        read_your_writes: bool = True,
    ) -> None:
        """`read_your_writes`: each read carries the tenant's latest consistency token, so it sees what
        this client wrote even when the server reads from a replica (`consistency` holds them: pass one
        to another process with `consistency.token(tenant)`). False: reads may lag the writes by up to
        the servers' database.max_replica_lag_ms."""
        self.target = target
        self.consistency = ReadYourWrites()
        self._read_your_writes = read_your_writes
        self._timeout_s = timeout_s
        self._metadata = tuple(metadata) + ((("authorization", f"Bearer {api_key}"),) if api_key else ())
        self._channel = channel if channel is not None else open_channel(target, tls, CHANNEL_OPTIONS)
        self._stub = pb_grpc.MemoryServiceStub(self._channel)
        self._webhooks = hooks_grpc.WebhooksServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    async def __aenter__(self) -> HindsightClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    def _call_options(self, timeout_s: float | None) -> dict[str, Any]:
        return {"timeout": timeout_s or self._timeout_s, "metadata": self._metadata}

    async def _mutate(self, rpc: Any, request: Any, timeout_s: float | None) -> Any:
        """A mutating call; its consistency token is kept for the tenant's next reads."""
        call = rpc(request, **self._call_options(timeout_s))
        response = await call
        self.consistency.observe(request.tenant_id, await call.trailing_metadata())
        return response

    async def _read(self, rpc: Any, request: Any, timeout_s: float | None) -> Any:
        """A read with the tenant's token. One the database cannot honour (another database's: the
        deployment was replaced; or ahead of it: restored from an older backup) is dropped and the read
        sent again without it: what it stood for cannot be read anywhere any more."""
        try:
            return await rpc(request, **self._call_options(timeout_s))
        except grpc.aio.AioRpcError as error:
            if not request.min_consistency_token or not _token_refused(error):
                raise
            log.warning("dropping the consistency token of tenant %s: %s", request.tenant_id, error.details())
        self.consistency.forget(request.tenant_id)
        request.min_consistency_token = ""
        return await rpc(request, **self._call_options(timeout_s))

    def _read_after(self, tenant_id: str) -> str:
        return self.consistency.token(tenant_id) if self._read_your_writes else ""

    # ----------------------------------------------------------------------------------------- writes

    async def write(
        self, tenant_id: str, content: str, *, timeout_s: float | None = None, **fields: Any
    ) -> pb.WriteResponse:
        """Writes one memory; `fields` are memory_input's keywords (tier and kind are required)."""
        request = pb.WriteRequest(tenant_id=tenant_id, memory=memory_input(content, **fields))
        response: pb.WriteResponse = await self._mutate(self._stub.Write, request, timeout_s)
        return response

    async def write_batch(
        self,
        tenant_id: str,
        memories: Sequence[pb.MemoryInput],
        *,
        verbatim: bool = False,
        timeout_s: float | None = None,
    ) -> pb.WriteBatchResponse:
        """All or nothing. `verbatim`: store every item as given (imports of history), no dedupe."""
        request = pb.WriteBatchRequest(tenant_id=tenant_id, memories=memories, verbatim=verbatim)
        response: pb.WriteBatchResponse = await self._mutate(self._stub.WriteBatch, request, timeout_s)
        return response

    async def update(
        self,
        tenant_id: str,
        memory_id: str,
        *,
        expected_version: int | None = None,
        idempotency_key: str = "",
        agent_id: str = "",
        timeout_s: float | None = None,
        **changes: Any,
    ) -> pb.Memory:
        """Changes the named fields only (content=..., entities=..., tier=..., ...)."""
        memory = pb.MemoryInput()
        for name, value in changes.items():
            if name == "tier":
                memory.tier = tier_value(value)
            elif name == "kind":
                memory.kind = kind_value(value)
            elif name == "entities":
                memory.entities.CopyFrom(_struct(value))
            elif name in ("valid_from", "valid_to", "expires_at"):
                _set_time(memory, name, value)
            else:
                setattr(memory, name, value)
        request = pb.UpdateRequest(
            tenant_id=tenant_id,
            id=memory_id,
            memory=memory,
            update_mask=field_mask_pb2.FieldMask(paths=list(changes)),
            agent_id=agent_id,
            idempotency_key=idempotency_key or new_idempotency_key(),
        )
        # The mask's first form as well, the same paths: a server older than the FieldMask reads only it.
        # Drop it once no such server runs.
        request.deprecated_update_mask.extend(changes)
        if expected_version is not None:
            request.expected_version = expected_version
        response: pb.Memory = await self._mutate(self._stub.Update, request, timeout_s)
        return response

    async def delete(
        self,
        tenant_id: str,
        memory_id: str,
        *,
        agent_id: str = "",
        idempotency_key: str = "",
        timeout_s: float | None = None,
    ) -> pb.Memory:
        request = pb.DeleteRequest(
            tenant_id=tenant_id,
            id=memory_id,
            agent_id=agent_id,
            idempotency_key=idempotency_key or new_idempotency_key(),
        )
        response: pb.Memory = await self._mutate(self._stub.Delete, request, timeout_s)
        return response

    # ------------------------------------------------------------------------------------------ reads

    async def get(
        self, tenant_id: str, memory_id: str, *, agent_id: str = "", timeout_s: float | None = None
    ) -> pb.Memory:
        request = pb.GetRequest(
            tenant_id=tenant_id,
            id=memory_id,
            agent_id=agent_id,
            min_consistency_token=self._read_after(tenant_id),
        )
        response: pb.Memory = await self._read(self._stub.Get, request, timeout_s)
        return response

    async def list(
        self,
        tenant_id: str,
        *,
        subject: str = "",
        session_id: str = "",
        tiers: Sequence[str] = (),
        kinds: Sequence[str] = (),
        statuses: Sequence[str] = (),
        page_size: int = 0,
        page_token: str = "",
        agent_id: str = "",
        timeout_s: float | None = None,
    ) -> pb.ListResponse:
        request = pb.ListRequest(
            tenant_id=tenant_id,
            subject=subject,
            session_id=session_id,
            tiers=[tier_value(t) for t in tiers],
            kinds=[kind_value(k) for k in kinds],
            statuses=[status_value(s) for s in statuses],
            page_size=page_size,
            page_token=page_token,
            agent_id=agent_id,
            min_consistency_token=self._read_after(tenant_id),
        )
        response: pb.ListResponse = await self._read(self._stub.List, request, timeout_s)
        return response

    async def list_all(self, tenant_id: str, **filters: Any) -> AsyncIterator[pb.Memory]:
        """Every memory matching the filters, following page tokens."""
        token = ""
        while True:
            page = await self.list(tenant_id, page_token=token, **filters)
            for memory in page.memories:
                yield memory
            token = page.next_page_token
            if not token:
                return

    async def recall(
        self,
        tenant_id: str,
        query: str,
        *,
        subject: str = "",
        session_id: str = "",
        tiers: Sequence[str] = (),
        kinds: Sequence[str] = (),
        entities: Mapping[str, Any] | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        top_k: int = 0,
        token_budget: int = 0,
        profile: str = "",
        weights: Mapping[str, float] | None = None,
        include_superseded: bool = False,
        as_of: datetime | None = None,
        now: datetime | None = None,
        explain: bool = False,
        min_score: float | None = None,
        agent_id: str = "",
        timeout_s: float | None = None,
    ) -> pb.RecallResponse:
        request = pb.RecallRequest(
            tenant_id=tenant_id,
            query=query,
            subject=subject,
            session_id=session_id,
            tiers=[tier_value(t) for t in tiers],
            kinds=[kind_value(k) for k in kinds],
            top_k=top_k,
            token_budget=token_budget,
            profile=profile,
            include_superseded=include_superseded,
            explain=explain,
            agent_id=agent_id,
            min_consistency_token=self._read_after(tenant_id),
        )
        if entities:
            request.entities.CopyFrom(_struct(entities))
        if start is not None or end is not None:
            _set_time(request.time_range, "start", start)
            _set_time(request.time_range, "end", end)
            request.time_range.SetInParent()
        if weights is not None:
            request.weights.CopyFrom(pb.ScoreWeights(**weights))
        if min_score is not None:
            request.min_score = min_score
        _set_time(request, "as_of", as_of)
        _set_time(request, "now", now)
        response: pb.RecallResponse = await self._read(self._stub.Recall, request, timeout_s)
        return response

    # --------------------------------------------------------------------------------------- sessions

    async def append_turn(
        self,
        tenant_id: str,
        session_id: str,
        text: str,
        *,
        role: str = "user",
        subject: str = "",
        agent_id: str = "",
        entities: Mapping[str, Any] | None = None,
        occurred_at: datetime | None = None,
        idempotency_key: str = "",
        expected_subject: str = "",
        timeout_s: float | None = None,
    ) -> pb.AppendTurnResponse:
        """`expected_subject`: only into a session of that subject, or a new one (FAILED_PRECONDITION
        SESSION_SUBJECT_MISMATCH otherwise)."""
        request = pb.AppendTurnRequest(
            tenant_id=tenant_id,
            session_id=session_id,
            text=text,
            role=role_value(role),
            subject=subject,
            agent_id=agent_id,
            idempotency_key=idempotency_key or new_idempotency_key(),
            expected_subject=expected_subject,
        )
        if entities:
            request.entities.CopyFrom(_struct(entities))
        _set_time(request, "occurred_at", occurred_at)
        response: pb.AppendTurnResponse = await self._mutate(self._stub.AppendTurn, request, timeout_s)
        return response

    async def summarize(
        self, tenant_id: str, session_id: str, *, agent_id: str = "", timeout_s: float | None = None
    ) -> pb.SessionSummary:
        """`agent_id`: only a session of that agent or of none (NOT_FOUND otherwise)."""
        request = pb.SummarizeRequest(
            tenant_id=tenant_id,
            session_id=session_id,
            min_consistency_token=self._read_after(tenant_id),
            agent_id=agent_id,
        )
        response: pb.SessionSummary = await self._read(self._stub.Summarize, request, timeout_s)
        return response

    async def end_session(
        self,
        tenant_id: str,
        session_id: str,
        *,
        reason: str = "",
        idempotency_key: str = "",
        expected_subject: str = "",
        agent_id: str = "",
        timeout_s: float | None = None,
    ) -> pb.EndSessionResponse:
        """`expected_subject`: only a session of that subject (FAILED_PRECONDITION otherwise);
        `agent_id`: only one of that agent or of none (NOT_FOUND otherwise)."""
        request = pb.EndSessionRequest(
            tenant_id=tenant_id,
            session_id=session_id,
            reason=reason,
            idempotency_key=idempotency_key or new_idempotency_key(),
            expected_subject=expected_subject,
            agent_id=agent_id,
        )
        response: pb.EndSessionResponse = await self._mutate(self._stub.EndSession, request, timeout_s)
        return response

    async def confirm_pending(
        self,
        tenant_id: str,
        memory_id: str,
        *,
        agent_id: str = "",
        idempotency_key: str = "",
        timeout_s: float | None = None,
    ) -> pb.Memory:
        """`agent_id`: the agent deciding; needed for a PRIVATE pending memory, which only its own
        agent sees (any other reads NOT_FOUND)."""
        request = pb.ConfirmPendingRequest(
            tenant_id=tenant_id,
            id=memory_id,
            agent_id=agent_id,
            idempotency_key=idempotency_key or new_idempotency_key(),
        )
        response: pb.Memory = await self._mutate(self._stub.ConfirmPending, request, timeout_s)
        return response

    async def reject_pending(
        self,
        tenant_id: str,
        memory_id: str,
        *,
        agent_id: str = "",
        idempotency_key: str = "",
        timeout_s: float | None = None,
    ) -> pb.Memory:
        """`agent_id`: the agent deciding; needed for a PRIVATE pending memory, which only its own
        agent sees (any other reads NOT_FOUND)."""
        request = pb.RejectPendingRequest(
            tenant_id=tenant_id,
            id=memory_id,
            agent_id=agent_id,
            idempotency_key=idempotency_key or new_idempotency_key(),
        )
        response: pb.Memory = await self._mutate(self._stub.RejectPending, request, timeout_s)
        return response

    async def history(
        self, tenant_id: str, memory_id: str, *, agent_id: str = "", timeout_s: float | None = None
    ) -> pb.HistoryResponse:
        request = pb.HistoryRequest(
            tenant_id=tenant_id,
            id=memory_id,
            agent_id=agent_id,
            min_consistency_token=self._read_after(tenant_id),
        )
        response: pb.HistoryResponse = await self._read(self._stub.History, request, timeout_s)
        return response

    # ----------------------------------------------------------------------- export, import, erasure

    async def export(
        self,
        tenant_id: str,
        *,
        subject: str | None = None,
        tiers: Sequence[str] = (),
        kinds: Sequence[str] = (),
        start: datetime | None = None,
        end: datetime | None = None,
        include_history: bool = False,
        include_embeddings: bool = False,
        after_id: str = "",
        timeout_s: float | None = None,
    ) -> AsyncIterator[pb.ExportItem]:
        """The export stream: its header first, then one item a memory. `timeout_s` bounds the whole
        stream (None: no bound, a large tenant takes as long as it takes)."""
        request = pb.ExportRequest(
            tenant_id=tenant_id,
            tiers=[tier_value(t) for t in tiers],
            kinds=[kind_value(k) for k in kinds],
            include_history=include_history,
            include_embeddings=include_embeddings,
            after_id=after_id,
            min_consistency_token=self._read_after(tenant_id),
        )
        if subject is not None:
            request.subject = subject
        if start is not None or end is not None:
            _set_time(request.time_range, "start", start)
            _set_time(request.time_range, "end", end)
            request.time_range.SetInParent()
        stream = self._stub.Export(request, timeout=timeout_s, metadata=self._metadata)
        async for item in stream:
            yield item

    async def watch(
        self,
        tenant_id: str,
        cursor: str = "",
        *,
        subjects: Sequence[str] = (),
        kinds: Sequence[str] = (),
        event_types: Sequence[str] = (),
        heartbeats: bool = False,
        max_retries: int | None = None,
        max_backoff_s: float = 5.0,
        agent_id: str = "",
    ) -> AsyncGenerator[pb.WatchItem, None]:
        """The tenant's change feed from `cursor` ("" now, "oldest", or a cursor it yielded), for as long
        as the caller iterates. After a transient error (UNAVAILABLE: a server restarted; the stream
        limit; an idle stream ended) it reconnects, with backoff, from the last cursor it received, so
        no event is missed or repeated. `heartbeats`: also yield them (their cursor is where to resume).
        `max_retries`: failures in a row before the error is raised (None: no limit). `agent_id`: watch
        as that agent (shared memories' events and its own private ones')."""
        failures, position = 0, cursor
        while True:
            request = pb.WatchRequest(
                tenant_id=tenant_id,
                cursor=position,
                subjects=subjects,
                kinds=[kind_value(k) for k in kinds],
                event_types=event_types,
                agent_id=agent_id,
            )
            stream = self._stub.Watch(request, metadata=self._metadata)
            try:
                async for item in stream:
                    failures = 0
                    received = item.event.cursor if item.HasField("event") else item.heartbeat.cursor
                    position = received or position
                    if item.HasField("event") or heartbeats:
                        yield item
                return  # the server ended the stream (it does not, unless it stops)
            except grpc.aio.AioRpcError as error:
                if error.code() not in _WATCH_RESUMABLE:
                    raise
                failures += 1
                if max_retries is not None and failures > max_retries:
                    raise
                delay = min(0.1 * 2 ** (failures - 1), max_backoff_s)
                code = error.code()
                log.info("watch of %s: %s; resuming from %r in %.1f s", tenant_id, code, position, delay)
                await asyncio.sleep(delay)
            finally:
                stream.cancel()

    async def audit_recalls(
        self,
        tenant_id: str,
        *,
        memory_id: str = "",
        subject: str = "",
        since: datetime | None = None,
        until: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
        agent_id: str = "",
        timeout_s: float | None = None,
    ) -> pb.AuditRecallsResponse:
        """One page of the recall audit, newest first: the recalls that returned `memory_id` (empty:
        any), of `subject` (empty: any), from `since` (inclusive) until `until` (exclusive); `agent_id`:
        that agent's recalls only."""
        request = pb.AuditRecallsRequest(
            tenant_id=tenant_id,
            memory_id=memory_id,
            subject=subject,
            page_size=page_size,
            page_token=page_token,
            agent_id=agent_id,
        )
        if since is not None or until is not None:
            request.time_range.SetInParent()
            _set_time(request.time_range, "start", since)
            _set_time(request.time_range, "end", until)
        response: pb.AuditRecallsResponse = await self._stub.AuditRecalls(
            request, **self._call_options(timeout_s)
        )
        return response

    async def import_memories(
        self,
        tenant_id: str,
        memories: Sequence[pb.ExportedMemory],
        *,
        new_ids: bool = False,
        models: Sequence[pb.EmbeddingModel] = (),
        timeout_s: float | None = None,
    ) -> pb.ImportResponse:
        """One batch of exported memories, all or nothing; `models`: the export header's."""
        request = pb.ImportRequest(tenant_id=tenant_id, memories=memories, new_ids=new_ids, models=models)
        response: pb.ImportResponse = await self._mutate(self._stub.Import, request, timeout_s or LONG_CALL_S)
        return response

    async def erase(
        self,
        tenant_id: str,
        *,
        subject: str | None = None,
        whole_tenant: bool = False,
        memory_ids: Sequence[str] = (),
        reason: str = "",
        idempotency_key: str = "",
        timeout_s: float | None = None,
    ) -> pb.EraseResponse:
        """Erases exactly one scope: a subject, the whole tenant, or the named memories."""
        scopes = (subject is not None) + whole_tenant + bool(memory_ids)
        if scopes != 1:
            raise ValueError("erase one scope: subject=..., whole_tenant=True or memory_ids=[...]")
        request = pb.EraseRequest(
            tenant_id=tenant_id,
            reason=reason,
            idempotency_key=idempotency_key or new_idempotency_key(),
        )
        if subject is not None:
            request.subject = subject
        elif whole_tenant:
            request.whole_tenant = True
        else:
            request.memories.ids.extend(memory_ids)
        response: pb.EraseResponse = await self._mutate(self._stub.Erase, request, timeout_s or LONG_CALL_S)
        return response

    # ----------------------------------------------------------------------------------------- webhooks
    # The tenant's change feed POSTed to HTTP endpoints (proto/hindsight/v1/webhooks.proto); every call
    # needs a key with the admin scope. Not retried by gRPC (AddEndpoint makes a new secret each time).

    async def add_webhook(
        self,
        tenant_id: str,
        url: str,
        *,
        event_types: Sequence[str] = (),
        subjects: Sequence[str] = (),
        timeout_s: float | None = None,
    ) -> hooks_pb.AddEndpointResponse:
        """A new endpoint receiving the events from now on; the answer's `secret` is shown only here."""
        request = hooks_pb.AddEndpointRequest(
            tenant_id=tenant_id, url=url, event_types=event_types, subjects=subjects
        )
        response: hooks_pb.AddEndpointResponse = await self._webhooks.AddEndpoint(
            request, **self._call_options(timeout_s)
        )
        return response

    async def list_webhooks(
        self, tenant_id: str, *, timeout_s: float | None = None
    ) -> Sequence[hooks_pb.WebhookEndpoint]:
        response: hooks_pb.ListEndpointsResponse = await self._webhooks.ListEndpoints(
            hooks_pb.ListEndpointsRequest(tenant_id=tenant_id), **self._call_options(timeout_s)
        )
        return list(response.endpoints)

    async def remove_webhook(
        self, tenant_id: str, endpoint_id: str, *, timeout_s: float | None = None
    ) -> None:
        await self._webhooks.RemoveEndpoint(
            hooks_pb.RemoveEndpointRequest(tenant_id=tenant_id, endpoint_id=endpoint_id),
            **self._call_options(timeout_s),
        )

    async def rotate_webhook_secret(
        self, tenant_id: str, endpoint_id: str, *, timeout_s: float | None = None
    ) -> hooks_pb.RotateSecretResponse:
        """A new secret (shown only here); the previous one keeps signing until the answer's
        endpoint.previous_secret_expires_at."""
        response: hooks_pb.RotateSecretResponse = await self._webhooks.RotateSecret(
            hooks_pb.RotateSecretRequest(tenant_id=tenant_id, endpoint_id=endpoint_id),
            **self._call_options(timeout_s),
        )
        return response

    async def replay_webhook(
        self, tenant_id: str, endpoint_id: str, cursor: str, *, timeout_s: float | None = None
    ) -> hooks_pb.WebhookEndpoint:
        """Delivers again from `cursor` ("oldest", a feed cursor, "" for now); revives a dead endpoint."""
        response: hooks_pb.ReplayResponse = await self._webhooks.Replay(
            hooks_pb.ReplayRequest(tenant_id=tenant_id, endpoint_id=endpoint_id, cursor=cursor),
            **self._call_options(timeout_s),
        )
        return response.endpoint

    async def health(self, service: str = "", *, timeout_s: float | None = None) -> str:
        """SERVING, NOT_SERVING, ... as the standard health service reports it."""
        response = await self._health.Check(
            health_pb2.HealthCheckRequest(service=service), **self._call_options(timeout_s)
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))
