"""One example for each bug the fuzzing found and that was fixed: each answered INTERNAL, UNKNOWN, a
RESOURCE_EXHAUSTED from the client's own trailer limit, or an INVALID_ARGUMENT naming a field the
request does not have. Now each is INVALID_ARGUMENT naming the right field."""

from __future__ import annotations

import base64
import math
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2
from google.protobuf.field_mask_pb2 import FieldMask

from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from tests.fuzz.checks import named_field, refused

SOME_ID = "01a22b8a-0000-7000-8000-000000000000"
YEAR_1 = timestamp_pb2.Timestamp(seconds=-62_135_510_400)  # 0001-01-02
YEAR_9999 = timestamp_pb2.Timestamp(seconds=253_402_041_600)  # 9999-12-29


def _memory(**fields: Any) -> pb.MemoryInput:
    return pb.MemoryInput(**{"content": "ok", "tier": pb.TIER_SEMANTIC, "kind": pb.KIND_FACT, **fields})


def _with_entities(message: Any, value: Any) -> Any:
    message.entities.update({"x": value})
    return message


CASES: list[tuple[str, str, Any, str]] = [
    # json_format refuses NaN and infinities in a Struct: ValueError -> INTERNAL.
    ("NaN entity", "Write", pb.WriteRequest(memory=_with_entities(_memory(), math.nan)),
     "memory.entities"),
    ("infinite entity in a batch", "WriteBatch",
     pb.WriteBatchRequest(memories=[_memory(), _with_entities(_memory(), -math.inf)]),
     "memories[1].entities"),
    ("infinite recall entity", "Recall",
     _with_entities(pb.RecallRequest(query="q"), math.inf), "entities"),
    ("NaN turn entity", "AppendTurn",
     _with_entities(pb.AppendTurnRequest(session_id="s", text="hi"), math.nan), "entities"),
    # Time expressions read relative to a `now` at the edge of datetime's range: OverflowError -> INTERNAL.
    ("now in year 1, '三天前'", "Recall", pb.RecallRequest(query="三天前", now=YEAR_1), "now"),
    ("now in year 9999, 'next week'", "Recall",
     pb.RecallRequest(query="next week", now=YEAR_9999), "now"),
    ("a turn said in year 1", "AppendTurn",
     pb.AppendTurnRequest(session_id="s", text="上周三", occurred_at=YEAR_1), "occurred_at"),
    # json.loads recursed into a page token of 5,000 '[': RecursionError -> INTERNAL.
    ("deep page token", "List",
     pb.ListRequest(page_token=base64.urlsafe_b64encode(b"[" * 5_000).decode()), "page_token"),
    # Unchecked identifiers reached SQL: PostgreSQL refused the NUL ("memory: text is not valid UTF-8").
    ("NUL in Get's agent_id", "Get", pb.GetRequest(id=SOME_ID, agent_id="a\x00"), "agent_id"),
    ("NUL in History's agent_id", "History", pb.HistoryRequest(id=SOME_ID, agent_id="\x00"),
     "agent_id"),
    ("NUL in Delete's agent_id", "Delete", pb.DeleteRequest(id=SOME_ID, agent_id="\x00"),
     "agent_id"),
    ("NUL in ConfirmPending's agent_id", "ConfirmPending",
     pb.ConfirmPendingRequest(id=SOME_ID, agent_id="\x00"), "agent_id"),
    ("NUL in RejectPending's agent_id", "RejectPending",
     pb.RejectPendingRequest(id=SOME_ID, agent_id="\x00"), "agent_id"),
    ("NUL in Summarize's session_id", "Summarize", pb.SummarizeRequest(session_id="s\x00"),
     "session_id"),
    ("NUL in ConfirmPending's idempotency_key", "ConfirmPending",
     pb.ConfirmPendingRequest(id=SOME_ID, idempotency_key="a\x00b"), "idempotency_key"),
    ("NUL in Update's idempotency_key", "Update",
     pb.UpdateRequest(id=SOME_ID, update_mask=FieldMask(paths=["content"]), memory=_memory(),
                      idempotency_key="\x00"), "idempotency_key"),
    ("NUL in EndSession's reason", "EndSession",
     pb.EndSessionRequest(session_id="s", reason="done\x00"), "reason"),
    # AppendTurn's text was checked as a memory's content and named `content`, not a field of AppendTurn.
    ("NUL in a turn", "AppendTurn", pb.AppendTurnRequest(session_id="s", text="a\x00b"), "text"),
    # Messages that quote a megabyte: the trailers passed the client's limit, which answered
    # RESOURCE_EXHAUSTED ("received metadata size exceeds ...") instead of the error.
    ("a megabyte profile", "Recall", pb.RecallRequest(query="q", profile="p" * 1_000_000),
     "profile"),
    ("a megabyte update_mask path", "Update",
     pb.UpdateRequest(id=SOME_ID, update_mask=FieldMask(paths=["界" * 300_000])), "update_mask"),
    ("a megabyte deprecated_update_mask path", "Update",
     pb.UpdateRequest(id=SOME_ID, deprecated_update_mask=["界" * 300_000]), "deprecated_update_mask"),
    ("a megabyte session id", "Summarize", pb.SummarizeRequest(session_id="s" * 1_000_000),
     "session_id"),
    ("a megabyte entity name", "Write",
     pb.WriteRequest(memory=_with_entities(_memory(), {"k" * 1_000_000: 1})), "memory.entities"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "method", "request_", "field"), CASES, ids=[c[0] for c in CASES])
async def test_fixed(
    stub: pb_grpc.MemoryServiceAsyncStub, tenant: str, case: str, method: str, request_: Any, field: str
) -> None:
    request = type(request_)()
    request.CopyFrom(request_)
    request.tenant_id = tenant  # the cases leave it out
    error = await refused(method, getattr(stub, method)(request, timeout=30))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert named_field(error).startswith(field), error.details()
    assert len((error.details() or "").encode()) <= 512


async def test_bytes_nested_past_the_limit_name_the_field(channel: grpc.aio.Channel, tenant: str) -> None:
    """Entities nested deeper than protobuf's recursion limit: the deserializer raised DecodeError and
    gRPC answered UNKNOWN with the exception's text."""
    level = b""
    for _ in range(80):  # Struct -> fields entry -> Value -> Struct ...: 3 messages a level
        value = _field(5, level)  # Value.struct_value
        level = _field(1, _field(1, b"n") + _field(2, value))  # Struct.fields entry {key, value}
    raw = _field(1, tenant.encode()) + _field(2, _field(8, b"ok") + _field(7, level))  # memory.entities
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]
    call = channel.unary_unary("/hindsight.v1.MemoryService/Write")
    error = await refused("Write", call(raw, timeout=30))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "memory.entities: nested deeper than 100 levels"


def _field(number: int, payload: bytes) -> bytes:
    size, out = len(payload), bytearray()
    while True:
        low, size = size & 0x7F, size >> 7
        out.append(low | (0x80 if size else 0))
        if not size:
            break
    return bytes([number << 3 | 2]) + bytes(out) + payload
