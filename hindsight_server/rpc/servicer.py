"""MemoryService: thin handlers that convert, call a pipeline, convert back. Errors are mapped by
the ErrorMappingInterceptor, so no handler chooses a status code."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import grpc
from google.protobuf.message import Message

from hindsight.consistency import TRAILER
from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import DeadlineExceeded
from hindsight_server.domain.policy import Limits, RecallPolicy
from hindsight_server.domain.portability import ExportHeader
from hindsight_server.domain.validation import require_memory_id, validate_identifiers, validate_tenant
from hindsight_server.pipelines.audit import RecallAudit
from hindsight_server.pipelines.erasure import ErasurePipeline
from hindsight_server.pipelines.feed import FeedPipeline
from hindsight_server.pipelines.portability import PortabilityPipeline
from hindsight_server.pipelines.read import CommitPositions, ReadPipeline
from hindsight_server.pipelines.recall import RecallPipeline
from hindsight_server.pipelines.replies import IdempotentReplies
from hindsight_server.pipelines.sessions import SessionPipeline
from hindsight_server.pipelines.write import WritePipeline
from hindsight_server.rpc import convert
from hindsight_server.rpc.context import current_caller, current_principal, current_request_id

R = TypeVar("R", bound=Message)


@dataclass(frozen=True)
class ServicerDependencies:
    """What MemoryService's handlers call: the pipelines, and the policies they are checked against."""

    writes: WritePipeline
    reads: ReadPipeline
    recalls: RecallPipeline
    sessions: SessionPipeline
    replies: IdempotentReplies
    limits: Limits
    recall_policy: RecallPolicy
    clock: Clock
    positions: CommitPositions
    portability: PortabilityPipeline
    erasures: ErasurePipeline
    feed: FeedPipeline
    audit: RecallAudit
    export_idle_timeout_s: float = 30.0
    watch_idle_timeout_s: float = 30.0


class MemoryServicer(pb_grpc.MemoryServiceServicer):
    def __init__(self, dependencies: ServicerDependencies) -> None:
        self._deps = dependencies

    async def Write(
        self, request: pb.WriteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.WriteResponse:
        outcome = await self._deps.writes.write(convert.draft_from_proto(request.tenant_id, request.memory))
        await self._committed(context)
        return convert.write_outcome_to_proto(outcome)

    async def WriteBatch(
        self, request: pb.WriteBatchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.WriteBatchResponse:
        outcomes = await self._deps.writes.write_batch(
            convert.drafts_from_batch(request), verbatim=request.verbatim
        )
        await self._committed(context)
        return pb.WriteBatchResponse(results=[convert.write_outcome_to_proto(o) for o in outcomes])

    async def Get(self, request: pb.GetRequest, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Memory:
        validate_identifiers(self._deps.limits, agent_id=request.agent_id)
        memory = await self._deps.reads.get(
            request.tenant_id,
            require_memory_id(request.id),
            request.agent_id,
            convert.read_after_from_proto(request.min_consistency_token),
        )
        return convert.memory_to_proto(memory)

    async def Update(
        self, request: pb.UpdateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Memory:
        async def run() -> Message:
            return convert.memory_to_proto(await self._deps.writes.update(convert.patch_from_proto(request)))

        return await self._once("Update", request, pb.Memory, run, context)

    async def Delete(
        self, request: pb.DeleteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Memory:
        validate_identifiers(self._deps.limits, agent_id=request.agent_id)

        async def run() -> Message:
            memory_id = require_memory_id(request.id)
            return convert.memory_to_proto(
                await self._deps.writes.delete(request.tenant_id, memory_id, request.agent_id)
            )

        return await self._once("Delete", request, pb.Memory, run, context)

    async def AppendTurn(
        self, request: pb.AppendTurnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AppendTurnResponse:
        result = await self._deps.sessions.append_turn(convert.turn_request_from_proto(request))
        await self._committed(context)
        return convert.append_result_to_proto(result)

    async def Summarize(
        self, request: pb.SummarizeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.SessionSummary:
        validate_identifiers(self._deps.limits, session_id=request.session_id, agent_id=request.agent_id)
        view = await self._deps.sessions.summarize(
            request.tenant_id,
            request.session_id,
            convert.read_after_from_proto(request.min_consistency_token),
            request.agent_id,
        )
        return convert.session_view_to_proto(view)

    async def EndSession(
        self, request: pb.EndSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.EndSessionResponse:
        validate_identifiers(
            self._deps.limits, session_id=request.session_id, reason=request.reason, agent_id=request.agent_id
        )

        async def run() -> Message:
            episode = await self._deps.sessions.end_session(
                request.tenant_id,
                request.session_id,
                request.reason,
                request.expected_subject,
                request.agent_id,
            )
            response = pb.EndSessionResponse()
            if episode is not None:
                response.episode.CopyFrom(convert.memory_to_proto(episode))
            return response

        return await self._once("EndSession", request, pb.EndSessionResponse, run, context)

    async def ConfirmPending(
        self, request: pb.ConfirmPendingRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Memory:
        run = self._decide(request, confirm=True)
        return await self._once("ConfirmPending", request, pb.Memory, run, context)

    async def RejectPending(
        self, request: pb.RejectPendingRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Memory:
        run = self._decide(request, confirm=False)
        return await self._once("RejectPending", request, pb.Memory, run, context)

    def _decide(
        self, request: pb.ConfirmPendingRequest | pb.RejectPendingRequest, *, confirm: bool
    ) -> Callable[[], Awaitable[Message]]:
        validate_identifiers(self._deps.limits, agent_id=request.agent_id)

        async def run() -> Message:
            memory = await self._deps.writes.decide_pending(
                request.tenant_id, require_memory_id(request.id), confirm=confirm, agent_id=request.agent_id
            )
            return convert.memory_to_proto(memory)

        return run

    async def _once(
        self,
        method: str,
        request: Any,
        response_type: type[R],
        run: Callable[[], Awaitable[Message]],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> R:
        """Runs a mutating call once per idempotency key (a retry gets the first answer)."""
        validate_tenant(request.tenant_id, self._deps.limits)
        validate_identifiers(self._deps.limits, idempotency_key=request.idempotency_key)
        response = await self._run_once(method, request, response_type, run)
        await self._committed(context)  # a retry's too: the position now is past the first answer's
        return response

    async def _committed(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """The consistency token of a mutating call that succeeded (memory.proto: read-your-writes)."""
        position = await self._deps.positions.commit_position()
        context.set_trailing_metadata(((TRAILER, convert.consistency_token(position)),))

    async def _run_once(
        self, method: str, request: Any, response_type: type[R], run: Callable[[], Awaitable[Message]]
    ) -> R:
        key = request.idempotency_key
        if not key:  # nothing to remember the answer by: no fingerprint, no serialised reply
            return cast(R, await run())
        unkeyed = type(request)()
        unkeyed.CopyFrom(request)
        unkeyed.idempotency_key = ""

        async def answer() -> bytes:
            return (await run()).SerializeToString(deterministic=True)

        reply = await self._deps.replies.once(
            request.tenant_id, method, key, unkeyed.SerializeToString(deterministic=True), answer
        )
        return response_type.FromString(reply)

    async def History(
        self, request: pb.HistoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.HistoryResponse:
        validate_identifiers(self._deps.limits, agent_id=request.agent_id)
        versions = await self._deps.reads.history(
            request.tenant_id,
            require_memory_id(request.id),
            request.agent_id,
            convert.read_after_from_proto(request.min_consistency_token),
        )
        return pb.HistoryResponse(versions=[convert.memory_to_proto(m) for m in versions])

    async def List(
        self, request: pb.ListRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListResponse:
        query = convert.list_query_from_proto(request, self._deps.limits)
        page = await self._deps.reads.list(query)
        return convert.page_to_proto(page, query)

    async def Recall(
        self, request: pb.RecallRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RecallResponse:
        query = convert.recall_query_from_proto(request, self._deps.recall_policy, self._deps.clock())
        result = await self._deps.recalls.recall(query, request_id=current_request_id())
        return convert.recall_result_to_proto(result, explain=query.explain)

    # grpc.aio takes a coroutine that writes with context.write as a streaming handler; the generated
    # stubs know only iterators.
    async def Export(  # type: ignore[override]
        self, request: pb.ExportRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        """Written item by item, each write bounded: a reader that stops taking the stream would
        otherwise hold an export slot, a pooled connection and an old snapshot (which holds back
        VACUUM for every tenant) for as long as its connection lives."""
        query = convert.export_query_from_proto(request, current_principal().viewer)
        names = convert.model_names(self._deps.portability.models)
        idle_s = self._deps.export_idle_timeout_s
        async for item in self._deps.portability.export(query):
            if isinstance(item, ExportHeader):
                message = convert.export_header_to_proto(item)
            else:
                message = convert.exported_to_proto(item, names)
            try:
                async with asyncio.timeout(idle_s):
                    await context.write(message)
            except TimeoutError:
                raise DeadlineExceeded(
                    f"the reader took nothing of the export for {idle_s:g} s; the stream is ended to free "
                    "its place (resume with after_id)"
                ) from None

    async def Import(
        self, request: pb.ImportRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ImportResponse:
        memories = [
            convert.portable_from_proto(memory, f"memories[{index}]")
            for index, memory in enumerate(request.memories)
        ]
        outcome = await self._deps.portability.import_batch(
            request.tenant_id,
            memories,
            new_ids=request.new_ids,
            models=convert.models_from_proto(request.models),
        )
        await self._committed(context)
        return convert.import_outcome_to_proto(outcome)

    async def Erase(
        self, request: pb.EraseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.EraseResponse:
        scope = convert.erasure_scope_from_proto(request)

        async def run() -> Message:
            record = await self._deps.erasures.erase(
                scope,
                reason=request.reason,
                requested_by=current_caller(),
                request_id=current_request_id(),
            )
            return convert.erasure_to_proto(record)

        return await self._once("Erase", request, pb.EraseResponse, run, context)

    async def Watch(  # type: ignore[override]
        self, request: pb.WatchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        """Each write awaited (gRPC's flow control: a reader that takes nothing holds the stream, not
        the server's memory) and bounded, so a reader that stopped frees its stream slot."""
        validate_tenant(request.tenant_id, self._deps.limits)
        # A key bound to an agent has its agent in agent_id already (rpc/auth.py binds it).
        validate_identifiers(self._deps.limits, agent_id=request.agent_id)
        query = convert.watch_query_from_proto(request, request.agent_id or None, self._deps.limits)
        idle_s = self._deps.watch_idle_timeout_s
        async for item in self._deps.feed.watch(query):
            try:
                async with asyncio.timeout(idle_s):
                    await context.write(convert.feed_item_to_proto(item, self._deps.clock()))
            except TimeoutError:
                raise DeadlineExceeded(
                    f"the reader took nothing of the feed for {idle_s:g} s; the stream is ended to free "
                    "its place (resume with the last cursor)"
                ) from None
            except Exception:
                if context.done():  # the reader went (cancelled, disconnected): nothing to report
                    return
                raise

    async def AuditRecalls(
        self, request: pb.AuditRecallsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AuditRecallsResponse:
        validate_tenant(request.tenant_id, self._deps.limits)
        validate_identifiers(
            self._deps.limits, agent_id=request.agent_id
        )  # bound to the key's, if it has one
        query = convert.audit_query_from_proto(request, request.agent_id or None, self._deps.limits)
        return convert.audit_page_to_proto(await self._deps.audit.page(query), query)
