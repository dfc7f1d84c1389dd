"""The recall audit (pipelines/audit.py) on the in-memory audit log (tests/support/fakes): only audited
tenants' recalls, each entry at the server's time with a keyed hash of its query (the text only where
kept), a bounded buffer that drops and counts past its size, written in statements of flush_rows, put
back in order after a failed or cancelled write and never recorded twice, the loop that writes as soon as
flush_rows wait, pages of what was recorded, and retention in batches. tests/rpc runs it over SQL."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.audit import AuditQuery, RecallServed, query_hash
from hindsight_server.domain.errors import Unavailable
from hindsight_server.pipelines.audit import AuditSettings, RecallAudit
from tests.domain.builders import numbered
from tests.support.eventually import eventually
from tests.support.fakes.audit_log import InMemoryAuditLog
from tests.support.fakes.clock import FakeClock

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
KEY = b"server-side key"
SETTINGS = AuditSettings(
    tenants=frozenset({"acme", "globex"}),
    query_text_tenants=frozenset({"globex"}),
    query_hash_key=KEY,
    buffer_size=4,
    flush_rows=2,
    trim_batch=2,
)
UNAVAILABLE = Unavailable("the database is unavailable; retry later")


def audit(
    store: InMemoryAuditLog | None = None, **settings: Any
) -> tuple[RecallAudit, InMemoryAuditLog, FakeClock]:
    store = InMemoryAuditLog() if store is None else store
    clock = FakeClock(NOW)
    return RecallAudit(store, replace(SETTINGS, **settings), clock), store, clock


def recall(recorder: RecallAudit, tenant_id: str = "acme", request_id: str = "r1", **fields: Any) -> None:
    values: dict[str, Any] = {
        "subject": "user-7",
        "agent_id": "",
        "query_text": "Where does the user live?",
        "returned_ids": (numbered(1).id, numbered(2).id),
        "packed_ids": (numbered(1).id,),
    }
    recorder.record(tenant_id, request_id=request_id, **(values | fields))


def request_ids(store: InMemoryAuditLog) -> list[str]:
    """The recorded entries' requests, in the order they were recorded."""
    return [entry.request_id for entry in store.entries.values()]


@pytest.mark.parametrize(("tenant_id", "audited"), [("acme", True), ("globex", True), ("initech", False)])
def test_only_the_configured_tenants_are_audited(tenant_id: str, audited: bool) -> None:
    recorder, _, _ = audit()
    assert recorder.audits(tenant_id) is audited


@pytest.mark.parametrize(("tenant_id", "text_kept"), [("acme", False), ("globex", True)])
async def test_an_entry_holds_who_asked_when_and_a_keyed_hash_of_the_query(
    tenant_id: str, text_kept: bool
) -> None:
    recorder, store, clock = audit()
    clock.now = NOW + timedelta(minutes=3)  # the server's time, whatever the request's `now`
    recall(recorder, tenant_id, agent_id="travel", query_text="Where  does the USER live?")
    assert store.entries == {}  # buffered: the recall did not wait for the database

    assert await recorder.flush() == 1

    (entry,) = store.entries.values()
    assert (entry.tenant_id, entry.at, entry.request_id, entry.subject, entry.agent_id) == (
        tenant_id,
        clock.now,
        "r1",
        "user-7",
        "travel",
    )
    assert entry.query_hash == query_hash(KEY, tenant_id, "where does the user live?")
    assert entry.query_hash != query_hash(b"another key", tenant_id, "where does the user live?")
    assert entry.query_text == ("Where  does the USER live?" if text_kept else None)
    assert (entry.returned_ids, entry.packed_ids) == ((numbered(1).id, numbered(2).id), (numbered(1).id,))


async def test_a_full_buffer_drops_and_counts_new_entries_and_keeps_the_old() -> None:
    recorder, store, _ = audit()
    for n in range(6):
        recall(recorder, request_id=f"r{n}")
    assert (recorder.buffered, recorder.dropped) == (4, 2)
    await recorder.flush()
    assert request_ids(store) == ["r0", "r1", "r2", "r3"]


@pytest.mark.parametrize(("entries", "statements"), [(0, 0), (1, 1), (2, 1), (3, 2), (4, 2)])
async def test_a_flush_writes_flush_rows_entries_a_statement(entries: int, statements: int) -> None:
    recorder, store, _ = audit()
    for n in range(entries):
        recall(recorder, request_id=f"r{n}")
    assert await recorder.flush() == entries
    assert (store.statements, recorder.buffered, len(store.entries)) == (statements, 0, entries)


async def test_a_failed_write_puts_its_batch_back_in_order_for_the_next_flush() -> None:
    recorder, store, _ = audit()
    for n in range(3):
        recall(recorder, request_id=f"r{n}")
    store.failing = UNAVAILABLE
    with pytest.raises(Unavailable):
        await recorder.flush()
    assert (recorder.buffered, recorder.dropped) == (3, 0)

    store.failing = None
    assert await recorder.flush() == 3
    assert request_ids(store) == ["r0", "r1", "r2"]


@dataclass
class CommitsThenFails(InMemoryAuditLog):
    """An audit log whose first write commits but whose answer is lost (the connection dropped around
    the commit): the flush cannot tell it was written."""

    lost: int = 1

    async def record(self, entries: Sequence[RecallServed]) -> None:
        await super().record(entries)
        if self.lost:
            self.lost -= 1
            raise UNAVAILABLE


async def test_a_write_retried_after_an_unknown_outcome_records_nothing_twice() -> None:
    recorder, store, _ = audit(CommitsThenFails())
    recall(recorder, request_id="r0")
    with pytest.raises(Unavailable):
        await recorder.flush()
    assert recorder.buffered == 1  # put back: for all it knows, not written

    assert await recorder.flush() == 1
    assert request_ids(store) == ["r0"]


@dataclass
class HeldWrite(InMemoryAuditLog):
    """An audit log whose writes wait until `released` is set: a slow database."""

    writing: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def record(self, entries: Sequence[RecallServed]) -> None:
        self.writing.set()
        await self.released.wait()
        await super().record(entries)


async def test_a_batch_that_fails_while_the_buffer_filled_keeps_what_fits_and_counts_the_rest() -> None:
    held = HeldWrite()
    recorder, _, _ = audit(held)
    recall(recorder, request_id="r0")
    recall(recorder, request_id="r1")
    flush = asyncio.create_task(recorder.flush())
    await held.writing.wait()
    for n in range(2, 5):  # recorded during the write: the buffer has room for one of the two back
        recall(recorder, request_id=f"r{n}")
    held.failing = UNAVAILABLE
    held.released.set()
    with pytest.raises(Unavailable):
        await flush

    assert (recorder.buffered, recorder.dropped) == (4, 1)
    held.failing = None
    await recorder.flush()
    assert request_ids(held) == ["r0", "r2", "r3", "r4"]


async def test_a_cancelled_write_puts_its_batch_back() -> None:
    held = HeldWrite()
    recorder, _, _ = audit(held)
    recall(recorder, request_id="r0")
    flush = asyncio.create_task(recorder.flush())
    await held.writing.wait()
    flush.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flush
    assert recorder.buffered == 1

    held.released.set()
    assert await recorder.flush() == 1
    assert request_ids(held) == ["r0"]


async def test_the_loop_writes_as_soon_as_flush_rows_wait() -> None:
    recorder, store, _ = audit(flush_interval_s=60.0)  # the interval never comes in this test
    loop = asyncio.create_task(recorder.run_forever())
    try:
        recall(recorder, request_id="r0")
        await asyncio.sleep(0)
        assert store.entries == {}  # one waits: less than flush_rows
        recall(recorder, request_id="r1")
        for _ in range(3):
            await asyncio.sleep(0)
        assert request_ids(store) == ["r0", "r1"]
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


async def test_the_loop_writes_what_waits_at_each_interval_after_a_failure() -> None:
    recorder, store, _ = audit(flush_interval_s=0.01)
    store.failing = UNAVAILABLE
    loop = asyncio.create_task(recorder.run_forever())
    try:
        recall(recorder, request_id="r0")
        await asyncio.sleep(0.03)
        assert recorder.buffered == 1  # kept while the database is away
        store.failing = None
        await eventually(lambda: not recorder.buffered, timeout_s=1, poll_s=0.01)
        assert request_ids(store) == ["r0"]
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


async def test_pages_of_what_was_recorded_come_newest_first_under_the_query() -> None:
    recorder, _, clock = audit(buffer_size=100, flush_rows=100)
    for n in range(5):
        clock.now = NOW + timedelta(minutes=n)
        recall(recorder, request_id=f"r{n}", agent_id="travel" if n % 2 else "", subject=f"user-{n % 2}")
    recall(recorder, "globex", request_id="g0")
    await recorder.flush()

    first = await recorder.page(AuditQuery("acme", page_size=2))
    assert [e.request_id for e in first.entries] == ["r4", "r3"]
    assert first.next_cursor is not None
    rest = await recorder.page(AuditQuery("acme", page_size=5, after=first.next_cursor))
    assert ([e.request_id for e in rest.entries], rest.next_cursor) == (["r2", "r1", "r0"], None)
    travel = await recorder.page(AuditQuery("acme", viewer="travel"))
    assert [e.request_id for e in travel.entries] == ["r3", "r1"]
    since = await recorder.page(AuditQuery("acme", subject="user-0", since=NOW + timedelta(minutes=1)))
    assert [e.request_id for e in since.entries] == ["r4", "r2"]


@pytest.mark.parametrize(("old", "trimmed"), [(0, 0), (2, 2), (4, 4), (5, 5)])
async def test_retention_trims_every_entry_past_it_a_batch_at_a_time(old: int, trimmed: int) -> None:
    recorder, store, clock = audit(buffer_size=100, retention=timedelta(days=30))
    for n in range(old):
        clock.now = NOW - timedelta(days=31, minutes=n)
        recall(recorder, request_id=f"old{n}")
    clock.now = NOW - timedelta(days=29)
    recall(recorder, request_id="young")
    await recorder.flush()

    assert await recorder.trim(NOW) == trimmed
    assert request_ids(store) == ["young"]
