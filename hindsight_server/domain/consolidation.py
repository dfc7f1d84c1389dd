"""Working -> episodic: when a session is consolidated, and the one structured record it becomes.

When (docs/design.md): every 5 turns since the last consolidation, after 120 s without a turn, or on an
explicit event (the task is done, the user says "记住这个" / "remember this", a key entity changed, the
session ends); never when no turn came since the last one (running it again changes nothing).

What: one episode per consolidation (the original design's record): when, intent, entities (the summary's
confirmed parameters), actions (what the assistant reported done), outcome, a summary line in the
session's language, and provenance (session, turn range, agent, subject, trigger).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from hindsight_server.domain.conversation import Role, Turn, validate_turns
from hindsight_server.domain.dialogue import done_action, has_change_cue, is_cancel
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import JsonValue, Kind, MemoryDraft, Tier
from hindsight_server.domain.session_summary import SessionSummary
from hindsight_server.domain.slots import describe_all, normalise

__all__ = [
    "ConsolidationDecision",
    "ConsolidationEvent",
    "ConsolidationPolicy",
    "Episode",
    "Outcome",
    "Provenance",
    "build_episode",
    "consolidation_due",
    "explicit_event",
]


class ConsolidationEvent(StrEnum):
    TASK_DONE = "task_done"  # the assistant reported the task done, or the user cancelled it
    REMEMBER_THIS = "remember_this"
    KEY_ENTITY_CHANGED = "key_entity_changed"
    SESSION_END = "session_end"


@dataclass(frozen=True, slots=True)
class ConsolidationPolicy:
    every_turns: int = 5
    idle: timedelta = timedelta(seconds=120)

    def __post_init__(self) -> None:
        if self.every_turns < 1:
            raise InvalidArgument("every_turns", "must be at least 1")
        if self.idle <= timedelta(0):
            raise InvalidArgument("idle", "must be positive")


@dataclass(frozen=True, slots=True)
class ConsolidationDecision:
    consolidate: bool
    trigger: str  # "event", "turns", "idle", or "" when not
    reason: str


def consolidation_due(
    *,
    turns_since_last: int,
    last_turn_at: datetime | None,
    now: datetime,
    event: ConsolidationEvent | None = None,
    policy: ConsolidationPolicy | None = None,
) -> ConsolidationDecision:
    """Whether to consolidate now: an explicit event, else every `every_turns` turns, else `idle`
    since the last turn; never without a turn since the last consolidation."""
    policy = policy or ConsolidationPolicy()
    if turns_since_last < 0:
        raise InvalidArgument("turns_since_last", "must not be negative")
    if turns_since_last == 0:
        return ConsolidationDecision(False, "", "no turn since the last consolidation")
    if event is not None:
        return ConsolidationDecision(True, "event", f"explicit event: {event.value}")
    if turns_since_last >= policy.every_turns:
        return ConsolidationDecision(True, "turns", f"{turns_since_last} turns since the last consolidation")
    if last_turn_at is not None and now - last_turn_at >= policy.idle:
        idle = int((now - last_turn_at).total_seconds())
        return ConsolidationDecision(True, "idle", f"idle for {idle} s")
    return ConsolidationDecision(False, "", "not yet")


_REMEMBER_THIS = re.compile(
    r"记住这个|记住这些|记住这件事|把这个记住|把这些记住|记下来|"
    r"\bremember\s+(?:this|that)\s*(?:[.!,]|$)|\bdon'?t\s+forget\s+this\b|\bnote\s+this\s+down\b|\bkeep\s+this\s+in\s+mind\b",
    re.IGNORECASE,
)


def explicit_event(turn: Turn) -> ConsolidationEvent | None:
    """The event a turn raises by itself: "记住这个" / "remember this" from the user, a task the
    assistant reports done, a cancellation by the user."""
    if turn.role is Role.USER:
        if _REMEMBER_THIS.search(normalise(turn.text)):
            return ConsolidationEvent.REMEMBER_THIS
        if is_cancel(turn.text) and not has_change_cue(turn.text):
            return ConsolidationEvent.TASK_DONE
    if turn.role is Role.ASSISTANT and done_action(turn.text) is not None:
        return ConsolidationEvent.TASK_DONE
    return None


class Outcome(StrEnum):
    DONE = "done"  # the assistant reported it done
    CONFIRMED = "confirmed"  # the user accepted, nothing left open
    CANCELLED = "cancelled"
    OPEN = "open"


_OUTCOME_LABELS = {
    Outcome.DONE: ("已完成", "done"),
    Outcome.CONFIRMED: ("已确认", "confirmed"),
    Outcome.CANCELLED: ("已取消", "cancelled"),
    Outcome.OPEN: ("未完成", "open"),
}


@dataclass(frozen=True, slots=True)
class Provenance:
    session_id: str
    first_turn: int
    last_turn: int
    agent_id: str
    subject: str
    trigger: str  # why it was consolidated ("turns", "idle", "task_done", ...)


@dataclass(frozen=True, slots=True)
class Episode:
    occurred_at: datetime  # the first turn's time
    ended_at: datetime  # the last turn's time
    intent: str
    goal: str
    entities: Mapping[str, JsonValue]  # the confirmed parameters
    actions: tuple[str, ...]
    outcome: Outcome
    summary: str  # the record's content, in `language`
    language: str
    provenance: Provenance

    def memory_entities(self) -> dict[str, JsonValue]:
        """The entities to store: the parameters plus session_id (so episodes of different sessions
        are distinct things, never versions of one: see conflicts.ConflictPolicy.distinct_keys), the
        turn range and the outcome."""
        source = self.provenance
        extra: dict[str, JsonValue] = {
            "session_id": source.session_id,
            "turns": [source.first_turn, source.last_turn],
            "outcome": self.outcome.value,
        }
        return dict(self.entities) | extra

    def draft(self, tenant_id: str) -> MemoryDraft:
        """The episodic memory to write. Its idempotency key names the session's turn range, so a
        consolidation run again after a crash writes nothing twice."""
        source = self.provenance
        return MemoryDraft(
            tenant_id=tenant_id,
            content=self.summary,
            tier=Tier.EPISODIC,
            kind=Kind.EVENT,
            subject=source.subject,
            agent_id=source.agent_id,
            session_id=source.session_id,
            intent=self.intent,
            entities=self.memory_entities(),
            valid_from=self.occurred_at,
            occurred_at=self.occurred_at,
            idempotency_key=f"episode:{source.session_id}:{source.first_turn}-{source.last_turn}",
        )


def _outcome(turns: Sequence[Turn], summary: SessionSummary) -> Outcome:
    outcome: Outcome | None = None
    for turn in turns:
        if turn.role is Role.USER and is_cancel(turn.text) and not has_change_cue(turn.text):
            outcome = Outcome.CANCELLED
        elif turn.role is Role.ASSISTANT and done_action(turn.text) is not None:
            outcome = Outcome.DONE
    if outcome is not None:
        return outcome
    return Outcome.CONFIRMED if summary.decision == "accepted" and not summary.open_items else Outcome.OPEN


def _summary_line(
    goal: str, entities: Mapping[str, JsonValue], outcome: Outcome, open_items: Sequence[str], lang: str
) -> str:
    phrases = describe_all(entities, lang)
    label = _OUTCOME_LABELS[outcome][0 if lang == "zh" else 1]
    if lang == "zh":
        head = f"用户{goal or '对话'}" + (f"：{'、'.join(phrases)}" if phrases else "")
        tail = f"；待确认：{'、'.join(open_items)}" if outcome is Outcome.OPEN and open_items else ""
        return f"{head}；{label}{tail}"
    head = f"User: {goal or 'conversation'}" + (f" ({', '.join(phrases)})" if phrases else "")
    tail = f"; still open: {', '.join(open_items)}" if outcome is Outcome.OPEN and open_items else ""
    return f"{head}; {label}{tail}"


def build_episode(
    turns: Sequence[Turn],
    summary: SessionSummary,
    *,
    session_id: str,
    agent_id: str = "",
    subject: str = "",
    trigger: str = "",
) -> Episode:
    """The episode of `turns` (those since the last consolidation) with the session's current summary.
    Raises InvalidArgument when there are no turns or no session."""
    if not session_id:
        raise InvalidArgument("session_id", "required")
    if not turns:
        raise InvalidArgument("turns", "must not be empty: nothing to consolidate")
    validate_turns(turns)
    outcome = _outcome(turns, summary)
    actions = [action for turn in turns if turn.role is Role.ASSISTANT and (action := done_action(turn.text))]
    lang = summary.language
    return Episode(
        occurred_at=turns[0].occurred_at,
        ended_at=turns[-1].occurred_at,
        intent=summary.intent,
        goal=summary.goal,
        entities=dict(summary.confirmed),
        actions=tuple(dict.fromkeys(actions)),
        outcome=outcome,
        summary=_summary_line(summary.goal, summary.confirmed, outcome, summary.open_items, lang),
        language=lang,
        provenance=Provenance(session_id, turns[0].index, turns[-1].index, agent_id, subject, trigger),
    )
