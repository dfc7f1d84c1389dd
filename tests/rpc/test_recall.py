"""Recall over the lexical, structured and session channels (the vector channel arrives with the
inference tier), with fusion, thresholds, packing and the explanation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.config import Settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from tests.conftest import MovableClock


async def test_chinese_substring_finds_the_memory(client: HindsightClient, tenant: str) -> None:
    written = await client.write(
        tenant, "用户偏好靠窗座位", tier="semantic", kind="preference", subject="user-7"
    )
    await client.write(tenant, "用户喜欢喝绿茶", tier="semantic", kind="preference", subject="user-7")
    found = await client.recall(tenant, "靠窗")
    assert [h.memory.id for h in found.hits] == [written.memory.id]
    assert found.hits[0].channels[0].channel == pb.CHANNEL_LEXICAL
    assert pb.CHANNEL_LEXICAL in found.channels_used and not found.channels_degraded
    assert found.injection_text.startswith("[相关记忆]\n- (")
    assert "偏好) 用户偏好靠窗座位，置信度1.00" in found.injection_text
    assert found.tokens_used > 0 and found.hits[0].packed


async def test_english_words_and_mixed_language(client: HindsightClient, tenant: str) -> None:
    csv = await client.write(
        tenant, "User prefers CSV export for reports", tier="semantic", kind="preference"
    )
    await client.write(tenant, "User lives in Berlin", tier="semantic", kind="fact")
    mixed = await client.write(tenant, "用户要求周报用 CSV 格式", tier="semantic", kind="preference")
    found = await client.recall(tenant, "What format for the CSV export?", min_score=0)
    ids = [h.memory.id for h in found.hits]
    assert ids[0] == csv.memory.id
    assert mixed.memory.id in ids
    assert len(ids) == 2


async def test_nothing_relevant_returns_nothing_to_inject(client: HindsightClient, tenant: str) -> None:
    await client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference")
    found = await client.recall(tenant, "quantum chromodynamics")
    assert list(found.hits) == []
    assert found.injection_text == ""
    assert found.tokens_used == 0


async def test_session_channel_brings_the_current_conversation(client: HindsightClient, tenant: str) -> None:
    turn = await client.write(
        tenant, "我要订下周三下午的会议室", tier="working", kind="task", session_id="s1"
    )
    await client.write(tenant, "something else entirely", tier="working", kind="task", session_id="s2")
    found = await client.recall(tenant, "改成周五", session_id="s1", min_score=0)
    assert [h.memory.id for h in found.hits] == [turn.memory.id]
    assert [c.channel for c in found.hits[0].channels] == [pb.CHANNEL_SESSION]


async def test_structured_channel_matches_entities_and_ranks_them(
    client: HindsightClient, tenant: str
) -> None:
    a = await client.write(
        tenant, "booked room 301", tier="episodic", kind="event", entities={"building": "A", "room": "301"}
    )
    b = await client.write(
        tenant, "booked room 12", tier="episodic", kind="event", entities={"building": "B"}
    )
    found = await client.recall(tenant, "which room", entities={"building": "A", "room": "301"}, min_score=0)
    assert found.hits[0].memory.id == a.memory.id
    assert found.hits[0].components.entity_match == 1.0
    assert b.memory.id not in [h.memory.id for h in found.hits if h.components.entity_match > 0]


async def test_time_range_limits_every_channel(client: HindsightClient, tenant: str) -> None:
    old = datetime.now(UTC) - timedelta(days=20)
    await client.write_batch(
        tenant,
        [
            memory_input("meeting about budget", tier="episodic", kind="event", occurred_at=old),
            memory_input("meeting about hiring", tier="episodic", kind="event"),
        ],
    )
    found = await client.recall(
        tenant, "meeting", start=old - timedelta(days=1), end=old + timedelta(days=1), min_score=0
    )
    assert [h.memory.content for h in found.hits] == ["meeting about budget"]
    assert found.time_range.start.ToDatetime(UTC) == old - timedelta(days=1)


async def test_recency_and_tier_order_equal_matches(client: HindsightClient, tenant: str) -> None:
    now = datetime.now(UTC)
    await client.write_batch(
        tenant,
        [
            memory_input(
                "window seat please", tier="semantic", kind="preference", occurred_at=now - timedelta(days=60)
            ),
            memory_input("window seat please", tier="working", kind="preference"),
        ],
    )
    found = await client.recall(tenant, "window seat", min_score=0)
    assert [h.memory.tier for h in found.hits] == [pb.TIER_WORKING, pb.TIER_SEMANTIC]
    assert found.hits[0].components.recency > found.hits[1].components.recency


async def test_expired_memories_leave_recall(
    client: HindsightClient, tenant: str, clock: MovableClock
) -> None:
    await client.write(tenant, "working note about the blue folder", tier="working", kind="fact")
    await client.write(tenant, "semantic note about the blue folder", tier="semantic", kind="fact")
    clock.advance(timedelta(hours=25))  # past the working-memory TTL
    found = await client.recall(tenant, "blue folder", min_score=0, now=clock())
    assert [h.memory.content for h in found.hits] == ["semantic note about the blue folder"]


async def test_pending_and_deleted_memories_are_not_recalled(client: HindsightClient, tenant: str) -> None:
    await client.write(tenant, "maybe likes opera", tier="semantic", kind="preference", confidence=0.3)
    gone = await client.write(tenant, "likes opera a lot", tier="semantic", kind="preference")
    await client.delete(tenant, gone.memory.id)
    assert list((await client.recall(tenant, "opera", min_score=0)).hits) == []


async def test_top_k_budget_and_explanation(client: HindsightClient, tenant: str) -> None:
    await client.write_batch(
        tenant, [memory_input(f"project apollo note {i}", tier="semantic", kind="fact") for i in range(8)]
    )
    found = await client.recall(tenant, "apollo", top_k=3, explain=True, min_score=0)
    assert len(found.hits) == 3
    explanation = found.explanation
    assert explanation.profile == "default"
    assert explanation.weights.similarity == 0.4
    lexical = next(c for c in explanation.channels if c.channel == pb.CHANNEL_LEXICAL)
    assert len(lexical.memory_ids) == 8 and lexical.elapsed_ms > 0
    small = await client.recall(tenant, "apollo", top_k=8, token_budget=30, min_score=0)
    assert len(small.hits) == 8
    assert 0 < sum(h.packed for h in small.hits) < 8
    assert small.tokens_used <= 30
    assert not (await client.recall(tenant, "apollo", min_score=0)).HasField("explanation")


async def test_profiles_and_weights_change_the_ranking(client: HindsightClient, tenant: str) -> None:
    now = datetime.now(UTC)
    await client.write_batch(
        tenant,
        [
            memory_input(
                "refund request refund policy refund",
                tier="semantic",
                kind="fact",
                occurred_at=now - timedelta(days=90),
            ),
            memory_input("refund asked today", tier="episodic", kind="event"),
        ],
    )
    by_recency = await client.recall(tenant, "refund", weights={"recency": 1.0}, min_score=0)
    assert by_recency.hits[0].memory.content == "refund asked today"
    assert by_recency.hits[0].components.final > by_recency.hits[1].components.final
    support = await client.recall(tenant, "refund", profile="support", explain=True, min_score=0)
    assert support.explanation.profile == "support"
    assert support.explanation.weights.recency == 0.4


async def test_recalled_memories_count_their_accesses(
    client: HindsightClient, server: RunningServer, tenant: str
) -> None:
    seen = await client.write(tenant, "the blue notebook is in the drawer", tier="semantic", kind="fact")
    unseen = await client.write(tenant, "groceries: milk and eggs", tier="semantic", kind="fact")
    for _ in range(3):
        found = await client.recall(tenant, "blue notebook", min_score=0)
        assert [h.memory.id for h in found.hits] == [seen.memory.id]
    assert server.access is not None
    await server.access.flush()  # the background loop would do this within a second
    after = await client.get(tenant, seen.memory.id)
    assert after.access_count == 3
    assert after.HasField("last_accessed_at")
    assert (await client.get(tenant, unseen.memory.id)).access_count == 0


async def test_access_counters_are_updated_in_place_without_touching_the_indexes(
    client: HindsightClient, server: RunningServer, tenant: str
) -> None:
    # fillfactor 80 (migration 0010) leaves room on the page: the flush writes the new row versions on
    # the same page, a HOT update (no indexed column changes), so it adds nothing to the HNSW graphs
    # (at 1M memories 82% of the flushes' updates were not HOT, 260 ms a flush).
    assert server.access is not None
    texts = [f"ferry timetable to {island}" for island in ("Capri", "Ischia", "Procida")]
    texts += [f"grocery list item {i}: {food}" for i, food in enumerate(["milk", "eggs", "rice", "tea"] * 50)]
    written = await client.write_batch(
        tenant, [memory_input(t, tier="semantic", kind="fact") for t in texts], verbatim=True
    )
    ferries = [r.memory.id for r in written.results[:3]]
    before = await _pages(server, ferries)
    found = await client.recall(tenant, "ferry timetable", top_k=20, min_score=0)
    assert {hit.memory.id for hit in found.hits} == set(ferries)
    await server.access.flush()
    assert [(await client.get(tenant, i)).access_count for i in ferries] == [1, 1, 1]
    assert await _pages(server, ferries) == before


async def _pages(server: RunningServer, ids: list[str]) -> list[int]:
    """The heap page of each memory's current row version."""
    rows = await server.pool.fetch(
        "SELECT id::text, (ctid::text::point)[0]::int AS page FROM memories WHERE id = ANY($1::uuid[])", ids
    )
    page = {row["id"]: row["page"] for row in rows}
    return [page[i] for i in ids]


async def test_a_time_the_query_speaks_of_finds_and_favours_memories_of_that_time(
    client: HindsightClient, tenant: str
) -> None:
    now = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)  # a Wednesday
    last_wednesday = datetime(2025, 1, 8, 15, tzinfo=UTC)
    await client.write_batch(
        tenant,
        [
            memory_input("订了A栋301会议室", tier="episodic", kind="event", occurred_at=last_wednesday),
            memory_input("订了B栋会议室", tier="episodic", kind="event", occurred_at=now - timedelta(days=1)),
            memory_input("用户喜欢靠窗", tier="semantic", kind="preference", occurred_at=last_wednesday),
        ],
    )
    found = await client.recall(tenant, "上周三订的会议室是哪个？", now=now, explain=True, min_score=0)
    assert found.hits[0].memory.content == "订了A栋301会议室"
    assert found.hits[0].components.entity_match == 1.0  # inside the spoken window
    assert found.time_range.start.ToDatetime(UTC) == datetime(2025, 1, 8, tzinfo=UTC)
    assert found.time_range.end.ToDatetime(UTC) == datetime(2025, 1, 9, tzinfo=UTC)
    structured = next(c for c in found.explanation.channels if c.channel == pb.CHANNEL_STRUCTURED)
    # The spoken time narrows the structured channel only; the lexical channel still sees both rooms.
    assert len(structured.memory_ids) == 2
    lexical = next(c for c in found.explanation.channels if c.channel == pb.CHANNEL_LEXICAL)
    assert len(lexical.memory_ids) == 2


async def test_the_turn_after_a_match_comes_along(client: HindsightClient, tenant: str) -> None:
    """In a conversation the answer often sits in the turn after the one that matches the question."""
    start = datetime.now(UTC) - timedelta(hours=1)
    turns = [
        "Melanie said, what did you think of the pottery class?",
        "Caroline said, I loved it, I made a blue bowl for my mum",
        "Melanie said, shall we get lunch on Sunday?",
        "Caroline said, the marathon training is going well",
    ]
    await client.write_batch(
        tenant,
        [
            memory_input(
                t, tier="episodic", kind="event", session_id="s1", occurred_at=start + timedelta(seconds=i)
            )
            for i, t in enumerate(turns)
        ],
    )
    found = await client.recall(tenant, "How was the pottery class?", explain=True, min_score=0)
    contents = [h.memory.content for h in found.hits]
    assert contents[:2] == turns[:2]  # the matching turn, then its answer, found through its neighbour
    context = next(c for c in found.explanation.channels if c.channel == pb.CHANNEL_CONTEXT)
    assert len(context.memory_ids) >= 1
    assert turns[2] not in contents[:2]
    # The answer came along as a neighbour: the hit says it does not match the query by itself.
    assert [h.matches_query for h in found.hits[:2]] == [True, False]


async def test_the_servers_connections_plan_each_statement_for_its_tenant(server: RunningServer) -> None:
    # A cached generic plan cannot see the tenant: it sent the largest tenant's vector search through a
    # sort of all its rows (BENCHMARKS.md, "Recall latency at 100,000 memories", session 3).
    settings = await server.pool.fetchrow(
        "SELECT current_setting('plan_cache_mode') AS plans,"
        " current_setting('hnsw.iterative_scan') AS scan, current_setting('jit') AS jit"
    )
    assert dict(settings) == {"plans": "force_custom_plan", "scan": "relaxed_order", "jit": "off"}


async def test_bm25_scores_at_most_match_rows_of_a_terms_memories_the_newest(
    make_settings: Callable[..., Settings], tenant: str
) -> None:
    # One user's memory can hold a rare term thousands of times; scoring each costs ~15 us, so the
    # lexical channel scores the newest match_rows of them (3 here) and finds its best among those.
    running = await start_server(make_settings(recall__bm25_match_rows=3))
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}", timeout_s=10) as client:
            start = datetime.now(UTC) - timedelta(days=1)
            written = await client.write_batch(
                tenant,
                [
                    memory_input(
                        f"the lighthouse keeper's note number {i}",
                        tier="semantic",
                        kind="fact",
                        occurred_at=start + timedelta(minutes=i),
                    )
                    for i in range(6)
                ],
                verbatim=True,
            )
            newest = {r.memory.id for r in written.results[3:]}
            found = await client.recall(tenant, "lighthouse", explain=True, top_k=10, min_score=0)
    finally:
        await running.stop()
    lexical = next(c for c in found.explanation.channels if c.channel == pb.CHANNEL_LEXICAL)
    assert set(lexical.memory_ids) == newest
