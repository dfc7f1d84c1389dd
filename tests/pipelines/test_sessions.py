"""The session pipeline on the in-memory stores (tests/support/fakes): what a turn becomes (a numbered
turn, working memory, a remembered or pending memory, a summary version, an episode), replays and subject
rules, the summary's refreshes and wording, consolidation by turns, event, end and idleness, and the
consolidate job going on past a session that fails. The SQL behind the same calls runs against
PostgreSQL in tests/rpc/test_sessions.py and tests/lifecycle/test_consolidate_job.py."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.conversation import Role
from hindsight_server.domain.errors import FailedPrecondition, HindsightError, InvalidArgument, NotFound
from hindsight_server.domain.model import CommitPosition, EmbeddingState, Kind, Memory, Status, Tier
from hindsight_server.domain.policy import Limits, TtlPolicy, WritePolicy
from hindsight_server.domain.sessions import CONSOLIDATE_JOB
from hindsight_server.pipelines.item_isolation import ItemIsolation
from hindsight_server.pipelines.ports import SessionReads, SummaryWriter
from hindsight_server.pipelines.sessions import AppendResult, SessionPipeline, SessionSettings, TurnRequest
from hindsight_server.pipelines.write import WritePipeline, WriteSettings
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.inference import FakeInferenceTier
from tests.support.fakes.memory_store import InMemoryMemoryStore
from tests.support.fakes.read_route import LaggingReplicaRoute
from tests.support.fakes.session_store import InMemorySessionStore
from tests.support.fakes.summarizer import ScriptedSummarizer

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
IDLE = timedelta(seconds=121)  # past the consolidation policy's 120 s
REPLAYED = CommitPosition(database=1, lsn=10)


@dataclass
class Sessions:
    pipeline: SessionPipeline
    store: InMemorySessionStore
    memories: InMemoryMemoryStore
    clock: FakeClock

    async def say(self, text: str, **fields: Any) -> AppendResult:
        request: dict[str, Any] = {"tenant_id": "acme", "session_id": "s1", "subject": "user-7"} | fields
        return await self.pipeline.append_turn(TurnRequest(text=text, **request))

    def of(self, kind: Kind, tier: Tier | None = None) -> list[Memory]:
        return [
            m for m in self.memories.of_tenant("acme") if m.kind is kind and (tier is None or m.tier is tier)
        ]

    def working_turns(self) -> list[Memory]:
        return [m for m in self.of(Kind.EVENT, Tier.WORKING) if m.idempotency_key.startswith("turn:")]


def sessions(
    summarizer: SummaryWriter | None = None,
    replica: InMemorySessionStore | None = None,
    inference: FakeInferenceTier | None = None,
    **settings: Any,
) -> Sessions:
    """A session pipeline on fresh stores; Summarize reads on `replica` (replayed up to lsn 10) if given;
    writes embed on `inference` if given (else there is no tier)."""
    clock = FakeClock(NOW)
    memories, store = InMemoryMemoryStore(), InMemorySessionStore()
    reads = None if replica is None else LaggingReplicaRoute[SessionReads](store, replica, REPLAYED)
    write_settings = WriteSettings(Limits(), TtlPolicy(), WritePolicy())
    writes = WritePipeline(memories, write_settings, clock, inference)
    isolation = ItemIsolation(store.failures, backoff_s=60, max_backoff_s=3600)
    pipeline = SessionPipeline(
        store,
        writes,
        SessionSettings(Limits(), WritePolicy(), **settings),
        clock,
        summarizer,
        isolation=isolation,
        reads=reads,
    )
    return Sessions(pipeline, store, memories, clock)


async def test_a_turn_is_numbered_stored_and_becomes_working_memory() -> None:
    s = sessions()
    first = await s.say("帮我订明天下午的会议室")
    second = await s.say("好的, 三楼那间", role=Role.ASSISTANT)
    assert [first.turn.index, second.turn.index] == [1, 2]
    assert [t.turn.text for t in s.store.turns_of[("acme", "s1")]] == [
        "帮我订明天下午的会议室",
        "好的, 三楼那间",
    ]
    working = s.working_turns()
    assert [m.idempotency_key for m in working] == ["turn:s1:1", "turn:s1:2"]
    assert [m.provenance["role"] for m in working] == ["user", "assistant"]
    assert all(m.expires_at == NOW + timedelta(hours=24) for m in working)  # working memory's TTL
    # Each stored turn knows the memory it became, which consolidation later expires.
    assert [t.memory_id for t in s.store.turns_of[("acme", "s1")]] == [m.id for m in working]
    assert second.view.turn_count == 2 and [t.index for t in second.view.recent_turns] == [1, 2]


@pytest.mark.parametrize(
    ("text", "role", "status", "kind"),
    [
        ("I prefer window seats", Role.USER, Status.ACTIVE, Kind.PREFERENCE),  # explicit: kept at once
        ("My dog is called Rex", Role.USER, Status.ACTIVE, Kind.FACT),
        ("Maybe I prefer aisle seats", Role.USER, Status.PENDING, Kind.PREFERENCE),  # unsure: waits
        ("thanks!", Role.USER, None, None),  # chit-chat: the session only
        ("帮我订明天下午的会议室", Role.USER, None, None),  # a one-off request: the summary's, not memory's
        ("I prefer window seats", Role.ASSISTANT, None, None),  # only the user's own words
    ],
)
async def test_a_turn_is_remembered_beyond_the_session_only_when_it_says_something_lasting(
    text: str, role: Role, status: Status | None, kind: Kind | None
) -> None:
    s = sessions()
    result = await s.say(text, role=role)
    lasting = [m for m in s.memories.of_tenant("acme") if m.tier is Tier.SEMANTIC]
    assert [(m.status, m.kind) for m in lasting] == ([] if status is None else [(status, kind)])
    assert [m.id for m in result.remembered] == [m.id for m in lasting]
    if lasting:
        assert lasting[0].content == text and lasting[0].idempotency_key == "remember:s1:1"
        assert lasting[0].provenance["turn"] == 1 and lasting[0].provenance["rule"]


@pytest.mark.parametrize("inline", [False, True])
async def test_a_turns_memory_and_the_summary_wait_for_the_encoders_only_when_asked_to(inline: bool) -> None:
    tier = FakeInferenceTier(english=True)
    s = sessions(inference=tier, embed_turns_inline=inline)
    result = await s.say("I prefer window seats")
    (turn,) = s.working_turns()
    (summary,) = s.of(Kind.SUMMARY)
    # What the turn remembers beyond the session is embedded before the answer: its conflict rules
    # compare vectors.
    (remembered,) = result.remembered
    assert remembered.embedding_state is EmbeddingState.READY
    # The turn's own memory and the summary: by default stored at once, for the background worker.
    expected = EmbeddingState.READY if inline else EmbeddingState.PENDING
    assert [turn.embedding_state, summary.embedding_state] == [expected, expected]
    # Two models (multilingual, English) per memory embedded inline.
    assert len(tier.embedded) == (6 if inline else 2)


async def test_a_preference_said_again_in_a_session_merges_into_the_one_remembered() -> None:
    s = sessions()
    await s.say("I prefer window seats")
    again = await s.say("I prefer window seats!")
    (remembered,) = [m for m in s.memories.of_tenant("acme") if m.tier is Tier.SEMANTIC]
    assert again.remembered[0].id == remembered.id and remembered.seen_count == 2


async def test_a_retried_turn_appends_nothing() -> None:
    s = sessions()
    first = await s.say("I prefer window seats", idempotency_key="t1")
    before = list(s.memories.of_tenant("acme"))
    again = await s.say("I prefer window seats", idempotency_key="t1")
    assert again.turn == first.turn and again.view.turn_count == 1
    assert not again.summary_refreshed and again.remembered == [] and again.episode is None
    assert s.memories.of_tenant("acme") == before and len(s.store.turns_of[("acme", "s1")]) == 1


async def test_a_key_reused_for_another_turn_is_refused() -> None:
    s = sessions()
    await s.say("I prefer window seats", idempotency_key="t1")
    with pytest.raises(FailedPrecondition, match="idempotency_key 't1' was used for another turn") as raised:
        await s.say("I prefer aisle seats", idempotency_key="t1")
    assert raised.value.cause == "IDEMPOTENCY_KEY_REUSED"
    assert len(s.store.turns_of[("acme", "s1")]) == 1


async def test_a_session_confined_to_a_subject_refuses_another_subjects_session() -> None:
    s = sessions()
    await s.say("hello", subject="user-7")
    with pytest.raises(FailedPrecondition, match="session 's1' is not a session of subject 'user-8'"):
        await s.say("hello again", subject="", expected_subject="user-8")
    assert s.store.sessions[("acme", "s1")].turn_count == 1
    # Without the confinement the turn joins the session, whose subject stays the first one's.
    joined = await s.say("hello again", subject="user-8")
    assert joined.view.subject == "user-7" and joined.view.turn_count == 2


async def test_an_agents_session_is_not_found_by_another_agent_and_one_of_no_agent_is_anyones() -> None:
    s = sessions()
    await s.say("my passport number is X123", agent_id="travel", idempotency_key="k")
    for refused in (
        s.say("and my seat is 3A", agent_id="calendar"),
        s.say("my passport number is X123", agent_id="calendar", idempotency_key="k"),  # its replay
        s.pipeline.summarize("acme", "s1", agent_id="calendar"),
        s.pipeline.end_session("acme", "s1", "done", agent_id="calendar"),
    ):
        with pytest.raises(NotFound, match="session 's1'"):
            await refused
    assert s.store.sessions[("acme", "s1")].turn_count == 1
    assert (await s.pipeline.summarize("acme", "s1", agent_id="travel")).turn_count == 1
    assert (await s.pipeline.summarize("acme", "s1")).turn_count == 1  # a call naming no agent
    await s.say("hello", session_id="lobby")
    await s.say("book a room", session_id="lobby", agent_id="calendar")
    assert s.store.sessions[("acme", "lobby")].agent_id == "calendar"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"session_id": " "}, "session_id: required"),
        ({"text": "   "}, "text: must not be empty"),
        ({"text": "x" * 16_385}, "text: is 16385 bytes; the limit is 16384"),
        ({"tenant_id": ""}, "tenant_id"),
        ({"subject": "user-7", "expected_subject": "user-8"}, "subject: differs from expected_subject"),
        ({"occurred_at": NOW + timedelta(seconds=1)}, "occurred_at: must not be in the future"),
    ],
)
async def test_a_bad_turn_is_refused_naming_its_field_and_stores_nothing(
    fields: dict[str, Any], message: str
) -> None:
    s = sessions()
    request = {"tenant_id": "acme", "session_id": "s1", "subject": "user-7", "text": "hello"} | fields
    with pytest.raises(InvalidArgument, match=message):
        await s.pipeline.append_turn(TurnRequest(**request))
    assert s.store.sessions == {} and s.memories.memories == {}


async def test_the_summary_is_refreshed_on_the_first_turn_then_every_third_each_a_new_version() -> None:
    s = sessions()
    refreshed = [
        (await s.say(f"ok, noted point {n}", role=Role.ASSISTANT)).summary_refreshed for n in range(7)
    ]
    assert refreshed == [True, False, False, True, False, False, True]
    versions = s.of(Kind.SUMMARY)  # in the order they were written
    assert [m.provenance["turns"] for m in versions] == [[1, 1], [1, 4], [1, 7]]
    assert [m.status for m in versions] == [Status.SUPERSEDED, Status.SUPERSEDED, Status.ACTIVE]
    assert [m.supersedes for m in versions[1:]] == [versions[0].id, versions[1].id]
    session = s.store.sessions[("acme", "s1")]
    assert session.summary_memory_id == versions[-1].id and session.summary is not None
    assert session.summary.turn_count == 7


@pytest.mark.parametrize(
    ("up", "summarizer", "text"), [(True, "llm", "worded from 1 turns"), (False, "rules", "")]
)
async def test_the_llm_words_a_kept_summary_and_a_silent_one_leaves_the_rules_text(
    up: bool, summarizer: str, text: str
) -> None:
    s = sessions(ScriptedSummarizer("worded from {turns} turns", up=up))
    result = await s.say("帮我订明天下午的会议室")
    assert result.view.summarizer == summarizer == s.store.sessions[("acme", "s1")].summarizer
    (stored,) = s.of(Kind.SUMMARY)
    if text:
        assert result.view.summary.text == stored.content == text
    else:
        assert result.view.summary.text and stored.content == result.view.summary.text


async def test_every_fifth_turn_becomes_an_episode_and_working_memory_keeps_the_last_turns() -> None:
    s = sessions(keep_turns=2)
    results = [await s.say(f"ok, noted point {n}", role=Role.ASSISTANT) for n in range(5)]
    assert [r.episode is not None for r in results] == [False] * 4 + [True]
    episode = results[-1].episode
    assert episode is not None and episode.tier is Tier.EPISODIC
    assert episode.provenance["turns"] == [1, 5] and episode.provenance["trigger"] == "turns"
    assert s.store.sessions[("acme", "s1")].consolidated_turn == 5
    assert [(c.through_turn, c.episode_id) for c in s.store.consolidations] == [(5, episode.id)]
    # Turns 1-3 are in the episode and out of the window of 2: their working memories end now.
    ended = [m.provenance["turn"] for m in s.working_turns() if m.expires_at == NOW]
    assert ended == [1, 2, 3]
    assert results[-1].view.recent_turns[-2].index == 4 and len(results[-1].view.recent_turns) == 2


async def test_remember_this_consolidates_the_session_at_once() -> None:
    s = sessions()
    await s.say("帮我订明天下午的会议室")
    result = await s.say("记住这个")
    assert result.episode is not None and result.episode.provenance["trigger"] == "event"
    assert result.episode.provenance["turns"] == [1, 2]


async def test_ending_a_session_consolidates_what_is_new_once() -> None:
    s = sessions()
    await s.say("帮我订明天下午的会议室")
    episode = await s.pipeline.end_session("acme", "s1", "  ")
    assert episode is not None and episode.provenance["trigger"] == "session_end"
    assert await s.pipeline.end_session("acme", "s1", "done") is None  # nothing new since
    await s.say("还有, 要投影仪")
    later = await s.pipeline.end_session("acme", "s1", "user left")
    assert (
        later is not None
        and later.provenance["turns"] == [2, 2]
        and later.provenance["trigger"] == "user left"
    )
    assert len(s.of(Kind.EVENT, Tier.EPISODIC)) == 2


@pytest.mark.parametrize(
    ("session_id", "expected_subject", "error", "message"),
    [
        ("nope", "", NotFound, "nope"),
        ("s1", "user-8", FailedPrecondition, "not a session of subject 'user-8'"),
        ("", "", InvalidArgument, "session_id: required"),
    ],
)
async def test_ending_a_session_not_there_or_not_the_callers_is_refused(
    session_id: str, expected_subject: str, error: type[HindsightError], message: str
) -> None:
    s = sessions()
    await s.say("帮我订明天下午的会议室")
    with pytest.raises(error, match=message):
        await s.pipeline.end_session("acme", session_id, "done", expected_subject)
    assert s.of(Kind.EVENT, Tier.EPISODIC) == []


async def test_the_consolidate_job_folds_idle_sessions_and_goes_on_past_one_that_fails() -> None:
    s = sessions()
    for session_id in ("idle-a", "broken", "idle-b"):
        await s.say("帮我订明天下午的会议室", session_id=session_id)
    s.clock.advance(IDLE)
    await s.say("帮我订明天下午的会议室", session_id="busy")
    s.store.broken["broken"] = RuntimeError("a bug")
    assert await s.pipeline.consolidate_idle(s.clock()) == 2
    folded = {m.session_id for m in s.of(Kind.EVENT, Tier.EPISODIC)}
    assert folded == {"idle-a", "idle-b"}
    assert s.store.failures.failures == {(CONSOLIDATE_JOB, "acme", "broken"): 1}
    # It backs off: the next run leaves it alone, one after the backoff gets it through and clears it.
    del s.store.broken["broken"]
    assert await s.pipeline.consolidate_idle(s.clock() + timedelta(seconds=30)) == 0
    assert await s.pipeline.consolidate_idle(s.clock() + timedelta(seconds=61)) == 1
    assert "broken" in {m.session_id for m in s.of(Kind.EVENT, Tier.EPISODIC)}
    assert s.store.failures.failures == {}
    assert await s.pipeline.consolidate_idle(s.clock() + timedelta(seconds=62)) == 0  # nothing left


async def test_summarize_shows_the_summary_and_the_window_of_recent_turns() -> None:
    s = sessions(keep_turns=3)
    for n in range(4):
        await s.say(f"ok, noted point {n}", role=Role.ASSISTANT)
    view = await s.pipeline.summarize("acme", "s1")
    assert view.turn_count == 4 and [t.index for t in view.recent_turns] == [2, 3, 4]
    assert view.summary == s.store.sessions[("acme", "s1")].summary
    with pytest.raises(NotFound, match="nope"):
        await s.pipeline.summarize("acme", "nope")
    with pytest.raises(InvalidArgument, match="session_id: required"):
        await s.pipeline.summarize("acme", "")


async def test_summarize_after_a_turn_reads_it_even_from_a_lagging_replica() -> None:
    replica = InMemorySessionStore()
    s = sessions(replica=replica)
    await s.say("ok, noted", role=Role.ASSISTANT)
    replica.sessions, replica.turns_of = copy.deepcopy(s.store.sessions), copy.deepcopy(s.store.turns_of)
    await s.say("ok, noted again", role=Role.ASSISTANT)  # the replica has not replayed it
    stale = await s.pipeline.summarize("acme", "s1")
    fresh = await s.pipeline.summarize("acme", "s1", read_after=CommitPosition(database=1, lsn=11))
    assert (stale.turn_count, fresh.turn_count) == (1, 2)
