"""The client commands of `hindsight`: every call of the memory API from a shell, through the shared
client (hindsight.client), with the connection options every client command shares (cli_args.py).

hindsight write|get|list|recall|update|delete ...    memories
hindsight session append|summarize|end SESSION ...   a conversation's turns, its working memory, its episode
hindsight pending list|confirm|reject ...            memories waiting for the user's confirmation
hindsight history ID                                 a memory's versions, oldest first
hindsight audit [--memory ID] [--subject S] ...      the recalls an audited tenant served, newest first
hindsight webhooks add|list|remove|rotate|replay     the change feed POSTed to HTTP endpoints (admin key)

Human-readable output by default (one memory a line; `get` and `session summarize` one field a line);
`--json` prints protobuf's JSON mapping with the proto's field names, every field, and 64-bit integers
as numbers. Errors go to stderr as one line; the exit codes are cli_args.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2, timestamp_pb2

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import webhooks_pb2 as hooks_pb
from hindsight_server.cli.args import (
    EXIT_USAGE,
    Connection,
    add_connection_options,
    print_json,
    rpc_failure,
    timestamp,
    typed_dict,
)

__all__ = ["add_client_commands", "memory_fields"]


def _enum_names(enum: Any, prefix: str) -> list[str]:
    names: list[str] = list(enum.DESCRIPTOR.values_by_name)
    return [name.removeprefix(prefix).lower() for name in names if not name.endswith("_UNSPECIFIED")]


TIERS = _enum_names(pb.Tier, "TIER_")
KINDS = _enum_names(pb.Kind, "KIND_")
STATUSES = _enum_names(pb.Status, "STATUS_")
ROLES = _enum_names(pb.Role, "ROLE_")
VISIBILITIES = _enum_names(pb.Visibility, "VISIBILITY_")
# What EndSession's reason usually says (any short text is taken: it is recorded in the episode).
END_REASONS = ["task_done", "remember_this", "session_end"]


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc.msg} at position {exc.pos}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('must be a JSON object, e.g. \'{"building": "A"}\'')
    return value


def _name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


def _call(args: argparse.Namespace, call: Callable[[HindsightClient], Awaitable[None]]) -> int:
    """Runs `call` with a client of the command's connection options; a failure is one line on
    stderr and its exit code."""
    connection: Connection | None = None

    async def run() -> None:
        nonlocal connection
        connection = Connection(args)
        async with connection as client:
            await call(client)

    try:
        asyncio.run(run())
    except grpc.aio.AioRpcError as error:
        message, code = (
            connection.failure(error)
            if connection is not None
            else rpc_failure(error, args.target, reached=False)
        )
        print(message, file=sys.stderr)
        return code
    # An unknown enum name from the client's helpers, a certificate without its key, an unreadable file.
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    return 0


# ------------------------------------------------------------------------------------------- output


def _time(message: Any, field: str) -> str:
    if not message.HasField(field):
        return ""
    stamp: timestamp_pb2.Timestamp = getattr(message, field)
    return stamp.ToDatetime(tzinfo=UTC).isoformat()


def _struct_json(value: struct_pb2.Struct) -> str:
    return json.dumps(json_format.MessageToDict(value), ensure_ascii=False, sort_keys=True)


def _memory_line(memory: pb.Memory) -> str:
    tier = _name(pb.Tier, memory.tier, "TIER_")
    return f"{memory.id}  {tier:<8}  {memory.content}"


def _pending_line(memory: pb.Memory) -> str:
    kind = _name(pb.Kind, memory.kind, "KIND_")
    return f"{memory.id}  {kind:<10}  {memory.confidence:.2f}  {memory.content}"


def _times(count: int) -> str:
    return "" if not count else "1 time" if count == 1 else f"{count} times"


def memory_fields(memory: pb.Memory) -> list[tuple[str, str]]:
    """A memory as (label, value) rows for `get`: what it says first, then what it is, then its record;
    empty fields are left out."""
    validity = ""
    if memory.HasField("valid_from") or memory.HasField("valid_to"):
        validity = f"{_time(memory, 'valid_from') or '-'} .. {_time(memory, 'valid_to') or 'now'}"
    seen = _times(memory.seen_count)
    if seen and memory.HasField("last_seen_at"):
        seen += f", last {_time(memory, 'last_seen_at')}"
    accessed = _times(memory.access_count)
    if accessed and memory.HasField("last_accessed_at"):
        accessed += f", last {_time(memory, 'last_accessed_at')}"
    rows = [
        ("id", memory.id),
        ("content", memory.content),
        ("tier", _name(pb.Tier, memory.tier, "TIER_")),
        ("kind", _name(pb.Kind, memory.kind, "KIND_")),
        ("status", _name(pb.Status, memory.status, "STATUS_")),
        ("confidence", f"{memory.confidence:g}"),
        ("subject", memory.subject),
        ("session", memory.session_id),
        ("agent", memory.agent_id),
        ("visibility", _name(pb.Visibility, memory.visibility, "VISIBILITY_") if memory.visibility else ""),
        ("intent", memory.intent),
        ("entities", _struct_json(memory.entities) if memory.entities.fields else ""),
        ("valid", validity),
        ("created", _time(memory, "created_at")),
        ("updated", _time(memory, "updated_at")),
        ("expires", _time(memory, "expires_at")),
        ("version", str(memory.version) if memory.version else ""),
        ("supersedes", memory.supersedes),
        ("superseded by", memory.superseded_by),
        ("derived from", ", ".join(memory.derived_from)),
        ("seen", seen),
        ("accessed", accessed),
        ("embedding", _name(pb.EmbeddingState, memory.embedding_state, "EMBEDDING_STATE_")),
        ("provenance", _struct_json(memory.provenance) if memory.provenance.fields else ""),
        ("idempotency key", memory.idempotency_key),
    ]
    return [(label, value) for label, value in rows if value]


def _print_fields(rows: list[tuple[str, str]]) -> None:
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        # A multi-line value (a content with newlines) stays under its column.
        print(f"{label:<{width}}" + value.replace("\n", "\n" + " " * width))


def _summary_fields(summary: pb.SessionSummary) -> list[tuple[str, str]]:
    rows = [
        ("session", summary.session_id),
        ("subject", summary.subject),
        ("goal", summary.goal),
        ("confirmed", _struct_json(summary.confirmed) if summary.confirmed.fields else ""),
        ("open items", "; ".join(summary.open_items)),
        ("turns", str(summary.turn_count)),
        ("updated", _time(summary, "updated_at")),
        ("summarizer", summary.summarizer),
        ("summary", summary.text),
    ]
    return [(label, value) for label, value in rows if value]


def _turn_line(turn: pb.Turn) -> str:
    return f"  {turn.index:>3}. {_name(pb.Role, turn.role, 'ROLE_'):<9} {turn.text}"


# ------------------------------------------------------------------------------------------ memories


def cmd_write(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        response = await client.write(
            args.tenant,
            args.content,
            tier=args.tier,
            kind=args.kind,
            subject=args.subject,
            agent_id=args.agent,
            session_id=args.session,
            intent=args.intent,
            entities=args.entities,
            confidence=args.confidence,
            idempotency_key=args.idempotency_key,
            occurred_at=args.occurred_at,
            valid_from=args.valid_from,
            valid_to=args.valid_to,
            expires_at=args.expires_at,
            visibility=args.visibility or "",
        )
        if args.json:
            print_json(
                {
                    "id": response.memory.id,
                    "created": response.created,
                    "resolution": response.resolution,
                    "resolution_reason": response.resolution_reason,
                    "embedding_truncated": response.embedding_truncated,
                    "memory": typed_dict(response.memory),
                }
            )
        else:
            print(response.memory.id)

    return _call(args, call)


def cmd_get(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        memory = await client.get(args.tenant, args.id, agent_id=args.agent)
        print_json(typed_dict(memory)) if args.json else _print_fields(memory_fields(memory))

    return _call(args, call)


def cmd_list(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        response = await client.list(
            args.tenant,
            subject=args.subject,
            session_id=args.session,
            tiers=args.tier or (),
            kinds=args.kind or (),
            statuses=args.status or (),
            page_size=args.page_size,
            page_token=args.page_token,
            agent_id=args.agent,
        )
        if args.json:
            print_json(typed_dict(response))
            return
        for memory in response.memories:
            print(_memory_line(memory))
        if response.next_page_token:
            print(f"next page: --page-token {response.next_page_token}")

    return _call(args, call)


def cmd_recall(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        response = await client.recall(
            args.tenant,
            args.query,
            subject=args.subject,
            session_id=args.session,
            tiers=args.tier or (),
            kinds=args.kind or (),
            entities=args.entities,
            start=args.since,
            end=args.until,
            top_k=args.top_k,
            token_budget=args.token_budget,
            profile=args.profile,
            include_superseded=args.include_superseded,
            as_of=args.as_of,
            explain=args.explain,
            min_score=args.min_score,
            agent_id=args.agent,
        )
        if args.json:
            print_json(typed_dict(response))
            return
        if response.injection_text:
            print(response.injection_text)
        for hit in response.hits:
            print(f"{hit.score:.3f}  {_memory_line(hit.memory)}")
        if not response.hits:
            print("(nothing relevant)")

    return _call(args, call)


def cmd_update(args: argparse.Namespace) -> int:
    changes: dict[str, Any] = {
        name: getattr(args, name)
        for name in ("content", "subject", "intent", "entities", "confidence", "tier", "kind")
        if getattr(args, name) is not None
    }
    if not changes:
        print("error: name at least one field to change (--content, --entities, ...)", file=sys.stderr)
        return EXIT_USAGE

    async def call(client: HindsightClient) -> None:
        memory = await client.update(
            args.tenant,
            args.id,
            expected_version=args.expected_version,
            idempotency_key=args.idempotency_key,
            agent_id=args.agent,
            **changes,
        )
        print_json(typed_dict(memory)) if args.json else print(_memory_line(memory))

    return _call(args, call)


def cmd_delete(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        memory = await client.delete(
            args.tenant, args.id, agent_id=args.agent, idempotency_key=args.idempotency_key
        )
        print_json(typed_dict(memory)) if args.json else print(f"deleted {memory.id}")

    return _call(args, call)


def cmd_history(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        response = await client.history(args.tenant, args.id, agent_id=args.agent)
        if args.json:
            print_json(typed_dict(response))
            return
        active = [m.id for m in response.versions if m.status == pb.STATUS_ACTIVE]
        for place, memory in enumerate(response.versions, 1):
            status = _name(pb.Status, memory.status, "STATUS_")
            now = "  (believed now)" if active and memory.id == active[-1] else ""
            print(f"{place}. {memory.id}  {_time(memory, 'created_at')}  {status}{now}")
            print(f"   {memory.content}")

    return _call(args, call)


# ------------------------------------------------------------------------------------------ sessions


def cmd_session_append(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        response = await client.append_turn(
            args.tenant,
            args.session,
            args.text,
            role=args.role,
            subject=args.subject,
            agent_id=args.agent,
            entities=args.entities,
            occurred_at=args.occurred_at,
            idempotency_key=args.idempotency_key,
        )
        if args.json:
            print_json(typed_dict(response))
            return
        role = _name(pb.Role, response.turn.role, "ROLE_")
        print(f"turn {response.turn.index} ({role}) in session {args.session}")
        for memory in response.remembered:
            status = _name(pb.Status, memory.status, "STATUS_")
            print(f"remembered {memory.id}  {status}  {memory.content}")
        if response.HasField("episode"):
            print(f"episode {response.episode.id}  {response.episode.content}")
        if response.summary_refreshed and response.summary.text:
            print(f"summary: {response.summary.text}")

    return _call(args, call)


def cmd_session_summarize(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        summary = await client.summarize(args.tenant, args.session)
        if args.json:
            print_json(typed_dict(summary))
            return
        _print_fields(_summary_fields(summary))
        if summary.recent_turns:
            print("recent turns")
            for turn in summary.recent_turns:
                print(_turn_line(turn))

    return _call(args, call)


def cmd_session_end(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        response = await client.end_session(
            args.tenant, args.session, reason=args.reason, idempotency_key=args.idempotency_key
        )
        consolidated = response.HasField("episode")
        if args.json:
            episode = typed_dict(response.episode) if consolidated else None
            print_json({"session_id": args.session, "consolidated": consolidated, "episode": episode})
        elif consolidated:
            print(f"episode {response.episode.id}  {response.episode.content}")
        else:
            print(f"nothing new in session {args.session} since its last episode: no episode written")

    return _call(args, call)


# ------------------------------------------------------------------------------------------- pending


def cmd_pending_list(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        response = await client.list(
            args.tenant,
            subject=args.subject,
            session_id=args.session,
            statuses=["pending"],
            page_size=args.page_size,
            page_token=args.page_token,
            agent_id=args.agent,
        )
        if args.json:
            print_json(typed_dict(response))
            return
        for memory in response.memories:
            print(_pending_line(memory))
        if not response.memories:
            print("(no memory waits for confirmation)")
        if response.next_page_token:
            print(f"next page: --page-token {response.next_page_token}")

    return _call(args, call)


def _decide(args: argparse.Namespace, *, confirm: bool) -> int:
    async def call(client: HindsightClient) -> None:
        decide = client.confirm_pending if confirm else client.reject_pending
        memory = await decide(args.tenant, args.id, agent_id=args.agent, idempotency_key=args.idempotency_key)
        if args.json:
            print_json(typed_dict(memory))
        else:
            print(f"{'confirmed' if confirm else 'rejected'} {memory.id}  {memory.content}")

    return _call(args, call)


def cmd_pending_confirm(args: argparse.Namespace) -> int:
    return _decide(args, confirm=True)


def cmd_pending_reject(args: argparse.Namespace) -> int:
    return _decide(args, confirm=False)


def _audit_line(entry: pb.RecallAuditEntry, memory_id: str) -> str:
    """One recall: when, its request id, subject and agent, what it returned (and, for --memory, whether
    that memory was packed), its query's hash (and text, where kept)."""
    served = f"{len(entry.returned_ids)} returned, {len(entry.packed_ids)} packed"
    if memory_id:
        served += ", this one packed" if memory_id in entry.packed_ids else ", this one not packed"
    query = f"  {json.dumps(entry.query_text, ensure_ascii=False)}" if entry.HasField("query_text") else ""
    who = f"subject={entry.subject or '-'} agent={entry.agent_id or '-'}"
    return f"{_time(entry, 'at')}  {entry.request_id}  {who}  {served}  {entry.query_hash[:16]}{query}"


def cmd_audit(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        memory_id = args.memory.lower()
        response = await client.audit_recalls(
            args.tenant,
            memory_id=memory_id,
            subject=args.subject,
            since=args.since,
            until=args.until,
            page_size=args.page_size,
            page_token=args.page_token,
        )
        if args.json:
            print_json(typed_dict(response))
            return
        for entry in response.entries:
            print(_audit_line(entry, memory_id))
        if not response.entries:
            print("(no audited recall)")
        if response.next_page_token:
            print(f"next page: --page-token {response.next_page_token}")

    return _call(args, call)


# ------------------------------------------------------------------------------------------ webhooks


def _endpoint_line(endpoint: hooks_pb.WebhookEndpoint) -> str:
    state = _name(hooks_pb.WebhookState, endpoint.state, "WEBHOOK_STATE_")
    filters = ",".join(endpoint.event_types) or "all types"
    if endpoint.subjects:
        filters += f"; subjects {','.join(endpoint.subjects)}"
    line = f"{endpoint.id}  {state:<6}  {endpoint.url}  ({filters})  delivered {endpoint.delivered}"
    if endpoint.attempts:
        line += f", {endpoint.attempts} failed attempt(s), next {_time(endpoint, 'next_attempt_at')}"
    if endpoint.last_error:
        line += f": {endpoint.last_error}"
    return line


def _print_secret(endpoint: hooks_pb.WebhookEndpoint, secret: str) -> None:
    print(_endpoint_line(endpoint))
    print(f"secret: {secret}")
    print("(shown only now: give it to the receiver, which verifies each webhook-signature with it)")


def cmd_webhooks_add(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        added = await client.add_webhook(
            args.tenant, args.url, event_types=args.event_types or (), subjects=args.subjects or ()
        )
        if args.json:
            print_json(typed_dict(added))
        else:
            _print_secret(added.endpoint, added.secret)

    return _call(args, call)


def cmd_webhooks_list(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        endpoints = await client.list_webhooks(args.tenant)
        if args.json:
            print_json([typed_dict(endpoint) for endpoint in endpoints])
            return
        for endpoint in endpoints:
            print(_endpoint_line(endpoint))
        if not endpoints:
            print("(no webhook endpoint)")

    return _call(args, call)


def cmd_webhooks_remove(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        await client.remove_webhook(args.tenant, args.id)
        if args.json:
            print_json({"removed": args.id})
        else:
            print(f"removed {args.id}")

    return _call(args, call)


def cmd_webhooks_rotate(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        rotated = await client.rotate_webhook_secret(args.tenant, args.id)
        if args.json:
            print_json(typed_dict(rotated))
            return
        _print_secret(rotated.endpoint, rotated.secret)
        until = _time(rotated.endpoint, "previous_secret_expires_at")
        print(f"the previous secret keeps signing beside it until {until}")

    return _call(args, call)


def cmd_webhooks_replay(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        endpoint = await client.replay_webhook(args.tenant, args.id, args.cursor)
        if args.json:
            print_json(typed_dict(endpoint))
        else:
            print(_endpoint_line(endpoint))

    return _call(args, call)


# -------------------------------------------------------------------------------------------- parser


def _command(
    commands: Any, name: str, handler: Callable[[argparse.Namespace], int], help_text: str
) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=help_text)
    add_connection_options(sub)
    sub.add_argument(
        "--json", action="store_true", help="print the answer as JSON (typed: numbers as numbers)"
    )
    sub.set_defaults(handler=handler)
    return sub


def _agent(sub: argparse.ArgumentParser, help_text: str = "") -> None:
    sub.add_argument(
        "--agent",
        default="",
        help=help_text
        or "the calling agent: its PRIVATE memories are visible to it, other agents' are not (default: none)",
    )


def _idempotency_key(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--idempotency-key",
        default="",
        help="repeat a call with the same key and it applies once (default: a new key per call)",
    )


def _filters(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--subject", default="", help="only memories about this subject (e.g. a user's id)")
    sub.add_argument("--session", default="", help="only memories from this session")
    sub.add_argument("--tier", action="append", choices=TIERS, help="only this tier; repeat for more")
    sub.add_argument("--kind", action="append", choices=KINDS, help="only this kind; repeat for more")


def _paging(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--page-size", type=int, default=0, help="memories per page (default: the server's)")
    sub.add_argument("--page-token", default="", help="the next page, as the previous page printed it")


def add_client_commands(commands: Any) -> None:
    """Registers the client commands on the `hindsight` parser's subcommands."""
    _add_memory_commands(commands)
    _add_session_commands(commands)
    _add_pending_commands(commands)
    _add_webhook_commands(commands)


def _add_memory_commands(commands: Any) -> None:
    write = _command(commands, "write", cmd_write, "store a memory; prints its id")
    write.add_argument("--content", required=True, help="the memory itself: one self-contained statement")
    write.add_argument("--tier", required=True, choices=TIERS, help="working, episodic or semantic")
    write.add_argument("--kind", required=True, choices=KINDS, help="what sort of memory it is")
    write.add_argument("--subject", default="", help="whom or what it is about (e.g. a user's id)")
    write.add_argument("--session", default="", help="the session it comes from")
    _agent(write, "the agent that writes it (needed for --visibility private)")
    write.add_argument("--intent", default="", help="what the user wanted, as a label (e.g. book_room)")
    write.add_argument(
        "--entities", type=_json_object, help='key entities, a JSON object: \'{"building": "A"}\''
    )
    write.add_argument("--confidence", type=float, help="0-1 (default 1; below 0.7 it waits as pending)")
    write.add_argument(
        "--visibility", choices=VISIBILITIES, help="shared (default) or private (only --agent sees it)"
    )
    _idempotency_key(write)
    write.add_argument("--occurred-at", type=timestamp, help="when it was said (ISO 8601 with offset)")
    write.add_argument("--valid-from", type=timestamp, help="true in the world from (ISO 8601 with offset)")
    write.add_argument("--valid-to", type=timestamp, help="true in the world until (ISO 8601 with offset)")
    write.add_argument(
        "--expires-at", type=timestamp, help="when it expires (default: its tier's or kind's TTL)"
    )

    get = _command(commands, "get", cmd_get, "read one memory, one field a line")
    get.add_argument("id", help="the memory's id")
    _agent(get)

    listing = _command(commands, "list", cmd_list, "list memories by filter, newest first")
    _filters(listing)
    listing.add_argument(
        "--status", action="append", choices=STATUSES, help="only this status; repeat (default: active)"
    )
    _paging(listing)
    _agent(listing)

    recall = _command(commands, "recall", cmd_recall, "find the memories relevant to a query")
    recall.add_argument("--query", required=True, help="what to remember, in the user's words")
    _filters(recall)
    recall.add_argument("--entities", type=_json_object, help="entities to match exactly, a JSON object")
    recall.add_argument("--since", type=timestamp, help="only memories from this time on (ISO 8601)")
    recall.add_argument("--until", type=timestamp, help="only memories before this time (ISO 8601)")
    recall.add_argument("--as-of", type=timestamp, help="what was known at that time (ISO 8601)")
    recall.add_argument("--top-k", type=int, default=0, help="at most this many hits (default: the server's)")
    recall.add_argument(
        "--token-budget", type=int, default=0, help="tokens of the injected text (default: the server's)"
    )
    recall.add_argument("--profile", default="", help="ranking profile: default, support, knowledge_qa")
    recall.add_argument("--min-score", type=float, help="drop hits below this score (default: the server's)")
    recall.add_argument(
        "--include-superseded", action="store_true", help="also memories a newer version replaced"
    )
    recall.add_argument(
        "--explain", action="store_true", help="every channel's candidates and the score components (--json)"
    )
    _agent(recall)

    update = _command(commands, "update", cmd_update, "change fields of a memory")
    update.add_argument("id", help="the memory's id")
    update.add_argument("--content", help="the new content")
    update.add_argument("--subject", help="the new subject")
    update.add_argument("--intent", help="the new intent label")
    update.add_argument(
        "--entities", type=_json_object, help="the new entities, a JSON object (replaces them)"
    )
    update.add_argument("--confidence", type=float, help="the new confidence, 0-1")
    update.add_argument("--tier", choices=TIERS, help="the new tier")
    update.add_argument("--kind", choices=KINDS, help="the new kind")
    update.add_argument(
        "--expected-version", type=int, help="fail (ABORTED) if the memory's version is not this one"
    )
    _idempotency_key(update)
    _agent(update)

    delete = _command(commands, "delete", cmd_delete, "soft-delete a memory (it leaves recall)")
    delete.add_argument("id", help="the memory's id")
    _idempotency_key(delete)
    _agent(delete)

    history = _command(commands, "history", cmd_history, "a memory's versions, oldest first")
    history.add_argument("id", help="any version's id")
    _agent(history)

    audit = _command(
        commands,
        "audit",
        cmd_audit,
        "the recall audit of a tenant whose recalls are audited (audit.tenants): which recalls a memory "
        "fed, newest first",
    )
    audit.add_argument("--memory", default="", help="only the recalls that returned this memory (its id)")
    audit.add_argument("--subject", default="", help="only the recalls of this subject")
    audit.add_argument("--since", type=timestamp, help="only recalls from this time on (ISO 8601)")
    audit.add_argument("--until", type=timestamp, help="only recalls before this time (ISO 8601)")
    audit.add_argument("--page-size", type=int, default=0, help="recalls per page (default: the server's)")
    audit.add_argument("--page-token", default="", help="the next page, as the previous page printed it")


def _add_session_commands(commands: Any) -> None:
    session = commands.add_parser(
        "session", help="a conversation: append a turn, read its summary, end (consolidate) it"
    )
    actions = session.add_subparsers(dest="session_command", required=True, metavar="ACTION")

    append = _command(
        actions,
        "append",
        cmd_session_append,
        "append one turn to the session's working memory (the server summarizes and remembers)",
    )
    append.add_argument("session", help="the session's id (the same for every turn of it)")
    append.add_argument("--text", required=True, help="what was said, verbatim")
    append.add_argument("--role", choices=ROLES, default="user", help="who said it (default user)")
    append.add_argument("--subject", default="", help="whom the session is about (e.g. the user's id)")
    _agent(append, "the agent in the conversation, kept on what is derived from the turn")
    append.add_argument(
        "--entities", type=_json_object, help="entities already known for the turn, a JSON object"
    )
    append.add_argument("--occurred-at", type=timestamp, help="when it was said (ISO 8601 with offset)")
    _idempotency_key(append)

    summarize = _command(
        actions,
        "summarize",
        cmd_session_summarize,
        "the session's goal, settled parameters, open items, turns",
    )
    summarize.add_argument("session", help="the session's id")

    end = _command(actions, "end", cmd_session_end, "consolidate the session now into one episodic memory")
    end.add_argument("session", help="the session's id")
    end.add_argument(
        "--reason",
        default="session_end",
        help=f"why it ends, kept in the episode: {', '.join(END_REASONS)} (default session_end)",
    )
    _idempotency_key(end)


def _add_pending_commands(commands: Any) -> None:
    pending = commands.add_parser(
        "pending", help="memories waiting for confirmation: list them, confirm or reject one"
    )
    actions = pending.add_subparsers(dest="pending_command", required=True, metavar="ACTION")

    listing = _command(
        actions,
        "list",
        cmd_pending_list,
        "the pending memories (id, kind, confidence, content), newest first",
    )
    listing.add_argument("--subject", default="", help="only memories about this subject")
    listing.add_argument("--session", default="", help="only memories from this session")
    _paging(listing)
    _agent(listing)

    for action, handler, help_text in (
        ("confirm", cmd_pending_confirm, "confirm a pending memory: it becomes active and recall uses it"),
        ("reject", cmd_pending_reject, "reject a pending memory: it is deleted, never recalled"),
    ):
        decision = _command(actions, action, handler, help_text)
        decision.add_argument("id", help="the pending memory's id (see `hindsight pending list`)")
        _idempotency_key(decision)
        _agent(
            decision, "the calling agent: needed to decide on its own PRIVATE pending memory (default: none)"
        )


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _add_webhook_commands(commands: Any) -> None:
    webhooks = commands.add_parser(
        "webhooks",
        help="the change feed POSTed to HTTP endpoints, signed (Standard Webhooks): needs an admin key",
    )
    actions = webhooks.add_subparsers(dest="webhooks_command", required=True, metavar="ACTION")

    add = _command(
        actions, "add", cmd_webhooks_add, "register an endpoint; prints its id and its secret (shown once)"
    )
    add.add_argument("url", help="http(s)://host[:port]/path, resolving to a public address")
    add.add_argument(
        "--event-types",
        type=_names,
        action="extend",
        metavar="TYPE[,TYPE...]",
        help="only these event types (created, merged, superseded, updated, deleted, confirmed, rejected, "
        "expired, purged, erased); repeat or comma-separate (default: all)",
    )
    add.add_argument(
        "--subjects",
        type=_names,
        action="extend",
        metavar="SUBJECT[,SUBJECT...]",
        help="only these subjects' events; repeat or comma-separate (default: every subject)",
    )
    _command(actions, "list", cmd_webhooks_list, "the endpoints: id, state, URL, filters, delivery state")
    for action, handler, help_text in (
        ("remove", cmd_webhooks_remove, "stop delivering to an endpoint and forget it"),
        ("rotate", cmd_webhooks_rotate, "a new secret; the previous one keeps signing for a while"),
    ):
        sub = _command(actions, action, handler, help_text)
        sub.add_argument("id", help="the endpoint's id (see `hindsight webhooks list`)")
    replay = _command(
        actions, "replay", cmd_webhooks_replay, "deliver again from a cursor; revives a dead endpoint"
    )
    replay.add_argument("id", help="the endpoint's id (see `hindsight webhooks list`)")
    replay.add_argument(
        "--from",
        dest="cursor",
        required=True,
        metavar="CURSOR",
        help="a cursor of the feed (a delivery's `cursor`, `hindsight webhooks list`), or 'oldest'",
    )
