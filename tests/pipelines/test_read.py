"""The read pipeline on the in-memory store (tests/support/fakes): Get as the calling agent may see it,
History along the version chain, List's filters and keyset pages, bad queries refused, and a read that
carries a commit position seeing that change on a lagging replica. The SQL behind the same calls runs
against PostgreSQL in tests/rpc/test_memories.py and tests/rpc/test_versions.py."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.errors import InvalidArgument, NotFound
from hindsight_server.domain.model import CommitPosition, Kind, ListQuery, Memory, Status, Tier, Visibility
from hindsight_server.domain.policy import Limits
from hindsight_server.pipelines.ports import MemoryReader
from hindsight_server.pipelines.read import ReadPipeline
from hindsight_server.store.routing import PrimaryOnly
from tests.domain.builders import memory
from tests.support.fakes.memory_reads import InMemoryMemoryReads
from tests.support.fakes.memory_store import InMemoryMemoryStore
from tests.support.fakes.read_route import LaggingReplicaRoute

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)


def numbered(n: int, **fields: Any) -> Memory:
    """Memory n, written n minutes after the first."""
    defaults = {
        "id": f"00000000-0000-7000-8000-{n:012d}",
        "content": f"fact number {n}",
        "created_at": NOW + timedelta(minutes=n),
    }
    return memory(**defaults | fields)


@dataclass
class Reads:
    pipeline: ReadPipeline
    store: InMemoryMemoryStore


def reads(*memories: Memory) -> Reads:
    store = InMemoryMemoryStore()
    for stored in memories:
        store.add(stored)
    return Reads(ReadPipeline(PrimaryOnly(InMemoryMemoryReads(store)), Limits()), store)


PRIVATE = numbered(1, visibility=Visibility.PRIVATE, agent_id="agent-a")


@pytest.mark.parametrize(
    ("agent_id", "seen"),
    [("agent-a", True), ("agent-b", False), ("", False)],  # another agent's private memory is not there
)
async def test_get_answers_as_the_calling_agent_may_see(agent_id: str, seen: bool) -> None:
    r = reads(PRIVATE)
    if seen:
        assert await r.pipeline.get("acme", PRIVATE.id, agent_id) == PRIVATE
    else:
        with pytest.raises(NotFound, match=PRIVATE.id):
            await r.pipeline.get("acme", PRIVATE.id, agent_id)


@pytest.mark.parametrize(("tenant_id", "error"), [("other", NotFound), ("", InvalidArgument)])
async def test_get_of_another_tenant_finds_nothing_and_a_bad_tenant_is_refused(
    tenant_id: str, error: type[Exception]
) -> None:
    r = reads(numbered(1))
    with pytest.raises(error):
        await r.pipeline.get(tenant_id, numbered(1).id)


def chain(*ns: int, **fields: Any) -> list[Memory]:
    """Versions ns[0] -> ns[1] -> ..., each superseding the one before."""
    ids = [numbered(n).id for n in ns]
    return [
        numbered(
            n,
            supersedes=ids[i - 1] if i else None,
            superseded_by=ids[i + 1] if i + 1 < len(ids) else None,
            status=Status.SUPERSEDED if i + 1 < len(ids) else Status.ACTIVE,
            **fields,
        )
        for i, n in enumerate(ns)
    ]


@pytest.mark.parametrize("asked", [1, 2, 3])
async def test_history_is_the_whole_version_chain_oldest_first_from_any_version(asked: int) -> None:
    r = reads(*chain(1, 2, 3), numbered(4))
    history = await r.pipeline.history("acme", numbered(asked).id)
    assert [m.id for m in history] == [numbered(n).id for n in (1, 2, 3)]


async def test_history_walks_a_looped_chain_once() -> None:
    first, second = chain(1, 2)
    r = reads(replace(first, supersedes=second.id), replace(second, superseded_by=first.id))
    assert [m.id for m in await r.pipeline.history("acme", first.id)] == [second.id, first.id]


async def test_history_leaves_out_versions_the_agent_may_not_see_and_an_unknown_memory_is_not_found() -> None:
    versions = chain(1, 2)
    r = reads(
        versions[0], numbered(2, supersedes=versions[0].id, visibility=Visibility.PRIVATE, agent_id="b")
    )
    assert [m.id for m in await r.pipeline.history("acme", numbered(2).id, "a")] == [numbered(1).id]
    with pytest.raises(NotFound):
        await r.pipeline.history("acme", numbered(9).id)


MIXED = [
    numbered(1),
    numbered(2, subject="user-8"),
    numbered(3, tier=Tier.WORKING, kind=Kind.EVENT, session_id="s2"),
    numbered(4, status=Status.PENDING),
    numbered(5, status=Status.DELETED),
    numbered(6, visibility=Visibility.PRIVATE, agent_id="agent-a"),
]


@pytest.mark.parametrize(
    ("filters", "listed"),
    [
        ({}, [3, 2, 1]),  # active, shared: newest first
        ({"subject": "user-8"}, [2]),
        ({"tiers": (Tier.WORKING,)}, [3]),
        ({"kinds": (Kind.PREFERENCE,)}, [2, 1]),
        ({"session_id": "s2"}, [3]),
        ({"statuses": (Status.PENDING, Status.DELETED)}, [5, 4]),
        ({"agent_id": "agent-a"}, [6, 3, 2, 1]),  # its own private memory too
    ],
)
async def test_list_keeps_to_its_filters(filters: dict[str, Any], listed: list[int]) -> None:
    page = await reads(*MIXED).pipeline.list(ListQuery("acme", **filters))
    assert [m.id for m in page.memories] == [numbered(n).id for n in listed] and page.next_cursor is None


async def test_list_pages_through_every_memory_once_newest_first() -> None:
    r = reads(*(numbered(n) for n in range(7)))
    seen: list[str] = []
    query = ListQuery("acme", page_size=3)
    pages = 0
    while True:
        page = await r.pipeline.list(query)
        pages += 1
        seen += [m.id for m in page.memories]
        if page.next_cursor is None:
            break
        query = ListQuery("acme", page_size=3, after=page.next_cursor)
    assert seen == [numbered(n).id for n in reversed(range(7))] and pages == 3


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"page_size": 0}, "page_size: must be between 1 and 500"),
        ({"page_size": 501}, "page_size: must be between 1 and 500"),
        ({"subject": "x" * 257}, "subject"),
        ({"tenant_id": ""}, "tenant_id"),
    ],
)
async def test_a_bad_list_is_refused_naming_its_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await reads(numbered(1)).pipeline.list(ListQuery(**{"tenant_id": "acme"} | fields))


async def test_a_read_carrying_a_later_position_sees_the_change_a_lagging_replica_has_not() -> None:
    primary, replica = InMemoryMemoryStore(), InMemoryMemoryStore()
    old, new = chain(1, 2)
    replica.add(numbered(1))  # the replica replayed up to before the new version
    for stored in (old, new):
        primary.add(stored)
    route = LaggingReplicaRoute[MemoryReader](
        InMemoryMemoryReads(primary), InMemoryMemoryReads(replica), CommitPosition(database=1, lsn=10)
    )
    pipeline = ReadPipeline(route, Limits())
    written = CommitPosition(database=1, lsn=11)
    assert (await pipeline.get("acme", old.id)).status is Status.ACTIVE  # stale, as the replica is
    assert (await pipeline.get("acme", old.id, read_after=written)).status is Status.SUPERSEDED
    assert len(await pipeline.history("acme", old.id, read_after=written)) == 2
    page = await pipeline.list(ListQuery("acme", read_after=written))
    assert [m.id for m in page.memories] == [new.id]
