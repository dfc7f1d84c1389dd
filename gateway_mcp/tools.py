"""The tools an agent sees: strict argument models (their JSON schemas are the tools' input schemas),
and descriptions that say WHEN to call each tool, with the Chinese and English cues users give.

The first arguments are the original design's (`session_id`, `memory_type`, `summary`, `intent`,
`entities`; `session_id`, `query`, `top_k`), so an agent written against it works unchanged; the rest
are what the gRPC API offers, all optional.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import mcp_types as types
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from gateway_mcp.results import (
    NOTHING_RECALLED,
    AppendTurnResult,
    ChangesResult,
    DebugResult,
    DecisionResult,
    EndSessionResult,
    ForgetResult,
    HistoryResult,
    PendingResult,
    RecallResult,
    SummaryResult,
    WriteResult,
)
from hindsight.client import KindName, TierName

__all__ = [
    "APPEND_TURN_TOOL",
    "CHANGES_TOOL",
    "CONFIRM_PENDING_TOOL",
    "DEBUG_TOOL",
    "END_SESSION_TOOL",
    "FORGET_TOOL",
    "HISTORY_TOOL",
    "MAX_AUDIT_ENTRIES",
    "MAX_CHANGES",
    "MAX_CHANGES_WAIT_S",
    "MAX_CONTENT_BYTES",
    "MAX_FORGET_IDS",
    "MAX_PENDING",
    "MAX_QUERY_BYTES",
    "MAX_TOKEN_BUDGET",
    "MAX_TOP_K",
    "PENDING_TOOL",
    "RECALL_TOOL",
    "REJECT_PENDING_TOOL",
    "SUMMARIZE_TOOL",
    "TOOLS",
    "WRITE_TOOL",
    "AppendTurnArguments",
    "ChangesArguments",
    "DebugArguments",
    "EndSessionArguments",
    "ForgetArguments",
    "HistoryArguments",
    "PendingArguments",
    "PendingDecisionArguments",
    "RecallArguments",
    "RoleName",
    "SummarizeArguments",
    "ToolSpec",
    "WriteArguments",
    "input_schema",
]

# The server accepts up to 100 (limits.max_top_k), but its channels merge 30-50 candidates: more than
# 50 can never be relevant, and each hit costs the agent's context.
MAX_TOP_K = 50
MAX_TOKEN_BUDGET = 32_000  # the server's limits.max_token_budget
_IDENTIFIER = 256  # the server's limits.max_identifier_chars
# The server's limits.max_content_bytes and max_query_bytes, which count UTF-8 bytes. The schemas' maxLength
# (characters) is the same number, a bound no acceptable text exceeds; the bytes are checked here too, so
# a text the server would refuse is the model's to shorten before any call is made.
MAX_CONTENT_BYTES = 16_384
MAX_QUERY_BYTES = 4_096

WRITE_TOOL = "memory_write"
RECALL_TOOL = "memory_recall"
SUMMARIZE_TOOL = "memory_summarize"
DEBUG_TOOL = "memory_debug"
FORGET_TOOL = "memory_forget"
APPEND_TURN_TOOL = "memory_append_turn"
END_SESSION_TOOL = "memory_end_session"
PENDING_TOOL = "memory_pending"
CONFIRM_PENDING_TOOL = "memory_confirm_pending"
REJECT_PENDING_TOOL = "memory_reject_pending"
HISTORY_TOOL = "memory_history"
CHANGES_TOOL = "memory_changes"
# A memory_changes call returns at most this many events and waits at most this long for them: a tool
# call is one request and one answer, and an agent's context takes a page, not a stream.
MAX_CHANGES = 100
_DEFAULT_CHANGES = 20
MAX_CHANGES_WAIT_S = 20.0
_CURSOR = 64  # the feed's cursors are "<xid>.<seq>", at most 40 characters
# The feed's event types (the server's EventType), for the event_types filter.
EventTypeName = Literal[
    "created",
    "merged",
    "superseded",
    "updated",
    "deleted",
    "confirmed",
    "rejected",
    "expired",
    "purged",
    "erased",
    "consolidated",
    "erasure_finished",
    "recall.served",
]
# memory_debug's audit of a memory: its newest recalls, one page.
MAX_AUDIT_ENTRIES = 20
# Far more than one unconfirmed call offers (5): room for what the user agreed to over a few of them.
MAX_FORGET_IDS = 100
# Pending memories a memory_pending call lists (the server's limits.max_page_size is larger): each one is
# a question for the user, and a few dozen are already more than one conversation settles.
MAX_PENDING = 50
_DEFAULT_PENDING = 20
_PAGE_TOKEN = 1_024  # the server's page tokens are a few dozen characters
# Who said a turn (the proto's Role without UNSPECIFIED).
RoleName = Literal["user", "assistant", "system", "tool"]
# Why a session is consolidated (the server's ConsolidationEvent that a caller can raise).
EndReason = Literal["task_done", "remember_this", "session_end"]

_TIME = "ISO 8601 with a UTC offset, e.g. 2025-01-08T14:00:00+08:00"


def _in_utc(value: datetime) -> datetime:
    """0001-01-01T00:00+14:00 is a valid time that no UTC datetime (nor protobuf Timestamp) holds."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("outside the years 0001-9999 once in UTC") from None


# Entities travel as a protobuf Struct inside the request: three messages a level, and protobuf parses
# 100 at most. (The memory server's own limit, limits.max_entity_depth, is far lower and names the key.)
_MAX_ENTITY_DEPTH = 30


def _struct_compatible(value: Any, depth: int = 0) -> Any:
    """What a protobuf Struct can carry: numbers that fit in a double, nesting it can parse. JSON has
    numbers of any size and any depth."""
    if depth > _MAX_ENTITY_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_ENTITY_DEPTH} levels")
    if isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            _struct_compatible(item, depth + 1)
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            raise ValueError("numbers must fit in a double (at most about 1.8e308)") from None
    return value


def _utf8_at_most(limit: int) -> AfterValidator:
    def check(value: str) -> str:
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise ValueError(f"{size} bytes in UTF-8; at most {limit}")
        return value

    return AfterValidator(check)


# The tools' times, entities and texts: the checks above, with the schema of the plain types.
_Time = Annotated[AwareDatetime, AfterValidator(_in_utc)]
_Entities = Annotated[dict[str, Any], AfterValidator(_struct_compatible)]
_Content = Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_BYTES), _utf8_at_most(MAX_CONTENT_BYTES)]
_Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_BYTES), _utf8_at_most(MAX_QUERY_BYTES)]


class _Arguments(BaseModel):
    # extra="forbid" is what puts `additionalProperties: false` in the schema (and enforces it).
    model_config = ConfigDict(extra="forbid", frozen=True)


class WriteArguments(_Arguments):
    session_id: str = Field(
        min_length=1, max_length=_IDENTIFIER, description="The conversation this memory comes from."
    )
    memory_type: TierName = Field(
        description="working: this session's goal, confirmed parameters and open items (expires in 24 h); "
        "episodic: what happened in one interaction or task; semantic: true across sessions "
        "(preferences, facts about the user or the project)."
    )
    summary: _Content = Field(
        description="The memory itself, stored as its content: one short, self-contained statement with "
        "the key entities, e.g. '用户偏好靠窗座位' or 'Booked room A-301 for 10 people on 2025-01-08 14:00'.",
    )
    intent: str = Field(
        "", max_length=_IDENTIFIER, description="What the user wanted, as a label, e.g. book_meeting_room."
    )
    entities: _Entities = Field(
        default_factory=dict,
        description='Key entities as a flat JSON object, e.g. {"date": "2025-01-08", "building": "A", '
        '"capacity": 10}; recall matches on them; a new value for an entity replaces the old memory.',
    )
    kind: KindName | None = Field(
        None,
        description="What sort of memory. Default from memory_type: working -> task, episodic -> event, "
        "semantic -> fact. Use preference for likes and habits, instruction for how to act for the user.",
    )
    subject: str = Field(
        "",
        max_length=_IDENTIFIER,
        description="Who or what it is about, e.g. the user's id; recall can filter on it.",
    )
    confidence: float | None = Field(
        None,
        ge=0,
        le=1,
        description="How sure you are (default 1). Below 0.7 the memory waits as pending and is not recalled "
        "until confirmed: do not write guesses as facts.",
    )
    occurred_at: _Time | None = Field(
        None, description=f"When it was said or happened (default now; not in the future), {_TIME}."
    )
    valid_from: _Time | None = Field(None, description=f"True in the world from ({_TIME}).")
    valid_to: _Time | None = Field(None, description=f"True in the world until ({_TIME}).")
    idempotency_key: str = Field(
        "",
        max_length=_IDENTIFIER,
        description="Send the same key when you repeat the same write: it is stored once. Default: a new key "
        "per call (a retry inside the gateway reuses it).",
    )


class RecallArguments(_Arguments):
    session_id: str = Field(
        min_length=1,
        max_length=_IDENTIFIER,
        description="The current conversation; its working memory and recent episodes are recalled too.",
    )
    query: _Query = Field(
        description="What you need to remember, in the user's words (Chinese or English). Time expressions "
        "such as 上次, 上周三, 三天前, last Friday narrow the time range by themselves.",
    )
    top_k: int | None = Field(None, ge=1, le=MAX_TOP_K, description="At most this many memories (default 5).")
    token_budget: int | None = Field(
        None, ge=1, le=MAX_TOKEN_BUDGET, description="Token budget of the injected text (default 2000)."
    )
    memory_types: list[TierName] = Field(
        default_factory=list, max_length=3, description="Only these tiers (default: all)."
    )
    kinds: list[KindName] = Field(
        default_factory=list, max_length=6, description="Only these kinds (default: all)."
    )
    subject: str = Field("", max_length=_IDENTIFIER, description="Only memories about this subject.")
    entities: _Entities = Field(
        default_factory=dict, description='Entities to match exactly, e.g. {"building": "A"}.'
    )
    start: _Time | None = Field(None, description=f"Only memories from this time on ({_TIME}).")
    end: _Time | None = Field(None, description=f"Only memories before this time ({_TIME}).")
    as_of: _Time | None = Field(
        None, description=f"Recall what was known at that time, before later corrections ({_TIME})."
    )
    profile: str = Field(
        "",
        max_length=64,
        pattern=r"^[a-z0-9_]*$",
        description="Ranking profile: default, support (recent first), knowledge_qa (meaning first).",
    )
    include_superseded: bool = Field(False, description="Also return memories a newer one replaced.")


class SummarizeArguments(_Arguments):
    session_id: str = Field(
        min_length=1, max_length=_IDENTIFIER, description="The conversation to summarise."
    )


class AppendTurnArguments(_Arguments):
    session_id: str = Field(
        min_length=1,
        max_length=_IDENTIFIER,
        description="The conversation the turn belongs to: the same id for every turn of it.",
    )
    role: RoleName = Field(
        description="Who said it: user (the person you talk with), assistant (you), system, or tool "
        "(a tool's output). Only user turns can become memories."
    )
    text: _Content = Field(
        description="What was said, verbatim, in its language (Chinese or English); one turn per call."
    )
    subject: str = Field(
        "",
        max_length=_IDENTIFIER,
        description="Whom the session is about, e.g. the user's id; kept on every memory derived from "
        "it (the session's first non-empty subject stays).",
    )
    entities: _Entities = Field(
        default_factory=dict,
        description='Entities you already know for this turn, e.g. {"date": "2025-01-08"}; merged with '
        "those the server extracts.",
    )
    occurred_at: _Time | None = Field(
        None, description=f"When it was said (default now; not in the future), {_TIME}."
    )
    idempotency_key: str = Field(
        "",
        max_length=_IDENTIFIER,
        description="Send the same key when you repeat the same append: the turn is added once. Default: "
        "a new key per call (a retry inside the gateway reuses it).",
    )


class EndSessionArguments(_Arguments):
    session_id: str = Field(
        min_length=1, max_length=_IDENTIFIER, description="The conversation to consolidate."
    )
    reason: EndReason = Field(
        "session_end",
        description="Why now: task_done (the task was completed or cancelled), remember_this (the user "
        "asked you to remember it), session_end (the conversation is over; default). Kept in the "
        "episode's provenance.",
    )
    idempotency_key: str = Field(
        "",
        max_length=_IDENTIFIER,
        description="Send the same key when you repeat the call: the first call's episode is returned. "
        "Default: a new key per call.",
    )


class PendingArguments(_Arguments):
    subject: str = Field("", max_length=_IDENTIFIER, description="Only memories about this subject.")
    session_id: str = Field(
        "", max_length=_IDENTIFIER, description="Only memories from this conversation (default: all)."
    )
    limit: int | None = Field(
        None,
        ge=1,
        le=MAX_PENDING,
        description=f"At most this many memories (default {_DEFAULT_PENDING}), newest first.",
    )
    page_token: str = Field(
        "",
        max_length=_PAGE_TOKEN,
        description="The next_page_token of the previous call, to list the ones after it.",
    )

    @property
    def page_size(self) -> int:
        return self.limit or _DEFAULT_PENDING


class PendingDecisionArguments(_Arguments):
    memory_id: UUID = Field(
        description="The pending memory's id, as memory_pending (or memory_append_turn's remembered "
        "list) returned it."
    )


class HistoryArguments(_Arguments):
    memory_id: UUID = Field(
        description="Any version of the memory: an id from memory_recall, memory_write or memory_pending."
    )


class DebugArguments(_Arguments):
    query: _Query | None = Field(None, description="The query whose recall to explain.")
    memory_id: UUID | None = Field(
        None,
        description="A memory whose audit to show: the audited recalls that returned it, newest first "
        f"(at most {MAX_AUDIT_ENTRIES}; only for tenants whose recalls the server audits).",
    )
    session_id: str = Field(
        "", max_length=_IDENTIFIER, description="The session, as memory_recall would send it."
    )
    subject: str = Field("", max_length=_IDENTIFIER, description="Only memories about this subject.")
    top_k: int | None = Field(None, ge=1, le=MAX_TOP_K, description="Final hits to rank (default 5).")

    @model_validator(mode="after")
    def _something_to_show(self) -> DebugArguments:
        if self.query is None and self.memory_id is None:
            raise PydanticCustomError(
                "nothing_to_debug", "query or memory_id is required: a recall to explain, a memory's audit"
            )
        return self


class ChangesArguments(_Arguments):
    cursor: str = Field(
        "",
        max_length=_CURSOR,
        description="Where to continue: the next_cursor of the previous call. Empty: from now (the "
        "first call); 'oldest': from the oldest change the server still keeps.",
    )
    limit: int | None = Field(
        None, ge=1, le=MAX_CHANGES, description=f"At most this many changes (default {_DEFAULT_CHANGES})."
    )
    wait_s: float = Field(
        1.0,
        ge=0.1,
        le=MAX_CHANGES_WAIT_S,
        description="How long to wait for changes when none is there yet, in seconds (default 1).",
    )
    subject: str = Field("", max_length=_IDENTIFIER, description="Only changes of this subject's memories.")
    event_types: list[EventTypeName] = Field(
        default_factory=list, max_length=13, description="Only these types of change (default: all)."
    )

    @property
    def count(self) -> int:
        return self.limit or _DEFAULT_CHANGES


class ForgetArguments(_Arguments):
    query: _Query = Field(
        description="What to forget, in the user's words (Chinese or English): the thing itself, e.g. "
        "我的住址, 我对花生过敏, my address, what I told you about my ex; without 'forget'. Its memories "
        "are looked up by meaning and words: when nothing matches, try the words the user used when "
        "telling it (我住在…, I live at …). Not kept anywhere (the erasure's reason names the tool only).",
    )
    confirm: bool = Field(
        False,
        description="false (default): only look up what would be erased; nothing is deleted. true: erase "
        "`memory_ids`, and only after the user saw them and agreed.",
    )
    memory_ids: list[UUID] = Field(
        default_factory=list,
        max_length=MAX_FORGET_IDS,
        # Checked when absent too: confirm without ids is refused, naming this argument.
        validate_default=True,
        description="With confirm: true, exactly the ids the unconfirmed call returned that the user "
        "agreed to erase; not allowed without confirm.",
    )
    subject: str = Field(
        "", max_length=_IDENTIFIER, description="Only memories about this subject (as memory_recall)."
    )

    @field_validator("memory_ids")
    @classmethod
    def _ids_go_with_confirm(cls, ids: list[UUID], info: ValidationInfo) -> list[UUID]:
        confirm = info.data.get("confirm")  # absent when `confirm` itself was invalid
        if confirm is True and not ids:
            raise PydanticCustomError(
                "confirm_without_ids",
                "required with confirm: true: the ids of the memories the user agreed to erase, as the "
                "call without confirm returned them; nothing was deleted",
            )
        if confirm is False and ids:
            raise PydanticCustomError(
                "ids_without_confirm",
                "only taken with confirm: true (after the user agreed); nothing was deleted",
            )
        return list(dict.fromkeys(ids))  # a repeated id is erased once


class _InputSchema(GenerateJsonSchema):
    """Optional arguments are advertised by their type: `null` only marks "absent" (still accepted)."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])


def _tidy(schema: dict[str, Any]) -> dict[str, Any]:
    """Titles repeat the names, and `default: null` says nothing: both only cost the model tokens."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        if prop.get("default", 0) is None:
            del prop["default"]
        if "items" in prop:
            prop["items"].pop("title", None)
    return schema


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    return _tidy(model.model_json_schema(schema_generator=_InputSchema))


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    title: str
    description: str
    arguments: type[_Arguments]
    result: type[BaseModel]
    read_only: bool
    destructive: bool = False  # it may delete what cannot be restored
    idempotent: bool = False  # repeating a call with the same arguments changes nothing more

    def definition(self) -> types.Tool:
        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=input_schema(self.arguments),
            output_schema=self.result.model_json_schema(mode="serialization"),
            annotations=types.ToolAnnotations(
                title=self.title,
                read_only_hint=self.read_only,
                destructive_hint=self.destructive,
                idempotent_hint=self.read_only or self.idempotent,
                open_world_hint=False,
            ),
        )


def _lines(*lines: str) -> str:
    return "\n".join(lines)


_WRITE = ToolSpec(
    name=WRITE_TOOL,
    title="Remember",
    arguments=WriteArguments,
    result=WriteResult,
    read_only=False,
    description=_lines(
        "Store one memory for later sessions.",
        "Call it WHEN:",
        "- the user states a stable preference or fact: 以后都… / 我总是… / 我喜欢… / 记住… / "
        "from now on / always / I prefer / remember that …",
        "- the user confirms an important decision or parameter (date, place, count, format), "
        "or changes one: 改成周五 / make it Friday",
        "- a task completes: write an episodic memory of what was done and its result.",
        "Do NOT call it for small talk (好的 / 谢谢 / 请稍等 / ok / thanks), for guesses, "
        "or for what only matters in this turn.",
        "Keep `summary` short and self-contained, with the key entities; "
        "put structured values in `entities`. A new value for the same subject, kind and entity "
        "replaces the old memory (kept as history).",
    ),
)

_RECALL = ToolSpec(
    name=RECALL_TOOL,
    title="Recall",
    arguments=RecallArguments,
    result=RecallResult,
    read_only=True,
    description=_lines(
        "Recall what you were told before that is relevant now, ready to put into your context.",
        "Call it WHEN:",
        "- the user refers to earlier interactions: 上次 / 之前 / 还是那个 / 跟以前一样 / 老样子 / 上周 / "
        "last time / as before / the same as / the usual / like I said",
        "- answering needs the user's preferences, facts or history from earlier sessions "
        "(which room, which format, what was decided).",
        "Do NOT call it on every turn, nor for what is already in this conversation.",
        "The text result is a block `[相关记忆] … [/相关记忆]` to use as-is; each line gives the date, "
        "the kind and the confidence, and says when a memory was updated. "
        f"`{NOTHING_RECALLED}` means nothing relevant is stored: do not invent history.",
    ),
)

_SUMMARIZE = ToolSpec(
    name=SUMMARIZE_TOOL,
    title="Session summary",
    arguments=SummarizeArguments,
    result=SummaryResult,
    read_only=True,
    description=_lines(
        "The current session's working memory: its goal, the parameters the user confirmed, the open items "
        "and the last turns, as text ready to inject.",
        "Call it WHEN you resume or continue a long conversation, when the user changes a confirmed "
        "parameter (改成周五 / change it to Friday) and you need to restate what is settled, "
        "or before acting on a multi-turn task. Not on every turn.",
        "It knows the sessions whose turns were added (by memory_append_turn, or by your host); for any "
        "other it answers not found.",
    ),
)

_DEBUG = ToolSpec(
    name=DEBUG_TOOL,
    title="Explain a recall",
    arguments=DebugArguments,
    result=DebugResult,
    read_only=True,
    description=_lines(
        "Diagnostics for developers, not for answering users: runs a recall with its explanation and "
        "returns each channel's raw candidates (structured, vector, lexical, session, context) with "
        "timings, and the score components of the final ranking (similarity, recency, tier priority, "
        "entity match, rerank, and what lifted the similarity: exact evidence of rare terms, the turns "
        "around it, the time and subject the query names).",
        "With memory_id: also (or, without query, only) that memory's audit: the recalls that returned "
        "it, when, for which agent and request, and whether it was packed.",
        "Call it only when asked why a memory was or was not recalled, or which recalls used it.",
    ),
)

_CHANGES = ToolSpec(
    name=CHANGES_TOOL,
    title="Memory changes",
    arguments=ChangesArguments,
    result=ChangesResult,
    read_only=True,
    description=_lines(
        "The changes to this tenant's memories after a cursor, oldest first: created, merged, superseded, "
        "updated, deleted, confirmed, rejected, expired, purged, erased, and recall.served where recalls "
        "are audited. Each call returns at most `limit` changes, waits at most `wait_s` for the first, "
        "and gives the next_cursor to pass to the next call: nothing is missed or repeated.",
        "Call it WHEN you keep a copy of the memories in sync (a cache, an index, another agent's view) "
        "or must react to what other agents or the lifecycle jobs changed: start with an empty cursor, "
        "then always pass the last next_cursor.",
        "Not to find memories (memory_recall does that). A cursor older than the server keeps is "
        "refused: start again from 'oldest' or empty and reread what you keep.",
    ),
)

_FORGET = ToolSpec(
    name=FORGET_TOOL,
    title="Forget",
    arguments=ForgetArguments,
    result=ForgetResult,
    read_only=False,
    destructive=True,
    idempotent=True,  # the erasure's idempotency key comes from the ids: a repeated call erases nothing more
    description=_lines(
        "Erase specific memories the user wants forgotten, in two steps: look up, then erase what the "
        "user agreed to.",
        "Call it WHEN the user asks to forget, delete or stop remembering something specific: "
        "忘掉我的住址 / 别再记着我对花生过敏 / 把我前任的事删了 / 不要记住这个 / "
        "forget my address / delete what I told you about my ex / stop remembering that …",
        "1. ALWAYS call it first WITHOUT confirm: nothing is deleted; it returns the memories that match "
        "`query`, each with its id and content.",
        "2. Show the user what would go and ask. Only after the user agreed, call it again with "
        "confirm: true and memory_ids: the ids the user agreed to, exactly as the first call returned "
        "them. Never confirm on your own, never with ids from anywhere else.",
        "Erasing is permanent: each memory's older versions and what was derived from it go too.",
        "Do NOT call it to update a fact (改成周五 / my new address is …): memory_write replaces the old "
        "value and keeps it as history. Do NOT call it to clear this session's working memory or to "
        "tidy up memories the user did not ask about.",
    ),
)

_APPEND_TURN = ToolSpec(
    name=APPEND_TURN_TOOL,
    title="Log a turn",
    arguments=AppendTurnArguments,
    result=AppendTurnResult,
    read_only=False,
    description=_lines(
        "Add one turn of the conversation to the session's working memory. From the turns the server "
        "keeps the session's summary (goal, confirmed parameters, open items), remembers the user's "
        "stable preferences and facts by itself (unsure ones wait as pending), and consolidates the "
        "session into an episodic memory every few turns or when the user says 记住这个 / remember this.",
        "Call it WHEN your host does not record the conversation for you: after each user message "
        "(role user) and after your reply (role assistant), in order, with the same session_id. "
        "memory_summarize and memory_end_session work only on a session whose turns were added.",
        "Do NOT send a turn twice (repeat a failed call with the same idempotency_key), and do not also "
        "memory_write what a user turn already said: the result lists what it remembered.",
        "When the result lists a pending memory, ask the user whether it is right, then call "
        "memory_confirm_pending or memory_reject_pending.",
    ),
)

_END_SESSION = ToolSpec(
    name=END_SESSION_TOOL,
    title="End a session",
    arguments=EndSessionArguments,
    result=EndSessionResult,
    read_only=False,
    description=_lines(
        "Consolidate the session now into one episodic memory: what was asked, what was settled and "
        "what was done, recalled in later sessions.",
        "Call it WHEN the task is done or cancelled (订好了 / 办完了 / 算了 / done / booked / never mind; "
        "reason task_done), when the user says 记住这个 / 记下来 / remember this (reason remember_this), or "
        "when the conversation ends (再见 / 先这样 / bye / that's all; reason session_end).",
        "Do NOT call it after every turn: the server also consolidates every few turns and after a pause. "
        "A session with nothing new since its last episode writes nothing.",
    ),
)

_PENDING = ToolSpec(
    name=PENDING_TOOL,
    title="Pending memories",
    arguments=PendingArguments,
    result=PendingResult,
    read_only=True,
    description=_lines(
        "List the memories that wait for the user's confirmation: statements the server was unsure of "
        "(我可能… / 好像… / I think maybe …) and memories written with a confidence below 0.7. Recall does "
        "not use them until they are confirmed.",
        "Call it WHEN a memory_append_turn or memory_write result reported a pending memory and you want to "
        "ask the user about it, when the user asks what you are unsure about (你有哪些不确定的 / what are "
        "you unsure about), or at the end of a task to settle them.",
        "Then ask the user about each one and call memory_confirm_pending or memory_reject_pending with "
        "its memory_id. Do not decide for the user.",
    ),
)

_CONFIRM_PENDING = ToolSpec(
    name=CONFIRM_PENDING_TOOL,
    title="Confirm a pending memory",
    arguments=PendingDecisionArguments,
    result=DecisionResult,
    read_only=False,
    idempotent=True,  # the decision's idempotency key comes from the id: a repeated call changes nothing
    description=_lines(
        "Confirm a pending memory: it becomes active and recall uses it from now on.",
        "Call it WHEN the user agreed that a pending memory is right (对 / 是的 / 没错 / yes / that's "
        "right), with its memory_id from memory_pending or memory_append_turn.",
        "Never confirm on your own, nor a memory the user was not asked about.",
    ),
)

_REJECT_PENDING = ToolSpec(
    name=REJECT_PENDING_TOOL,
    title="Reject a pending memory",
    arguments=PendingDecisionArguments,
    result=DecisionResult,
    read_only=False,
    destructive=True,  # the memory is deleted: recall never uses it
    idempotent=True,
    description=_lines(
        "Reject a pending memory: it is deleted and never recalled.",
        "Call it WHEN the user says a pending memory is wrong or should not be kept (不对 / 不是 / "
        "别记这个 / no / that's wrong / don't remember that), with its memory_id from memory_pending or "
        "memory_append_turn.",
        "Only for pending memories: to correct an active one, memory_write the new value (it replaces the "
        "old one); to erase one, memory_forget.",
    ),
)

_HISTORY = ToolSpec(
    name=HISTORY_TOOL,
    title="Memory history",
    arguments=HistoryArguments,
    result=HistoryResult,
    read_only=True,
    description=_lines(
        "The versions of one memory, oldest first: every older value a newer one replaced, and which one "
        "is believed now, with when each was recorded and true.",
        "Call it WHEN the user asks what something was before, or when and how it changed (之前是什么 / "
        "原来是哪天 / 什么时候改的 / what was it before / when did I change it), or when a recalled memory "
        "says it replaced another and you need the older value.",
        "Not to find memories: memory_recall does that; this needs a memory_id.",
    ),
)

TOOLS: tuple[ToolSpec, ...] = (
    _WRITE,
    _RECALL,
    _SUMMARIZE,
    _APPEND_TURN,
    _END_SESSION,
    _PENDING,
    _CONFIRM_PENDING,
    _REJECT_PENDING,
    _HISTORY,
    _FORGET,
    _CHANGES,
    _DEBUG,
)
