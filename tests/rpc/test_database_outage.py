"""A real database outage (connections cut by a proxy): callers get UNAVAILABLE, never INTERNAL; the
health service reports NOT_SERVING; everything recovers by itself and no acknowledged write is lost."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from urllib.parse import parse_qs, urlsplit

import grpc
import pytest
from google.rpc import error_details_pb2

from hindsight.client import HindsightClient
from hindsight_server.config import Settings
from hindsight_server.process.server import start_server
from tests.support.eventually import eventually
from tests.support.rich_errors import detail
from tests.support.tcp_proxy import CuttableProxy

RPC_ERRORS = (grpc.aio.AioRpcError,)  # a health call itself may fail during the outage


@pytest.fixture
async def proxy(postgres_dsn: str) -> AsyncIterator[CuttableProxy]:
    socket_dir = parse_qs(urlsplit(postgres_dsn).query)["host"][0]
    cuttable = CuttableProxy(f"{socket_dir}/.s.PGSQL.5432")
    await cuttable.start()
    yield cuttable
    await cuttable.close()


async def test_outage_gives_unavailable_and_recovers(
    proxy: CuttableProxy, make_settings: Callable[..., Settings], tenant: str
) -> None:
    settings = make_settings(
        database__dsn=f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres",
        database__health_interval_s=0.2,
        database__connect_timeout_s=1.0,
    )
    running = await start_server(settings)
    acknowledged: list[str] = []
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}", timeout_s=5) as client:
            acknowledged.append(
                (await client.write(tenant, "before the outage", tier="semantic", kind="fact")).memory.id
            )

            await proxy.cut()
            codes = []
            for call in (
                lambda: client.write(tenant, "during the outage", tier="semantic", kind="fact"),
                lambda: client.get(tenant, acknowledged[0]),
                lambda: client.recall(tenant, "outage"),
                lambda: client.list(tenant),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as error:
                    await call()
                codes.append(error.value.code())
                assert "Traceback" not in (error.value.details() or "")
                retry = detail(error.value, error_details_pb2.RetryInfo)  # safe to retry, and when
                assert retry is not None and retry.retry_delay.ToTimedelta().total_seconds() > 0
            assert codes == [grpc.StatusCode.UNAVAILABLE] * 4
            await eventually(lambda: _is(client, "NOT_SERVING"), timeout_s=10, ignoring=RPC_ERRORS)

            await proxy.restore()
            await eventually(lambda: _is(client, "SERVING"), timeout_s=10, ignoring=RPC_ERRORS)
            acknowledged.append(
                (await client.write(tenant, "after the outage", tier="semantic", kind="fact")).memory.id
            )
            stored = {m.id async for m in client.list_all(tenant)}
            assert stored == set(acknowledged)
    finally:
        await running.stop()


async def _is(client: HindsightClient, status: str) -> bool:
    return await client.health(timeout_s=1) == status
