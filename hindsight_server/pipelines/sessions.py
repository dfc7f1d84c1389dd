"""Sessions: conversation turns -> working memory, remembered facts, the session summary, and episodes.

AppendTurn, in order, each step safe to repeat (idempotency keys name the session and turn):
1. the turn is numbered and stored (store/sessions.py);
2. it becomes a working memory (tier working: recall's session channel sees it; its 24 h TTL ends it);
3. a user turn goes through remember-or-not (domain/remember.py): an explicit, stable preference or fact
   becomes a memory at once (merged or superseding through the conflict rules); an unsure one waits as
   PENDING; chit-chat and one-off parameters stay in the session only;
4. the summary is recomputed from the stored one and the new turns (domain/session_summary.py) and kept
   when refresh_decision says so (every 3 turns, or a key entity changed). Each kept summary is a new
   version of the session's summary memory, so History and as_of show what was settled when;
5. consolidation (domain/consolidation.py): every 5 turns or on an explicit event ("task done", "记住这个")
   the turns since the last episode become one episodic record; working memory then keeps the last turns
   only. Idle sessions are consolidated by the `consolidate` job (consolidate_idle).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.consolidation import (
    ConsolidationEvent,
    ConsolidationPolicy,
    build_episode,
    consolidation_due,
    explicit_event,
)
from hindsight_server.domain.conversation import Role, Turn, require_text, session_subject_mismatch
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.lifecycle import initial_status
from hindsight_server.domain.model import (
    CommitPosition,
    Entities,
    JsonValue,
    Kind,
    Memory,
    MemoryDraft,
    Tier,
)
from hindsight_server.domain.policy import Limits, WritePolicy
from hindsight_server.domain.remember import decide
from hindsight_server.domain.session_summary import SessionSummary, refresh_decision, summarize
from hindsight_server.domain.sessions import (
    CONSOLIDATE_JOB,
    IdleSession,
    SessionRecord,
    TurnInput,
    require_open_to_agent,
)
from hindsight_server.domain.validation import validate_draft, validate_tenant
from hindsight_server.offload import run_pure
from hindsight_server.pipelines.item_isolation import ItemIsolation, JobItem
from hindsight_server.pipelines.ports import SessionReads, SessionTurns, SummaryWriter
from hindsight_server.pipelines.write import WritePipeline
from hindsight_server.store.routing import PrimaryOnly, ReadRoute

__all__ = ["AppendResult", "SessionPipeline", "SessionSettings", "SessionView", "TurnRequest"]


@dataclass(frozen=True, slots=True)
class SessionSettings:
    limits: Limits
    write: WritePolicy
    keep_turns: int = 5  # docs/design.md: working memory keeps the last 5 turns (plus the summary)
    refresh_every_turns: int = 3  # docs/design.md: refreshed every 3 turns or on a key entity change
    consolidation: ConsolidationPolicy = field(default_factory=ConsolidationPolicy)
    idle_batch: int = 100  # sessions per run of the consolidate job
    # A turn's own memory and the summary are embedded inline (the turn's writer waits for the
    # encoders) instead of by the background worker.
    embed_turns_inline: bool = False


@dataclass(frozen=True, slots=True)
class TurnRequest:
    tenant_id: str
    session_id: str
    text: str
    role: Role = Role.USER
    subject: str = ""
    agent_id: str = ""
    entities: Entities = field(default_factory=dict)
    occurred_at: datetime | None = None
    idempotency_key: str = ""
    expected_subject: str = ""  # only a session of this subject (or a new one); "" any


@dataclass(frozen=True, slots=True)
class SessionView:
    session_id: str
    subject: str
    summary: SessionSummary
    recent_turns: list[Turn]
    turn_count: int
    summarizer: str = "rules"


@dataclass(frozen=True, slots=True)
class AppendResult:
    turn: Turn
    view: SessionView
    summary_refreshed: bool
    remembered: list[Memory]
    episode: Memory | None


class SessionPipeline:
    def __init__(
        self,
        sessions: SessionTurns,
        writes: WritePipeline,
        settings: SessionSettings,
        clock: Clock,
        summarizer: SummaryWriter | None = None,
        *,
        isolation: ItemIsolation,
        reads: ReadRoute[SessionReads] | None = None,
    ) -> None:
        self._sessions = sessions  # the primary's: every turn is written there
        self._reads = reads or PrimaryOnly(sessions)  # Summarize, which may read from a replica
        self._writes = writes
        self._settings = settings
        self._clock = clock
        self._llm = summarizer
        self._isolation = isolation  # the consolidate job's sessions, one at a time

    async def append_turn(self, request: TurnRequest) -> AppendResult:
        now = self._clock()
        turn_input = self._validated(request, now)
        appended = await self._sessions.append_turn(turn_input, now)
        session, turn = appended.session, appended.turn
        if appended.replayed:
            return AppendResult(turn, await self._view(session), False, [], None)

        working = await self._write_turn(session, turn, now)
        await self._sessions.link_turn_memory(session.tenant_id, session.session_id, turn.index, working.id)
        remembered = await self._remember(session, turn, now) if turn.role is Role.USER else []
        recent = await self._recent_turns(session)
        current, refreshed, summarizer = await self._refresh_summary(session, recent, now)
        kept = current if refreshed else (session.summary or SessionSummary())
        summarizer = summarizer if refreshed else session.summarizer
        # The episode takes what was settled up to now, refreshed or not.
        session = replace(session, summary=current)
        decision = consolidation_due(
            turns_since_last=session.turn_count - session.consolidated_turn,
            last_turn_at=None,  # idle sessions are the consolidate job's
            now=now,
            event=explicit_event(turn),
            policy=self._settings.consolidation,
        )
        episode = await self._consolidate(session, decision.trigger, now) if decision.consolidate else None
        window = recent[-self._settings.keep_turns :]
        view = SessionView(session.session_id, session.subject, kept, window, session.turn_count, summarizer)
        return AppendResult(turn, view, refreshed, remembered, episode)

    async def summarize(
        self,
        tenant_id: str,
        session_id: str,
        read_after: CommitPosition | None = None,
        agent_id: str = "",
    ) -> SessionView:
        """The session's summary and working window; with `agent_id`, only a session of that agent or
        of none (another agent's: NotFound)."""
        validate_tenant(tenant_id, self._settings.limits)
        _require_session_id(session_id)

        async def view(sessions: SessionReads) -> SessionView:
            session = require_open_to_agent(await sessions.get(tenant_id, session_id), agent_id)
            return await self._view(session, sessions)

        return await self._reads.read(read_after, view)

    async def end_session(
        self, tenant_id: str, session_id: str, reason: str, expected_subject: str = "", agent_id: str = ""
    ) -> Memory | None:
        """Consolidates what the session said since its last episode (nothing new: None); with
        `expected_subject`, only a session of that subject; with `agent_id`, only one of that agent or
        of none."""
        validate_tenant(tenant_id, self._settings.limits)
        _require_session_id(session_id)
        session = require_open_to_agent(await self._sessions.get(tenant_id, session_id), agent_id)
        if expected_subject and session.subject != expected_subject:
            raise session_subject_mismatch(session_id, expected_subject)
        if session.turn_count <= session.consolidated_turn:
            return None
        trigger = reason.strip() or ConsolidationEvent.SESSION_END.value
        return await self._consolidate(session, trigger, self._clock())

    async def consolidate_idle(self, now: datetime) -> int:
        """The `consolidate` job: sessions idle for the policy's time with turns not in an episode yet.
        Each session on its own: one that fails waits out a backoff and the others go on."""
        idle_since = now - self._settings.consolidation.idle
        done = 0
        for idle in await self._sessions.idle_sessions(idle_since, self._settings.idle_batch, now):
            item = JobItem(CONSOLIDATE_JOB, idle.tenant_id, idle.session_id, idle.failures)
            episode = await self._isolation.run(item, partial(self._consolidate_idle, idle, now), now)
            done += episode is not None
        return done

    async def _consolidate_idle(self, idle: IdleSession, now: datetime) -> Memory | None:
        session = await self._sessions.get(idle.tenant_id, idle.session_id)
        return await self._consolidate(session, "idle", now)

    # ------------------------------------------------------------------------------------------ steps

    def _validated(self, request: TurnRequest, now: datetime) -> TurnInput:
        validate_tenant(request.tenant_id, self._settings.limits)
        _require_session_id(request.session_id)
        text = require_text(request.text)
        limit = self._settings.limits.max_content_bytes
        if len(text.encode()) > limit:
            raise InvalidArgument("text", f"is {len(text.encode())} bytes; the limit is {limit}")
        occurred_at = request.occurred_at or now
        subject = request.subject or request.expected_subject
        if request.expected_subject and subject != request.expected_subject:
            raise InvalidArgument("subject", "differs from expected_subject: send one of them, or the same")
        # The same checks as a written memory's (entities, subject, times, key lengths).
        validate_draft(
            MemoryDraft(
                tenant_id=request.tenant_id,
                content=text,
                tier=Tier.WORKING,
                kind=Kind.EVENT,
                subject=subject,
                agent_id=request.agent_id,
                session_id=request.session_id,
                entities=request.entities,
                occurred_at=occurred_at,
                idempotency_key=request.idempotency_key,
            ),
            self._settings.limits,
            now,
            prefix="",
            content_field="text",
        )
        return TurnInput(
            tenant_id=request.tenant_id,
            session_id=request.session_id,
            subject=subject,
            subject_fixed=bool(request.expected_subject),
            agent_id=request.agent_id,
            role=request.role,
            text=text,
            entities=dict(request.entities),
            occurred_at=occurred_at,
            idempotency_key=request.idempotency_key,
        )

    async def _write_turn(self, session: SessionRecord, turn: Turn, now: datetime) -> Memory:
        draft = _from_turn(session, turn, "turn", turn.text, Tier.WORKING, Kind.EVENT)
        memory = replace(self._writes.new_memory(draft, now), provenance=_provenance(session, turn))
        (outcome,) = await self._writes.commit(
            [memory], now, verbatim=True, inline=self._settings.embed_turns_inline
        )
        return outcome.memory

    async def _remember(self, session: SessionRecord, turn: Turn, now: datetime) -> list[Memory]:
        decision = await run_pure(len(turn.text), decide, turn.text)  # a 16 KB turn: tens of ms
        if not decision.keep:
            return []
        draft = _from_turn(
            session, turn, "remember", decision.content, decision.tier, decision.kind, decision.confidence
        )
        memory = self._writes.new_memory(draft, now)
        memory = replace(
            memory,
            status=initial_status(decision.confidence, self._settings.write),
            provenance={**_provenance(session, turn), "cue": decision.cue, "rule": decision.reason},
        )
        (outcome,) = await self._writes.commit([memory], now, verbatim=False)
        return [outcome.memory]

    async def _recent_turns(self, session: SessionRecord) -> list[Turn]:
        """The working window (the last keep_turns turns) and every turn the stored summary has not
        folded in yet."""
        covered = session.summary.turn_count if session.summary else 0
        first = max(1, min(covered + 1, session.turn_count - self._settings.keep_turns + 1))
        return await self._sessions.turns(session.tenant_id, session.session_id, first)

    async def _refresh_summary(
        self, session: SessionRecord, turns: list[Turn], now: datetime
    ) -> tuple[SessionSummary, bool, str]:
        """The summary after the new turns, whether it was kept (stored as the session's summary), and
        who wrote its text. The optional LLM words a kept summary; the rules decide what it says."""
        stored = session.summary
        current = await run_pure(_chars(turns), summarize, turns, stored, now=now)
        if not refresh_decision(stored, current, every_n_turns=self._settings.refresh_every_turns).refresh:
            return current, False, "rules"
        summarizer = "rules"
        if self._llm is not None and (worded := await self._llm.write(turns, current)):
            current, summarizer = replace(current, text=worded), self._llm.name
        draft = MemoryDraft(
            tenant_id=session.tenant_id,
            content=current.text or current.goal or turns[-1].text,
            tier=Tier.WORKING,
            kind=Kind.SUMMARY,
            subject=session.subject,
            agent_id=session.agent_id,
            session_id=session.session_id,
            intent=current.intent,
            entities=dict(current.confirmed),
            idempotency_key=f"summary:{session.session_id}:{current.turn_count}",
        )
        memory = replace(
            self._writes.new_memory(draft, now),
            provenance={
                "session_id": session.session_id,
                "turns": [1, current.turn_count],
                "rule": "summary",
            },
        )
        inline = self._settings.embed_turns_inline
        if session.summary_memory_id is None:
            (outcome,) = await self._writes.commit([memory], now, verbatim=True, inline=inline)
        else:
            outcome = await self._writes.supersede(
                memory, session.summary_memory_id, "the session summary was refreshed", now, inline=inline
            )
        await self._sessions.save_summary(
            session.tenant_id, session.session_id, current, outcome.memory.id, summarizer
        )
        return current, True, summarizer

    async def _consolidate(self, session: SessionRecord, trigger: str, now: datetime) -> Memory | None:
        """One episodic record of the turns since the last one; then working memory drops the turns that
        are both in an episode and older than the window. Run twice, it writes the episode once (its
        idempotency key names the turn range) and marks the range once."""
        first = session.consolidated_turn + 1
        turns = await self._sessions.turns(session.tenant_id, session.session_id, first, session.turn_count)
        if not turns:
            return None
        summary = session.summary
        if summary is None:
            summary = await run_pure(_chars(turns), summarize, turns, None, now=now)
        episode = build_episode(
            turns,
            summary,
            session_id=session.session_id,
            agent_id=session.agent_id,
            subject=session.subject,
            trigger=trigger,
        )
        draft = episode.draft(session.tenant_id)
        memory = replace(
            self._writes.new_memory(draft, now),
            provenance={
                "session_id": session.session_id,
                "turns": [turns[0].index, turns[-1].index],
                "agent_id": session.agent_id,
                "subject": session.subject,
                "trigger": trigger,
            },
        )
        (outcome,) = await self._writes.commit([memory], now, verbatim=False)
        await self._sessions.mark_consolidated(session.session_id, turns[-1].index, outcome.memory, now)
        expired = await self._sessions.consolidated_turn_memories(
            session.tenant_id, session.session_id, self._settings.keep_turns, turns[-1].index
        )
        await self._writes.expire_now(session.tenant_id, expired)
        return outcome.memory

    async def _view(self, session: SessionRecord, sessions: SessionReads | None = None) -> SessionView:
        first = max(1, session.turn_count - self._settings.keep_turns + 1)
        recent = await (sessions or self._sessions).turns(session.tenant_id, session.session_id, first)
        return SessionView(
            session.session_id,
            session.subject,
            session.summary or SessionSummary(),
            recent,
            session.turn_count,
            session.summarizer,
        )


def _chars(turns: list[Turn]) -> int:
    return sum(len(turn.text) for turn in turns)


def _require_session_id(session_id: str) -> None:
    if not session_id.strip():
        raise InvalidArgument("session_id", "required")


def _from_turn(
    session: SessionRecord,
    turn: Turn,
    purpose: str,
    content: str,
    tier: Tier,
    kind: Kind,
    confidence: float = 1.0,
) -> MemoryDraft:
    """A memory a turn gives rise to; its idempotency key names the purpose, session and turn, so an
    append run again writes it once."""
    return MemoryDraft(
        tenant_id=session.tenant_id,
        content=content,
        tier=tier,
        kind=kind,
        subject=session.subject,
        agent_id=session.agent_id,
        session_id=session.session_id,
        entities=turn.entities,
        confidence=confidence,
        occurred_at=turn.occurred_at,
        idempotency_key=f"{purpose}:{session.session_id}:{turn.index}",
    )


def _provenance(session: SessionRecord, turn: Turn) -> dict[str, JsonValue]:
    return {
        "session_id": session.session_id,
        "turn": turn.index,
        "role": turn.role.value,
        "agent_id": session.agent_id,
        "subject": session.subject,
    }
