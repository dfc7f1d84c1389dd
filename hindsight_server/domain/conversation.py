"""A session's conversation turns, as the session rules (summary, remember-or-not, consolidation) see them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from hindsight_server.domain.errors import FailedPrecondition, InvalidArgument
from hindsight_server.domain.language import language
from hindsight_server.domain.model import Entities

__all__ = ["Role", "Turn", "require_text", "session_language", "validate_turns"]


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class Turn:
    index: int  # 1-based position in the session
    role: Role
    text: str
    occurred_at: datetime  # timezone-aware: relative dates ("明天", "next Friday") resolve against it
    entities: Entities = field(default_factory=dict)  # what the caller already knows about this turn


def require_text(text: str, field: str = "text") -> str:
    """The text with its outer white space removed, or InvalidArgument naming `field` when blank."""
    stripped = text.strip()
    if not stripped:
        raise InvalidArgument(field, "must not be empty")
    return stripped


def validate_turns(turns: Sequence[Turn]) -> None:
    """Each turn has text, a timezone-aware time and an index above the one before it."""
    previous = 0
    for position, turn in enumerate(turns):
        require_text(turn.text, f"turns[{position}].text")
        if turn.occurred_at.tzinfo is None or turn.occurred_at.utcoffset() is None:
            raise InvalidArgument(f"turns[{position}].occurred_at", "must be timezone-aware")
        if turn.index <= previous:
            raise InvalidArgument(f"turns[{position}].index", "must be 1 or more and increase turn by turn")
        previous = turn.index


def session_language(turns: Sequence[Turn]) -> str:
    """ "zh" when the conversation is mostly Chinese, else "en" (system and tool turns do not count)."""
    spoken = [turn.text for turn in turns if turn.role in (Role.USER, Role.ASSISTANT)]
    return language(" ".join(spoken))


def session_subject_mismatch(session_id: str, subject: str) -> FailedPrecondition:
    """A call confined to one subject reached a session of another, or of none. The message names the
    caller's own subject only: it says nothing of whose the session is."""
    return FailedPrecondition.of(
        "SUBJECT",
        f"sessions/{session_id}",
        f"session {session_id!r} is not a session of subject {subject!r}",
        cause="SESSION_SUBJECT_MISMATCH",
    )
