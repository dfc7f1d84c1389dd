"""Each tool call becomes gRPC calls through the shared client, as the caller's agent and, for a caller
confined to one subject, about that subject only: the model's `subject` argument cannot pick another,
and memory_forget erases only that subject's memories. Errors are not caught here except where a
NOT_FOUND must read like any other refusal (errors.describe turns them into tool errors, in one
place)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import grpc
from pydantic import BaseModel

from gateway_mcp.auth import Caller
from gateway_mcp.errors import ToolError, reason
from gateway_mcp.results import (
    append_result,
    audit_result,
    changes_result,
    debug_result,
    decision_result,
    end_session_result,
    erased_result,
    forget_candidates,
    history_result,
    pending_result,
    recall_result,
    summary_result,
    with_audit,
    write_result,
)
from gateway_mcp.tools import (
    APPEND_TURN_TOOL,
    CHANGES_TOOL,
    CONFIRM_PENDING_TOOL,
    DEBUG_TOOL,
    END_SESSION_TOOL,
    FORGET_TOOL,
    HISTORY_TOOL,
    MAX_AUDIT_ENTRIES,
    PENDING_TOOL,
    RECALL_TOOL,
    REJECT_PENDING_TOOL,
    SUMMARIZE_TOOL,
    WRITE_TOOL,
    AppendTurnArguments,
    ChangesArguments,
    DebugArguments,
    EndSessionArguments,
    ForgetArguments,
    HistoryArguments,
    PendingArguments,
    PendingDecisionArguments,
    RecallArguments,
    SummarizeArguments,
    WriteArguments,
)
from hindsight.client import HindsightClient, KindName, TierName
from hindsight.v1 import memory_pb2 as pb

__all__ = ["CALLS", "Call", "Outcome"]

# The original design's memory_write has no kind; the server requires one.
DEFAULT_KIND: Mapping[TierName, KindName] = {"working": "task", "episodic": "event", "semantic": "fact"}


Outcome = tuple[str, BaseModel]  # the text a model reads, and the structured content
Call = Callable[[HindsightClient, Caller, Any], Awaitable[Outcome]]


def _subject(caller: Caller, requested: str) -> str:
    """The subject a call is about: the caller's own when it is confined to one (naming another is
    refused), else what the model asked for ("" in a recall: every subject)."""
    if caller.subject is None:
        return requested
    if requested and requested != caller.subject:
        raise ToolError(f"subject: this token acts for subject {caller.subject!r} only; leave subject empty")
    return caller.subject


async def write(client: HindsightClient, caller: Caller, args: WriteArguments) -> Outcome:
    response = await client.write(
        caller.tenant,
        args.summary,
        tier=args.memory_type,
        kind=args.kind or DEFAULT_KIND[args.memory_type],
        subject=_subject(caller, args.subject),
        agent_id=caller.agent_id,
        session_id=args.session_id,
        intent=args.intent,
        entities=args.entities,
        confidence=args.confidence,
        occurred_at=args.occurred_at,
        valid_from=args.valid_from,
        valid_to=args.valid_to,
        # A key per tool call makes the channel's retries (and an agent's own) store the memory once.
        idempotency_key=args.idempotency_key or f"mcp:{uuid.uuid4()}",
    )
    return write_result(response)


async def recall(client: HindsightClient, caller: Caller, args: RecallArguments) -> Outcome:
    response = await client.recall(
        caller.tenant,
        args.query,
        session_id=args.session_id,
        subject=_subject(caller, args.subject),
        agent_id=caller.agent_id,
        tiers=args.memory_types,
        kinds=args.kinds,
        entities=args.entities,
        start=args.start,
        end=args.end,
        as_of=args.as_of,
        top_k=args.top_k or 0,
        token_budget=args.token_budget or 0,
        profile=args.profile,
        include_superseded=args.include_superseded,
    )
    return recall_result(response)


# The server's reason for a call on another subject's session (hindsight_server/domain/conversation.py).
_SUBJECT_MISMATCH = "SESSION_SUBJECT_MISMATCH"


def _not_this_subjects_session(session_id: str) -> ToolError:
    return ToolError(f"session_id: no session {session_id!r} of this token's subject")


@contextlib.contextmanager
def _own_sessions_only(session_id: str) -> Iterator[None]:
    """The server refuses a bound caller's call on another subject's session (expected_subject); to
    the caller that reads as a missing session, as it does in memory_summarize."""
    try:
        yield
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.FAILED_PRECONDITION and reason(error) == _SUBJECT_MISMATCH:
            raise _not_this_subjects_session(session_id) from None
        raise


async def summarize(client: HindsightClient, caller: Caller, args: SummarizeArguments) -> Outcome:
    summary = await client.summarize(caller.tenant, args.session_id, agent_id=caller.agent_id)
    if caller.subject is not None and summary.subject != caller.subject:
        raise _not_this_subjects_session(args.session_id)
    return summary_result(summary)


async def append_turn(client: HindsightClient, caller: Caller, args: AppendTurnArguments) -> Outcome:
    subject = _subject(caller, args.subject)
    with _own_sessions_only(args.session_id):
        response = await client.append_turn(
            caller.tenant,
            args.session_id,
            args.text,
            role=args.role,
            subject=subject,
            agent_id=caller.agent_id,
            entities=args.entities,
            occurred_at=args.occurred_at,
            # A key per tool call makes the channel's retries (and an agent's own) append the turn once.
            idempotency_key=args.idempotency_key or f"mcp:{uuid.uuid4()}",
            expected_subject=caller.subject or "",
        )
    return append_result(response)


async def end_session(client: HindsightClient, caller: Caller, args: EndSessionArguments) -> Outcome:
    with _own_sessions_only(args.session_id):
        response = await client.end_session(
            caller.tenant,
            args.session_id,
            reason=args.reason,
            idempotency_key=args.idempotency_key or f"mcp:{uuid.uuid4()}",
            expected_subject=caller.subject or "",
            agent_id=caller.agent_id,
        )
    return end_session_result(args.session_id, response)


async def pending(client: HindsightClient, caller: Caller, args: PendingArguments) -> Outcome:
    response = await client.list(
        caller.tenant,
        subject=_subject(caller, args.subject),
        session_id=args.session_id,
        statuses=["pending"],
        page_size=args.page_size,
        page_token=args.page_token,
        agent_id=caller.agent_id,
    )
    return pending_result(response)


async def _of_subject(client: HindsightClient, caller: Caller, memory_id: str, refusal: str) -> None:
    """For a caller confined to one subject: the memory is that subject's and visible to its agent.
    A missing one and another subject's read the same, so the refusal does not tell which ids exist."""
    if caller.subject is None:
        return
    try:
        memory = await client.get(caller.tenant, memory_id, agent_id=caller.agent_id)
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.NOT_FOUND:
            raise
        raise ToolError(refusal) from None
    if memory.subject != caller.subject:
        raise ToolError(refusal)


def decision_key(decision: str, memory_id: str, agent_id: str = "") -> str:
    """A pending decision's idempotency key: a repeated call (the model's or the channel's) gets the
    first call's answer instead of "not pending". The agent is part of it (as a digest: an agent id
    may be as long as the key may be), so another agent's call is its own request, answered on its
    own (NOT_FOUND for a private memory it cannot see) and not refused as a reused key."""
    if not agent_id:
        return f"mcp-{decision}:{memory_id}"
    agent = hashlib.sha256(agent_id.encode()).hexdigest()[:32]
    return f"mcp-{decision}:{memory_id}:{agent}"


async def _decide(
    client: HindsightClient, caller: Caller, args: PendingDecisionArguments, *, confirm: bool
) -> Outcome:
    memory_id = str(args.memory_id)  # canonical: lowercase, hyphenated
    refusal = f"memory_id: {memory_id} is not a memory of this token's subject; nothing was changed"
    await _of_subject(client, caller, memory_id, refusal)
    if confirm:
        memory = await client.confirm_pending(
            caller.tenant,
            memory_id,
            agent_id=caller.agent_id,
            idempotency_key=decision_key("confirm", memory_id, caller.agent_id),
        )
    else:
        memory = await client.reject_pending(
            caller.tenant,
            memory_id,
            agent_id=caller.agent_id,
            idempotency_key=decision_key("reject", memory_id, caller.agent_id),
        )
    return decision_result(memory, confirmed=confirm)


async def confirm_pending(client: HindsightClient, caller: Caller, args: PendingDecisionArguments) -> Outcome:
    return await _decide(client, caller, args, confirm=True)


async def reject_pending(client: HindsightClient, caller: Caller, args: PendingDecisionArguments) -> Outcome:
    return await _decide(client, caller, args, confirm=False)


async def history(client: HindsightClient, caller: Caller, args: HistoryArguments) -> Outcome:
    memory_id = str(args.memory_id)
    if caller.subject is None:
        return history_result(await client.history(caller.tenant, memory_id, agent_id=caller.agent_id))
    refusal = ToolError(f"memory_id: {memory_id} is not a memory of this token's subject")
    try:  # a missing memory and another subject's read the same (see _of_subject)
        response = await client.history(caller.tenant, memory_id, agent_id=caller.agent_id)
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.NOT_FOUND:
            raise
        raise refusal from None
    if any(version.subject != caller.subject for version in response.versions):
        raise refusal
    return history_result(response)


async def debug(client: HindsightClient, caller: Caller, args: DebugArguments) -> Outcome:
    subject = _subject(caller, args.subject)
    explained = None
    if args.query is not None:
        response = await client.recall(
            caller.tenant,
            args.query,
            session_id=args.session_id,
            subject=subject,
            agent_id=caller.agent_id,
            top_k=args.top_k or 0,
            explain=True,
        )
        explained = debug_result(response)
    if args.memory_id is None:
        assert explained is not None  # DebugArguments requires one of the two
        return explained
    memory_id = str(args.memory_id)
    # The caller's own recalls (its agent's), of its subject when it is confined to one.
    audit = await client.audit_recalls(
        caller.tenant,
        memory_id=memory_id,
        subject=subject,
        agent_id=caller.agent_id,
        page_size=MAX_AUDIT_ENTRIES,
    )
    if explained is None:
        return audit_result(memory_id, audit)
    return with_audit(explained, memory_id, audit)


# The first item of a Watch is a heartbeat with its starting cursor; it comes at once unless the server
# is in trouble, so it gets the gateway's usual deadline rather than the caller's wait.
_FIRST_ITEM_S = 10.0


async def changes(client: HindsightClient, caller: Caller, args: ChangesArguments) -> Outcome:
    """A poll over Watch: opens the stream at the cursor, takes what comes within `wait_s` (at most
    `limit` events), and closes it. The next cursor is the last event's, or the last heartbeat's when
    fewer came (everything up to it was looked at), so consecutive calls miss nothing and repeat
    nothing. A call holds one of the tenant's Watch streams for at most its wait."""
    subject = _subject(caller, args.subject)
    stream = client.watch(
        caller.tenant,
        args.cursor,
        subjects=[subject] if subject else [],
        event_types=list(args.event_types),
        heartbeats=True,
        max_retries=0,  # the stream's errors are the call's: the model retries with the same cursor
        agent_id=caller.agent_id,
    )
    events: list[pb.ChangeEvent] = []
    cursor = ""
    items = aiter(stream)
    loop = asyncio.get_running_loop()
    deadline = None  # set once the starting heartbeat came
    try:
        while len(events) < args.count:
            left = _FIRST_ITEM_S if deadline is None else deadline - loop.time()
            try:
                # A timeout cancels the stream's read, which ends the stream: nothing after it is taken.
                async with asyncio.timeout(max(left, 0)):
                    item = await anext(items)
            except (TimeoutError, StopAsyncIteration):
                break
            if item.HasField("heartbeat"):
                cursor = item.heartbeat.cursor
            else:
                events.append(item.event)
                cursor = item.event.cursor
            if deadline is None:
                deadline = loop.time() + args.wait_s
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.OUT_OF_RANGE:
            # The server's message names the cursor and the oldest one still served.
            raise ToolError(f"{error.details()} (OUT_OF_RANGE)") from None
        raise
    finally:
        await stream.aclose()
    if not cursor:
        raise ToolError("the memory service did not start the change feed in time; call again (UNAVAILABLE)")
    return changes_result(events, cursor)


# What memory_forget offers: the few memories that match the query, ranked by meaning alone (how old a
# memory is, or its tier, says nothing about whether it is the one to forget). The similarity is
# relative to the best match (exp(-z), z in standard deviations of the candidates' spread): 0.1 drops
# those more than ~2.3 deviations behind it and keeps the weaker of two matches (2 apart). No session_id:
# the session channel adds the conversation's newest memories whatever they say, which is right for
# recall and wrong for what to erase. The recall asks for more than it offers, because results.py drops
# the hits that only sit next to a match (the context stage's), which may rank above weaker matches.
FORGET_TOP_K = 5
FORGET_MIN_SCORE = 0.1
_FORGET_SEARCHED = 20
_BY_MEANING = {"similarity": 1.0, "recency": 0.0, "tier_priority": 0.0, "entity_match": 0.0}
# The audit record's reason. Not the query: "forget that I live at 12 Oak St" is the very thing erased,
# and the audit record outlives it.
FORGET_REASON = "memory_forget via MCP: the user asked to forget these memories"


def forget_key(memory_ids: Sequence[str]) -> str:
    """The erasure's idempotency key: a retried or repeated tool call with the same ids, in any order,
    gets the first erasure's answer instead of erasing and counting again."""
    digest = hashlib.sha256("\n".join(memory_ids).encode()).hexdigest()
    return f"mcp-forget:{digest}"


async def forget(client: HindsightClient, caller: Caller, args: ForgetArguments) -> Outcome:
    if not args.confirm:
        response = await client.recall(
            caller.tenant,
            args.query,
            subject=_subject(caller, args.subject),
            agent_id=caller.agent_id,
            top_k=_FORGET_SEARCHED,
            weights=_BY_MEANING,
            min_score=FORGET_MIN_SCORE,
        )
        return forget_candidates(args.query, response, FORGET_TOP_K)
    ids = [str(memory_id) for memory_id in args.memory_ids]  # canonical: lowercase, hyphenated
    if caller.subject is not None:
        await _all_of_subject(client, caller, ids)
    ordered = sorted(ids)  # one request (and key) for the same ids in any order
    erased = await client.erase(
        caller.tenant, memory_ids=ordered, reason=FORGET_REASON, idempotency_key=forget_key(ordered)
    )
    return erased_result(ids, erased)


async def _all_of_subject(client: HindsightClient, caller: Caller, ids: Sequence[str]) -> None:
    """Refuses, before anything is erased, ids that are not the caller's subject's memories (or not
    visible to its agent): one answer for both, so the refusal does not tell which ids exist."""
    foreign = []
    for memory_id in ids:
        try:
            memory = await client.get(caller.tenant, memory_id, agent_id=caller.agent_id)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
            foreign.append(memory_id)
            continue
        if memory.subject != caller.subject:
            foreign.append(memory_id)
    if foreign:
        raise ToolError(
            f"memory_ids: {', '.join(foreign)} are not memories of this token's subject; nothing was erased"
        )


CALLS: Mapping[str, Call] = {
    WRITE_TOOL: write,
    RECALL_TOOL: recall,
    SUMMARIZE_TOOL: summarize,
    APPEND_TURN_TOOL: append_turn,
    END_SESSION_TOOL: end_session,
    PENDING_TOOL: pending,
    CONFIRM_PENDING_TOOL: confirm_pending,
    REJECT_PENDING_TOOL: reject_pending,
    HISTORY_TOOL: history,
    FORGET_TOOL: forget,
    CHANGES_TOOL: changes,
    DEBUG_TOOL: debug,
}
