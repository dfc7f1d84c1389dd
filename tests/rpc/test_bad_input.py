"""Every bad request gets INVALID_ARGUMENT naming the field, in the message and as a BadRequest detail."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2, struct_pb2, timestamp_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight_server.process.running import RunningServer

TENANT = "bad-input"


def _memory(**fields: Any) -> pb.MemoryInput:
    values: dict[str, Any] = {"content": "ok", "tier": pb.TIER_SEMANTIC, "kind": pb.KIND_FACT}
    values.update(fields)
    return pb.MemoryInput(**values)


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        value = {"n": value}
    return value


WRITE_CASES: list[tuple[str, pb.WriteRequest, str]] = [
    ("missing tenant", pb.WriteRequest(memory=_memory()), "tenant_id"),
    ("empty content", pb.WriteRequest(tenant_id=TENANT, memory=_memory(content="")), "memory.content"),
    (
        "oversized content",
        pb.WriteRequest(tenant_id=TENANT, memory=_memory(content="x" * 20_000)),
        "memory.content",
    ),
    ("missing tier", pb.WriteRequest(tenant_id=TENANT, memory=_memory(tier=0)), "memory.tier"),
    ("unknown tier", pb.WriteRequest(tenant_id=TENANT, memory=_memory(tier=42)), "memory.tier"),
    ("unknown kind", pb.WriteRequest(tenant_id=TENANT, memory=_memory(kind=99)), "memory.kind"),
    (
        "entities too deep",
        pb.WriteRequest(tenant_id=TENANT, memory=_memory(entities=_struct(_deep(6)))),
        "memory.entities.n",
    ),
    (
        "empty entity name",
        pb.WriteRequest(tenant_id=TENANT, memory=_memory(entities=_struct({"": "A"}))),
        "memory.entities",
    ),
    (
        "timestamp out of range",
        pb.WriteRequest(tenant_id=TENANT, memory=_memory(valid_from=timestamp_pb2.Timestamp(seconds=10**12))),
        "memory.valid_from",
    ),
    (
        "negative nanos",
        pb.WriteRequest(
            tenant_id=TENANT, memory=_memory(expires_at=timestamp_pb2.Timestamp(seconds=1, nanos=-5))
        ),
        "memory.expires_at",
    ),
    (
        "confidence above 1",
        pb.WriteRequest(tenant_id=TENANT, memory=_memory(confidence=3.0)),
        "memory.confidence",
    ),
    ("NUL in content", pb.WriteRequest(tenant_id=TENANT, memory=_memory(content="a\x00b")), "memory.content"),
]

OTHER_CASES: list[tuple[str, str, Any, str]] = [
    ("get without id", "Get", pb.GetRequest(tenant_id=TENANT), "id"),
    (
        "get with a malformed id",
        "Get",
        pb.GetRequest(tenant_id=TENANT, id="'; DROP TABLE memories; --"),
        "id",
    ),
    (
        "delete without tenant",
        "Delete",
        pb.DeleteRequest(id="01a22b18-e375-7426-afa1-f923854e099a"),
        "tenant_id",
    ),
    (
        "update of an immutable field",
        "Update",
        pb.UpdateRequest(
            tenant_id=TENANT,
            id="01a22b18-e375-7426-afa1-f923854e099a",
            update_mask=field_mask_pb2.FieldMask(paths=["status"]),
        ),
        "update_mask",
    ),
    (
        "update of an immutable field, the mask's first form",
        "Update",
        pb.UpdateRequest(
            tenant_id=TENANT, id="01a22b18-e375-7426-afa1-f923854e099a", deprecated_update_mask=["status"]
        ),
        "deprecated_update_mask",
    ),
    (
        "update whose two masks differ",
        "Update",
        pb.UpdateRequest(
            tenant_id=TENANT,
            id="01a22b18-e375-7426-afa1-f923854e099a",
            update_mask=field_mask_pb2.FieldMask(paths=["content"]),
            deprecated_update_mask=["content", "intent"],
        ),
        "update_mask",
    ),
    (
        "update with an empty mask",
        "Update",
        pb.UpdateRequest(
            tenant_id=TENANT,
            id="01a22b18-e375-7426-afa1-f923854e099a",
            update_mask=field_mask_pb2.FieldMask(),
        ),
        "update_mask",
    ),
    ("page size too large", "List", pb.ListRequest(tenant_id=TENANT, page_size=100_000), "page_size"),
    ("negative page size", "List", pb.ListRequest(tenant_id=TENANT, page_size=-1), "page_size"),
    ("garbage page token", "List", pb.ListRequest(tenant_id=TENANT, page_token="%%%"), "page_token"),
    (
        "unknown status filter",
        "List",
        pb.ListRequest(tenant_id=TENANT, statuses=[pb.Status.ValueType(77)]),
        "statuses[0]",
    ),
    ("empty batch", "WriteBatch", pb.WriteBatchRequest(tenant_id=TENANT), "memories"),
    (
        "batch too large",
        "WriteBatch",
        pb.WriteBatchRequest(tenant_id=TENANT, memories=[_memory()] * 1001),
        "memories",
    ),
    ("empty query", "Recall", pb.RecallRequest(tenant_id=TENANT, query=" "), "query"),
    ("top_k out of range", "Recall", pb.RecallRequest(tenant_id=TENANT, query="q", top_k=1000), "top_k"),
    (
        "negative budget",
        "Recall",
        pb.RecallRequest(tenant_id=TENANT, query="q", token_budget=-5),
        "token_budget",
    ),
    ("unknown profile", "Recall", pb.RecallRequest(tenant_id=TENANT, query="q", profile="nope"), "profile"),
    (
        "weights summing to zero",
        "Recall",
        pb.RecallRequest(tenant_id=TENANT, query="q", weights=pb.ScoreWeights()),
        "weights",
    ),
    (
        "reversed time range",
        "Recall",
        pb.RecallRequest(
            tenant_id=TENANT,
            query="q",
            time_range=pb.TimeRange(
                start=timestamp_pb2.Timestamp(seconds=2000), end=timestamp_pb2.Timestamp(seconds=1000)
            ),
        ),
        "time_range.end",
    ),
]


@pytest.fixture(scope="module")
async def stub(server: RunningServer) -> AsyncIterator[pb_grpc.MemoryServiceAsyncStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield pb_grpc.MemoryServiceStub(channel)


async def _expect_invalid(call: Callable[[], Any], field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call()
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert (error.details() or "").startswith(field), error.details()
    status = rpc_status.from_call(error)
    assert status is not None
    violations = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(violations)
    assert violations.field_violations[0].field.startswith(field)


@pytest.mark.parametrize(("case", "request_", "field"), WRITE_CASES, ids=[c[0] for c in WRITE_CASES])
async def test_bad_writes(
    stub: pb_grpc.MemoryServiceAsyncStub, case: str, request_: pb.WriteRequest, field: str
) -> None:
    await _expect_invalid(lambda: stub.Write(request_, timeout=5), field)


@pytest.mark.parametrize(
    ("case", "method", "request_", "field"), OTHER_CASES, ids=[c[0] for c in OTHER_CASES]
)
async def test_bad_requests(
    stub: pb_grpc.MemoryServiceAsyncStub, case: str, method: str, request_: Message, field: str
) -> None:
    await _expect_invalid(lambda: getattr(stub, method)(request_, timeout=5), field)


async def test_nothing_of_a_rejected_request_was_stored(stub: pb_grpc.MemoryServiceAsyncStub) -> None:
    every_status = [pb.Status.ValueType(number) for number in range(1, 6)]
    listed = await stub.List(pb.ListRequest(tenant_id=TENANT, statuses=every_status), timeout=5)
    assert list(listed.memories) == []
