"""A server's index of a subject answers what the recall statements answer, and stays fresh: the same
hits in the same order, scores and vectors, for every kind of scope, on real rows of a real PostgreSQL
written through the real server with real embeddings (domain/scope_index.py, pipelines/hot_scopes.py,
store/scope_index.py)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from hindsight.client import HindsightClient, memory_input
from hindsight_server.config import EmbeddingSettings
from hindsight_server.domain.bm25 import Bm25
from hindsight_server.domain.channels import ChannelRows
from hindsight_server.domain.lexical import query_terms
from hindsight_server.domain.model import Kind, Scope, Tier, TimeWindow, VectorSpace
from hindsight_server.domain.scope_index import ScopeIndex
from hindsight_server.pipelines.hot_scopes import HotScopes, HotScopeSettings
from hindsight_server.pipelines.indexed_reads import IndexedReads
from hindsight_server.pipelines.vector_searches import VectorSearches
from hindsight_server.process.running import RunningServer
from hindsight_server.store.embeddings import CONTEXT_DUE
from hindsight_server.store.memories import MemoryStore
from tests.domain.builders import nearest

SUBJECT = "ann"
_WORDS = (
    "lake hiking painting guitar sister dinner flight Porto Lisbon coffee tea marathon garden novel "
    "cooking piano museum camping photography bakery"
).split()
_CHINESE = [
    "用户喜欢在杭州西湖边散步",
    "她的妹妹在上海工作",
    "周末去爬山和露营",
    "最喜欢的咖啡是拿铁",
    "订单A7X92已寄出",
]
BM25 = Bm25(1.2, 0.75, 0.5, 8, 2_000, 3, 50)
# What the recalls read: an English query's spaces and a Chinese query's, each with its companion, neither
# model's.
_READ_SPACES = (
    (VectorSpace.ENGLISH, VectorSpace.MULTILINGUAL, VectorSpace.ENGLISH_CONTEXT),
    (VectorSpace.MULTILINGUAL, VectorSpace.CHINESE),
    (VectorSpace.MULTILINGUAL,),
)
DIMENSIONS = EmbeddingSettings().by_space()


@pytest.fixture(scope="module")
async def client(tier_server: RunningServer) -> AsyncIterator[HindsightClient]:
    async with HindsightClient(f"127.0.0.1:{tier_server.port}", timeout_s=60) as shared:
        yield shared


def _sentence(rng: random.Random, index: int) -> str:
    if index % 7 == 3:
        return f"{rng.choice(_CHINESE)}，第{index}次"
    words = rng.sample(_WORDS, 4)
    code = f" order X{index:03d}Q" if index % 11 == 0 else ""
    return f"Ann talked about {words[0]} and {words[1]} with her {words[2]} near the {words[3]}{code}."


async def _embedded(server: RunningServer, tenant: str) -> None:
    """Waits for the backfill to embed the tenant's memories (a verbatim batch is embedded after), and
    to give those of a session their English context vectors."""
    for _ in range(600):
        pending = await server.pool.fetchval(
            f"""SELECT count(*) FROM memories WHERE tenant_id = $1
                AND (embedding_state = 'pending' OR {CONTEXT_DUE})""",
            tenant,
        )
        if not pending:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{pending} memories still pending embedding")


async def _corpus(client: HindsightClient, tenant: str) -> None:
    """A subject's memories of every shape a scope filters on, and another subject's beside them."""
    rng = random.Random(7)
    now = datetime.now(UTC)
    tiers, kinds = ["episodic", "semantic", "working"], ["event", "fact", "preference"]
    memories = []
    for index in range(150):
        memories.append(
            memory_input(
                _sentence(rng, index),
                tier=tiers[index % 3],
                kind=kinds[index % 5 % 3],
                subject=SUBJECT,
                session_id=f"s{index % 4}" if index % 5 else "",
                agent_id="agent-a" if index % 6 == 0 else "agent-b",
                visibility="private" if index % 9 == 0 else "",
                occurred_at=now - timedelta(hours=300 - index),
                valid_from=now - timedelta(days=index % 20) if index % 8 == 0 else None,
                expires_at=now - timedelta(minutes=1) if index % 13 == 0 else None,
            )
        )
    # Each at its own time: the statements order equal scores by time only, so a tie in both is in no
    # set order.
    memories += [
        memory_input(
            _sentence(rng, i),
            tier="episodic",
            kind="event",
            subject="bob",
            session_id="s1",
            occurred_at=now - timedelta(hours=400 + i),
        )
        for i in range(30)
    ]
    await client.write_batch(tenant, memories, verbatim=True)
    listed = await client.list(tenant, subject=SUBJECT, page_size=200)
    for memory in list(listed.memories)[:6]:
        await client.delete(tenant, memory.id)
    for memory in list(listed.memories)[6:10]:
        await client.update(tenant, memory.id, content=memory.content + " Updated with tennis.")


def _scopes(tenant: str) -> list[Scope]:
    now = datetime.now(UTC)
    base = Scope(tenant_id=tenant, now=now, subject=SUBJECT)
    return [
        base,
        Scope(tenant_id=tenant, now=now, subject=SUBJECT, agent_id="agent-a"),
        Scope(tenant_id=tenant, now=now, subject=SUBJECT, tiers=(Tier.EPISODIC, Tier.WORKING)),
        Scope(tenant_id=tenant, now=now, subject=SUBJECT, kinds=(Kind.FACT,), include_superseded=True),
        Scope(
            tenant_id=tenant,
            now=now,
            subject=SUBJECT,
            window=TimeWindow(now - timedelta(days=10), now - timedelta(days=2)),
        ),
        Scope(tenant_id=tenant, now=now + timedelta(days=400), subject=SUBJECT),
    ]


def _same(expected: ChannelRows, got: ChannelRows) -> None:
    assert [h.memory.id for h in got.hits] == [h.memory.id for h in expected.hits]
    assert [h.rank for h in got.hits] == [h.rank for h in expected.hits]
    assert [h.memory for h in got.hits] == [h.memory for h in expected.hits]
    np.testing.assert_allclose(
        [h.score for h in got.hits], [h.score for h in expected.hits], rtol=1e-4, atol=1e-5
    )
    assert {s: set(v) for s, v in got.vectors.items() if v} == {
        s: set(v) for s, v in expected.vectors.items() if v
    }
    for space, by_id in expected.vectors.items():
        for memory_id, vector in by_id.items():
            np.testing.assert_array_equal(got.vectors[space][memory_id], vector)


async def _written_and_held(
    server: RunningServer, client: HindsightClient, tenant: str, held: str = SUBJECT
) -> tuple[MemoryStore, HotScopes, ScopeIndex]:
    """The corpus written and embedded, and the subject (the whole tenant, for "") read into an index."""
    await _corpus(client, tenant)
    await _embedded(server, tenant)
    store = MemoryStore(server.pool)
    hot = HotScopes(store, HotScopeSettings(recalls_to_load=1_000), DIMENSIONS)  # held by warm() only
    assert await hot.warm(tenant, held)
    index = await hot.index_for(Scope(tenant_id=tenant, now=datetime.now(UTC), subject=SUBJECT))
    assert index is not None
    return store, hot, index


@pytest.mark.parametrize("holding", [SUBJECT, ""], ids=["a subject", "the whole tenant"])
async def test_every_channel_of_the_index_answers_as_the_statements(
    tier_server: RunningServer, client: HindsightClient, tenant: str, holding: str
) -> None:
    store, _, index = await _written_and_held(tier_server, client, tenant, holding)
    searches = VectorSearches(off_loop_from=0)  # on the thread, whatever the size
    reads = IndexedReads(store, index, searches, primary=True)
    assert index.live == (150 if holding else 180) and index.subject == holding
    scopes = _scopes(tenant)
    if not holding:  # the whole tenant also answers the other subject's recalls, and those of none
        now = datetime.now(UTC)
        scopes += [
            Scope(tenant_id=tenant, now=now, subject="bob"),
            Scope(tenant_id=tenant, now=now, subject=""),
        ]
    rng = random.Random(3)
    held = {
        space: index.first_vectors(index.ids(), [space])[space] for space in VectorSpace
    }  # queries near real memories
    compared = 0
    for scope in scopes:
        for query in ["lake hiking with her sister", "咖啡 拿铁", "order X033Q", "piano tennis Updated"]:
            terms = query_terms(query)
            for spaces in _READ_SPACES:
                expected = await store.lexical_channel(scope, terms, 20, BM25, spaces)
                got = await reads.lexical_channel(scope, terms, 20, BM25, spaces)
                _same(expected, got)
                assert got.rare_terms == expected.rare_terms
                compared += len(expected.hits)
        for space in VectorSpace:
            vectors = list(held[space].values())
            for _ in range(3):
                query_vector = (rng.choice(vectors) + rng.gauss(0, 0.02)).astype(np.float32)
                searched = (space, VectorSpace.MULTILINGUAL) if space is VectorSpace.ENGLISH else (space,)
                for without_english in (False, True):
                    args = (scope, query_vector, 15, space, searched)
                    expected = await store.vector_channel(*args, exact=True, without_english=without_english)
                    got = await reads.vector_channel(*args, without_english=without_english)
                    _same(expected, got)
                    compared += len(expected.hits)
        ids = rng.sample(index.ids(), 25)
        for spaces in _READ_SPACES:
            expected_rows, expected_around = await store.adjacent_turns(scope, ids, spaces)
            got_rows, got_around = await reads.adjacent_turns(scope, ids, spaces)
            assert got_around == expected_around
            by_id = {h.memory.id: h.memory for h in expected_rows.hits}
            assert {h.memory.id: h.memory for h in got_rows.hits} == by_id
            compared += len(by_id)
    assert compared > 1_000  # the comparisons compared something
    assert searches.passes == searches.searches > 50


async def test_the_index_sees_every_change_made_after_it_was_read(
    tier_server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    store, hot, index = await _written_and_held(tier_server, client, tenant)
    scope = Scope(tenant_id=tenant, now=datetime.now(UTC), subject=SUBJECT)
    written = await client.write(
        tenant, "Ann adopted a grey kitten named Pixel.", subject=SUBJECT, tier="semantic", kind="fact"
    )
    listed = (await client.list(tenant, subject=SUBJECT, page_size=5)).memories
    victim, moved = [m for m in listed if m.id != written.memory.id][:2]
    await client.delete(tenant, victim.id)

    fresh = await hot.index_for(replace_now(scope))
    assert fresh is index  # the same index, changed in place
    assert written.memory.id in fresh
    terms = query_terms("grey kitten Pixel")
    found = await IndexedReads(store, fresh, hot.vector_searches, primary=True).lexical_channel(
        scope, terms, 5, BM25, (VectorSpace.ENGLISH,)
    )
    assert found.hits and found.hits[0].memory.id == written.memory.id
    assert victim.id in fresh  # deleted: still held (a neighbour of others), no longer found
    near_victim = fresh.first_vectors([victim.id], [VectorSpace.MULTILINGUAL])[VectorSpace.MULTILINGUAL][
        victim.id
    ]
    near = nearest(fresh, fresh.visible(replace_now(scope)), VectorSpace.MULTILINGUAL, near_victim, 200)
    assert victim.id not in {s.memory.id for s in near} and len(near) > 50

    await client.update(tenant, moved.id, subject="bob")
    # Moved away: the tenant's removal mark makes the next look build the subject again.
    assert await hot.index_for(replace_now(scope)) is None
    assert await hot.warm(tenant, SUBJECT)
    rebuilt = await hot.index_for(replace_now(scope))
    assert rebuilt is not None and moved.id not in rebuilt
    assert written.memory.id in rebuilt

    await client.erase(tenant, memory_ids=[written.memory.id], reason="test")
    assert await hot.index_for(replace_now(scope)) is None  # erased: built again before use
    assert await hot.warm(tenant, SUBJECT)
    again = await hot.index_for(replace_now(scope))
    assert again is not None and written.memory.id not in again


async def test_a_whole_tenants_index_keeps_the_lexical_statistics_until_the_tenant_changes(
    tier_server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    store, hot, index = await _written_and_held(tier_server, client, tenant, "")
    scope = Scope(tenant_id=tenant, now=datetime.now(UTC), subject=SUBJECT)
    terms = query_terms("a zebra by the lake")
    reads = IndexedReads(store, index, hot.vector_searches, primary=True)
    first = await reads.term_statistics(tenant, terms)
    assert first is not None and first == await store.term_statistics(tenant, terms)
    assert "zebra" not in first.df and first.df["lake"] > 0
    assert index.statistics(terms) == first  # kept: the next recall asks the database nothing

    written = await client.write(
        tenant, "Ann saw a zebra by the lake.", subject="bob", tier="episodic", kind="event"
    )
    assert await hot.index_for(replace_now(scope)) is index  # the look applied another subject's write
    assert index.statistics(terms) is None  # and dropped what was kept
    second = await reads.term_statistics(tenant, terms)
    assert second == await store.term_statistics(tenant, terms)
    assert second is not None and second.df["zebra"] == 1 and second.documents == first.documents + 1
    bob = Scope(tenant_id=tenant, now=datetime.now(UTC), subject="bob")
    found = await reads.lexical_channel(bob, terms, 5, BM25, (VectorSpace.ENGLISH,))
    assert found.hits[0].memory.id == written.memory.id

    # A replica's statistics may be older than the index: what a read there finds is not kept.
    await client.write(tenant, "Ann fed the zebra.", subject="bob", tier="episodic", kind="event")
    assert await hot.index_for(replace_now(scope)) is index and index.statistics(terms) is None
    assert await IndexedReads(store, index, hot.vector_searches, primary=False).term_statistics(tenant, terms)
    assert index.statistics(terms) is None


async def test_a_read_without_replicas_runs_on_the_primarys_store(tier_server: RunningServer) -> None:
    assert tier_server.routing is not None
    route = tier_server.routing.route(MemoryStore)

    async def where(store: MemoryStore) -> tuple[MemoryStore, bool]:
        return store, route.on_primary(store)

    first, on_primary = await route.read(None, where)
    assert on_primary and (await route.read(None, where))[0] is first  # one store, made once


async def test_a_subjects_index_keeps_no_statistics_of_the_tenant(
    tier_server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    store, hot, index = await _written_and_held(tier_server, client, tenant, SUBJECT)
    terms = query_terms("lake hiking")
    assert await IndexedReads(store, index, hot.vector_searches, primary=True).term_statistics(tenant, terms)
    assert index.statistics(terms) is None  # another subject's write would change them unseen here


def replace_now(scope: Scope) -> Scope:
    return Scope(tenant_id=scope.tenant_id, now=datetime.now(UTC), subject=scope.subject)
