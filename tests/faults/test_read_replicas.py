"""Reads from streaming replicas (store/routing.py) against a real primary and a real replica started by
the test (stack/replicas.py): a write is found by the recall right after it (with the token the shared
client sends) every time, replay paused or not; a replica killed under load costs no call; a lagging
replica is left out and comes back; bad tokens are refused by name, and one from the future fails fast."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import grpc
import psutil
import pytest
from google.rpc import error_details_pb2

from hindsight.client import HindsightClient
from hindsight.consistency import TRAILER, decode_token, encode_token
from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight_server.bench.replicas import report, run_replicas_bench
from hindsight_server.cli.status import render
from hindsight_server.config import load_settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from hindsight_server.rpc.ops import fetch_status
from hindsight_server.store.memories import MemoryStore
from hindsight_server.store.pool import create_pool
from hindsight_server.store.routing import CaughtUpPool, ReadRouting, ReplicaBehind, ReplicaState
from tests.support.eventually import eventually
from tests.support.memory_fields import MemoryFields
from tests.support.replicas import Replicated, replicated_postgres
from tests.support.rich_errors import detail

pytestmark = pytest.mark.timeout(180)

MAX_LAG_MS = 300


@pytest.fixture(scope="module")
async def replicated(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Replicated]:
    async with replicated_postgres(tmp_path_factory.mktemp("data"), replicas=1) as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def server(
    replicated: Replicated, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RunningServer]:
    settings = load_settings(
        None,
        data_dir=tmp_path_factory.mktemp("server"),
        server__port=0,
        database__dsn=replicated.dsn,
        database__replica_dsns=tuple(replicated.stack.replica_dsns),
        database__max_replica_lag_ms=MAX_LAG_MS,
        database__replica_check_interval_s=0.05,
        database__replica_read_timeout_ms=300,
        security__require_api_keys=False,
        jobs__enabled=False,
        inference__url="",  # lexical recall: the test is about where reads run, not how they rank
    )
    running = await start_server(settings)
    yield running
    await running.stop()


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[HindsightClient]:
    async with HindsightClient(f"127.0.0.1:{server.port}", timeout_s=10) as shared:
        yield shared


def _routing(server: RunningServer) -> ReadRouting:
    assert server.routing is not None
    return server.routing


def _replica(server: RunningServer) -> ReplicaState:
    (state,) = _routing(server).replicas
    return state


async def _on_replica(replicated: Replicated, sql: str) -> None:
    connection = await asyncpg.connect(replicated.stack.replica_dsns[0])
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _usable_again(server: RunningServer) -> None:
    await eventually(lambda: _replica(server).usable)


FACT: MemoryFields = {"tier": "semantic", "kind": "fact", "subject": "user"}


async def test_a_read_on_a_replica_is_not_told_it_runs_on_the_primary(server: RunningServer) -> None:
    """What a recall keeps from a read (the lexical statistics, pipelines/indexed_reads.py) is kept only
    from the primary: a replica may be behind the subject the server holds."""
    await _usable_again(server)
    route = _routing(server).route(MemoryStore)

    async def where(store: MemoryStore) -> bool:
        return route.on_primary(store)

    assert await route.read(None, where) is False  # a usable replica takes a read with no token
    assert route.on_primary(MemoryStore(_routing(server).primary)) is False  # the route's own store only


async def test_a_write_is_found_by_the_recall_after_it_every_time(
    server: RunningServer, replicated: Replicated, client: HindsightClient
) -> None:
    """400 tries; replay is paused on the replica for a fifth of them (the replica falls behind: the
    reads wait a little, then go to the primary, until the watch leaves it out)."""
    await _usable_again(server)
    routing, tenant = _routing(server), f"t-{uuid.uuid4().hex[:12]}"
    replica_before, primary_before = _replica(server).reads, routing.primary_reads
    missed: list[int] = []
    paused = False
    try:
        for attempt in range(400):
            pause = attempt % 100 >= 80
            if pause != paused:
                await _on_replica(
                    replicated, "SELECT pg_wal_replay_pause()" if pause else "SELECT pg_wal_replay_resume()"
                )
                paused = pause
            word = f"locker{uuid.uuid4().hex[:10]}"
            written = await client.write(tenant, f"The spare key is in {word}", **FACT)
            found = await client.recall(tenant, word, subject="user")
            if written.memory.id not in [hit.memory.id for hit in found.hits]:
                missed.append(attempt)
    finally:
        if paused:
            await _on_replica(replicated, "SELECT pg_wal_replay_resume()")
    assert missed == []
    # Both answered: the replica while it replayed, the primary while it did not.
    assert _replica(server).reads - replica_before > 120
    assert routing.primary_reads - primary_before > 20


@dataclass
class _Load:
    answered: int = 0
    slowest_s: float = 0.0
    errors: list[BaseException] = field(default_factory=list)


@contextlib.asynccontextmanager
async def _recall_load(client: HindsightClient, memory: str, query: str) -> AsyncIterator[_Load]:
    """8 recalls in a loop over a tenant of 20 memories, until the block ends: what they met."""
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    for index in range(20):
        await client.write(tenant, memory.format(index), **FACT)
    load, stop = _Load(), asyncio.Event()

    async def recall_until_stopped() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                await client.recall(tenant, query, subject="user")
                load.answered += 1
            except grpc.aio.AioRpcError as exc:
                load.errors.append(exc)
            load.slowest_s = max(load.slowest_s, time.monotonic() - started)

    workers = [asyncio.create_task(recall_until_stopped()) for _ in range(8)]
    try:
        yield load
    finally:
        stop.set()
        await asyncio.gather(*workers)


async def test_a_replica_killed_under_recall_load_costs_no_call(
    server: RunningServer, replicated: Replicated, client: HindsightClient
) -> None:
    await _usable_again(server)
    served_before = _replica(server).reads
    async with _recall_load(client, "The parcel locker number {} is by the door", "parcel locker") as load:
        await eventually(lambda: _replica(server).reads > served_before + 50)
        child = replicated.replicas[0]
        assert child.process is not None
        child.process.send_signal(signal.SIGQUIT)  # immediate shutdown: every backend killed mid-read
        await asyncio.wait_for(child.process.wait(), 30)
        await eventually(lambda: not _replica(server).usable)
        answered_while_down = load.answered
        await eventually(lambda: load.answered > answered_while_down + 50)  # the primary answers them
        await child.spawn()
        await child.wait_ready(60)
        await _usable_again(server)
        back = _replica(server).reads
        await eventually(lambda: _replica(server).reads > back + 50)
    assert load.errors == []


def _freeze(replicated: Replicated, signum: signal.Signals) -> None:
    """Stops (or continues) every process of the replica: its postmaster and its backends, as a host
    that hangs or a network partition would look."""
    child = replicated.replicas[0]
    assert child.process is not None
    postmaster = psutil.Process(child.process.pid)
    for process in [postmaster, *postmaster.children(recursive=True)]:
        process.send_signal(signum)


async def test_a_replica_that_hangs_under_recall_load_costs_no_call(
    server: RunningServer, replicated: Replicated, client: HindsightClient
) -> None:
    await _usable_again(server)
    frozen = False
    async with _recall_load(client, "The bike lock code {} is on the fridge", "bike lock") as load:
        try:
            served = _replica(server).reads
            await eventually(lambda: _replica(server).reads > served + 20)
            _freeze(replicated, signal.SIGSTOP)
            frozen = True
            await eventually(lambda: not _replica(server).usable)
            primary = _routing(server).primary_reads
            await eventually(lambda: _routing(server).primary_reads > primary + 50)  # the primary answers
            _freeze(replicated, signal.SIGCONT)
            frozen = False
            await _usable_again(server)
        finally:
            if frozen:
                _freeze(replicated, signal.SIGCONT)
    assert load.errors == []
    assert load.slowest_s < 5  # a read the replica held waited its 300 ms, then the primary's time


async def test_a_lagging_replica_is_left_out_and_comes_back(
    server: RunningServer, replicated: Replicated, client: HindsightClient
) -> None:
    await _usable_again(server)
    routing, tenant = _routing(server), f"t-{uuid.uuid4().hex[:12]}"
    stale = HindsightClient(f"127.0.0.1:{server.port}", timeout_s=10, read_your_writes=False)
    try:
        await _on_replica(replicated, "SELECT pg_wal_replay_pause()")
        try:
            await client.write(tenant, "The boiler was serviced in March", **FACT)
            await eventually(lambda: "lags" in _replica(server).reason)
            assert not _replica(server).usable
            primary_before = routing.primary_reads
            for _ in range(10):  # no token: any replica would do, but this one is too far behind
                await stale.recall(tenant, "boiler", subject="user")
            assert routing.primary_reads - primary_before == 10
        finally:
            await _on_replica(replicated, "SELECT pg_wal_replay_resume()")
        await _usable_again(server)
        served_before = _replica(server).reads
        found = await stale.recall(tenant, "boiler", subject="user")
        assert [hit.memory.content for hit in found.hits] == ["The boiler was serviced in March"]
        assert _replica(server).reads == served_before + 1
    finally:
        await stale.close()


async def test_every_mutating_answer_carries_a_token_of_this_database(server: RunningServer) -> None:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb_grpc.MemoryServiceStub(channel)
        memory = pb.MemoryInput(content="I take the 8:10 train", tier=pb.TIER_SEMANTIC, kind=pb.KIND_FACT)
        first = stub.Write(pb.WriteRequest(tenant_id=tenant, memory=memory))
        written = await first
        second = stub.Delete(pb.DeleteRequest(tenant_id=tenant, id=written.memory.id))
        await second
        tokens = [dict(await call.trailing_metadata())[TRAILER] for call in (first, second)]
    positions = []
    for token in tokens:
        assert isinstance(token, str), token  # an ASCII trailer (only a -bin one is bytes)
        positions.append(decode_token(token))
    assert positions[0][0] == positions[1][0]  # the same database
    assert positions[0][1] < positions[1][1]  # the delete committed later


async def _refused(server: RunningServer, token: str) -> grpc.aio.AioRpcError:
    """The error of a recall carrying `token`."""
    request = pb.RecallRequest(tenant_id="t-tokens", query="train", min_consistency_token=token)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await pb_grpc.MemoryServiceStub(channel).Recall(request, timeout=10)
    return raised.value


@pytest.mark.parametrize(
    "token",
    ["garbage", "c1.", "c1.!!!!", "c2.AAAAAAAAAAAAAAAAAAAAAA", "c1.AAAA", "c1." + "A" * 80],
)
async def test_a_malformed_token_is_refused_naming_the_field(server: RunningServer, token: str) -> None:
    error = await _refused(server, token)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    request = detail(error, error_details_pb2.BadRequest)
    assert request is not None
    assert [v.field for v in request.field_violations] == ["min_consistency_token"]


async def test_a_token_of_another_database_is_refused_naming_the_field(
    server: RunningServer, client: HindsightClient
) -> None:
    written = await client.write(f"t-{uuid.uuid4().hex[:12]}", "I take the 8:10 train", **FACT)
    database, position = decode_token(client.consistency.token(written.memory.tenant_id))
    error = await _refused(server, encode_token(database ^ 1, position))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "another database" in (error.details() or "")
    request = detail(error, error_details_pb2.BadRequest)
    assert request is not None and request.field_violations[0].field == "min_consistency_token"


async def test_a_token_from_the_future_fails_the_precondition_without_waiting(
    server: RunningServer, client: HindsightClient
) -> None:
    written = await client.write(f"t-{uuid.uuid4().hex[:12]}", "I take the 8:10 train", **FACT)
    database, position = decode_token(client.consistency.token(written.memory.tenant_id))
    started = time.monotonic()
    error = await _refused(server, encode_token(database, position + 10**12))
    assert time.monotonic() - started < 2
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    failure = detail(error, error_details_pb2.PreconditionFailure)
    assert failure is not None and failure.violations[0].subject == "min_consistency_token"


async def test_hindsight_status_shows_where_reads_ran(server: RunningServer) -> None:
    await _usable_again(server)
    async with HindsightClient(f"127.0.0.1:{server.port}", read_your_writes=False) as stale:
        await stale.recall("t-status", "anything")  # no token: the usable replica answers
    status = await fetch_status(f"127.0.0.1:{server.port}", timeout_s=5)
    reads = status.figures["reads"]
    (replica,) = reads["replicas"]
    assert replica["name"] == _replica(server).name and replica["usable"] is True
    assert replica["reads"] == _replica(server).reads > 0
    assert reads["primary_reads"] == _routing(server).primary_reads
    shown = render(status.target, status.serving, status.inference, status.figures)
    assert f"  reads       {reads['primary_reads']:,} on the primary" in shown
    assert re.search(
        rf"^  replica     {re.escape(replica['name'])}: serving reads \(lag \d+ ms\), [\d,]+ reads",
        shown,
        re.MULTILINE,
    ), shown


async def test_the_replicas_bench_measures_both_ways(server: RunningServer) -> None:
    await _usable_again(server)
    target = f"127.0.0.1:{server.port}"
    result = await run_replicas_bench(
        target, rounds=20, seconds=1.0, concurrency=1, batch_size=20, sample_s=0.05
    )
    assert result.replicas == 1
    assert (result.with_token.found, result.with_token.recall.count) == (20, 20)
    assert result.reads_with_token.primary + result.reads_with_token.replicas >= 20
    assert result.reads_without_token.replicas > 0  # no token: the replica answers
    assert result.under_writes.memories_per_s > 0 and result.under_writes.samples > 0
    shown = report(result, as_json=False)
    assert "Recall after Write, token" in shown and "found 20/20" in shown


@pytest.mark.parametrize("kind", ["another database", "ahead of the database"])
async def test_the_shared_client_drops_a_token_the_database_refuses(
    server: RunningServer, client: HindsightClient, kind: str
) -> None:
    """After the deployment was replaced, or restored from an older backup, a long-running service's
    tokens can never be met: its reads go on without them (a warning logged), they do not fail."""
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    written = await client.write(tenant, "The gate code is 4711", **FACT)
    database, position = decode_token(client.consistency.token(tenant))
    stale = (
        encode_token(database ^ 1, position)
        if kind == "another database"
        else encode_token(database, position + 10**12)
    )
    client.consistency.forget(tenant)
    client.consistency.observe(tenant, [(TRAILER, stale)])
    found = await client.recall(tenant, "gate code", subject="user")  # answers: no error
    assert client.consistency.token(tenant) == ""  # dropped; the next write brings a good one
    # Without its token the read may land on a replica a moment behind the write (a CI run met one):
    # the memory is found once the replica replayed it.
    if [hit.memory.id for hit in found.hits] != [written.memory.id]:

        async def found_now() -> bool:
            hits = (await client.recall(tenant, "gate code", subject="user")).hits
            return [hit.memory.id for hit in hits] == [written.memory.id]

        await eventually(found_now, timeout_s=5)
    assert (await client.get(tenant, written.memory.id)).id == written.memory.id


async def test_every_connection_of_a_read_with_a_token_is_checked(replicated: Replicated) -> None:
    """Behind a Service that balances connections over several standbys, the connection a read runs on
    need not be the one whose position was asked: each is checked itself, and remembers what it saw."""
    pool = await create_pool(
        replicated.stack.replica_dsns[0],
        min_size=1,
        max_size=2,
        statement_timeout_ms=5_000,
        max_statement_timeout_ms=5_000,
        connect_timeout_s=5,
    )
    primary = await asyncpg.connect(replicated.dsn)
    try:
        now = int(await primary.fetchval("SELECT pg_current_wal_flush_lsn()"))
        async with CaughtUpPool(pool, now, wait_s=5).acquire() as connection:
            assert connection.replayed >= now  # asked once, then kept on the connection
        await _on_replica(replicated, "SELECT pg_wal_replay_pause()")
        try:
            await primary.execute(
                "CREATE TABLE IF NOT EXISTS guard_probe (n int); INSERT INTO guard_probe VALUES (1)"
            )
            ahead = int(await primary.fetchval("SELECT pg_current_wal_flush_lsn()"))
            with pytest.raises(ReplicaBehind):
                await CaughtUpPool(pool, ahead, wait_s=0.05).fetchval("SELECT 1")
        finally:
            await _on_replica(replicated, "SELECT pg_wal_replay_resume()")
        assert await CaughtUpPool(pool, ahead, wait_s=5).fetchval("SELECT count(*) FROM guard_probe") == 1
    finally:
        await primary.close()
        await pool.close()
