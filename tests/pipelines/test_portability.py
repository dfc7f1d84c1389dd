"""Export and import on the in-memory store (tests/support/fakes): an export's header and memories from
one snapshot, in id order and as selected, its bounds per server and per tenant, bad queries; an import
that keeps each memory as exported, reuses the vectors of the same models only, renames ids on request,
replays, links versions split over batches, refuses bad batches whole, and tells the planner statistics
and scope sizes. The SQL behind the same calls runs in tests/rpc/test_portability.py."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from hindsight_server.domain.errors import InvalidArgument, ResourceExhausted
from hindsight_server.domain.model import EmbeddingState, Kind, Memory, Status, Tier, TimeWindow, VectorSpace
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.portability import (
    EmbeddingModel,
    ExportHeader,
    ExportQuery,
    PortableMemory,
    imported_id,
)
from hindsight_server.domain.vectors import FloatVector
from hindsight_server.pipelines.portability import EXPORT_PAGE, PortabilityPipeline
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from hindsight_server.pipelines.statistics import StatisticsRefresh
from tests.domain.builders import memory
from tests.support.fakes.portability_store import InMemoryPortabilityStore

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
MODELS = (
    EmbeddingModel(VectorSpace.MULTILINGUAL, "bge-m3", 4),
    EmbeddingModel(VectorSpace.ENGLISH, "bge-small-en", 3),
)


@dataclass
class Portability:
    pipeline: PortabilityPipeline
    store: InMemoryPortabilityStore
    sizes: ScopeSizes
    statistics: StatisticsRefresh


def portability(*memories: Memory, inference: bool = True, **bounds: Any) -> Portability:
    store = InMemoryPortabilityStore()
    for stored in memories:
        store.add(stored)
    sizes = ScopeSizes(store)
    statistics = StatisticsRefresh(store, after_rows=2)
    pipeline = PortabilityPipeline(
        store,
        store,
        MODELS,
        Limits(),
        lambda: NOW,
        inference=inference,
        statistics=statistics,
        scope_sizes=sizes,
        **bounds,
    )
    return Portability(pipeline, store, sizes, statistics)


def numbered(n: int, **fields: Any) -> Memory:
    return memory(
        **{"id": f"00000000-0000-7000-8000-{n:012d}", "content": f"The user visited museum {n}"} | fields
    )


def vector(size: int, value: float = 1.0) -> FloatVector:
    return np.full(size, value, dtype=np.float32)


async def exported(p: Portability, query: ExportQuery) -> list[ExportHeader | PortableMemory]:
    return [item async for item in p.pipeline.export(query)]


async def test_an_export_is_its_header_then_the_memories_in_id_order_over_pages() -> None:
    memories = [numbered(n) for n in (3, 1, 2)]
    p = portability(*memories, numbered(9, tenant_id="globex"))
    header, *items = await exported(p, ExportQuery("acme"))
    assert header == ExportHeader("acme", None, 3, MODELS, NOW)
    assert [item.memory.id for item in items if isinstance(item, PortableMemory)] == [
        numbered(n).id for n in (1, 2, 3)
    ]


async def test_an_export_longer_than_a_page_carries_every_memory_once() -> None:
    p = portability(*(numbered(n) for n in range(EXPORT_PAGE + 3)))
    _, *items = await exported(p, ExportQuery("acme"))
    ids = [item.memory.id for item in items if isinstance(item, PortableMemory)]
    assert len(ids) == len(set(ids)) == EXPORT_PAGE + 3


@pytest.mark.parametrize(
    ("query", "selected"),
    [
        ({}, [1, 2, 4]),  # no history: neither deleted nor superseded memories
        ({"include_history": True}, [1, 2, 3, 4]),
        ({"subject": "user-8"}, [2]),
        ({"tiers": (Tier.EPISODIC,)}, [4]),
        ({"kinds": (Kind.FACT,)}, [2]),
        ({"window": TimeWindow(NOW - timedelta(days=2), NOW)}, [2, 4]),
        ({"after_id": numbered(1).id}, [2, 4]),
        ({"viewer": "agent-b"}, [1, 2]),  # another agent's private memory is not this one's to take
    ],
)
async def test_an_export_carries_what_its_query_selects(query: dict[str, Any], selected: list[int]) -> None:
    p = portability(
        numbered(1, created_at=NOW - timedelta(days=9)),
        numbered(2, subject="user-8", kind=Kind.FACT, created_at=NOW - timedelta(days=1)),
        numbered(3, status=Status.DELETED),
        numbered(
            4,
            tier=Tier.EPISODIC,
            visibility="private",
            agent_id="agent-a",
            created_at=NOW - timedelta(hours=1),
        ),
    )
    header, *items = await exported(p, ExportQuery("acme", **query))
    assert isinstance(header, ExportHeader) and header.count == len(selected)
    assert [item.memory.id for item in items if isinstance(item, PortableMemory)] == [
        numbered(n).id for n in selected
    ]


async def test_an_export_reads_one_snapshot_whatever_is_written_meanwhile() -> None:
    p = portability(numbered(1), numbered(3))
    stream = p.pipeline.export(ExportQuery("acme"))
    header = await anext(stream)
    p.store.add(numbered(2))  # written after the export began
    rest = [item async for item in stream]
    assert isinstance(header, ExportHeader) and header.count == 2 == len(rest)


async def test_an_export_with_embeddings_carries_each_memorys_vectors() -> None:
    p = portability()
    p.store.add(numbered(1), {VectorSpace.MULTILINGUAL: vector(4)})
    p.store.add(numbered(2))
    _, first, second = await exported(p, ExportQuery("acme", include_embeddings=True))
    assert isinstance(first, PortableMemory) and isinstance(second, PortableMemory)
    assert list(first.vectors) == [VectorSpace.MULTILINGUAL] and second.vectors == {}
    _, plain, _ = await exported(p, ExportQuery("acme"))
    assert isinstance(plain, PortableMemory) and plain.vectors == {}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        (ExportQuery("", None), "tenant_id"),
        (ExportQuery("acme", window=TimeWindow(NOW, NOW - timedelta(days=1))), "time_range.end"),
        (ExportQuery("acme", after_id="not-a-uuid"), "after_id"),
    ],
)
async def test_a_bad_export_query_is_refused_before_reading(query: ExportQuery, field: str) -> None:
    p = portability(numbered(1))
    with pytest.raises(InvalidArgument) as err:
        await exported(p, query)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("tenants", "message"),
    [
        (["acme", "globex"], "this server runs as many exports as database.max_concurrent_exports allows"),
        (["acme"], "tenant 'acme' runs 1 exports on this server, as many as database.max_exports_per_tenant"),
    ],
)
async def test_exports_are_bounded_per_server_and_per_tenant(tenants: list[str], message: str) -> None:
    p = portability(numbered(1), numbered(2, tenant_id="globex"), max_concurrent_exports=2)
    running = [p.pipeline.export(ExportQuery(tenant)) for tenant in tenants]
    for stream in running:
        await anext(stream)
    with pytest.raises(ResourceExhausted, match=message):
        await exported(p, ExportQuery("acme"))
    for stream in running:
        assert len([item async for item in stream]) == 1  # each runs to its end, freeing its slot
    assert len(await exported(p, ExportQuery("acme"))) == 2


async def test_an_import_keeps_each_memory_as_exported_and_counts_what_it_did() -> None:
    old = numbered(1, status=Status.SUPERSEDED, version=3, access_count=7, provenance={"source": "crm"})
    p = portability()
    outcome = await p.pipeline.import_batch(
        "acme", [PortableMemory(old), PortableMemory(numbered(2))], new_ids=False, models=MODELS
    )
    assert (outcome.ids, outcome.imported, outcome.already_present) == ([old.id, numbered(2).id], 2, 0)
    kept = p.store.get("acme", old.id)
    assert (kept.status, kept.version, kept.access_count, kept.provenance) == (
        Status.SUPERSEDED,
        3,
        7,
        {"source": "crm"},
    )
    assert kept.embedding_state is EmbeddingState.PENDING and outcome.embeddings_pending == 2


async def test_an_import_again_finds_what_the_first_one_wrote() -> None:
    p = portability()
    batch = [PortableMemory(numbered(n)) for n in range(3)]
    await p.pipeline.import_batch("acme", batch[:2], new_ids=True, models=MODELS)
    again = await p.pipeline.import_batch("acme", batch, new_ids=True, models=MODELS)
    assert (again.imported, again.already_present) == (1, 2)
    assert again.ids == [imported_id("acme", numbered(n).id) for n in range(3)]
    assert len(p.store.of_tenant("acme")) == 3


@pytest.mark.parametrize(
    ("exported_by", "vectors", "reused", "state"),
    [
        # the same models: kept, nothing left to embed (an English text needs its English vector too)
        (
            MODELS,
            {VectorSpace.MULTILINGUAL: vector(4), VectorSpace.ENGLISH: vector(3)},
            2,
            EmbeddingState.READY,
        ),
        (MODELS, {VectorSpace.MULTILINGUAL: vector(4)}, 1, EmbeddingState.PENDING),
        # another model in the space, or another dimension: not comparable with ours, dropped
        (
            (EmbeddingModel(VectorSpace.MULTILINGUAL, "e5", 4),),
            {VectorSpace.MULTILINGUAL: vector(4)},
            0,
            EmbeddingState.PENDING,
        ),
        (MODELS, {VectorSpace.MULTILINGUAL: vector(5)}, 0, EmbeddingState.PENDING),
    ],
)
async def test_an_import_reuses_only_the_vectors_of_the_models_named_the_same(
    exported_by: tuple[EmbeddingModel, ...],
    vectors: dict[VectorSpace, FloatVector],
    reused: int,
    state: EmbeddingState,
) -> None:
    p = portability()
    item = PortableMemory(numbered(1, content="The user prefers window seats"), vectors)
    outcome = await p.pipeline.import_batch("acme", [item], new_ids=False, models=exported_by)
    assert outcome.embeddings_reused == (1 if reused else 0)
    assert sum(numbered(1).id in p.store.vectors.get(space, {}) for space in VectorSpace) == reused
    assert p.store.get("acme", numbered(1).id).embedding_state is state


@pytest.mark.parametrize(
    ("vectors", "state"),
    [({VectorSpace.MULTILINGUAL: vector(4)}, EmbeddingState.READY), ({}, EmbeddingState.DISABLED)],
)
async def test_a_server_without_inference_keeps_what_came_or_disables_embedding(
    vectors: dict[VectorSpace, FloatVector], state: EmbeddingState
) -> None:
    p = portability(inference=False)
    await p.pipeline.import_batch(
        "acme", [PortableMemory(numbered(1), vectors)], new_ids=False, models=MODELS
    )
    assert p.store.get("acme", numbered(1).id).embedding_state is state


async def test_a_version_chain_split_over_batches_is_linked_once_both_ends_are_in() -> None:
    old = numbered(1, status=Status.SUPERSEDED, superseded_by=numbered(2).id)
    new = numbered(2, supersedes=old.id)
    p = portability()
    await p.pipeline.import_batch("globex", [PortableMemory(new)], new_ids=True, models=MODELS)
    renamed_new = imported_id("globex", new.id)
    assert p.store.get("globex", renamed_new).supersedes is None  # its older end is not here yet
    await p.pipeline.import_batch("globex", [PortableMemory(old)], new_ids=True, models=MODELS)
    renamed_old = imported_id("globex", old.id)
    assert p.store.get("globex", renamed_new).supersedes == renamed_old
    assert p.store.get("globex", renamed_old).superseded_by == renamed_new


async def test_an_import_whose_links_close_a_loop_stores_nothing() -> None:
    a, b = numbered(1), numbered(2)
    p = portability()
    batch = [PortableMemory(replace(a, supersedes=b.id)), PortableMemory(replace(b, supersedes=a.id))]
    with pytest.raises(InvalidArgument, match="the version links would form a loop through memory"):
        await p.pipeline.import_batch("acme", batch, new_ids=False, models=MODELS)
    assert p.store.of_tenant("acme") == []


@pytest.mark.parametrize(
    ("tenant", "memories", "field", "reason"),
    [
        ("acme", [], "memories", "required: at least one exported memory"),
        ("acme", [numbered(1)] * 1_001, "memories", "at most 1000 a call"),
        ("acme", [numbered(1), numbered(2, content="")], "memories[1].memory.content", "must not be empty"),
        (
            "acme",
            [numbered(1, supersedes=numbered(1).id)],
            "memories[0].memory.supersedes",
            "its own version",
        ),
        ("-bad", [numbered(1)], "tenant_id", "use letters, digits"),
    ],
)
async def test_a_bad_import_is_refused_whole(
    tenant: str, memories: list[Memory], field: str, reason: str
) -> None:
    p = portability()
    with pytest.raises(InvalidArgument, match=reason) as err:
        await p.pipeline.import_batch(
            tenant, [PortableMemory(m) for m in memories], new_ids=False, models=MODELS
        )
    assert err.value.field == field
    assert p.store.memories == {}


async def test_an_import_tells_the_planner_statistics_and_scope_sizes_what_it_added() -> None:
    p = portability()
    before = await p.sizes.of("acme", "user-7")
    items = [
        PortableMemory(
            numbered(1, content="The user prefers window seats"), {VectorSpace.MULTILINGUAL: vector(4)}
        ),
        PortableMemory(numbered(2), {VectorSpace.MULTILINGUAL: vector(4), VectorSpace.ENGLISH: vector(3)}),
    ]
    await p.pipeline.import_batch("acme", items, new_ids=False, models=MODELS)
    await p.pipeline.import_batch("acme", items, new_ids=False, models=MODELS)  # a replay adds nothing
    after = await p.sizes.of("acme", "user-7")
    assert (after.rows - before.rows, after.without_english - before.without_english) == (2, 1)
    assert await p.statistics.refresh_next() == "acme"  # two new rows: due (after_rows=2)
    assert p.store.analyzed == ["acme"]
