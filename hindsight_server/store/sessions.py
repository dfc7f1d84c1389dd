"""SessionStore: the SQL of sessions and their turns (tables `sessions` and `session_turns`).

A turn is appended under the session row's lock (the upsert that numbers it), so concurrent appends to
one session get consecutive indexes and a retried append with the same idempotency key is not counted
twice. Every statement filters on tenant_id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import asyncpg

from hindsight_server.domain.conversation import Role, Turn, session_subject_mismatch
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
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.job_failures import BACKING_OFF

__all__ = ["SessionStore"]

_SESSION_COLUMNS = (
    "tenant_id, session_id, subject, agent_id, turn_count, created_at, last_turn_at, summary, "
    "summary_memory_id, consolidated_turn"
)


class SessionStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def append_turn(self, turn: TurnInput, now: datetime) -> AppendedTurn:
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            if turn.idempotency_key:
                replay = await connection.fetchrow(
                    """SELECT turn_index, role, text, entities, occurred_at FROM session_turns
                       WHERE tenant_id = $1 AND session_id = $2 AND idempotency_key = $3""",
                    turn.tenant_id,
                    turn.session_id,
                    turn.idempotency_key,
                )
                if replay is not None:
                    if (replay["role"], replay["text"]) != (turn.role.value, turn.text):
                        key = turn.idempotency_key
                        message = f"idempotency_key {key!r} was used for another turn; use a new key"
                        raise FailedPrecondition.of(
                            "IDEMPOTENCY_KEY",
                            f"idempotency_keys/{key}",
                            message,
                            cause="IDEMPOTENCY_KEY_REUSED",
                        )
                    session = require_open_to_agent(
                        await _session(connection, turn.tenant_id, turn.session_id), turn.agent_id
                    )
                    if turn.subject_fixed and session.subject != turn.subject:
                        raise session_subject_mismatch(turn.session_id, turn.subject)
                    return AppendedTurn(_turn(replay), session, replayed=True)
            # The upsert numbers the turn under the session row's lock.
            row = await connection.fetchrow(
                f"""INSERT INTO sessions AS s (tenant_id, session_id, subject, agent_id, turn_count,
                                               created_at, last_turn_at)
                    VALUES ($1, $2, $3, $4, 1, $5, $6)
                    ON CONFLICT (tenant_id, session_id) DO UPDATE
                    SET turn_count = s.turn_count + 1,
                        last_turn_at = greatest(s.last_turn_at, EXCLUDED.last_turn_at),
                        subject = CASE WHEN s.subject = '' THEN EXCLUDED.subject ELSE s.subject END,
                        agent_id = CASE WHEN s.agent_id = '' THEN EXCLUDED.agent_id ELSE s.agent_id END
                    WHERE (NOT $7 OR s.subject = EXCLUDED.subject)
                      AND ($4 = '' OR s.agent_id IN ('', $4))
                    RETURNING {_SESSION_COLUMNS}""",
                turn.tenant_id,
                turn.session_id,
                turn.subject,
                turn.agent_id,
                now,
                turn.occurred_at,
                turn.subject_fixed,
            )
            if row is None:  # the session is there, and another agent's or another subject's
                existing = await _session(connection, turn.tenant_id, turn.session_id)
                require_open_to_agent(existing, turn.agent_id)
                raise session_subject_mismatch(turn.session_id, turn.subject)
            session = _record(row)
            await connection.execute(
                """INSERT INTO session_turns (tenant_id, session_id, turn_index, role, text, entities,
                                              occurred_at, idempotency_key, recorded_at)
                   VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9)""",
                turn.tenant_id,
                turn.session_id,
                session.turn_count,
                turn.role.value,
                turn.text,
                json.dumps(turn.entities, ensure_ascii=False),
                turn.occurred_at,
                turn.idempotency_key or None,
                now,
            )
        appended = Turn(session.turn_count, turn.role, turn.text, turn.occurred_at, dict(turn.entities))
        return AppendedTurn(appended, session, replayed=False)

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        async with translate_errors(), self._pool.acquire() as connection:
            return await _session(connection, tenant_id, session_id)

    async def turns(self, tenant_id: str, session_id: str, first: int, last: int | None = None) -> list[Turn]:
        """The turns with first <= index (<= last), in order."""
        async with translate_errors():
            rows = await self._pool.fetch(
                """SELECT turn_index, role, text, entities, occurred_at FROM session_turns
                   WHERE tenant_id = $1 AND session_id = $2 AND turn_index >= $3
                     AND ($4::bigint IS NULL OR turn_index <= $4)
                   ORDER BY turn_index""",
                tenant_id,
                session_id,
                first,
                last,
            )
        return [_turn(row) for row in rows]

    async def link_turn_memory(self, tenant_id: str, session_id: str, index: int, memory_id: str) -> None:
        async with translate_errors():
            await self._pool.execute(
                """UPDATE session_turns SET memory_id = $4
                   WHERE tenant_id = $1 AND session_id = $2 AND turn_index = $3""",
                tenant_id,
                session_id,
                index,
                memory_id,
            )

    async def save_summary(
        self, tenant_id: str, session_id: str, summary: SessionSummary, memory_id: str, summarizer: str
    ) -> None:
        """Stores a refreshed summary unless a newer one (covering more turns) is already there."""
        async with translate_errors():
            await self._pool.execute(
                """UPDATE sessions
                   SET summary = $3::jsonb, summary_turn = $4, summary_updated_at = $5, summary_memory_id = $6
                   WHERE tenant_id = $1 AND session_id = $2 AND summary_turn <= $4""",
                tenant_id,
                session_id,
                json.dumps({**summary_to_json(summary), "summarizer": summarizer}, ensure_ascii=False),
                summary.turn_count,
                summary.updated_at,
                memory_id,
            )

    async def mark_consolidated(
        self, session_id: str, through_turn: int, episode: Memory, now: datetime
    ) -> bool:
        """Records that turns up to `through_turn` are in the episode, with its `consolidated` event;
        False when a run already did."""
        async with translate_errors():
            done = await self._pool.fetchval(
                """WITH changed AS (
                       UPDATE sessions SET consolidated_turn = $3
                       WHERE tenant_id = $1 AND session_id = $2 AND consolidated_turn < $3
                       RETURNING tenant_id),
                   feed AS (
                       INSERT INTO change_events (tenant_id, type, at, memory_id, subject, kind, visibility,
                                                  agent_id, version, fields, session_id)
                       SELECT tenant_id, 'consolidated', $4, $5, $6, $7, $8, $9, $10,
                              '{consolidated_turn}', $2
                       FROM changed)
                   SELECT true FROM changed""",
                episode.tenant_id,
                session_id,
                through_turn,
                now,
                episode.id,
                episode.subject,
                episode.kind.value,
                episode.visibility.value,
                episode.agent_id,
                episode.version,
            )
        return bool(done)

    async def idle_sessions(self, idle_since: datetime, limit: int, now: datetime) -> list[IdleSession]:
        """Sessions with turns not yet in an episode and no turn since `idle_since`, the longest idle
        first (a maintenance path across tenants), leaving out those backing off from a failure."""
        backing_off = BACKING_OFF.format(job="$3", tenant="s.tenant_id", item="s.session_id", now="$4")
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT s.tenant_id, s.session_id,
                           coalesce((SELECT f.failures FROM job_item_failures f
                                     WHERE f.job = $3 AND f.tenant_id = s.tenant_id
                                       AND f.item = s.session_id), 0) AS failures
                    FROM sessions s
                    WHERE s.turn_count > s.consolidated_turn AND s.last_turn_at <= $1
                      AND NOT {backing_off}
                    ORDER BY s.last_turn_at LIMIT $2""",
                idle_since,
                limit,
                CONSOLIDATE_JOB,
                now,
            )
        return [IdleSession(row["tenant_id"], row["session_id"], row["failures"]) for row in rows]

    async def consolidated_turn_memories(
        self, tenant_id: str, session_id: str, keep_last: int, consolidated_turn: int
    ) -> list[str]:
        """The working memories of turns that are both in an episode and older than the last
        `keep_last` turns: working memory keeps the last turns only, and nothing leaves it unsaved."""
        async with translate_errors():
            rows = await self._pool.fetch(
                """SELECT t.memory_id FROM session_turns t JOIN sessions s USING (tenant_id, session_id)
                   WHERE t.tenant_id = $1 AND t.session_id = $2 AND t.memory_id IS NOT NULL
                     AND t.turn_index <= least($4, s.turn_count - $3)""",
                tenant_id,
                session_id,
                keep_last,
                consolidated_turn,
            )
        return [str(row["memory_id"]) for row in rows]


async def _session(connection: asyncpg.Connection, tenant_id: str, session_id: str) -> SessionRecord:
    row = await connection.fetchrow(
        f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE tenant_id = $1 AND session_id = $2",
        tenant_id,
        session_id,
    )
    if row is None:
        raise NotFound("session", session_id)
    return _record(row)


def _record(row: Mapping[str, Any]) -> SessionRecord:
    summary = None if row["summary"] is None else _json(row["summary"])
    return SessionRecord(
        tenant_id=row["tenant_id"],
        session_id=row["session_id"],
        subject=row["subject"],
        agent_id=row["agent_id"],
        turn_count=row["turn_count"],
        created_at=row["created_at"],
        last_turn_at=row["last_turn_at"],
        summary=None if summary is None else summary_from_json(summary),
        summary_memory_id=str(row["summary_memory_id"]) if row["summary_memory_id"] else None,
        consolidated_turn=row["consolidated_turn"],
        summarizer=(summary or {}).get("summarizer", "rules"),
    )


def _turn(row: Mapping[str, Any]) -> Turn:
    return Turn(row["turn_index"], Role(row["role"]), row["text"], row["occurred_at"], _json(row["entities"]))


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def summary_to_json(summary: SessionSummary) -> dict[str, Any]:
    return {
        "goal": summary.goal,
        "intent": summary.intent,
        "confirmed": dict(summary.confirmed),
        "open_items": list(summary.open_items),
        "questions": list(summary.questions),
        "decision": summary.decision,
        "language": summary.language,
        "turn_count": summary.turn_count,
        "text": summary.text,
        "updated_at": None if summary.updated_at is None else summary.updated_at.isoformat(),
    }


def summary_from_json(value: Mapping[str, Any]) -> SessionSummary:
    updated_at = value.get("updated_at")
    return SessionSummary(
        goal=value.get("goal", ""),
        intent=value.get("intent", ""),
        confirmed=dict(value.get("confirmed", {})),
        open_items=tuple(value.get("open_items", ())),
        questions=tuple(value.get("questions", ())),
        decision=value.get("decision", ""),
        language=value.get("language", "en"),
        turn_count=int(value.get("turn_count", 0)),
        text=value.get("text", ""),
        updated_at=None if updated_at is None else datetime.fromisoformat(updated_at),
    )
