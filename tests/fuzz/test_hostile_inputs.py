"""The audit's hostile inputs, from outside, against real servers: each answered OK or with a clear error
naming the field, never INTERNAL, and nothing left behind that breaks a later call or someone else's work
(no traceback in the server's log afterwards)."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.domain.query import MAX_EMBEDDED_TURNS
from hindsight_server.process.running import RunningServer

POISON = "9" * 4400 + "人"


@pytest.fixture
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.ERROR)
    yield
    unhandled = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert unhandled == []


async def _clear(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        assert error.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), error.details()
        return error.code()
    return grpc.StatusCode.OK


async def test_long_digit_runs_are_stored_and_searched_without_errors(
    client: HindsightClient, tenant: str, no_tracebacks: Any
) -> None:
    for text in (POISON, "9" * 16_000, "9" * 4400 + " x", "用户的订单号是" + "8" * 5000):
        written = await client.write(tenant, text, tier="semantic", kind="fact")
        again = await client.write(tenant, text + " again", tier="semantic", kind="fact")  # its near twin
        assert written.memory.id and again.memory.id
    turn = await client.append_turn(tenant, "digits", POISON)
    assert (
        await client.append_turn(tenant, "digits", "and 3 people tomorrow")
    ).turn.index == turn.turn.index + 1
    assert await _clear(client.end_session(tenant, "digits")) == grpc.StatusCode.OK
    found = await client.recall(tenant, "用户的订单号是" + "8" * 3000)
    assert found.hits  # the Chinese words still find it


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, written by hand: the Python runtime refuses to build messages
    as deep as a hostile client can send."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = b""
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            return out + bytes([low])
        out += bytes([low | 0x80])


def _deep_struct(levels: int) -> bytes:
    """{"k": {"k": ... {"k": null}}}, `levels` objects deep, as Struct bytes."""
    struct = _field(1, _field(1, b"k") + _field(2, b"\x08\x00"))  # {"k": null}
    for _ in range(levels):
        struct = _field(1, _field(1, b"k") + _field(2, _field(5, struct)))  # a Value's struct_value
    return struct


def _deep_write(tenant: str, levels: int) -> bytes:
    memory = pb.MemoryInput(content="deep", tier=pb.TIER_SEMANTIC, kind=pb.KIND_FACT).SerializeToString()
    memory += _field(pb.MemoryInput.DESCRIPTOR.fields_by_name["entities"].number, _deep_struct(levels))
    request = pb.WriteRequest(tenant_id=tenant).SerializeToString()
    return request + _field(pb.WriteRequest.DESCRIPTOR.fields_by_name["memory"].number, memory)


@pytest.mark.parametrize("levels", [2, 4, 5, 60, 200, 5000])
async def test_deep_entities_are_refused_whatever_the_depth(
    server: RunningServer, tenant: str, levels: int, no_tracebacks: Any
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        write: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]
        write = channel.unary_unary("/hindsight.v1.MemoryService/Write")
        try:
            answer = pb.WriteResponse.FromString(await write(_deep_write(tenant, levels), timeout=10))
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
            assert (levels > 3 and "entities" in (error.details() or "")) or "request" in (
                error.details() or ""
            )
            return
        # Within the limit: stored, and the standard client reads it back.
        assert levels <= 3
    async with HindsightClient(f"127.0.0.1:{server.port}") as client:
        assert (await client.get(tenant, answer.memory.id)).id == answer.memory.id


async def test_a_dialogue_query_embeds_a_bounded_number_of_turns(
    tier_server: RunningServer, tenant: str, no_tracebacks: Any
) -> None:
    """A 4 KB query of 700 short turns was 700 inference calls per vector space on the shared tier."""
    query = "\n".join(f"U:{index}" for index in range(2000)).encode()[:4000].decode()
    assert query.count("\n") > 600
    async with HindsightClient(f"127.0.0.1:{tier_server.port}", timeout_s=30) as client:
        await client.write(tenant, "the user's meeting is on Friday", tier="semantic", kind="fact")

        status = tier_server.status
        assert status is not None  # a started server has its board

        def misses() -> int:
            caches = status.snapshot()["query_cache"]
            return sum(int(figures["misses"]) for figures in caches.values())

        before = misses()
        answer = await client.recall(tenant, query)
        spaces = len(status.snapshot()["query_cache"])
        assert misses() - before <= spaces * (1 + MAX_EMBEDDED_TURNS)
        assert answer.query_truncated  # it says the turns were capped
