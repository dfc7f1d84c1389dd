"""Admission control over real gRPC: a tenant past its share of a server is refused at once with
RESOURCE_EXHAUSTED, a retry delay and a gRPC pushback, while another tenant's calls all go through; the
shared client's own retries bring a shed call back when there is room."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from google.rpc import error_details_pb2

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight_server.app import RunningServer, start_server
from hindsight_server.config import Settings
from hindsight_server.rpc.errors import PUSHBACK_HEADER
from tests.support.rich_errors import detail


@pytest.fixture(scope="module")
async def tight_server(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningServer]:
    """8 cost units in flight per server before each tenant is held to its share (a maximal recall: ~3)."""
    running = await start_server(make_settings(admission__max_cost_in_flight=8))
    yield running
    await running.stop()


async def _flood(
    stub: pb_grpc.MemoryServiceStub, tenant: str, calls: int
) -> list[grpc.aio.AioRpcError | None]:
    """`calls` concurrent maximal recalls, with no retries: each answer or its refusal."""

    async def one() -> grpc.aio.AioRpcError | None:
        query = " ".join(f"word{index}" for index in range(400))
        try:
            await stub.Recall(pb.RecallRequest(tenant_id=tenant, query=query, top_k=100), timeout=30)
        except grpc.aio.AioRpcError as refused:
            return refused
        return None

    return await asyncio.gather(*(one() for _ in range(calls)))


async def test_a_tenant_past_its_share_is_shed_and_another_is_not(tight_server: RunningServer) -> None:
    target = f"127.0.0.1:{tight_server.port}"
    async with grpc.aio.insecure_channel(target, options=[("grpc.enable_retries", 0)]) as channel:
        stub = pb_grpc.MemoryServiceStub(channel)
        noisy = await _flood(stub, "noisy", 12)
        refused = [error for error in noisy if error is not None]
        assert 0 < len(refused) < 12
        first = refused[0]
        assert first.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "'noisy'" in (first.details() or "") and "share" in (first.details() or "")
        retry = detail(first, error_details_pb2.RetryInfo)
        assert retry is not None and 0 < retry.retry_delay.ToTimedelta().total_seconds() <= 1
        assert dict(first.trailing_metadata() or ())[PUSHBACK_HEADER] == "50"

        # While the noisy tenant floods, the quiet one's calls each get in: it is under its share.
        flood = asyncio.ensure_future(_flood(stub, "noisy", 24))
        quiet = [
            await stub.Recall(pb.RecallRequest(tenant_id="quiet", query="meeting room"), timeout=30)
            for _ in range(5)
        ]
        assert len(quiet) == 5
        assert any(error is not None for error in await flood)


async def test_the_shared_client_retries_a_shed_call_after_the_pushback(
    make_settings: Callable[..., Settings],
) -> None:
    running = await start_server(make_settings(admission__max_cost_in_flight=2))
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}", timeout_s=30) as client:
            answers = await asyncio.gather(*(client.recall("patient", "meeting room") for _ in range(4)))
        assert len(answers) == 4  # each shed call was retried by gRPC itself, after 50 ms, and got in
    finally:
        await running.stop()
