"""The consolidate job: a session idle for 120 s with turns not in an episode becomes one episodic record,
once however often the job runs."""

from __future__ import annotations

from datetime import timedelta

from hindsight.client import HindsightClient
from hindsight_server.pipelines.jobs import JobRunner
from tests.conftest import MovableClock


async def test_an_idle_session_is_consolidated_once(
    client: HindsightClient, jobs: JobRunner, clock: MovableClock
) -> None:
    for text in ("I need a meeting room tomorrow afternoon", "for 6 people in building B"):
        await client.append_turn("acme", "idle-session", text, subject="u1")
    assert (await jobs.run("consolidate")).processed == 0  # not idle yet

    clock.advance(timedelta(seconds=121))
    assert (await jobs.run("consolidate")).processed == 1
    episodes = await client.list("acme", session_id="idle-session", tiers=["episodic"])
    (episode,) = episodes.memories
    assert episode.entities["building"] == "B"
    assert episode.provenance["trigger"] == "idle"
    assert list(episode.provenance["turns"]) == [1, 2]

    clock.advance(timedelta(seconds=121))
    assert (await jobs.run("consolidate")).processed == 0
    assert not (await client.end_session("acme", "idle-session")).HasField("episode")
    assert len((await client.list("acme", tiers=["episodic"])).memories) == 1
    assert (await client.summarize("acme", "idle-session")).turn_count == 2
