"""The erasure side of the in-memory store (ErasureLog, pipelines/ports.py): erasure records and
store/erasure.py's batches over an InMemoryMemoryStore's memories (one database: its `failing` fails these
calls too), with the sessions, turns and kept answers an erasure removes besides them. It keeps no change
feed, recall audit or BM25 statistics, so their scrubbing has nothing to do here (tests/rpc checks it
against PostgreSQL)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from hindsight_server.domain.errors import NotFound
from hindsight_server.domain.model import (
    BatchRemoved,
    ErasureKind,
    ErasureRecord,
    ErasureScope,
    JsonValue,
    Memory,
    Tier,
)
from hindsight_server.store.erasure import SESSIONS_PER_BATCH
from tests.support.fakes.memory_store import InMemoryMemoryStore


@dataclass
class StoredSession:
    subject: str
    turns: dict[int, str]  # by turn index
    summary: str | None = None


def _text_of(value: JsonValue) -> str | None:
    """jsonb's ->>: a string as it is, any other value as JSON writes it, NULL for a missing one."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _number(value: JsonValue) -> float | None:
    """A JSON number's value (jsonb_typeof 'number'); None for any other value."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _said_at(memory: Memory) -> tuple[str, int] | None:
    """(session, turn) of a memory taken from a turn (store/erasure.py _turns_said)."""
    session, turn = memory.provenance.get("session_id"), _text_of(memory.provenance.get("turn"))
    if not isinstance(session, str) or not session or turn is None or not turn.isdigit():
        return None
    return session, int(turn)


def _spans(memory: Memory, turn: int) -> bool:
    """The memory was kept of this turn: it is the turn's own, or a summary or episode whose span
    [first, last] of turns holds it."""
    if _text_of(memory.provenance.get("turn")) == str(turn):
        return True
    span = memory.provenance.get("turns")
    if not isinstance(span, list) or len(span) < 2:
        return False
    first, last = _number(span[0]), _number(span[1])
    return first is not None and last is not None and first <= turn <= last


@dataclass
class InMemoryErasureStore:
    memory_store: InMemoryMemoryStore = field(default_factory=InMemoryMemoryStore)  # the memories erased
    erasures: dict[tuple[str, str], ErasureRecord] = field(default_factory=dict)  # by (tenant, id)
    heartbeats: dict[tuple[str, str], datetime] = field(default_factory=dict)
    sessions: dict[str, dict[str, StoredSession]] = field(default_factory=dict)  # by tenant, by id
    replies: dict[str, list[bytes]] = field(default_factory=dict)  # answers kept for retries, by tenant

    def add_session(
        self,
        tenant_id: str,
        session_id: str,
        subject: str,
        turns: Mapping[int, str],
        summary: str | None = None,
    ) -> None:
        self.sessions.setdefault(tenant_id, {})[session_id] = StoredSession(subject, dict(turns), summary)

    def add_reply(self, tenant_id: str, response: bytes) -> None:
        self.replies.setdefault(tenant_id, []).append(response)

    async def begin(
        self, scope: ErasureScope, reason: str, requested_by: str, request_id: str, now: datetime
    ) -> ErasureRecord:
        self.memory_store._answer()
        record = ErasureRecord(str(uuid.uuid4()), scope, "running", now, None, 0, 0, 0, 0)
        self.erasures[(scope.tenant_id, record.id)] = record
        self.heartbeats[(scope.tenant_id, record.id)] = now
        return record

    async def get(self, tenant_id: str, erasure_id: str) -> ErasureRecord:
        self.memory_store._answer()
        record = self.erasures.get((tenant_id, erasure_id))
        if record is None:
            raise NotFound("erasure", erasure_id)
        return record

    async def stale(self, heartbeat_before: datetime, limit: int) -> list[ErasureRecord]:
        self.memory_store._answer()
        left = [
            (self.heartbeats[key], record)
            for key, record in self.erasures.items()
            if record.state == "running" and self.heartbeats[key] < heartbeat_before
        ]
        return [record for _, record in sorted(left, key=lambda pair: pair[0])[:limit]]

    async def finished_since(self, after: datetime | None) -> tuple[datetime | None, list[str]]:
        self.memory_store._answer()
        done = [
            r
            for r in self.erasures.values()
            if r.state == "done" and r.finished_at is not None and (after is None or r.finished_at > after)
        ]
        latest = max((r.finished_at for r in done if r.finished_at is not None), default=None)
        return latest, [] if after is None else sorted({r.scope.tenant_id for r in done})

    async def remove_batch(self, erasure: ErasureRecord, limit: int, now: datetime) -> BatchRemoved:
        self.memory_store._answer()
        key = (erasure.scope.tenant_id, erasure.id)
        if self.erasures[key].state == "done":
            return BatchRemoved(finished=True)
        removing = self._scope_memories(erasure.scope, limit)
        removed = (
            self._remove_memories(erasure.scope.tenant_id, removing)
            if removing
            else self._remove_sessions_and_replies(erasure.scope)
        )
        record = self.erasures[key]
        self.erasures[key] = replace(
            record,
            memories=record.memories + removed.memories,
            sessions=record.sessions + removed.sessions,
            turns=record.turns + removed.turns,
            replies=record.replies + removed.replies,
            state="done" if removed.finished else record.state,
            finished_at=now if removed.finished else record.finished_at,
        )
        self.heartbeats[key] = now
        return removed

    def _scope_memories(self, scope: ErasureScope, limit: int) -> list[Memory]:
        """Up to `limit` memories of the scope, everything linked to them, and what the sessions kept of
        the turns they were taken from (with what is linked to that)."""
        mine = self.memory_store.of_tenant(scope.tenant_id)
        if scope.kind is ErasureKind.SUBJECT:
            mine = [m for m in mine if m.subject == scope.subject]
        elif scope.kind is ErasureKind.MEMORIES:
            mine = [m for m in mine if m.id in scope.memory_ids]
        removing = self._linked(scope.tenant_id, [m.id for m in mine[:limit]], taken=set())
        said = [at for at in map(_said_at, removing) if at is not None]
        taken = {m.id for m in removing}
        kept_of_turns = [
            m.id
            for m in self.memory_store.of_tenant(scope.tenant_id)
            if m.tier in (Tier.WORKING, Tier.EPISODIC)
            and m.id not in taken
            and any(m.session_id == session and _spans(m, turn) for session, turn in said)
        ]
        return removing + self._linked(scope.tenant_id, kept_of_turns, taken)

    def _linked(self, tenant_id: str, start: Iterable[str], taken: set[str]) -> list[Memory]:
        """The memories `start` names and every memory linked to them, to any depth: versions both ways
        and what was derived from them; less those already taken."""
        tenant = self.memory_store.memories.get(tenant_id, {})
        reached = {memory_id for memory_id in start if memory_id in tenant}
        frontier = set(reached)
        while frontier:
            frontier = {
                m.id
                for m in tenant.values()
                if m.id not in reached
                and (
                    m.supersedes in frontier or m.superseded_by in frontier or frontier & set(m.derived_from)
                )
            }
            reached |= frontier
        return [m for m in tenant.values() if m.id in reached and m.id not in taken]

    def _remove_memories(self, tenant_id: str, removing: list[Memory]) -> BatchRemoved:
        gone = {m.id for m in removing}
        tenant = self.memory_store.memories[tenant_id]
        for memory_id in gone:
            del tenant[memory_id]
            for by_id in self.memory_store.vectors.values():
                by_id.pop(memory_id, None)
        for memory in list(tenant.values()):  # links from memories that stay lose their target
            if memory.supersedes in gone or memory.superseded_by in gone:
                tenant[memory.id] = replace(
                    memory,
                    supersedes=None if memory.supersedes in gone else memory.supersedes,
                    superseded_by=None if memory.superseded_by in gone else memory.superseded_by,
                )
        turns = 0
        sessions = self.sessions.get(tenant_id, {})
        for session_id, turn in {at for at in map(_said_at, removing) if at is not None}:
            session = sessions.get(session_id)
            if session is None:
                continue
            turns += session.turns.pop(turn, None) is not None
            session.summary = None  # it may repeat the turn: made again from the turns that are left
        replies = self._remove_replies(tenant_id, [memory_id.encode() for memory_id in gone])
        return BatchRemoved(memories=len(removing), turns=turns, replies=replies)

    def _remove_sessions_and_replies(self, scope: ErasureScope) -> BatchRemoved:
        if scope.kind is ErasureKind.MEMORIES:
            return BatchRemoved(finished=True)
        sessions = self.sessions.get(scope.tenant_id, {})
        picked = [
            session_id
            for session_id, session in sessions.items()
            if scope.kind is ErasureKind.TENANT or session.subject == scope.subject
        ][:SESSIONS_PER_BATCH]
        if picked:
            turns = sum(len(sessions.pop(session_id).turns) for session_id in picked)
            return BatchRemoved(sessions=len(picked), turns=turns)
        if scope.kind is ErasureKind.TENANT:
            replies = len(self.replies.get(scope.tenant_id, []))
            self.replies[scope.tenant_id] = []
        else:
            replies = self._remove_replies(scope.tenant_id, [scope.subject.encode()])
        return BatchRemoved(replies=replies, finished=True)

    def _remove_replies(self, tenant_id: str, needles: list[bytes]) -> int:
        """The kept answers that quote any of `needles` (an empty one quotes nothing)."""
        kept = self.replies.get(tenant_id, [])
        named = [reply for reply in kept if any(needle and needle in reply for needle in needles)]
        self.replies[tenant_id] = [reply for reply in kept if reply not in named]
        return len(named)
