"""A session as it is stored: its record, a turn to append and what appending it did, and the idle
sessions the consolidate job folds into episodes; what the session pipeline and its store exchange."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hindsight_server.domain.conversation import Role, Turn
from hindsight_server.domain.errors import NotFound
from hindsight_server.domain.model import Entities
from hindsight_server.domain.session_summary import SessionSummary

__all__ = [
    "CONSOLIDATE_JOB",
    "AppendedTurn",
    "IdleSession",
    "SessionRecord",
    "TurnInput",
    "require_open_to_agent",
]

CONSOLIDATE_JOB = "consolidate"  # the job that folds idle sessions into episodes


@dataclass(frozen=True, slots=True)
class SessionRecord:
    tenant_id: str
    session_id: str
    subject: str
    agent_id: str
    turn_count: int
    created_at: datetime
    last_turn_at: datetime
    summary: SessionSummary | None
    summary_memory_id: str | None  # the working memory that carries the summary's text
    consolidated_turn: int  # turns up to this index are in an episode
    summarizer: str = "rules"  # who wrote the summary's text: "rules" or "llm"


@dataclass(frozen=True, slots=True)
class TurnInput:
    tenant_id: str
    session_id: str
    subject: str
    agent_id: str
    role: Role
    text: str
    entities: Entities
    occurred_at: datetime
    idempotency_key: str
    subject_fixed: bool = False  # only a session of `subject`, or a new one (expected_subject)


@dataclass(frozen=True, slots=True)
class IdleSession:
    tenant_id: str
    session_id: str
    failures: int  # how many runs in a row failed on it (0: none)


@dataclass(frozen=True, slots=True)
class AppendedTurn:
    turn: Turn
    session: SessionRecord  # as it is after the append
    replayed: bool  # the idempotency key was used before: nothing was appended


def require_open_to_agent(session: SessionRecord, agent_id: str) -> SessionRecord:
    """The session, if a call naming `agent_id` may read or extend it: an agent's session is its own
    (its turns become memories of that agent, private ones included); a session of no agent is
    anyone's, and a call naming no agent (a tenant-wide key) reaches every session. Otherwise NotFound,
    as for a session that does not exist: another agent's session ids are not told apart from unknown
    ones. (store/sessions.py applies the same rule in the statement that appends a turn.)"""
    if agent_id and session.agent_id not in ("", agent_id):
        raise NotFound("session", session.session_id)
    return session
