"""The client commands of `hindsight`: every call of the memory API from a shell, through the shared
client (hindsight.client), with the connection options every client command shares (args.py); the
webhooks commands are webhooks.py's.

hindsight write|get|list|recall|update|delete ...    memories
hindsight session append|summarize|end SESSION ...   a conversation's turns, its working memory, its episode
hindsight pending list|confirm|reject ...            memories waiting for the user's confirmation
hindsight history ID                                 a memory's versions, oldest first
hindsight audit [--memory ID] [--subject S] ...      the recalls an audited tenant served, newest first

Human-readable output by default (one memory a line; `get` and `session summarize` one field a line);
`--json` prints protobuf's JSON mapping with the proto's field names, every field, and 64-bit integers
as numbers. Errors go to stderr as one line; the exit codes are args.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from google.protobuf import json_format, struct_pb2

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.cli.args import (
    EXIT_USAGE,
    KINDS,
    TIERS,
    call_client,
    client_command,
    enum_name,
    enum_names,
    print_json,
    time_text,
    timestamp,
    typed_dict,
)

__all__ = ["add_client_commands", "memory_fields"]


STATUSES = enum_names(pb.Status, "STATUS_")
ROLES = enum_names(pb.Role, "ROLE_")
VISIBILITIES = enum_names(pb.Visibility, "VISIBILITY_")
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


# ------------------------------------------------------------------------------------------- output


def _struct_json(value: struct_pb2.Struct) -> str:
    return json.dumps(json_format.MessageToDict(value), ensure_ascii=False, sort_keys=True)


def _memory_line(memory: pb.Memory) -> str:
    tier = enum_name(pb.Tier, memory.tier, "TIER_")
    return f"{memory.id}  {tier:<8}  {memory.content}"


def _pending_line(memory: pb.Memory) -> str:
    kind = enum_name(pb.Kind, memory.kind, "KIND_")
    return f"{memory.id}  {kind:<10}  {memory.confidence:.2f}  {memory.content}"


def _times(count: int) -> str:
    return "" if not count else "1 time" if count == 1 else f"{count} times"


def memory_fields(memory: pb.Memory) -> list[tuple[str, str]]:
    """A memory as (label, value) rows for `get`: what it says first, then what it is, then its record;
    empty fields are left out."""
    validity = ""
    if memory.HasField("valid_from") or memory.HasField("valid_to"):
        validity = f"{time_text(memory, 'valid_from') or '-'} .. {time_text(memory, 'valid_to') or 'now'}"
    seen = _times(memory.seen_count)
    if seen and memory.HasField("last_seen_at"):
        seen += f", last {time_text(memory, 'last_seen_at')}"
    accessed = _times(memory.access_count)
    if accessed and memory.HasField("last_accessed_at"):
        accessed += f", last {time_text(memory, 'last_accessed_at')}"
    rows = [
        ("id", memory.id),
        ("content", memory.content),
        ("tier", enum_name(pb.Tier, memory.tier, "TIER_")),
        ("kind", enum_name(pb.Kind, memory.kind, "KIND_")),
        ("status", enum_name(pb.Status, memory.status, "STATUS_")),
        ("confidence", f"{memory.confidence:g}"),
        ("subject", memory.subject),
        ("session", memory.session_id),
        ("agent", memory.agent_id),
        (
            "visibility",
            enum_name(pb.Visibility, memory.visibility, "VISIBILITY_") if memory.visibility else "",
        ),
        ("intent", memory.intent),
        ("entities", _struct_json(memory.entities) if memory.entities.fields else ""),
        ("valid", validity),
        ("created", time_text(memory, "created_at")),
        ("updated", time_text(memory, "updated_at")),
        ("expires", time_text(memory, "expires_at")),
        ("version", str(memory.version) if memory.version else ""),
        ("supersedes", memory.supersedes),
        ("superseded by", memory.superseded_by),
        ("derived from", ", ".join(memory.derived_from)),
        ("seen", seen),
        ("accessed", accessed),
        ("embedding", enum_name(pb.EmbeddingState, memory.embedding_state, "EMBEDDING_STATE_")),
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
        ("updated", time_text(summary, "updated_at")),
        ("summarizer", summary.summarizer),
        ("summary", summary.text),
    ]
    return [(label, value) for label, value in rows if value]


def _turn_line(turn: pb.Turn) -> str:
    return f"  {turn.index:>3}. {enum_name(pb.Role, turn.role, 'ROLE_'):<9} {turn.text}"


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

    return call_client(args, call)


def cmd_get(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        memory = await client.get(args.tenant, args.id, agent_id=args.agent)
        print_json(typed_dict(memory)) if args.json else _print_fields(memory_fields(memory))

    return call_client(args, call)


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

    return call_client(args, call)


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

    return call_client(args, call)


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

    return call_client(args, call)


def cmd_delete(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        memory = await client.delete(
            args.tenant, args.id, agent_id=args.agent, idempotency_key=args.idempotency_key
        )
        print_json(typed_dict(memory)) if args.json else print(f"deleted {memory.id}")

    return call_client(args, call)


def cmd_history(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        response = await client.history(args.tenant, args.id, agent_id=args.agent)
        if args.json:
            print_json(typed_dict(response))
            return
        active = [m.id for m in response.versions if m.status == pb.STATUS_ACTIVE]
        for place, memory in enumerate(response.versions, 1):
            status = enum_name(pb.Status, memory.status, "STATUS_")
            now = "  (believed now)" if active and memory.id == active[-1] else ""
            print(f"{place}. {memory.id}  {time_text(memory, 'created_at')}  {status}{now}")
            print(f"   {memory.content}")

    return call_client(args, call)


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
        role = enum_name(pb.Role, response.turn.role, "ROLE_")
        print(f"turn {response.turn.index} ({role}) in session {args.session}")
        for memory in response.remembered:
            status = enum_name(pb.Status, memory.status, "STATUS_")
            print(f"remembered {memory.id}  {status}  {memory.content}")
        if response.HasField("episode"):
            print(f"episode {response.episode.id}  {response.episode.content}")
        if response.summary_refreshed and response.summary.text:
            print(f"summary: {response.summary.text}")

    return call_client(args, call)


def cmd_session_summarize(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        summary = await client.summarize(args.tenant, args.session, agent_id=args.agent)
        if args.json:
            print_json(typed_dict(summary))
            return
        _print_fields(_summary_fields(summary))
        if summary.recent_turns:
            print("recent turns")
            for turn in summary.recent_turns:
                print(_turn_line(turn))

    return call_client(args, call)


def cmd_session_end(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        response = await client.end_session(
            args.tenant,
            args.session,
            reason=args.reason,
            idempotency_key=args.idempotency_key,
            agent_id=args.agent,
        )
        consolidated = response.HasField("episode")
        if args.json:
            episode = typed_dict(response.episode) if consolidated else None
            print_json({"session_id": args.session, "consolidated": consolidated, "episode": episode})
        elif consolidated:
            print(f"episode {response.episode.id}  {response.episode.content}")
        else:
            print(f"nothing new in session {args.session} since its last episode: no episode written")

    return call_client(args, call)


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

    return call_client(args, call)


def _decide(args: argparse.Namespace, *, confirm: bool) -> int:
    async def call(client: HindsightClient) -> None:
        decide = client.confirm_pending if confirm else client.reject_pending
        memory = await decide(args.tenant, args.id, agent_id=args.agent, idempotency_key=args.idempotency_key)
        if args.json:
            print_json(typed_dict(memory))
        else:
            print(f"{'confirmed' if confirm else 'rejected'} {memory.id}  {memory.content}")

    return call_client(args, call)


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
    return f"{time_text(entry, 'at')}  {entry.request_id}  {who}  {served}  {entry.query_hash[:16]}{query}"


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

    return call_client(args, call)


# -------------------------------------------------------------------------------------------- parser


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


def _add_memory_commands(commands: Any) -> None:
    write = client_command(commands, "write", cmd_write, "store a memory; prints its id")
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

    get = client_command(commands, "get", cmd_get, "read one memory, one field a line")
    get.add_argument("id", help="the memory's id")
    _agent(get)

    listing = client_command(commands, "list", cmd_list, "list memories by filter, newest first")
    _filters(listing)
    listing.add_argument(
        "--status", action="append", choices=STATUSES, help="only this status; repeat (default: active)"
    )
    _paging(listing)
    _agent(listing)

    recall = client_command(commands, "recall", cmd_recall, "find the memories relevant to a query")
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

    update = client_command(commands, "update", cmd_update, "change fields of a memory")
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

    delete = client_command(commands, "delete", cmd_delete, "soft-delete a memory (it leaves recall)")
    delete.add_argument("id", help="the memory's id")
    _idempotency_key(delete)
    _agent(delete)

    history = client_command(commands, "history", cmd_history, "a memory's versions, oldest first")
    history.add_argument("id", help="any version's id")
    _agent(history)

    audit = client_command(
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

    append = client_command(
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

    summarize = client_command(
        actions,
        "summarize",
        cmd_session_summarize,
        "the session's goal, settled parameters, open items, turns",
    )
    summarize.add_argument("session", help="the session's id")
    _agent(summarize, "only a session of this agent (or of none)")

    end = client_command(
        actions, "end", cmd_session_end, "consolidate the session now into one episodic memory"
    )
    end.add_argument("session", help="the session's id")
    _agent(end, "only a session of this agent (or of none)")
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

    listing = client_command(
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
        decision = client_command(actions, action, handler, help_text)
        decision.add_argument("id", help="the pending memory's id (see `hindsight pending list`)")
        _idempotency_key(decision)
        _agent(
            decision, "the calling agent: needed to decide on its own PRIVATE pending memory (default: none)"
        )
