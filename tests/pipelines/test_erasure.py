"""Erasure (pipelines/erasure.py) on the in-memory store (tests/support/fakes): a subject, a tenant or named
memories removed batch by batch with what is linked to them (versions, derivations, the turns they came
from and what the sessions kept of those, the answers kept for retries), nothing of another scope
touched, bad requests refused before anything is recorded, a dead server's erasures finished, and the
caches of each tenant an erasure finished in dropped on every server. tests/rpc runs the SQL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain.errors import InvalidArgument, Unavailable
from hindsight_server.domain.model import ErasureKind, ErasureScope, Tier
from hindsight_server.domain.policy import Limits
from hindsight_server.pipelines.erasure import ErasurePipeline, ErasureSettings
from tests.domain.builders import numbered
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.erasure_store import InMemoryErasureStore

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
STALE_AFTER = timedelta(minutes=5)


@dataclass
class Server:
    erasures: ErasurePipeline
    forgotten: list[str]  # the tenants whose caches it dropped, in order


def server(store: InMemoryErasureStore, *, batch_size: int = 2, limits: Limits | None = None) -> Server:
    forgotten: list[str] = []
    settings = ErasureSettings(limits or Limits(), batch_size, STALE_AFTER)
    clock = FakeClock(NOW, step=timedelta(seconds=1))  # each batch's heartbeat later than the last
    return Server(ErasurePipeline(store, settings, clock, forgotten.append), forgotten)


def subject(name: str, tenant_id: str = "acme") -> ErasureScope:
    return ErasureScope(tenant_id, ErasureKind.SUBJECT, subject=name)


def named(*memory_ids: str) -> ErasureScope:
    return ErasureScope("acme", ErasureKind.MEMORIES, memory_ids=memory_ids)


def ids_of(store: InMemoryErasureStore, tenant_id: str = "acme") -> set[str]:
    return {m.id for m in store.memory_store.of_tenant(tenant_id)}


async def test_a_subject_erasure_removes_its_memories_sessions_and_kept_answers_only() -> None:
    store = InMemoryErasureStore()
    from_turn = numbered(1, provenance={"session_id": "s1", "turn": 2})
    for kept in (from_turn, numbered(2), numbered(3), numbered(4, subject="user-8")):
        store.memory_store.add(kept)
    store.memory_store.add(numbered(1, tenant_id="globex"))  # the same id in another tenant is another memory
    store.add_session("acme", "s1", "user-7", {1: "hi", 2: "I moved to Porto", 3: "thanks"}, summary="moved")
    store.add_session("acme", "s2", "user-8", {1: "hello"})
    store.add_reply("acme", b"memory " + numbered(2).id.encode())
    store.add_reply("acme", b"subject user-7 listed")
    store.add_reply("acme", b"subject user-8 listed")
    s = server(store)

    record = await s.erasures.erase(subject("user-7"), reason="GDPR art. 17", requested_by="ops")

    assert (record.state, record.finished_at is not None) == ("done", True)
    assert (record.memories, record.sessions, record.turns, record.replies) == (3, 1, 3, 2)
    assert ids_of(store) == {numbered(4).id}
    assert set(store.sessions["acme"]) == {"s2"}
    assert store.replies["acme"] == [b"subject user-8 listed"]
    assert ids_of(store, "globex") == {numbered(1).id}
    assert s.forgotten == ["acme"]


async def test_named_memories_go_with_their_versions_and_what_was_derived_from_them() -> None:
    store = InMemoryErasureStore()
    old, new = numbered(1, superseded_by=numbered(2).id), numbered(2, supersedes=numbered(1).id)
    episode = numbered(3, derived_from=(new.id,), subject="user-8")  # derivations cross subjects
    habit = numbered(4, derived_from=(episode.id, numbered(9).id))  # and go to any depth
    for stored in (old, new, episode, habit, numbered(5)):
        store.memory_store.add(stored)
    store.add_session("acme", "s1", "user-7", {1: "hi"})

    record = await server(store).erasures.erase(named(new.id), reason="", requested_by="ops")

    assert record.memories == 4
    assert ids_of(store) == {numbered(5).id}
    assert set(store.sessions["acme"]) == {"s1"}  # named memories never take a session
    assert record.sessions == 0


async def test_erasing_what_a_turn_said_takes_what_the_session_kept_of_that_turn() -> None:
    store = InMemoryErasureStore()
    fact = numbered(1, provenance={"session_id": "s1", "turn": 3})
    words = numbered(2, tier=Tier.WORKING, provenance={"turn": 3})
    spanning = numbered(3, tier=Tier.EPISODIC, provenance={"turns": [1, 4]})
    after = numbered(4, tier=Tier.EPISODIC, provenance={"turns": [5, 6]})
    same_turn_other_session = numbered(5, tier=Tier.WORKING, session_id="s2", provenance={"turn": 3})
    semantic_of_turn = numbered(6, provenance={"turn": 3})  # not the session's own keeping
    for stored in (fact, words, spanning, after, same_turn_other_session, semantic_of_turn):
        store.memory_store.add(stored)
    store.add_session("acme", "s1", "user-7", {2: "a", 3: "I moved to Porto", 4: "b"}, summary="moved")

    record = await server(store).erasures.erase(named(fact.id), reason="", requested_by="ops")

    assert (record.memories, record.turns) == (3, 1)
    assert ids_of(store) == {after.id, same_turn_other_session.id, semantic_of_turn.id}
    session = store.sessions["acme"]["s1"]
    assert (sorted(session.turns), session.summary) == ([2, 4], None)


async def test_a_tenant_erasure_takes_every_batch_of_the_tenant_and_nothing_else() -> None:
    store = InMemoryErasureStore()
    for n in range(7):
        store.memory_store.add(numbered(n, subject=f"user-{n}"))
        store.memory_store.add(numbered(n, tenant_id="globex"))
    store.add_session("acme", "s1", "user-1", {1: "a", 2: "b"})
    store.add_session("acme", "s2", "user-2", {1: "c"})
    store.add_session("globex", "s1", "user-1", {1: "a"})
    store.add_reply("acme", b"anything")
    store.add_reply("globex", b"anything")

    record = await server(store, batch_size=3).erasures.erase(
        ErasureScope("acme", ErasureKind.TENANT), reason="contract ended", requested_by="ops"
    )

    assert (record.memories, record.sessions, record.turns, record.replies) == (7, 2, 3, 1)
    assert not ids_of(store) and not store.sessions["acme"] and not store.replies["acme"]
    assert len(ids_of(store, "globex")) == 7
    assert (set(store.sessions["globex"]), store.replies["globex"]) == ({"s1"}, [b"anything"])
    heartbeat = store.heartbeats[("acme", record.id)]
    assert heartbeat > record.requested_at  # every batch moved it on (3 + 3 + 1 memories, then the rest)


async def test_named_ids_are_made_canonical_and_counted_once() -> None:
    store = InMemoryErasureStore()
    store.memory_store.add(numbered(1))
    upper = numbered(1).id.upper()

    record = await server(store).erasures.erase(named(numbered(1).id, upper), reason="", requested_by="ops")

    assert record.scope.memory_ids == (numbered(1).id,)
    assert record.memories == 1


@pytest.mark.parametrize(
    ("scope", "reason", "message"),
    [
        (ErasureScope("", ErasureKind.TENANT), "", "tenant_id: required"),
        (ErasureScope("-acme", ErasureKind.TENANT), "", "tenant_id: use letters"),
        (subject("user\x01"), "", "subject: contains control characters"),
        (subject("u" * 257), "", "subject: longer than 256 characters"),
        (subject("user-7"), "r" * 501, "reason: at most 500 characters"),
        (named(), "", "memories.ids: required: the ids of the memories to erase"),
        (named(*(numbered(n).id for n in range(3))), "", "memories.ids: at most 2 ids a call"),
        (named("order 17"), "", "memories.ids[0]: is not a memory id (a UUID)"),
        (named(numbered(1).id, ""), "", "memories.ids[1]: required"),
    ],
)
async def test_a_bad_request_is_refused_before_anything_is_recorded(
    scope: ErasureScope, reason: str, message: str
) -> None:
    store = InMemoryErasureStore()
    store.memory_store.add(numbered(1))
    s = server(store, limits=Limits(max_batch_size=2))

    with pytest.raises(InvalidArgument, match=re.escape(message)):
        await s.erasures.erase(scope, reason=reason, requested_by="ops")

    assert not store.erasures and ids_of(store) == {numbered(1).id}
    assert not s.forgotten


async def test_only_erasures_left_running_past_the_stale_time_are_finished_by_the_job() -> None:
    store = InMemoryErasureStore()
    store.memory_store.add(numbered(1, subject="left"))
    store.memory_store.add(numbered(2, subject="running"))
    left = await store.begin(subject("left"), "", "ops", "", NOW - STALE_AFTER - timedelta(seconds=1))
    running = await store.begin(subject("running"), "", "ops", "", NOW - STALE_AFTER + timedelta(seconds=1))
    s = server(store)

    assert await s.erasures.resume_stale(NOW) == 1

    assert (await store.get("acme", left.id)).state == "done"
    assert (await store.get("acme", running.id)).state == "running"
    assert ids_of(store) == {numbered(2).id}
    assert s.forgotten == ["acme"]
    assert await s.erasures.resume_stale(NOW) == 0  # nothing left to finish


async def test_erasing_the_same_scope_again_finds_nothing_left() -> None:
    store = InMemoryErasureStore()
    store.memory_store.add(numbered(1))
    s = server(store)
    first = await s.erasures.erase(subject("user-7"), reason="", requested_by="ops")
    again = await s.erasures.erase(subject("user-7"), reason="", requested_by="ops")
    assert (first.memories, again.memories, again.state) == (1, 0, "done")
    assert first.id != again.id  # each call leaves its own audit record


async def yield_to_watch(times: int = 5) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


async def test_every_server_drops_the_caches_of_the_tenants_erased_since_its_last_look(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryErasureStore()
    store.memory_store.add(numbered(1))
    store.memory_store.add(numbered(2, tenant_id="globex"))
    erasing, watching = server(store), server(store)
    await erasing.erasures.erase(subject("user-7"), reason="", requested_by="ops")  # before the first look
    watch = asyncio.create_task(watching.erasures.watch_forever(interval_s=0))
    try:
        await yield_to_watch()
        assert watching.forgotten == []  # the first look only notes where to start

        await erasing.erasures.erase(subject("user-7", "globex"), reason="", requested_by="ops")
        store.memory_store.failing = Unavailable("the database is unavailable; retry later")
        with caplog.at_level(logging.WARNING):
            await yield_to_watch()
        assert "could not look for finished erasures" in caplog.text
        assert watching.forgotten == []

        store.memory_store.failing = None
        await yield_to_watch()
        assert watching.forgotten == ["globex"]  # once, and only the tenant erased since
        assert erasing.forgotten == ["acme", "globex"]  # the erasing server dropped its own at once
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
