"""The recall audit over real gRPC and PostgreSQL: on for the tenants configured, nothing at all for the
others; each recall's returned and packed ids in AuditRecalls and in a recall.served Watch event;
paging and filters; the query's hash and (only where allowed) its text; `hindsight audit`; erasure of a
subject and of a memory; retention; an agent-bound key; every bad input naming its field; and the
buffer's bound."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.config import ConfigError, Settings, load_settings
from hindsight_server.domain.audit import RecallServed, query_hash
from hindsight_server.domain.clock import system_clock
from hindsight_server.pipelines.audit import AuditSettings, RecallAudit
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from hindsight_server.store.audit import AuditStore
from tests.support.eventually import eventually
from tests.support.memory_fields import MemoryFields
from tests.support.processes import create_key, run_cli

RUN = uuid.uuid4().hex[:8]
AUDITED = f"audited-{RUN}"  # its audit keeps query texts
HASHED = f"hashed-{RUN}"  # audited, hashes only
KEY = "a server-side key of 32 chars..."
PREFERENCE = MemoryFields(tier="semantic", kind="preference")


@pytest.fixture(scope="module")
async def audit_server(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningServer]:
    running = await start_server(
        make_settings(
            audit__tenants=[AUDITED, HASHED],
            audit__query_text_tenants=[AUDITED],
            audit__query_hash_key=KEY,
            audit__flush_interval_s=0.05,
            feed__poll_s=0.05,
        )
    )
    yield running
    await running.stop()


@pytest.fixture
async def audit_client(audit_server: RunningServer) -> AsyncIterator[HindsightClient]:
    async with HindsightClient(f"127.0.0.1:{audit_server.port}") as client:
        yield client


async def _entries(
    client: HindsightClient, tenant: str, count: int, **filters: object
) -> list[pb.RecallAuditEntry]:
    """The newest entries once `count` are there (the buffer is written every 50 ms)."""
    found: list[pb.RecallAuditEntry] = []

    async def arrived() -> bool:
        nonlocal found
        found = list((await client.audit_recalls(tenant, page_size=100, **filters)).entries)  # type: ignore[arg-type]
        return len(found) >= count

    await eventually(arrived, timeout_s=10)
    return found


async def _three_memories(client: HindsightClient, tenant: str, subject: str) -> list[str]:
    ids = []
    for text in (
        "User prefers window seats",
        "User prefers aisle seats on long flights",
        "User prefers seats",
    ):
        ids.append((await client.write(tenant, text, subject=subject, **PREFERENCE)).memory.id)
    return ids


async def _heartbeat_cursor(client: HindsightClient, tenant: str) -> str:
    stream = client.watch(tenant, heartbeats=True)
    try:
        first = await asyncio.wait_for(anext(stream), 10)
    finally:
        await stream.aclose()
    return first.heartbeat.cursor


async def _served_events(
    client: HindsightClient, tenant: str, cursor: str, count: int, agent_id: str = ""
) -> list[pb.ChangeEvent]:
    stream = client.watch(tenant, cursor, event_types=["recall.served"], agent_id=agent_id)
    try:
        return [(await asyncio.wait_for(anext(stream), 10)).event for _ in range(count)]
    finally:
        await stream.aclose()


async def test_an_audited_recall_is_in_the_audit_and_the_feed_and_another_tenant_has_neither(
    audit_server: RunningServer, audit_client: HindsightClient, tenant: str
) -> None:
    cursor = await _heartbeat_cursor(audit_client, AUDITED)
    mine = await _three_memories(audit_client, AUDITED, "ana")
    theirs = await _three_memories(audit_client, tenant, "ana")  # `tenant` is not audited
    # A budget that packs some of the hits only.
    recalled = await audit_client.recall(AUDITED, "seats", subject="ana", token_budget=30, min_score=0)
    returned = [hit.memory.id for hit in recalled.hits]
    packed = [hit.memory.id for hit in recalled.hits if hit.packed]
    assert set(returned) == set(mine) and 0 < len(packed) < len(returned)
    unaudited = await audit_client.recall(tenant, "seats", subject="ana", min_score=0)
    assert {hit.memory.id for hit in unaudited.hits} == set(theirs)
    assert audit_server.audit is not None and audit_server.audit.buffered <= 1  # the other tenant added none

    (entry,) = await _entries(audit_client, AUDITED, 1)
    assert (list(entry.returned_ids), list(entry.packed_ids)) == (returned, packed)
    assert (entry.subject, entry.agent_id, entry.query_text) == ("ana", "", "seats")
    assert entry.query_hash == query_hash(KEY.encode(), AUDITED, "seats") and entry.request_id
    assert abs(entry.at.ToDatetime(tzinfo=UTC) - datetime.now(UTC)) < timedelta(minutes=1)

    (event,) = await _served_events(audit_client, AUDITED, cursor, 1)
    assert (event.type, event.id, event.memory_id, event.subject) == ("recall.served", entry.id, "", "ana")
    assert (list(event.memory_ids), list(event.packed_ids)) == (returned, packed)

    assert not (await audit_client.audit_recalls(tenant)).entries
    rows = await audit_server.pool.fetch(
        """SELECT 1 FROM recall_audit WHERE tenant_id = $1
           UNION ALL SELECT 1 FROM recall_audit_memories WHERE tenant_id = $1
           UNION ALL SELECT 1 FROM change_events WHERE tenant_id = $1 AND type = 'recall.served'""",
        tenant,
    )
    assert rows == []


async def test_a_server_that_audits_no_tenant_runs_no_audit_at_all(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    """The session's server has no audit.tenants: recall gets no recorder (nothing is buffered, no
    statement is added), and no loop runs to write."""
    await _three_memories(client, tenant, "ana")
    assert (await client.recall(tenant, "seats", min_score=0)).hits
    assert server.audit is not None and server.audit.buffered == 0
    assert not [task for task in server.background if task.get_name() == "recall-audit"]
    assert not (await client.audit_recalls(tenant)).entries


async def test_the_audit_finds_a_memorys_recalls_newest_first_a_page_at_a_time(
    audit_client: HindsightClient,
) -> None:
    subject = f"bo-{uuid.uuid4().hex[:6]}"
    ids = await _three_memories(audit_client, HASHED, subject)
    queries = ["window seats", "Window   SEATS", "aisle seats"]
    for query in queries:
        await audit_client.recall(HASHED, query, subject=subject, min_score=0)
    await audit_client.recall(HASHED, "seats", subject=f"{subject}-other", min_score=0)  # another subject
    entries = await _entries(audit_client, HASHED, 3, subject=subject)
    assert len(entries) == 3
    assert [e.query_hash for e in entries][1:] == [query_hash(KEY.encode(), HASHED, "window seats")] * 2
    assert entries[0].query_hash != entries[1].query_hash  # "aisle seats", the newest
    assert all(not e.HasField("query_text") for e in entries)  # this tenant keeps hashes only

    window_seats = ids[0]
    fed = [e for e in entries if window_seats in e.returned_ids]
    first = await audit_client.audit_recalls(HASHED, memory_id=window_seats, subject=subject, page_size=2)
    assert [e.id for e in first.entries] == [e.id for e in fed[:2]] and first.next_page_token
    rest = await audit_client.audit_recalls(
        HASHED, memory_id=window_seats, subject=subject, page_size=2, page_token=first.next_page_token
    )
    assert [e.id for e in rest.entries] == [e.id for e in fed[2:]] and not rest.next_page_token
    # The memory id in any case; a time range.
    upper = await audit_client.audit_recalls(HASHED, memory_id=window_seats.upper(), subject=subject)
    assert [e.id for e in upper.entries] == [e.id for e in fed]
    newest = entries[0].at.ToDatetime(tzinfo=UTC)
    since = await audit_client.audit_recalls(HASHED, subject=subject, since=newest)
    assert [e.id for e in since.entries] == [entries[0].id]
    until = await audit_client.audit_recalls(HASHED, subject=subject, until=newest)
    assert [e.id for e in until.entries] == [e.id for e in entries[1:]]


async def test_hindsight_audit_finds_the_recalls_a_memory_fed(
    audit_server: RunningServer, audit_client: HindsightClient
) -> None:
    subject = f"cy-{uuid.uuid4().hex[:6]}"
    ids = await _three_memories(audit_client, AUDITED, subject)
    await audit_client.recall(AUDITED, "window seats", subject=subject, min_score=0)
    (entry,) = await _entries(audit_client, AUDITED, 1, subject=subject)
    common = ["--target", f"127.0.0.1:{audit_server.port}", "--tenant", AUDITED]
    shown = await run_cli(["audit", "--memory", ids[0], *common])
    assert shown.code == 0, shown.stderr
    (line,) = [line for line in shown.stdout.splitlines() if entry.request_id in line]
    assert f"subject={subject}" in line and '"window seats"' in line and entry.query_hash[:16] in line
    typed = await run_cli(["audit", "--memory", ids[0], "--subject", subject, "--json", *common])
    assert typed.code == 0, typed.stderr
    (listed,) = json.loads(typed.stdout)["entries"]
    assert listed["id"] == entry.id and ids[0] in listed["returned_ids"]
    nothing = await run_cli(["audit", "--memory", str(uuid.uuid4()), *common])
    assert nothing.code == 0 and nothing.stdout.strip() == "(no audited recall)"
    bad = await run_cli(["audit", "--memory", "not-an-id", *common])
    assert bad.code == 1 and "memory_id" in bad.stderr


async def test_erasure_removes_a_subjects_audit_and_a_memorys(
    audit_server: RunningServer, audit_client: HindsightClient
) -> None:
    gone, kept = f"dan-{uuid.uuid4().hex[:6]}", f"eve-{uuid.uuid4().hex[:6]}"
    await _three_memories(audit_client, AUDITED, gone)
    eves = await _three_memories(audit_client, AUDITED, kept)
    for subject in (gone, kept, kept):
        await audit_client.recall(AUDITED, "window seats" if subject == gone else "seats", subject=subject,
                                  min_score=0)  # fmt: skip
    await _entries(audit_client, AUDITED, 1, subject=gone)
    eve_entries = await _entries(audit_client, AUDITED, 2, subject=kept)

    await audit_client.erase(AUDITED, subject=gone, reason="test")
    assert not (await audit_client.audit_recalls(AUDITED, subject=gone)).entries
    leftovers = await audit_server.pool.fetch(
        """SELECT 'audit' FROM recall_audit WHERE tenant_id = $1 AND subject = $2
           UNION ALL SELECT 'event' FROM change_events WHERE tenant_id = $1 AND subject = $2""",
        AUDITED,
        gone,
    )
    assert leftovers == []

    # One memory erased: every recall that returned it goes (its query may say what it said), the rest stay.
    erased = eves[0]
    await audit_client.erase(AUDITED, memory_ids=[erased], reason="test")
    left = await audit_client.audit_recalls(AUDITED, subject=kept)
    assert {e.id for e in left.entries} == {e.id for e in eve_entries if erased not in e.returned_ids}
    assert not (await audit_client.audit_recalls(AUDITED, memory_id=erased)).entries
    rows = await audit_server.pool.fetch(
        """SELECT 1 FROM recall_audit_memories WHERE tenant_id = $1 AND memory_id = $2
           UNION ALL SELECT 1 FROM change_events WHERE tenant_id = $1 AND $2 = ANY(memory_ids)""",
        AUDITED,
        uuid.UUID(erased),
    )
    assert rows == []


async def test_retention_deletes_old_entries_with_their_rows_and_events(audit_server: RunningServer) -> None:
    tenant = f"old-{uuid.uuid4().hex[:6]}"
    store = AuditStore(audit_server.pool)
    audit = RecallAudit(
        store, AuditSettings(tenants=frozenset({tenant}), query_hash_key=b"x" * 16), system_clock
    )
    memory = str(uuid.uuid4())
    audit.record(tenant, request_id="r1", subject="", agent_id="", query_text="q", returned_ids=(memory,),
                 packed_ids=(memory,))  # fmt: skip
    assert await audit.flush() == 1

    async def rows() -> int:
        count: int = await audit_server.pool.fetchval(
            "SELECT (SELECT count(*) FROM recall_audit WHERE tenant_id = $1)"
            " + (SELECT count(*) FROM recall_audit_memories WHERE tenant_id = $1)"
            " + (SELECT count(*) FROM change_events WHERE tenant_id = $1)",
            tenant,
        )
        return count

    await audit.trim(datetime.now(UTC) + timedelta(days=29))  # within the 30 days
    assert await rows() == 3  # the entry, its memory's row, its event
    assert await audit.trim(datetime.now(UTC) + timedelta(days=31)) >= 1  # (other tests' entries too)
    assert await rows() == 0


async def test_a_full_buffer_drops_and_counts_and_never_blocks(audit_server: RunningServer) -> None:
    tenant = f"busy-{uuid.uuid4().hex[:6]}"
    audit = RecallAudit(
        AuditStore(audit_server.pool),
        AuditSettings(tenants=frozenset({tenant}), query_hash_key=b"x" * 16, buffer_size=3, flush_rows=2),
        system_clock,
    )
    for index in range(5):
        audit.record(tenant, request_id=f"r{index}", subject="", agent_id="", query_text="q", returned_ids=(),
                     packed_ids=())  # fmt: skip
    assert (audit.buffered, audit.dropped) == (3, 2)
    assert await audit.flush() == 3  # two statements of flush_rows
    requests = await audit_server.pool.fetch(
        "SELECT request_id FROM recall_audit WHERE tenant_id = $1 ORDER BY request_id", tenant
    )
    assert [row["request_id"] for row in requests] == ["r0", "r1", "r2"]


async def test_a_flush_retried_after_its_commit_records_nothing_twice(audit_server: RunningServer) -> None:
    tenant = f"again-{uuid.uuid4().hex[:6]}"
    memory = str(uuid.uuid4())
    entry = RecallServed(str(uuid.uuid4()), tenant, datetime.now(UTC), "r", "", "", "h", None, (memory,), ())
    store = AuditStore(audit_server.pool)
    await store.record([entry])
    await store.record([entry])  # the connection was lost around the first commit: sent again
    count = await audit_server.pool.fetchval(
        """SELECT (SELECT count(*) FROM recall_audit WHERE tenant_id = $1)
                  + (SELECT count(*) FROM recall_audit_memories WHERE tenant_id = $1)
                  + (SELECT count(*) FROM change_events WHERE tenant_id = $1)""",
        tenant,
    )
    assert count == 3


async def test_an_agent_bound_key_reads_its_own_recalls_only(
    postgres_dsn: str, make_settings: Callable[..., Settings]
) -> None:
    running = await start_server(
        make_settings(
            audit__tenants=[AUDITED], audit__query_hash_key=KEY, audit__flush_interval_s=0.05,
            security__require_api_keys=True, security__api_key_cache_s=0,
        )
    )  # fmt: skip
    try:
        bot = await create_key(postgres_dsn, AUDITED, "--agent", "bot")
        service = await create_key(postgres_dsn, AUDITED)
        target = f"127.0.0.1:{running.port}"
        async with (
            HindsightClient(target, api_key=bot["api_key"]) as as_bot,
            HindsightClient(target, api_key=service["api_key"]) as as_service,
        ):
            subject = f"fay-{uuid.uuid4().hex[:6]}"
            await _three_memories(as_service, AUDITED, subject)
            cursor = await _heartbeat_cursor(as_service, AUDITED)
            await as_bot.recall(AUDITED, "seats", subject=subject, min_score=0)
            await as_service.recall(AUDITED, "seats", subject=subject, agent_id="other", min_score=0)
            both = await _entries(as_service, AUDITED, 2, subject=subject)
            assert sorted(e.agent_id for e in both) == ["bot", "other"]
            (own,) = (await as_bot.audit_recalls(AUDITED, subject=subject)).entries
            assert own.agent_id == "bot"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await as_bot.audit_recalls(AUDITED, subject=subject, agent_id="other")
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            # The feed alike: an agent's recall.served events are its own (its recall may have
            # returned its private memories); a key bound to no agent may watch as one.
            stream = as_bot.watch(AUDITED, cursor, event_types=["recall.served"])
            try:
                assert (await asyncio.wait_for(anext(stream), 10)).event.id == own.id
                with pytest.raises(TimeoutError):  # the other agent's recall came after it: not shown
                    await asyncio.wait_for(anext(stream), 1)
            finally:
                await stream.aclose()
            (theirs,) = await _served_events(as_service, AUDITED, cursor, 1, agent_id="other")
            assert theirs.id == next(e.id for e in both if e.agent_id == "other")
    finally:
        await running.stop()


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"memory_id": "not-a-uuid"}, "memory_id"),
        ({"page_size": 501}, "page_size"),
        ({"page_size": -1}, "page_size"),
        ({"page_token": "garbage!"}, "page_token"),
        ({"page_token": "A" * 2000}, "page_token"),
        ({"subject": "s" * 300}, "subject"),
        ({"agent_id": "a" * 300}, "agent_id"),
        (
            {"since": datetime(2026, 1, 2, tzinfo=UTC), "until": datetime(2026, 1, 1, tzinfo=UTC)},
            "time_range",
        ),
    ],
)
async def test_bad_input_names_the_field(
    audit_client: HindsightClient, arguments: dict[str, object], field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await audit_client.audit_recalls(AUDITED, **arguments)  # type: ignore[arg-type]
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (bad.value.details() or "").startswith(f"{field}:")


async def test_a_token_for_other_filters_is_refused(audit_client: HindsightClient) -> None:
    subject = f"gus-{uuid.uuid4().hex[:6]}"
    await _three_memories(audit_client, AUDITED, subject)
    for _ in range(2):
        await audit_client.recall(AUDITED, "seats", subject=subject, min_score=0)
    await _entries(audit_client, AUDITED, 2, subject=subject)
    page = await audit_client.audit_recalls(AUDITED, subject=subject, page_size=1)
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await audit_client.audit_recalls(AUDITED, subject="someone else", page_token=page.next_page_token)
    assert (bad.value.details() or "") == "page_token: was issued for different filters"


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"tenants": ["acme"]}, "query_hash_key"),
        ({"tenants": ["acme"], "query_hash_key": "short"}, "query_hash_key"),
        ({"tenants": ["acme"], "query_hash_key": KEY, "query_text_tenants": ["globex"]}, "globex"),
        ({"buffer_size": 0}, "buffer_size"),
        ({"flush_rows": 10_000}, "flush_rows"),
    ],
)
def test_a_configuration_that_cannot_audit_is_refused(values: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(None, **{f"audit__{key}": value for key, value in values.items()})
    assert problem in str(refused.value) and "audit" in str(refused.value)


async def test_a_flush_cancelled_mid_write_keeps_its_entries_for_the_next(
    audit_server: RunningServer,
) -> None:
    tenant = f"stop-{uuid.uuid4().hex[:6]}"
    audit = RecallAudit(
        AuditStore(audit_server.pool),
        AuditSettings(tenants=frozenset({tenant}), query_hash_key=b"x" * 16),
        system_clock,
    )
    for index in range(3):
        audit.record(tenant, request_id=f"r{index}", subject="", agent_id="", query_text="q",
                     returned_ids=(str(uuid.uuid4()),), packed_ids=())  # fmt: skip
    writing = asyncio.ensure_future(audit.flush())
    await asyncio.sleep(0)  # the statement is on its way
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert audit.buffered == 3 and audit.dropped == 0
    await audit.flush()  # whether the cancelled statement committed or not: each entry once
    count = await audit_server.pool.fetchval("SELECT count(*) FROM recall_audit WHERE tenant_id = $1", tenant)
    assert count == 3 and audit.buffered == 0
