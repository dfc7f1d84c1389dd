"""An in-memory session store behind the session pipeline's ports (SessionTurns, pipelines/ports.py): the
sessions and their numbered turns per (tenant, session), with store/sessions.py's rules where the pipeline
depends on them (a reused idempotency key appends nothing, a session fixed to a subject refuses another,
another agent's session is not found, a summary covering fewer turns never replaces one covering more, a
range consolidated once, idle sessions backing off from a failure left out). The SQL itself is tested
against PostgreSQL in tests/rpc and tests/lifecycle; this is for the pipeline's logic."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from hindsight_server.domain.conversation import Turn, session_subject_mismatch
from hindsight_server.domain.errors import FailedPrecondition, NotFound
from hindsight_server.domain.model import Memory
from hindsight_server.domain.session_summary import SessionSummary
from hindsight_server.domain.sessions import (
    CONSOLIDATE_JOB,
    AppendedTurn,
    IdleSession,
    SessionRecord,
    TurnInput,
    require_open_to_agent,
)
from tests.support.fakes.lifecycle_store import RecordedFailures

SessionKey = tuple[str, str]  # (tenant, session)


@dataclass
class StoredTurn:
    turn: Turn
    idempotency_key: str
    memory_id: str | None = None  # the working memory it became


@dataclass(frozen=True, slots=True)
class Consolidated:
    """A `consolidated` change event: the session's turns up to `through_turn` are in `episode_id`."""

    tenant_id: str
    session_id: str
    through_turn: int
    episode_id: str


@dataclass
class InMemorySessionStore:
    failures: RecordedFailures = field(default_factory=RecordedFailures)  # the consolidate job's
    sessions: dict[SessionKey, SessionRecord] = field(default_factory=dict)
    turns_of: dict[SessionKey, list[StoredTurn]] = field(default_factory=dict)
    consolidations: list[Consolidated] = field(default_factory=list)  # the change events, in order
    # Sessions whose every call raises this: a session the consolidate job cannot get through.
    broken: dict[str, Exception] = field(default_factory=dict)

    def _answer(self, session_id: str) -> None:
        if session_id in self.broken:
            raise self.broken[session_id]

    async def append_turn(self, turn: TurnInput, now: datetime) -> AppendedTurn:
        self._answer(turn.session_id)
        key = (turn.tenant_id, turn.session_id)
        replay = next(
            (
                stored
                for stored in self.turns_of.get(key, [])
                if turn.idempotency_key and stored.idempotency_key == turn.idempotency_key
            ),
            None,
        )
        if replay is not None:
            if (replay.turn.role, replay.turn.text) != (turn.role, turn.text):
                name = turn.idempotency_key
                raise FailedPrecondition.of(
                    "IDEMPOTENCY_KEY",
                    f"idempotency_keys/{name}",
                    f"idempotency_key {name!r} was used for another turn; use a new key",
                    cause="IDEMPOTENCY_KEY_REUSED",
                )
            session = require_open_to_agent(self.sessions[key], turn.agent_id)
            if turn.subject_fixed and session.subject != turn.subject:
                raise session_subject_mismatch(turn.session_id, turn.subject)
            return AppendedTurn(replay.turn, session, replayed=True)
        session = self._numbered(self.sessions.get(key), turn, now)
        self.sessions[key] = session
        appended = Turn(session.turn_count, turn.role, turn.text, turn.occurred_at, dict(turn.entities))
        self.turns_of.setdefault(key, []).append(StoredTurn(appended, turn.idempotency_key))
        return AppendedTurn(appended, session, replayed=False)

    @staticmethod
    def _numbered(existing: SessionRecord | None, turn: TurnInput, now: datetime) -> SessionRecord:
        """The session row after the upsert that numbers the turn: a subject or agent once set stays."""
        if existing is None:
            return SessionRecord(
                tenant_id=turn.tenant_id,
                session_id=turn.session_id,
                subject=turn.subject,
                agent_id=turn.agent_id,
                turn_count=1,
                created_at=now,
                last_turn_at=turn.occurred_at,
                summary=None,
                summary_memory_id=None,
                consolidated_turn=0,
            )
        require_open_to_agent(existing, turn.agent_id)
        if turn.subject_fixed and existing.subject != turn.subject:
            raise session_subject_mismatch(turn.session_id, turn.subject)
        return replace(
            existing,
            turn_count=existing.turn_count + 1,
            last_turn_at=max(existing.last_turn_at, turn.occurred_at),
            subject=existing.subject or turn.subject,
            agent_id=existing.agent_id or turn.agent_id,
        )

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        self._answer(session_id)
        session = self.sessions.get((tenant_id, session_id))
        if session is None:
            raise NotFound("session", session_id)
        return session

    async def turns(self, tenant_id: str, session_id: str, first: int, last: int | None = None) -> list[Turn]:
        self._answer(session_id)
        return [
            stored.turn
            for stored in self.turns_of.get((tenant_id, session_id), [])
            if stored.turn.index >= first and (last is None or stored.turn.index <= last)
        ]

    async def link_turn_memory(self, tenant_id: str, session_id: str, index: int, memory_id: str) -> None:
        self._answer(session_id)
        for stored in self.turns_of.get((tenant_id, session_id), []):
            if stored.turn.index == index:
                stored.memory_id = memory_id

    async def save_summary(
        self, tenant_id: str, session_id: str, summary: SessionSummary, memory_id: str, summarizer: str
    ) -> None:
        self._answer(session_id)
        session = self.sessions.get((tenant_id, session_id))
        covered = 0 if session is None or session.summary is None else session.summary.turn_count
        if session is not None and covered <= summary.turn_count:
            self.sessions[(tenant_id, session_id)] = replace(
                session, summary=summary, summary_memory_id=memory_id, summarizer=summarizer
            )

    async def mark_consolidated(
        self, session_id: str, through_turn: int, episode: Memory, now: datetime
    ) -> bool:
        self._answer(session_id)
        key = (episode.tenant_id, session_id)
        session = self.sessions.get(key)
        if session is None or session.consolidated_turn >= through_turn:
            return False
        self.sessions[key] = replace(session, consolidated_turn=through_turn)
        self.consolidations.append(Consolidated(episode.tenant_id, session_id, through_turn, episode.id))
        return True

    async def idle_sessions(self, idle_since: datetime, limit: int, now: datetime) -> list[IdleSession]:
        idle = sorted(
            (
                s
                for s in self.sessions.values()
                if s.turn_count > s.consolidated_turn
                and s.last_turn_at <= idle_since
                and not self.failures.backing_off(CONSOLIDATE_JOB, s.tenant_id, s.session_id, now)
            ),
            key=lambda s: s.last_turn_at,
        )
        return [
            IdleSession(
                s.tenant_id,
                s.session_id,
                self.failures.failures.get((CONSOLIDATE_JOB, s.tenant_id, s.session_id), 0),
            )
            for s in idle[:limit]
        ]

    async def consolidated_turn_memories(
        self, tenant_id: str, session_id: str, keep_last: int, consolidated_turn: int
    ) -> list[str]:
        self._answer(session_id)
        session = self.sessions.get((tenant_id, session_id))
        if session is None:
            return []
        through = min(consolidated_turn, session.turn_count - keep_last)
        return [
            stored.memory_id
            for stored in self.turns_of.get((tenant_id, session_id), [])
            if stored.memory_id is not None and stored.turn.index <= through
        ]
