"""Admission control over real gRPC: a tenant past its share of a server is refused at once with
RESOURCE_EXHAUSTED, a retry delay and a gRPC pushback, while another tenant's calls all go through; the
shared client's own retries bring a shed call back when there is room."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from google.rpc import error_details_pb2

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight_server.config import Settings
from hindsight_server.domain.admission import CallShape, call_cost
from hindsight_server.domain.errors import Shed
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from hindsight_server.rpc.admission import shape_of
from hindsight_server.rpc.auth import AUTHORIZATION_HEADER
from hindsight_server.rpc.errors import PUSHBACK_HEADER, Pacer
from tests.support.processes import create_key
from tests.support.rich_errors import detail


@pytest.fixture(scope="module")
async def tight_server(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningServer]:
    """8 cost units in flight per server before each tenant is held to its share (a maximal recall: ~3)."""
    running = await start_server(make_settings(admission__max_cost_in_flight=8))
    yield running
    await running.stop()


async def _flood(
    stub: pb_grpc.MemoryServiceAsyncStub, tenant: str, calls: int
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


def _unparseable_recall(tenant: str) -> bytes:
    """A Recall whose tenant reads but whose query is not UTF-8: INVALID_ARGUMENT once it is parsed."""
    return pb.RecallRequest(tenant_id=tenant).SerializeToString() + b"\x12\x02\xff\xfe"


async def test_a_tenant_refused_whatever_it_asks_is_refused_before_its_request_is_parsed(
    make_settings: Callable[..., Settings], postgres_dsn: str, tenant: str
) -> None:
    """Its bucket empty (1 unit, refilled at 0.01 a second), the tenant's next call is shed unread: the
    bytes that would not parse are answered RESOURCE_EXHAUSTED, not INVALID_ARGUMENT. Only for its own
    key: another tenant's key and no key at all are answered as before, learning nothing of its load."""
    running = await start_server(
        make_settings(
            security__require_api_keys=True,
            security__api_key_cache_s=0,
            admission__cost_per_s_per_tenant=0.01,
            admission__cost_burst_per_tenant=1,
        )
    )
    owner = (await create_key(postgres_dsn, tenant))["api_key"]
    stranger = (await create_key(postgres_dsn, f"{tenant}-stranger"))["api_key"]
    target = f"127.0.0.1:{running.port}"
    try:
        async with grpc.aio.insecure_channel(target, options=[("grpc.enable_retries", 0)]) as channel:
            send: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]
            send = channel.unary_unary("/hindsight.v1.MemoryService/Recall")

            async def code(data: bytes, key: str | None) -> grpc.StatusCode:
                metadata = () if key is None else ((AUTHORIZATION_HEADER, f"Bearer {key}"),)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await send(data, metadata=metadata, timeout=10)
                return refused.value.code()

            assert await code(_unparseable_recall(tenant), owner) == grpc.StatusCode.INVALID_ARGUMENT
            stub = pb_grpc.MemoryServiceStub(channel)
            await stub.Recall(
                pb.RecallRequest(tenant_id=tenant, query="x"),
                metadata=((AUTHORIZATION_HEADER, f"Bearer {owner}"),),
            )
            # The bucket is empty now: whatever the tenant sends is refused, unread.
            assert await code(_unparseable_recall(tenant), owner) == grpc.StatusCode.RESOURCE_EXHAUSTED
            # Anyone else is answered as before the tenant was busy: the bytes do not parse.
            for key in (None, stranger, f"{owner}x"):
                assert await code(_unparseable_recall(tenant), key) == grpc.StatusCode.INVALID_ARGUMENT
            assert await code(b"\x0a\xff", owner) == grpc.StatusCode.INVALID_ARGUMENT  # no tenant to read
    finally:
        await running.stop()


async def test_a_refusal_is_answered_after_its_delay_at_most_the_cap() -> None:
    pacer = Pacer(cap_s=0.1, limit=1)
    started = time.perf_counter()
    await pacer.pace(Shed("busy", retry_after_s=0.05))
    assert time.perf_counter() - started >= 0.05
    started = time.perf_counter()
    await pacer.pace(Shed("over its rate", retry_after_s=30))  # held the cap, not 30 s
    assert 0.1 <= time.perf_counter() - started < 1
    started = time.perf_counter()
    held = asyncio.create_task(pacer.pace(Shed("busy", retry_after_s=0.1)))
    await asyncio.sleep(0)
    await pacer.pace(Shed("busy", retry_after_s=0.1))  # past the limit: at once
    assert time.perf_counter() - started < 0.05
    await held


def test_a_recall_is_weighed_with_the_cross_encoder_work_its_plan_would_do() -> None:
    asked: list[tuple[str, str]] = []

    def reranking(text: str, profile: str) -> tuple[int, bool]:
        asked.append((text, profile))
        return (30, False) if profile == "deep" else (0, False)

    deep = pb.RecallRequest(tenant_id="t", query="where does the user live", top_k=10, profile="deep")
    plain = pb.RecallRequest(tenant_id="t", query="where does the user live", top_k=10)
    assert shape_of("Recall", deep, 40, reranking) == CallShape("Recall", 10, 40, rerank_pairs=30)
    assert call_cost(shape_of("Recall", deep, 40, reranking)) > 15 * call_cost(shape_of("Recall", plain, 40))
    assert shape_of("Recall", plain, 40, reranking).rerank_pairs == 0
    assert shape_of("Write", pb.WriteRequest(tenant_id="t"), 10, reranking).rerank_pairs == 0
    assert asked == [("where does the user live", "deep")] * 2 + [("where does the user live", "")]
