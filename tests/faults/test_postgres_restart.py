"""PostgreSQL stopped and started again under write load (a real restart of a PostgreSQL of the test's
own, not a proxy): the server reconnects by itself (health SERVING again, no restart of the server),
callers see OK or UNAVAILABLE only (retried with the same key), and every acknowledged write is there,
once."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from hindsight.client import HindsightClient
from hindsight_server.config import Settings
from hindsight_server.domain.errors import Unavailable
from hindsight_server.process.server import start_server
from hindsight_server.store.errors import translate_errors
from tests.faults.conftest import SECTION
from tests.faults.load import WriteLoad
from tests.support.eventually import eventually
from tests.support.figures import by_code, report
from tests.support.postgres_ctl import RestartablePostgres

DOWN_S = 1.5  # how long PostgreSQL stays down


@pytest.fixture
async def postgres() -> AsyncIterator[RestartablePostgres]:
    # Not under pytest's basetemp: a concurrent pytest run prunes old basetemps, data directory included.
    with tempfile.TemporaryDirectory(prefix="hindsight-restart-") as data:
        own = RestartablePostgres(Path(data) / "pg")
        await own.start()
        yield own
        await own.close()


async def test_postgres_restart_under_write_load(
    postgres: RestartablePostgres, make_settings: Callable[..., Settings], tenant: str
) -> None:
    settings = make_settings(
        database__dsn=postgres.dsn, database__health_interval_s=0.2, database__connect_timeout_s=1.0,
        server__grace_s=1.0,
    )  # fmt: skip
    running = await start_server(settings)
    health: Counter[str] = Counter()
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}", timeout_s=5) as client:

            async def serving() -> bool:
                status = await client.health(timeout_s=1)
                health[status] += 1
                return status == "SERVING"

            # A write's deadline with room for the reconnect after the restart on a loaded machine (the pool
            # opens its connections again then): 2 s was once too short for it in a full suite.
            load = WriteLoad(client, tenant, timeout_s=5.0)
            load.start()
            await load.run_for(1.5)
            await postgres.stop()
            stopped, before = time.monotonic(), len(load.acknowledged)
            await eventually(lambda: _not(serving), timeout_s=10)  # readiness follows the database
            await load.run_for(max(0.0, DOWN_S - (time.monotonic() - stopped)))
            during = len(load.acknowledged)
            await postgres.start()
            back_in = await eventually(serving, timeout_s=20)
            await load.run_for(2.0)
            await load.stop()

            found = {m.id: m.content async for m in client.list_all(tenant, page_size=500)}
            for memory_id in load.acknowledged:
                assert (await client.get(tenant, memory_id)).id == memory_id
    finally:
        await running.stop()

    lost = set(load.acknowledged) - set(found)
    report(
        SECTION,
        f"postgres restart ({DOWN_S}s down, 4 writers): {len(load.acknowledged)} writes acknowledged "
        f"({before} before the stop, {during - before} while down, {len(load.acknowledged) - during} after), "
        f"{len(set(load.acknowledged) & set(found))} found, {len(lost)} lost; answers by code: "
        f"{by_code(load.answers)}; health SERVING {back_in:.2f}s after PostgreSQL was back",
    )
    assert not lost
    assert set(load.answers) <= {"OK", "UNAVAILABLE"}, load.answers
    assert load.answers["UNAVAILABLE"] > 0 and during - before <= load.writers  # the outage was real
    # Retries reuse their key: nothing is stored twice (at most one unanswered write per writer extra).
    assert sorted(found.values()) == sorted(set(found.values()))
    assert len(found) - len(load.acknowledged) <= load.writers
    assert health["NOT_SERVING"] > 0


async def _not(check: Callable[[], Any]) -> bool:
    try:
        return not await check()
    except Exception:  # the health call itself may fail while the server reconnects
        return False


def _raise_chain(*errors: BaseException) -> None:
    """Raises the last of `errors` while handling the one before it, and so on (as asyncpg does)."""
    try:
        if len(errors) > 1:
            _raise_chain(*errors[:-1])
    finally:
        raise errors[-1]


@pytest.mark.parametrize(
    "chain",
    [
        # What the restart test met, each once an INTERNAL: leaving a transaction on a dead connection ...
        [
            asyncpg.AdminShutdownError("terminating connection"),
            asyncpg.InterfaceError("connection is closed"),
        ],
        [
            asyncpg.InternalClientError("cannot switch to state 12"),
            asyncpg.InterfaceError("connection is closed"),
        ],
        # ... giving it back to the pool, and BEGIN on one a lost server left between two states.
        [
            asyncpg.ConnectionDoesNotExistError("closed"),
            asyncpg.InternalClientError("cannot switch to state 15"),
        ],
        [asyncpg.InternalClientError("cannot switch to state 15")],
    ],
    ids=["closed after shutdown", "closed after protocol error", "reset after loss", "begin after loss"],
)
async def test_a_connection_lost_under_a_statement_is_unavailable(chain: list[BaseException]) -> None:
    with pytest.raises(Unavailable):
        async with translate_errors():
            _raise_chain(*chain)


async def test_an_interface_error_of_its_own_stays_a_bug() -> None:
    with pytest.raises(asyncpg.InterfaceError):
        async with translate_errors():
            raise asyncpg.InterfaceError("cannot perform operation: another operation is in progress")
