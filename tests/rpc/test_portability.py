"""Export, Import and Erase over real gRPC on a real PostgreSQL: an export erased and imported again is
the same tenant, field by field; an erased subject leaves no trace in any table while the others'
memories, statistics and recall results stay as they were; an export is one snapshot."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import asyncpg
import grpc
import pytest

from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight_server.config import Settings
from hindsight_server.process.server import start_server
from tests.conftest import MovableClock
from tests.support.memory_fields import MemoryFields

BOOKING: MemoryFields = {"tier": "episodic", "kind": "task", "intent": "book_meeting_room"}


async def _everything(
    client: HindsightClient, tenant: str, **filters: Any
) -> tuple[pb.ExportHeader, list[pb.ExportedMemory]]:
    header: pb.ExportHeader | None = None
    memories: list[pb.ExportedMemory] = []
    async for item in client.export(tenant, include_history=True, **filters):
        if item.HasField("header"):
            assert header is None, "one header, first"
            header = item.header
        else:
            assert header is not None, "the header comes first"
            memories.append(item.memory)
    assert header is not None
    assert header.count == len(memories)
    return header, memories


async def _a_life(
    client: HindsightClient, tenant: str, clock: MovableClock, subject: str, marker: str
) -> None:
    """A little of everything a tenant holds: facts, a superseded booking, a session with its turns
    and the episode consolidated from them, a private memory."""
    for index in range(5):
        await client.write(
            tenant,
            f"{marker} fact {index}: the {index}th floor has a kettle",
            tier="semantic",
            kind="fact",
            subject=subject,
        )
    await client.write(
        tenant,
        f"{marker} book room A on Wednesday",
        entities={"date": "2026-12-02"},
        subject=subject,
        **BOOKING,
    )
    clock.advance(timedelta(minutes=5))
    await client.write(
        tenant,
        f"{marker} book room A on Friday",
        entities={"date": "2026-12-04"},
        subject=subject,
        **BOOKING,
    )
    session = f"s-{marker}"
    for text in (f"{marker} I live in Lyon", f"{marker} I prefer tea to coffee", f"{marker} remember that"):
        await client.append_turn(tenant, session, text, subject=subject)
    await client.end_session(tenant, session, reason="done")
    await client.write(
        tenant,
        f"{marker} the agent's own note",
        tier="semantic",
        kind="fact",
        subject=subject,
        agent_id="agent-1",
        visibility="private",
    )


async def _derive(client: HindsightClient, tenant: str, sources: Sequence[pb.Memory], content: str) -> str:
    """A memory derived from `sources` (as the patterns job makes habits), put in through Import."""
    derived = pb.Memory()
    derived.CopyFrom(sources[0])
    derived.id = str(uuid.uuid4())
    derived.content = content
    derived.idempotency_key = ""
    derived.supersedes = derived.superseded_by = ""
    derived.derived_from[:] = [source.id for source in sources]
    await client.import_memories(tenant, [pb.ExportedMemory(memory=derived)])
    return derived.id


def _by_id(memories: Sequence[pb.ExportedMemory]) -> dict[str, pb.ExportedMemory]:
    return {m.memory.id: m for m in memories}


async def test_export_erase_import_restores_the_same_tenant(
    client: HindsightClient, tenant: str, clock: MovableClock
) -> None:
    await _a_life(client, tenant, clock, "user", "rt")
    facts = [m.memory for m in (await _everything(client, tenant))[1] if m.memory.kind == pb.KIND_FACT]
    await _derive(client, tenant, facts[:2], "rt the user likes kettles (a habit)")
    header, exported = await _everything(client, tenant)
    statuses = {m.memory.status for m in exported}
    assert pb.STATUS_SUPERSEDED in statuses and pb.STATUS_ACTIVE in statuses
    assert any(m.memory.supersedes for m in exported) and any(m.memory.derived_from for m in exported)
    assert [m.memory.id for m in exported] == sorted(m.memory.id for m in exported)  # id order

    erased = await client.erase(tenant, whole_tenant=True, reason="test: round trip")
    assert erased.memories == len(exported)
    assert erased.sessions == 1 and erased.turns >= 3
    assert (await _everything(client, tenant))[1] == []

    answer = await client.import_memories(tenant, exported, models=header.models)
    assert (answer.imported, answer.already_present) == (len(exported), 0)
    assert list(answer.ids) == [m.memory.id for m in exported]
    _, again = await _everything(client, tenant)
    assert _by_id(again) == _by_id(exported)  # every field, version links and provenance included

    twice = await client.import_memories(tenant, exported, models=header.models)
    assert (twice.imported, twice.already_present) == (0, len(exported))
    assert _by_id((await _everything(client, tenant))[1]) == _by_id(exported)

    chained = next(m.memory for m in again if m.memory.supersedes)
    history = await client.history(tenant, chained.id)
    assert [v.id for v in history.versions] == [chained.supersedes, chained.id]


async def test_an_import_under_new_ids_keeps_the_links_between_them(
    client: HindsightClient, tenant: str, clock: MovableClock
) -> None:
    await _a_life(client, tenant, clock, "user", "nid")
    facts = [m.memory for m in (await _everything(client, tenant))[1] if m.memory.kind == pb.KIND_FACT]
    await _derive(client, tenant, facts[:2], "nid the user likes kettles (a habit)")
    header, exported = await _everything(client, tenant)
    target = f"{tenant}-copy"
    answer = await client.import_memories(target, exported, new_ids=True, models=header.models)
    assert answer.imported == len(exported)
    mapping = dict(zip((m.memory.id for m in exported), answer.ids, strict=True))
    assert not set(mapping) & set(mapping.values())
    _, copied = await _everything(client, target)
    copies = _by_id(copied)
    for original in exported:
        copy = copies[mapping[original.memory.id]].memory
        assert (copy.content, copy.status, copy.tier, copy.subject) == (
            original.memory.content,
            original.memory.status,
            original.memory.tier,
            original.memory.subject,
        )
        assert copy.supersedes == mapping.get(original.memory.supersedes, "")
        assert copy.superseded_by == mapping.get(original.memory.superseded_by, "")
        assert list(copy.derived_from) == [mapping[s] for s in original.memory.derived_from]
    again = await client.import_memories(target, exported, new_ids=True, models=header.models)
    assert (again.imported, again.already_present) == (0, len(exported))  # the same new ids again


async def test_a_chain_split_over_batches_is_whole_once_both_are_in(
    client: HindsightClient, tenant: str, clock: MovableClock
) -> None:
    await _a_life(client, tenant, clock, "user", "split")
    header, exported = await _everything(client, tenant)
    target = f"{tenant}-split"
    newer = next(m for m in exported if m.memory.supersedes)
    older = next(m for m in exported if m.memory.id == newer.memory.supersedes)
    await client.import_memories(target, [newer], models=header.models)  # the newer first, alone
    assert (await client.get(target, newer.memory.id)).supersedes == ""  # its target is not here yet
    await client.import_memories(target, [older], models=header.models)
    assert (await client.get(target, newer.memory.id)).supersedes == older.memory.id
    assert (await client.get(target, older.memory.id)).superseded_by == newer.memory.id


async def test_a_bad_memory_fails_its_whole_batch(
    client: HindsightClient, tenant: str, clock: MovableClock
) -> None:
    await _a_life(client, tenant, clock, "user", "bad")
    header, exported = await _everything(client, tenant)
    broken = pb.ExportedMemory()
    broken.CopyFrom(exported[1])
    broken.memory.id = "not-a-uuid"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.import_memories(f"{tenant}-bad", [exported[0], broken], models=header.models)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "memories[1].memory.id" in (refused.value.details() or "")
    assert (await _everything(client, f"{tenant}-bad"))[1] == []  # nothing of the batch


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"content": ""}, "memories[0].memory.content"),
        ({"content": "x" * 70_000}, "memories[0].memory.content"),
        ({"confidence": 1.5}, "memories[0].memory.confidence"),
        ({"subject": "a\x01b"}, "memories[0].memory.subject"),
        ({"visibility": pb.VISIBILITY_PRIVATE, "agent_id": ""}, "memories[0].memory.visibility"),
        ({"tier": pb.TIER_UNSPECIFIED}, "memories[0].memory.tier"),
        ({"supersedes": "not-an-id"}, "memories[0].memory.supersedes"),
    ],
)
async def test_an_imported_memory_has_the_bounds_of_a_written_one(
    client: HindsightClient, tenant: str, change: dict[str, Any], field: str
) -> None:
    await client.write(tenant, "a memory to export", tier="semantic", kind="fact")
    _, (exported,) = await _everything(client, tenant)
    for name, value in change.items():
        setattr(exported.memory, name, value)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.import_memories(f"{tenant}-bounds", [exported])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith(f"{field}: ")


async def test_an_export_is_one_snapshot_under_concurrent_writes(
    client: HindsightClient, tenant: str
) -> None:
    batch = [memory_input(f"note {i} about the garden", tier="semantic", kind="fact") for i in range(120)]
    for start in range(0, 600, 120):
        await client.write_batch(tenant, batch[:120], verbatim=True)
        batch = [
            memory_input(f"note {start + i} about the pond", tier="semantic", kind="fact") for i in range(120)
        ]
    stream = client.export(tenant, include_history=True)
    first = await anext(stream)
    assert first.header.count == 600
    one = await anext(stream)
    # Meanwhile: more memories, and one deleted.
    await client.write_batch(
        tenant, [memory_input("written during the export", tier="semantic", kind="fact")]
    )
    await client.delete(tenant, one.memory.memory.id)
    rest = [item.memory async for item in stream]
    seen = [one.memory, *rest]
    assert len(seen) == 600
    assert all(m.memory.content != "written during the export" for m in seen)
    assert all(m.memory.status == pb.STATUS_ACTIVE for m in seen)  # as it was when the export began


HELD_ROWS = 600  # of 5 KB each: 3 MB, few rows (their writing is the tests' cost, not their bytes)


async def _held_export_data(client: HindsightClient, tenant: str) -> None:
    """More than gRPC's flow control lets a server send ahead of its reader: its streams stay open."""
    padding = " and the rest of the story" * 200
    for start in range(0, HELD_ROWS, 200):
        batch = [
            memory_input(f"held {i}{padding}", tier="semantic", kind="fact")
            for i in range(start, start + 200)
        ]
        await client.write_batch(tenant, batch, verbatim=True)


async def test_exports_beyond_the_servers_limit_are_told_to_retry(
    client: HindsightClient, tenant: str
) -> None:
    """Each export holds a connection while it streams: the server runs database.max_concurrent_exports
    (2) at once, one per tenant (database.max_exports_per_tenant), and refuses more with
    RESOURCE_EXHAUSTED until one ends."""
    other = f"{tenant}-other"
    for owner in (tenant, other):
        await _held_export_data(client, owner)
    first = client.export(tenant)
    await anext(first)  # the header: its snapshot is open
    with pytest.raises(grpc.aio.AioRpcError) as own_share:
        await anext(client.export(tenant))
    assert own_share.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_exports_per_tenant" in (own_share.value.details() or "")
    second = client.export(other)  # another tenant still finds a slot
    await anext(second)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await anext(client.export(f"{tenant}-third"))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_concurrent_exports" in (refused.value.details() or "")
    for stream in (first, second):
        assert len([item async for item in stream]) == HELD_ROWS
    assert (await _everything(client, tenant))[0].count == HELD_ROWS  # they ended: exports run again


async def test_an_export_whose_reader_stops_is_ended_and_frees_its_slot(
    make_settings: Callable[..., Settings], tenant: str
) -> None:
    running = await start_server(
        make_settings(database__export_idle_timeout_s=1, database__max_concurrent_exports=1)
    )
    try:
        target = f"127.0.0.1:{running.port}"
        async with HindsightClient(target, timeout_s=30) as client:
            await _held_export_data(client, tenant)
            # A reader with gRPC's first flow-control window (64 KiB, no growing it): the server can send
            # only that far ahead of what is read.
            async with grpc.aio.insecure_channel(target, options=[("grpc.http2.bdp_probe", 0)]) as channel:
                stalled = pb_grpc.MemoryServiceStub(channel).Export(pb.ExportRequest(tenant_id=tenant))
                await anext(aiter(stalled))
                await asyncio.sleep(2.5)  # reads nothing more: the server stops waiting after 1 s
                header, memories = await _everything(client, f"{tenant}-next")  # the slot is free again
                assert header.count == 0 and memories == []
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    _ = [item async for item in stalled]
                assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                assert "after_id" in (ended.value.details() or "")
    finally:
        await running.stop()


async def test_an_export_resumes_after_the_last_id(client: HindsightClient, tenant: str) -> None:
    await client.write_batch(
        tenant,
        [memory_input(f"resume note {i}", tier="semantic", kind="fact") for i in range(30)],
        verbatim=True,
    )
    _, every = await _everything(client, tenant)
    cut = every[11].memory.id
    header, rest = await _everything(client, tenant, after_id=cut)
    assert [m.memory.id for m in rest] == [m.memory.id for m in every[12:]]
    assert header.count == 18


# ------------------------------------------------------------------------------------------ erasure


async def _recalls(
    client: HindsightClient, tenant: str, subject: str, queries: Sequence[str]
) -> list[list[str]]:
    """Each query's hits, by content (the ids differ between tenants)."""
    return [
        [
            hit.memory.content
            for hit in (await client.recall(tenant, query, subject=subject, min_score=0)).hits
        ]
        for query in queries
    ]


async def _statistics(dsn: str, tenant: str) -> tuple[Any, ...]:
    connection = await asyncpg.connect(dsn)
    try:
        stats = await connection.fetchrow(
            "SELECT documents, terms FROM lexical_stats WHERE tenant_id = $1", tenant
        )
        df = await connection.fetch(
            "SELECT term, df FROM lexical_df WHERE tenant_id = $1 ORDER BY term", tenant
        )
        return tuple(stats), [tuple(row) for row in df]
    finally:
        await connection.close()


async def _bm25_exact(dsn: str, tenant: str) -> None:
    """The tenant's BM25 statistics equal what its rows hold now (as if the erased had never been)."""
    connection = await asyncpg.connect(dsn)
    try:
        stats = await connection.fetchrow(
            "SELECT documents, terms FROM lexical_stats WHERE tenant_id = $1", tenant
        )
        counted = await connection.fetchrow(
            """SELECT count(*) AS documents, coalesce(sum(lexical_terms), 0) AS terms
               FROM memories WHERE tenant_id = $1""",
            tenant,
        )
        assert (stats["documents"], stats["terms"]) == (counted["documents"], counted["terms"])
        df = await connection.fetch(
            "SELECT term, df FROM lexical_df WHERE tenant_id = $1 ORDER BY term", tenant
        )
        recount = await connection.fetch(
            """SELECT term, count(*) AS df FROM memories, unnest(tsvector_to_array(lexical)) AS term
               WHERE tenant_id = $1 GROUP BY term ORDER BY term""",
            tenant,
        )
        assert [tuple(r) for r in df] == [tuple(r) for r in recount]
    finally:
        await connection.close()


async def _tables_holding(dsn: str, needle: str) -> list[str]:
    """Every table.column of the database in which `needle` occurs, as text or as bytes."""
    connection = await asyncpg.connect(dsn)
    try:
        columns = await connection.fetch(
            """SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
               JOIN information_schema.tables t USING (table_schema, table_name)
               WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
                 AND c.data_type IN ('text', 'jsonb', 'bytea', 'ARRAY', 'tsvector', 'USER-DEFINED')"""
        )
        found = []
        for table, column, data_type in columns:
            test = (
                f"position(convert_to($1, 'UTF8') in \"{column}\") > 0"
                if data_type == "bytea"
                else f"\"{column}\"::text LIKE '%' || $1 || '%'"
            )
            if await connection.fetchval(f'SELECT EXISTS (SELECT FROM "{table}" WHERE {test})', needle):
                found.append(f"{table}.{column}")
        return found
    finally:
        await connection.close()


async def test_erasing_a_subject_leaves_nothing_of_it_and_the_others_as_they_were(
    client: HindsightClient, tenant: str, clock: MovableClock, postgres_dsn: str
) -> None:
    await _a_life(client, tenant, clock, "alice", "zqalice")
    await _a_life(client, tenant, clock, "bob", "zqbob")
    # An answer kept for a retry that holds alice's words.
    await client.update(
        tenant,
        (
            await client.write(tenant, "zqalice spare key", tier="semantic", kind="fact", subject="alice")
        ).memory.id,
        content="zqalice spare key in the pot",
    )
    # The same life of bob's in a tenant alice never was in: what erasing her must leave.
    never = f"{tenant}-never-alice"
    await _a_life(client, never, clock, "bob", "zqbob")
    _, bob_exported = await _everything(client, tenant, subject="bob")
    assert await _tables_holding(postgres_dsn, "zqalice")  # the search can find it

    erased = await client.erase(tenant, subject="alice", reason="GDPR art. 17, ticket 1")
    assert erased.memories >= 10 and erased.sessions == 1 and erased.turns >= 3 and erased.replies >= 1

    assert await _tables_holding(postgres_dsn, "zqalice") == []
    assert (await _everything(client, tenant, subject="alice"))[1] == []
    for query in ("kettle floor", "Lyon", "spare key"):
        hits = (await client.recall(tenant, query, min_score=0)).hits
        assert all(hit.memory.subject != "alice" for hit in hits)
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await client.summarize(tenant, "s-zqalice")
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND

    _, bob_after = await _everything(client, tenant, subject="bob")
    assert _by_id(bob_after) == _by_id(bob_exported)
    # Bob's recalls rank as if alice had never been there: the BM25 statistics are exact.
    queries = ["zqbob kettle floor", "book room Friday", "tea coffee", "Lyon"]
    assert await _recalls(client, tenant, "bob", queries) == await _recalls(client, never, "bob", queries)
    await _bm25_exact(postgres_dsn, tenant)
    assert await _statistics(postgres_dsn, tenant) == await _statistics(postgres_dsn, never)

    again = await client.erase(tenant, subject="alice", reason="GDPR art. 17, ticket 1")
    assert again.memories == 0  # idempotent: nothing left to erase


async def test_the_audit_record_names_who_what_and_when_without_content(
    client: HindsightClient, tenant: str, clock: MovableClock, postgres_dsn: str
) -> None:
    await _a_life(client, tenant, clock, "carol", "zqcarol")
    erased = await client.erase(tenant, subject="carol", reason="user asked, ticket 9")
    connection = await asyncpg.connect(postgres_dsn)
    try:
        record = await connection.fetchrow(
            "SELECT * FROM erasures WHERE tenant_id = $1 AND id = $2", tenant, uuid.UUID(erased.erasure_id)
        )
    finally:
        await connection.close()
    assert record["scope"] == "subject" and record["subject"] == "carol" and record["state"] == "done"
    assert record["reason"] == "user asked, ticket 9" and record["requested_by"]
    assert record["memories"] == erased.memories and record["finished_at"] is not None
    assert "zqcarol" not in " ".join(str(value) for value in record.values())


async def test_erasing_named_memories_takes_their_versions_turns_and_derived_ones(
    client: HindsightClient, tenant: str, clock: MovableClock, postgres_dsn: str
) -> None:
    await _a_life(client, tenant, clock, "dave", "zqdave")
    _, exported = await _everything(client, tenant)
    newer = next(m.memory for m in exported if m.memory.supersedes)
    erased = await client.erase(tenant, memory_ids=[newer.id], reason="forget the booking")
    assert erased.memories == 2  # the booking and the version it replaced
    for memory_id in (newer.id, newer.supersedes):
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await client.get(tenant, memory_id)
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    _, left = await _everything(client, tenant)
    assert len(left) == len(exported) - 2
    assert await _tables_holding(postgres_dsn, "zqdave book room") == []

    turn_fact = next(
        m.memory for m in left if "Lyon" in m.memory.content and m.memory.tier != pb.TIER_WORKING
    )
    derived = await _derive(client, tenant, [turn_fact], "zqdave lives in a city (derived)")
    deeper = await _derive(client, tenant, [await client.get(tenant, derived)], "zqdave derived twice")
    await client.erase(tenant, memory_ids=[turn_fact.id])
    assert await _tables_holding(postgres_dsn, "zqdave I live in Lyon") == []  # the turn and its words
    remaining = {m.memory.id for m in (await _everything(client, tenant))[1]}
    assert not {derived, deeper} & remaining  # what was made from it, to any depth
    assert await _tables_holding(postgres_dsn, "zqdave derived twice") == []


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({}, "whole_tenant"),
        ({"whole_tenant": False}, "whole_tenant"),
        ({"memories": pb.MemoryIds()}, "memories.ids"),
        ({"memories": pb.MemoryIds(ids=["nope"])}, "memories.ids[0]"),
        ({"subject": "x", "reason": "r" * 501}, "reason"),
    ],
)
async def test_a_bad_erasure_is_refused_naming_what_is_wrong(
    client: HindsightClient, tenant: str, request_fields: dict[str, Any], field: str
) -> None:
    async with grpc.aio.insecure_channel(client.target) as channel:
        stub = pb_grpc.MemoryServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Erase(pb.EraseRequest(tenant_id=tenant, **request_fields))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (refused.value.details() or "")


async def test_erasure_is_immediate_for_a_concurrent_reader(client: HindsightClient, tenant: str) -> None:
    await client.write_batch(
        tenant,
        [memory_input(f"zqeve diary {i}", tier="semantic", kind="fact", subject="eve") for i in range(300)],
        verbatim=True,
    )
    await client.erase(tenant, subject="eve")
    found = await asyncio.gather(
        client.recall(tenant, "zqeve diary", min_score=0), client.list(tenant, subject="eve")
    )
    assert list(found[0].hits) == [] and list(found[1].memories) == []


def _bare(exported: pb.ExportedMemory, **links: str) -> pb.ExportedMemory:
    """The exported memory under a new id, with only the version links given."""
    copy = pb.ExportedMemory()
    copy.CopyFrom(exported)
    copy.memory.id = str(uuid.uuid4())
    copy.memory.idempotency_key = ""
    copy.memory.supersedes = links.get("supersedes", "")
    copy.memory.superseded_by = links.get("superseded_by", "")
    return copy


async def _refused(client: HindsightClient, tenant: str, memories: Sequence[pb.ExportedMemory]) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.import_memories(tenant, memories)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return refused.value.details() or ""


async def test_an_import_cannot_make_a_version_chain_that_never_ends(
    client: HindsightClient, tenant: str
) -> None:
    await client.write(tenant, "a memory to export", tier="semantic", kind="fact")
    _, (exported,) = await _everything(client, tenant)
    target = f"{tenant}-loops"
    selfish = _bare(exported)
    selfish.memory.supersedes = selfish.memory.id
    assert (await _refused(client, target, [selfish])).startswith("memories[0].memory.supersedes: ")
    selfish.memory.supersedes, selfish.memory.superseded_by = "", selfish.memory.id
    assert (await _refused(client, target, [selfish])).startswith("memories[0].memory.superseded_by: ")

    a, b = _bare(exported), _bare(exported)
    a.memory.supersedes, b.memory.supersedes = b.memory.id, a.memory.id
    assert "loop" in await _refused(client, target, [a, b])
    assert (await _everything(client, target))[1] == []  # nothing of the batch

    # Over three calls, each fine alone: A and B, then C between them, then D closing A -> C -> B -> D -> A.
    a, b = _bare(exported), _bare(exported)
    await client.import_memories(target, [a, b])
    c = _bare(exported, superseded_by=a.memory.id, supersedes=b.memory.id)
    await client.import_memories(target, [c])
    d = _bare(exported, superseded_by=b.memory.id, supersedes=a.memory.id)
    assert "loop" in await _refused(client, target, [d])
    chain = await client.history(target, a.memory.id, timeout_s=5)
    assert [m.id for m in chain.versions] == [b.memory.id, c.memory.id, a.memory.id]

    # A memory already here keeps its links: a re-import naming other versions leaves them as they are.
    e = _bare(exported, supersedes=a.memory.id)
    stolen = pb.ExportedMemory()
    stolen.CopyFrom(c)
    stolen.memory.superseded_by = e.memory.id
    await client.import_memories(target, [stolen, e])
    assert (await client.get(target, c.memory.id)).superseded_by == a.memory.id
    assert (await client.get(target, a.memory.id)).superseded_by == e.memory.id


async def test_history_ends_on_a_loop_already_in_the_database(
    client: HindsightClient, tenant: str, postgres_dsn: str
) -> None:
    """Links written before the import checked them (or by hand) cannot make History run forever."""
    first = await client.write(tenant, "the user lives in Lisbon", tier="semantic", kind="fact")
    second = await client.write(tenant, "the user likes green tea", tier="semantic", kind="fact")
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await connection.execute(
            """UPDATE memories SET supersedes = $3::uuid, superseded_by = $3::uuid
               WHERE tenant_id = $1 AND id = $2::uuid""",
            tenant,
            first.memory.id,
            second.memory.id,
        )
        await connection.execute(
            """UPDATE memories SET supersedes = $3::uuid, superseded_by = $3::uuid
               WHERE tenant_id = $1 AND id = $2::uuid""",
            tenant,
            second.memory.id,
            first.memory.id,
        )
    finally:
        await connection.close()
    chain = await client.history(tenant, first.memory.id, timeout_s=5)
    assert sorted(m.id for m in chain.versions) == sorted([first.memory.id, second.memory.id])
