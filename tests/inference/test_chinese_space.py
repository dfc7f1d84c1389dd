"""Chinese memories' second multilingual vector (VectorSpace.CHINESE: multilingual-e5-small, `embed_zh` on
the real Triton tier), through the real server: who gets which vector, and which recalls ask the second
model (pipelines/write.py, pipelines/recall.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hindsight.client import HindsightClient
from hindsight_server.domain.model import VectorSpace
from hindsight_server.process.running import RunningServer
from tests.support.memory_fields import MemoryFields

FACT: MemoryFields = {"tier": "semantic", "kind": "fact"}
SUBJECT = "user-9"


@pytest.fixture(scope="module")
async def client(tier_server: RunningServer) -> AsyncIterator[HindsightClient]:
    async with HindsightClient(f"127.0.0.1:{tier_server.port}", timeout_s=30) as shared:
        yield shared


def _chinese_queries_embedded(server: RunningServer) -> int:
    assert server.inference is not None
    stats = server.inference.query_cache_stats()[VectorSpace.CHINESE]
    return stats.hits + stats.misses


async def test_each_memory_gets_its_languages_vector_and_a_chinese_query_asks_both_models(
    tier_server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    home = await client.write(tenant, "用户住在上海浦东", subject=SUBJECT, **FACT)
    coffee = await client.write(tenant, "用户喜欢喝不加糖的咖啡", subject=SUBJECT, **FACT)
    hiking = await client.write(tenant, "The user likes hiking in the Alps", subject=SUBJECT, **FACT)
    rows = await tier_server.pool.fetch(
        """SELECT id::text, embedding_state, embedding IS NOT NULL AS multilingual,
                  embedding_en IS NOT NULL AS english, embedding_zh IS NOT NULL AS chinese
           FROM memories WHERE tenant_id = $1""",
        tenant,
    )
    held = {row["id"]: (row["multilingual"], row["english"], row["chinese"]) for row in rows}
    assert held == {
        home.memory.id: (True, False, True),  # inline, a write of one: ready at once
        coffee.memory.id: (True, False, True),
        hiking.memory.id: (True, True, False),
    }
    assert {row["embedding_state"] for row in rows} == {"ready"}

    before = _chinese_queries_embedded(tier_server)
    found = await client.recall(tenant, "用户住在哪里？", subject=SUBJECT)
    assert found.hits[0].memory.id == home.memory.id
    assert _chinese_queries_embedded(tier_server) == before + 1  # the joined text, once
    english = await client.recall(tenant, "Where does the user go hiking?", subject=SUBJECT)
    assert english.hits[0].memory.id == hiking.memory.id
    assert _chinese_queries_embedded(tier_server) == before + 1  # an English query never asks it
