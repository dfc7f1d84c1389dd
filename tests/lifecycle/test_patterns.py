"""Episodic -> semantic: a habit repeated across episodes becomes one semantic preference linked to its
sources, once, however often the job runs."""

from __future__ import annotations

import pytest

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.pipelines.jobs import JobRunner
from tests.support.memory_fields import MemoryFields
from tests.support.structs import list_of

BOOKING: MemoryFields = {"tier": "episodic", "kind": "event", "intent": "book_meeting_room"}


async def _episodes(client: HindsightClient, tenant: str, subject: str, texts: list[str]) -> list[str]:
    ids = []
    for index, text in enumerate(texts):
        written = await client.write(
            tenant, text, subject=subject, session_id=f"{subject}-s{index}", agent_id="booker",
            entities={"building": "A"}, **BOOKING,
        )  # fmt: skip
        assert written.resolution == "created"  # three episodes, not versions of one
        ids.append(written.memory.id)
    return ids


async def test_three_episodes_booking_building_a_become_one_habit_with_three_sources(
    client: HindsightClient, jobs: JobRunner, tenant: str
) -> None:
    days = ["Monday", "Wednesday", "Friday"]
    sources = await _episodes(
        client, tenant, "u1", [f"Booked a meeting room in building A on {d}" for d in days]
    )

    assert (await jobs.run("patterns")).processed == 1
    (habit,) = (await client.list(tenant, tiers=["semantic"])).memories
    assert habit.content == "usually books building A"
    assert (habit.kind, habit.status, habit.subject) == (pb.KIND_PREFERENCE, pb.STATUS_ACTIVE, "u1")
    assert habit.intent == "book_meeting_room" and habit.entities["building"] == "A"
    assert sorted(habit.derived_from) == sorted(sources)
    assert habit.confidence == pytest.approx(0.75)  # 3 of 3 episodes
    assert habit.provenance["job"] == "patterns" and habit.provenance["support"] == 3
    assert list_of(habit.provenance["sessions"]) == ["u1-s0", "u1-s1", "u1-s2"]
    assert list_of(habit.provenance["agents"]) == ["booker"]

    assert (await jobs.run("patterns")).processed == 0  # idempotent: nothing new on a rerun
    every_status = ["active", "pending", "superseded", "expired", "deleted"]
    assert len((await client.list(tenant, tiers=["semantic"], statuses=every_status)).memories) == 1
    found = await client.recall(
        tenant, "which building does u1 usually book", tiers=["semantic"], min_score=0
    )
    assert [hit.memory.id for hit in found.hits] == [habit.id]

    # A fourth episode: the habit gets a new version with four sources; the old one is history.
    sources += await _episodes(client, tenant, "u1", ["Booked a meeting room in building A on Tuesday"])
    assert (await jobs.run("patterns")).processed == 1
    (current,) = (await client.list(tenant, tiers=["semantic"])).memories
    assert sorted(current.derived_from) == sorted(sources) and current.supersedes == habit.id
    assert [m.id for m in (await client.history(tenant, current.id)).versions] == [habit.id, current.id]


async def test_chinese_episodes_give_a_chinese_habit_and_two_episodes_give_none(
    client: HindsightClient, jobs: JobRunner, tenant: str
) -> None:
    sources = await _episodes(
        client, tenant, "u2", ["周一在A栋订了会议室", "周三在A栋订了会议室", "周五在A栋订了会议室"]
    )
    await _episodes(client, tenant, "u3", ["Booked building A on Monday", "Booked building A on Friday"])
    assert (await jobs.run("patterns")).processed == 1
    (habit,) = (await client.list(tenant, tiers=["semantic"])).memories
    assert (habit.subject, habit.content) == ("u2", "通常预订A栋")
    assert sorted(habit.derived_from) == sorted(sources)


@pytest.mark.parametrize(
    ("turns", "habit_text"),
    [
        (["我要订下周三下午的会议室", "A栋", "好的"], "通常预订A栋"),
        (
            ["I want to book a meeting room next Wednesday", "in building A", "yes"],
            "usually books building A",
        ),
    ],
)
async def test_three_booking_sessions_end_to_end_give_a_habit_linked_to_their_episodes(
    client: HindsightClient, jobs: JobRunner, tenant: str, turns: list[str], habit_text: str
) -> None:
    episodes = []
    for session in ("monday", "tuesday", "thursday"):
        for text in turns:
            await client.append_turn(tenant, session, text, subject="u1")
        ended = await client.end_session(tenant, session, reason="task_done")
        assert ended.episode.intent == "book_meeting_room" and ended.episode.entities["building"] == "A"
        episodes.append(ended.episode.id)

    assert (await jobs.run("patterns")).processed >= 1
    habits = {m.content: m for m in (await client.list(tenant, tiers=["semantic"])).memories}
    assert sorted(habits[habit_text].derived_from) == sorted(episodes)
    assert list_of(habits[habit_text].provenance["sessions"]) == ["monday", "thursday", "tuesday"]
    assert (await jobs.run("patterns")).processed == 0
