"""Each tool call becomes one gRPC call through the shared client; nothing here catches errors
(errors.describe turns them into tool errors, in one place)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gateway_mcp.results import debug_result, recall_result, summary_result, write_result
from gateway_mcp.tools import (
    DEBUG_TOOL,
    RECALL_TOOL,
    SUMMARIZE_TOOL,
    WRITE_TOOL,
    DebugArguments,
    RecallArguments,
    SummarizeArguments,
    WriteArguments,
)
from hindsight.client import HindsightClient, KindName, TierName

__all__ = ["CALLS", "Call", "Caller", "Outcome"]

# The original design's memory_write has no kind; the server requires one.
DEFAULT_KIND: Mapping[TierName, KindName] = {"working": "task", "episodic": "event", "semantic": "fact"}


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str
    agent_id: str


Outcome = tuple[str, BaseModel]  # the text a model reads, and the structured content
Call = Callable[[HindsightClient, Caller, Any], Awaitable[Outcome]]


async def write(client: HindsightClient, caller: Caller, args: WriteArguments) -> Outcome:
    response = await client.write(
        caller.tenant,
        args.summary,
        tier=args.memory_type,
        kind=args.kind or DEFAULT_KIND[args.memory_type],
        subject=args.subject,
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
        subject=args.subject,
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


async def summarize(client: HindsightClient, caller: Caller, args: SummarizeArguments) -> Outcome:
    return summary_result(await client.summarize(caller.tenant, args.session_id))


async def debug(client: HindsightClient, caller: Caller, args: DebugArguments) -> Outcome:
    response = await client.recall(
        caller.tenant,
        args.query,
        session_id=args.session_id,
        subject=args.subject,
        top_k=args.top_k or 0,
        explain=True,
    )
    return debug_result(response)


CALLS: Mapping[str, Call] = {
    WRITE_TOOL: write,
    RECALL_TOOL: recall,
    SUMMARIZE_TOOL: summarize,
    DEBUG_TOOL: debug,
}
