"""`hindsight up --replicas N`: streaming standbys of the embedded PostgreSQL (stack/replicas.py), against
a real primary: they see its writes, report their replay lag, are reused across restarts (made anew when
they cannot be), and the supervisor restarts one that dies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from hindsight_server.config import Settings, load_settings
from hindsight_server.stack.children import ReplicaChild
from hindsight_server.stack.replicas import (
    drop_unused_slots,
    replica_number,
    replica_status,
    running_replica_dsns,
)
from hindsight_server.stack.supervisor import Stack
from tests.support.eventually import eventually
from tests.support.processes import free_port, run_cli
from tests.support.replicas import Replicated, replicated_postgres

pytestmark = pytest.mark.timeout(90)


class Cluster:
    def __init__(self, replicated: Replicated) -> None:
        self.stack, self.postgres, self.dsn = replicated.stack, replicated.postgres, replicated.dsn
        self.rows = 0  # rows written to t so far

    @property
    def replicas(self) -> list[ReplicaChild]:
        return self.stack.replica_children

    async def execute(self, sql: str, *args: object) -> None:
        connection = await asyncpg.connect(self.dsn)
        try:
            await connection.execute(sql, *args)
        finally:
            await connection.close()

    async def write(self, count: int) -> int:
        await self.execute(
            "INSERT INTO t SELECT generate_series($1::int + 1, $1::int + $2::int)", self.rows, count
        )
        self.rows += count
        return self.rows

    async def lags(self) -> list[int | None]:
        return [status.lag_bytes for status in await self.stack.replica_status()]


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    """An embedded primary in a temporary data dir, and 2 replicas the stack starts from it."""
    async with replicated_postgres(tmp_path_factory.mktemp("data"), replicas=2) as replicated:
        cluster = Cluster(replicated)
        await cluster.execute("CREATE TABLE t (id int PRIMARY KEY)")
        yield cluster


async def _count(dsn: str) -> int | None:
    with contextlib.suppress(OSError, asyncpg.PostgresError):
        connection = await asyncpg.connect(dsn, timeout=2)
        try:
            count: int = await connection.fetchval("SELECT count(*) FROM t")
            return count
        finally:
            await connection.close()
    return None


async def _sees(dsn: str, rows: int) -> None:
    async def check() -> bool:
        return await _count(dsn) == rows

    await eventually(check, timeout_s=10.0)


async def _caught_up(cluster: Cluster) -> None:
    async def check() -> bool:
        return await cluster.lags() == [0] * len(cluster.replicas)

    await eventually(check, timeout_s=10.0)


async def test_the_replicas_stream_the_primary_writes_and_catch_up(cluster: Cluster) -> None:
    assert [child.replica.reused for child in cluster.replicas] == [False, False]  # base backups
    rows = await cluster.write(100)
    for child in cluster.replicas:
        await _sees(child.replica.dsn, rows)
    await _caught_up(cluster)
    statuses = await cluster.stack.replica_status()
    assert [status.state for status in statuses] == ["streaming", "streaming"]
    # Each on a unix socket in its own data directory, under the stack's data dir.
    for index, dsn in enumerate(cluster.stack.replica_dsns, start=1):
        directory = cluster.stack.data_dir / f"postgres-replica-{index}"
        assert dsn == f"postgresql://postgres@/postgres?host={directory}"
        assert (directory / ".s.PGSQL.5432").is_socket()
    # What another process (`hindsight status`) finds from the data dir alone.
    assert running_replica_dsns(cluster.stack.data_dir) == cluster.stack.replica_dsns


async def test_hindsight_status_shows_each_replicas_lag(cluster: Cluster) -> None:
    await _caught_up(cluster)
    shown = await run_cli(
        [
            "status",
            "--json",
            "--data-dir",
            str(cluster.stack.data_dir),
            "--target",
            f"127.0.0.1:{free_port()}",
        ]
    )
    assert shown.code == 3  # no memory server on that port (exit 3): said, replicas still shown
    replicas = json.loads(shown.stdout)["replicas"]
    assert [r["dsn"] for r in replicas] == [child.replica.dsn for child in cluster.replicas]
    assert [(r["state"], r["lag_bytes"]) for r in replicas] == [("streaming", 0)] * 2


async def test_the_lag_grows_while_a_replica_does_not_replay(cluster: Cluster) -> None:
    paused = cluster.replicas[0].replica.dsn
    connection = await asyncpg.connect(paused)
    try:
        await connection.execute("SELECT pg_wal_replay_pause()")
        before = await _count(paused)
        rows = await cluster.write(1000)

        async def behind() -> bool:
            first, second = await cluster.lags()
            return first is not None and first > 0 and second == 0

        await eventually(behind, timeout_s=10.0)  # the other one keeps replaying
        assert await _count(paused) == before
        await connection.execute("SELECT pg_wal_replay_resume()")
    finally:
        await connection.close()
    await _sees(paused, rows)
    await _caught_up(cluster)


async def test_one_start_up_line_per_replica(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    await cluster.stack._describe_replicas()
    cluster.stack._print_banner(cluster.postgres)
    out = capsys.readouterr().out
    for index, child in enumerate(cluster.replicas, start=1):
        assert child.process is not None
        line = re.escape(f"  postgres replica {index} {child.replica.dsn} (streaming, lag ")
        assert re.search(rf"^{line}\d+ B\), pid {child.process.pid}$", out, re.MULTILINE), out
    assert out.index("postgres replica 1") < out.index("postgres replica 2") < out.index("triton")


async def test_a_restarted_replica_is_reused(cluster: Cluster) -> None:
    child = cluster.replicas[0]
    marker = child.replica.data_dir / "kept-by-the-test"
    marker.write_text("not a base backup's\n")
    await child.stop(10)
    rows = await cluster.write(10)  # written while it was down: the slot kept the WAL for it
    await child.spawn()
    await child.wait_ready(30)
    assert child.replica.reused is True
    assert marker.exists()
    await _sees(child.replica.dsn, rows)


async def test_a_standby_left_running_on_the_directory_is_stopped_and_replaced(cluster: Cluster) -> None:
    left = cluster.replicas[0]  # as if an earlier `up` had left it running
    assert left.process is not None
    replacement = ReplicaChild.of(left.replica)
    await replacement.spawn()  # stops the one running there first (pg_ctl stop -m fast)
    assert await asyncio.wait_for(left.process.wait(), 30) == 0
    cluster.stack.replica_children[0] = replacement
    await replacement.wait_ready(30)
    assert replacement.replica.reused is True
    rows = await cluster.write(10)
    await _sees(replacement.replica.dsn, rows)


async def test_the_supervisor_restarts_a_replica_that_dies(cluster: Cluster) -> None:
    child = cluster.replicas[1]
    assert child.process is not None
    killed = child.process.pid
    stop = asyncio.Event()
    supervisor = asyncio.create_task(cluster.stack._supervise(stop))
    try:
        os.kill(killed, signal.SIGKILL)

        async def restarted() -> bool:
            process = child.process
            if process is None or process.pid == killed or process.returncode is not None:
                return False
            with contextlib.suppress(RuntimeError):  # a first try may find the dead one's memory in use
                await child.wait_ready(2)
                return True
            return False

        await eventually(restarted, timeout_s=30)
        assert child.restarts >= 1
        assert child.replica.reused is True  # the crash left a directory to replay from
        rows = await cluster.write(10)
        await _sees(child.replica.dsn, rows)
    finally:
        stop.set()
        await supervisor


async def test_a_replica_without_its_slot_is_made_anew(cluster: Cluster) -> None:
    child = cluster.replicas[0]
    marker = child.replica.data_dir / "kept-by-the-test"
    assert marker.exists()
    await child.stop(10)
    await cluster.execute("SELECT pg_drop_replication_slot('hindsight_replica_1')")
    await child.spawn()
    await child.wait_ready(30)
    assert child.replica.reused is False
    assert not marker.exists()
    await _sees(child.replica.dsn, cluster.rows)
    await _caught_up(cluster)


async def test_slots_of_replicas_not_started_are_dropped(cluster: Cluster) -> None:
    await cluster.replicas[1].stop(10)

    async def dropped() -> bool:  # its WAL sender lets go of the slot a moment after it stops
        return await drop_unused_slots(cluster.dsn, keep=1) == ["hindsight_replica_2"]

    await eventually(dropped, timeout_s=10.0)
    connection = await asyncpg.connect(cluster.dsn)
    try:
        slots = await connection.fetch("SELECT slot_name, active FROM pg_replication_slots ORDER BY 1")
    finally:
        await connection.close()
    assert [(row["slot_name"], row["active"]) for row in slots] == [("hindsight_replica_1", True)]
    statuses = await replica_status(cluster.dsn, cluster.stack.replica_dsns)
    assert [status.state for status in statuses] == ["streaming", "down"]
    assert statuses[1].lag_bytes is None


async def test_up_refuses_replicas_of_an_external_database(capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(database={"dsn": "postgresql://app@db.example/memories"})
    assert await Stack(settings, replicas=1, mcp=False).run() == 1
    assert "--replicas streams from the embedded PostgreSQL" in capsys.readouterr().err
    assert await Stack(Settings(), replicas=9, mcp=False).run() == 1
    assert "--replicas: 0 to 8" in capsys.readouterr().err


def test_a_replica_of_another_primary_is_not_reused(tmp_path: Path) -> None:
    from hindsight_server.stack.replicas import MARKER, Primary, Replica

    replica = Replica(Primary("postgresql:///postgres", tmp_path), 1, tmp_path)
    assert replica._not_reusable("42", has_slot=True) is not None  # no directory
    replica.data_dir.mkdir()
    (replica.data_dir / "standby.signal").touch()
    assert "no finished base backup" in (replica._not_reusable("42", has_slot=True) or "")
    (replica.data_dir / MARKER).write_text(
        '{"primary_system_identifier": "7", "slot": "hindsight_replica_1"}'
    )
    assert "another primary" in (replica._not_reusable("42", has_slot=True) or "")
    assert replica._not_reusable("7", has_slot=True) is None
    assert "slot" in (replica._not_reusable("7", has_slot=False) or "")
    (replica.data_dir / "standby.signal").unlink()
    assert "no longer a standby" in (replica._not_reusable("7", has_slot=True) or "")


async def test_the_memory_servers_are_given_the_replicas_to_read_from(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    (server,) = cluster.stack._server_children(cluster.dsn, "")
    given = server.env["HINDSIGHT_DATABASE__REPLICA_DSNS"]
    assert json.loads(given) == cluster.stack.replica_dsns
    monkeypatch.setenv("HINDSIGHT_DATABASE__REPLICA_DSNS", given)  # what the server then reads
    assert list(load_settings(None).database.replica_dsns) == cluster.stack.replica_dsns


def test_hindsight_status_numbers_a_replica_as_the_stack_does() -> None:
    """With replica 1 stopped, `hindsight status` shows replica 2 as 2, not as the first one found."""
    assert replica_number("postgresql://postgres@/postgres?host=/data/postgres-replica-2") == "2"
    assert replica_number("postgresql://hindsight@db.example/hindsight") == "?"
