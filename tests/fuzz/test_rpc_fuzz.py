"""Every RPC of MemoryService with random and hostile requests against the real server: never INTERNAL,
never a crash (the server answers health after every test), always OK with a sensible result or a clear
error naming the field. Also bytes that are not the request at all (invalid UTF-8 in every string
field, random and mutated bytes), SQL-looking content stored byte-exact, and a thousand tiny items."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight_server.domain.model import MUTABLE_FIELDS
from hindsight_server.domain.policy import RecallPolicy
from tests.fuzz.checks import answered, named_field, refused, same_tenant
from tests.fuzz.conftest import examples
from tests.fuzz.strategies import (
    FLOATS,
    FUTURE,
    INT32,
    INT64,
    LIMITS,
    PAST,
    PROMPT_INJECTION,
    SANE_ENTITIES,
    SANE_NAME,
    SANE_TEXT,
    SQL,
    TIME_QUERIES,
    Fields,
    contents,
    enum_numbers,
    identifiers,
    page_tokens,
    structs,
    tenants,
    texts,
    timestamps,
)

TIERS = list(pb.Tier.values())
KINDS = list(pb.Kind.values())
STATUSES = list(pb.Status.values())
ROLES = list(pb.Role.values())
VISIBILITIES = list(pb.Visibility.values())
MUTABLE = sorted(MUTABLE_FIELDS)  # sampled_from needs an order
RECALL = RecallPolicy()
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Seeds:
    """What already exists in the test's tenant, so that some fuzzed ids, sessions and tokens hit."""

    tenant: str
    ids: list[str]
    pending_id: str
    session_id: str
    page_token: str


@pytest.fixture
async def seeds(stub: pb_grpc.MemoryServiceAsyncStub, tenant: str) -> AsyncIterator[Seeds]:
    ids = []
    for content, confidence in (("the user prefers aisle seats", 1.0), ("用户偏好靠窗座位", 1.0)):
        memory = pb.MemoryInput(
            content=content, tier=pb.TIER_SEMANTIC, kind=pb.KIND_PREFERENCE, confidence=confidence
        )
        written = await stub.Write(pb.WriteRequest(tenant_id=tenant, memory=memory), timeout=TIMEOUT_S)
        ids.append(written.memory.id)
    pending = pb.MemoryInput(
        content="maybe likes tea", tier=pb.TIER_SEMANTIC, kind=pb.KIND_PREFERENCE, confidence=0.4
    )
    pending_id = (
        await stub.Write(pb.WriteRequest(tenant_id=tenant, memory=pending), timeout=TIMEOUT_S)
    ).memory.id
    await stub.AppendTurn(
        pb.AppendTurnRequest(tenant_id=tenant, session_id="s1", text="I need a room on Friday"),
        timeout=TIMEOUT_S,
    )
    page = await stub.List(pb.ListRequest(tenant_id=tenant, page_size=1), timeout=TIMEOUT_S)
    yield Seeds(tenant, ids, pending_id, "s1", page.next_page_token)


def _ids(seeds: Seeds) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from([*seeds.ids, seeds.pending_id]),
        st.uuids().map(str),
        st.uuids().map(lambda u: u.hex.upper()),
        texts(40),
    )


def _sessions(seeds: Seeds) -> st.SearchStrategy[str]:
    return st.one_of(st.just(seeds.session_id), identifiers())


_MEMORY_FIELDS = [
    "content",
    "tier",
    "kind",
    "subject",
    "agent_id",
    "session_id",
    "intent",
    "idempotency_key",
    "entities",
    "confidence",
    "valid_from",
    "valid_to",
    "expires_at",
    "occurred_at",
    "visibility",
]
_MAYBE = st.none()


@st.composite
def _memory_input(draw: st.DrawFn, sessions: st.SearchStrategy[str]) -> pb.MemoryInput:
    pick = Fields(draw, _MEMORY_FIELDS)
    memory = pb.MemoryInput(
        content=pick("content", SANE_TEXT, contents()),
        tier=pick("tier", st.sampled_from(TIERS[1:]), enum_numbers(TIERS)),
        kind=pick("kind", st.sampled_from(KINDS[1:]), enum_numbers(KINDS)),
        subject=pick("subject", SANE_NAME, identifiers()),
        intent=pick("intent", SANE_NAME, identifiers()),
        idempotency_key=pick("idempotency_key", SANE_NAME, identifiers()),
        session_id=pick("session_id", st.one_of(st.just(""), sessions), identifiers()),
    )
    memory.agent_id = pick("agent_id", SANE_NAME, identifiers())
    memory.visibility = pick(
        "visibility", st.sampled_from([0, 1, 2] if memory.agent_id else [0, 1]), enum_numbers(VISIBILITIES)
    )
    entities = pick("entities", st.one_of(_MAYBE, SANE_ENTITIES), structs())
    if entities is not None:
        memory.entities.CopyFrom(entities if isinstance(entities, struct_pb2.Struct) else _struct(entities))
    confidence = pick("confidence", st.one_of(_MAYBE, st.floats(0, 1)), FLOATS)
    if confidence is not None:
        memory.confidence = confidence
    for name, sane in (
        ("valid_from", PAST),
        ("valid_to", FUTURE),
        ("expires_at", FUTURE),
        ("occurred_at", PAST),
    ):
        stamp = pick(name, st.one_of(_MAYBE, _MAYBE, sane), timestamps())
        if stamp is not None:
            getattr(memory, name).CopyFrom(stamp)
    return memory


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def _check_memory(tenant: str, memory: pb.Memory) -> None:
    same_tenant(tenant, [memory])
    assert uuid.UUID(memory.id) and memory.version >= 1
    assert memory.status in STATUSES and memory.tier in TIERS and memory.kind in KINDS


def _check_write(request: pb.WriteRequest, response: pb.WriteResponse) -> None:
    _check_memory(request.tenant_id, response.memory)
    assert response.resolution in ("created", "merged", "superseded", "replayed")
    if response.resolution in ("created", "superseded"):
        assert response.memory.content == request.memory.content  # byte-exact
        assert 0.0 <= response.memory.confidence <= 1.0


# ------------------------------------------------------------------------------------------ writes


@examples(60)
@given(data=st.data())
async def test_write(stub: pb_grpc.MemoryServiceAsyncStub, seeds: Seeds, data: st.DataObject) -> None:
    request = pb.WriteRequest(
        tenant_id=data.draw(tenants(seeds.tenant)), memory=data.draw(_memory_input(_sessions(seeds)))
    )
    response = await answered("Write", stub.Write(request, timeout=TIMEOUT_S))
    if response is not None:
        _check_write(request, response)


@examples(30)
@given(data=st.data())
async def test_write_batch(stub: pb_grpc.MemoryServiceAsyncStub, seeds: Seeds, data: st.DataObject) -> None:
    memories = data.draw(st.lists(_memory_input(_sessions(seeds)), max_size=4))
    request = pb.WriteBatchRequest(
        tenant_id=data.draw(tenants(seeds.tenant)), memories=memories, verbatim=data.draw(st.booleans())
    )
    response = await answered("WriteBatch", stub.WriteBatch(request, timeout=TIMEOUT_S))
    if response is not None:
        assert len(response.results) == len(memories)
        for item, result in zip(memories, response.results, strict=True):
            _check_write(pb.WriteRequest(tenant_id=request.tenant_id, memory=item), result)


async def test_a_thousand_tiny_items_and_one_more(stub: pb_grpc.MemoryServiceAsyncStub, tenant: str) -> None:
    tiny = [pb.MemoryInput(content=f"t{i}", tier=pb.TIER_EPISODIC, kind=pb.KIND_EVENT) for i in range(5_000)]
    request = pb.WriteBatchRequest(tenant_id=tenant, memories=tiny[: LIMITS.max_batch_size], verbatim=True)
    stored = await answered("WriteBatch", stub.WriteBatch(request, timeout=TIMEOUT_S))
    assert stored is not None and len({r.memory.id for r in stored.results}) == LIMITS.max_batch_size
    for size in (LIMITS.max_batch_size + 1, 5_000):
        request = pb.WriteBatchRequest(tenant_id=tenant, memories=tiny[:size])
        error = await refused("WriteBatch", stub.WriteBatch(request, timeout=TIMEOUT_S))
        assert named_field(error) == "memories"
    listed = await stub.List(
        pb.ListRequest(tenant_id=tenant, page_size=LIMITS.max_page_size), timeout=TIMEOUT_S
    )
    assert len(listed.memories) == LIMITS.max_page_size and listed.next_page_token


# ------------------------------------------------------------------------------------------ by id


@examples(40)
@given(data=st.data())
async def test_get_history_and_pending_decisions(
    stub: pb_grpc.MemoryServiceAsyncStub, seeds: Seeds, data: st.DataObject
) -> None:
    tenant = data.draw(tenants(seeds.tenant))
    memory_id, agent_id = data.draw(_ids(seeds)), data.draw(st.one_of(st.just(""), identifiers()))
    get = pb.GetRequest(tenant_id=tenant, id=memory_id, agent_id=agent_id)
    memory = await answered("Get", stub.Get(get, timeout=TIMEOUT_S))
    if memory is not None:
        _check_memory(tenant, memory)
        assert uuid.UUID(memory.id) == uuid.UUID(memory_id)
    history = pb.HistoryRequest(tenant_id=tenant, id=memory_id, agent_id=agent_id)
    versions = await answered("History", stub.History(history, timeout=TIMEOUT_S))
    if versions is not None:
        assert versions.versions
        same_tenant(tenant, versions.versions)
    method = data.draw(st.sampled_from(["ConfirmPending", "RejectPending"]))
    decision = getattr(pb, f"{method}Request")(
        tenant_id=tenant, id=memory_id, agent_id=agent_id, idempotency_key=data.draw(identifiers())
    )
    decided = await answered(method, getattr(stub, method)(decision, timeout=TIMEOUT_S))
    if decided is not None:
        _check_memory(tenant, decided)


@examples(50)
@given(data=st.data())
async def test_update(stub: pb_grpc.MemoryServiceAsyncStub, seeds: Seeds, data: st.DataObject) -> None:
    pick = Fields(
        data.draw, ["tenant_id", "id", "update_mask", "agent_id", "idempotency_key", "expected_version"]
    )
    request = pb.UpdateRequest(
        tenant_id=pick("tenant_id", st.just(seeds.tenant), tenants(seeds.tenant)),
        id=pick("id", st.sampled_from(seeds.ids), _ids(seeds)),
        memory=data.draw(_memory_input(_sessions(seeds))),
        agent_id=pick("agent_id", st.just(""), identifiers()),
        idempotency_key=pick("idempotency_key", st.one_of(st.just(""), st.uuids().map(str)), identifiers()),
    )
    paths = pick(
        "update_mask",
        st.lists(st.sampled_from(MUTABLE), min_size=1, max_size=3, unique=True),
        st.lists(st.one_of(st.sampled_from(MUTABLE), texts(20)), max_size=4),
    )
    # The mask in either form, or in both (the same paths, as the shared client sends it).
    form = data.draw(st.sampled_from(["field_mask", "deprecated", "both"]))
    if form != "deprecated":
        request.update_mask.paths.extend(paths)
    if form != "field_mask":
        request.deprecated_update_mask.extend(paths)
    expected_version = pick("expected_version", st.one_of(_MAYBE, st.integers(1, 3)), INT64)
    if expected_version is not None:
        request.expected_version = expected_version
    memory = await answered("Update", stub.Update(request, timeout=TIMEOUT_S))
    if memory is not None:
        _check_memory(request.tenant_id, memory)
        if "content" in paths:
            assert memory.content == request.memory.content


@examples(30)
@given(data=st.data())
async def test_delete(stub: pb_grpc.MemoryServiceAsyncStub, seeds: Seeds, data: st.DataObject) -> None:
    request = pb.DeleteRequest(
        tenant_id=data.draw(tenants(seeds.tenant)),
        id=data.draw(_ids(seeds)),
        agent_id=data.draw(st.one_of(st.just(""), identifiers())),
        idempotency_key=data.draw(st.one_of(st.just(""), identifiers())),
    )
    memory = await answered("Delete", stub.Delete(request, timeout=TIMEOUT_S))
    if memory is not None:
        _check_memory(request.tenant_id, memory)
        assert memory.status == pb.STATUS_DELETED


# ------------------------------------------------------------------------------------------ reads


_LIST_FIELDS = [
    "tenant_id",
    "subject",
    "session_id",
    "tiers",
    "kinds",
    "statuses",
    "page_size",
    "page_token",
    "agent_id",
]


@examples(50)
@given(data=st.data())
async def test_list(stub: pb_grpc.MemoryServiceAsyncStub, seeds: Seeds, data: st.DataObject) -> None:
    pick = Fields(data.draw, _LIST_FIELDS)
    request = pb.ListRequest(
        tenant_id=pick("tenant_id", st.just(seeds.tenant), tenants(seeds.tenant)),
        subject=pick("subject", SANE_NAME, identifiers()),
        session_id=pick("session_id", st.one_of(st.just(""), st.just(seeds.session_id)), identifiers()),
        tiers=pick(
            "tiers",
            st.lists(st.sampled_from(TIERS[1:]), max_size=3),
            st.lists(enum_numbers(TIERS), max_size=3),
        ),
        kinds=pick(
            "kinds",
            st.lists(st.sampled_from(KINDS[1:]), max_size=3),
            st.lists(enum_numbers(KINDS), max_size=3),
        ),
        statuses=pick(
            "statuses",
            st.lists(st.sampled_from(STATUSES[1:]), max_size=3),
            st.lists(enum_numbers(STATUSES), max_size=3),
        ),
        page_size=pick("page_size", st.integers(0, LIMITS.max_page_size), INT32),
        page_token=pick(
            "page_token", st.sampled_from(["", seeds.page_token]), page_tokens([seeds.page_token])
        ),
        agent_id=pick("agent_id", SANE_NAME, identifiers()),
    )
    page = await answered("List", stub.List(request, timeout=TIMEOUT_S))
    if page is not None:
        assert len(page.memories) <= (request.page_size or LIMITS.default_page_size)
        same_tenant(request.tenant_id, page.memories)


_RECALL_FIELDS = [
    "tenant_id",
    "query",
    "subject",
    "session_id",
    "tiers",
    "kinds",
    "top_k",
    "token_budget",
    "profile",
    "agent_id",
    "entities",
    "time_range",
    "weights",
    "as_of",
    "now",
    "min_score",
]
_QUERIES = st.one_of(SANE_TEXT, st.sampled_from(TIME_QUERIES), st.just("aisle seats 靠窗"))


@st.composite
def _recall_request(draw: st.DrawFn, seeds: Seeds) -> pb.RecallRequest:
    pick = Fields(draw, _RECALL_FIELDS)
    request = pb.RecallRequest(
        tenant_id=pick("tenant_id", st.just(seeds.tenant), tenants(seeds.tenant)),
        query=pick("query", _QUERIES, texts()),
        subject=pick("subject", SANE_NAME, identifiers()),
        session_id=pick("session_id", st.one_of(st.just(""), st.just(seeds.session_id)), identifiers()),
        tiers=pick(
            "tiers",
            st.lists(st.sampled_from(TIERS[1:]), max_size=3),
            st.lists(enum_numbers(TIERS), max_size=3),
        ),
        kinds=pick(
            "kinds",
            st.lists(st.sampled_from(KINDS[1:]), max_size=3),
            st.lists(enum_numbers(KINDS), max_size=3),
        ),
        top_k=pick("top_k", st.integers(0, LIMITS.max_top_k), INT32),
        token_budget=pick("token_budget", st.integers(0, LIMITS.max_token_budget), INT32),
        profile=pick("profile", st.sampled_from(["", "default", "support", "knowledge_qa"]), texts(20)),
        include_superseded=draw(st.booleans()),
        explain=draw(st.booleans()),
        agent_id=pick("agent_id", SANE_NAME, identifiers()),
    )
    entities = pick("entities", st.one_of(_MAYBE, SANE_ENTITIES), structs())
    if entities is not None:
        request.entities.CopyFrom(entities if isinstance(entities, struct_pb2.Struct) else _struct(entities))
    window = pick(
        "time_range", st.one_of(_MAYBE, st.tuples(PAST, FUTURE)), st.tuples(timestamps(), timestamps())
    )
    if window is not None:
        request.time_range.start.CopyFrom(window[0])
        request.time_range.end.CopyFrom(window[1])
    weight = st.floats(0, 10)
    weights = pick(
        "weights",
        st.one_of(_MAYBE, st.tuples(weight, weight, weight, weight)),
        st.tuples(FLOATS, FLOATS, FLOATS, FLOATS),
    )
    if weights is not None:
        request.weights.CopyFrom(
            pb.ScoreWeights(
                similarity=weights[0], recency=weights[1], tier_priority=weights[2], entity_match=weights[3]
            )
        )
    for name, sane in (("as_of", FUTURE), ("now", PAST)):
        stamp = pick(name, st.one_of(_MAYBE, sane), timestamps())
        if stamp is not None:
            getattr(request, name).CopyFrom(stamp)
    min_score = pick("min_score", st.one_of(_MAYBE, st.floats(0, 1)), FLOATS)
    if min_score is not None:
        request.min_score = min_score
    return request


@examples(80)
@given(data=st.data())
async def test_recall(stub: pb_grpc.MemoryServiceAsyncStub, seeds: Seeds, data: st.DataObject) -> None:
    request = data.draw(_recall_request(seeds))
    found = await answered("Recall", stub.Recall(request, timeout=TIMEOUT_S))
    if found is not None:
        assert len(found.hits) <= (request.top_k or RECALL.default_top_k)
        assert found.tokens_used <= (request.token_budget or RECALL.default_token_budget)
        same_tenant(request.tenant_id, [hit.memory for hit in found.hits])
        assert request.explain == found.HasField("explanation")


# ------------------------------------------------------------------------------------------ sessions


_TURN_FIELDS = [
    "tenant_id",
    "session_id",
    "subject",
    "agent_id",
    "role",
    "text",
    "idempotency_key",
    "entities",
    "occurred_at",
]
# A fresh session per example: a session's summary gathers every entity its turns name, and this test
# is about one hostile turn, not about a session of hundreds (test_long_content.py has that).
_FRESH_SESSION = st.uuids().map(lambda u: f"s-{u.hex[:12]}")


@examples(50)
@given(data=st.data())
async def test_append_turn(stub: pb_grpc.MemoryServiceAsyncStub, seeds: Seeds, data: st.DataObject) -> None:
    pick = Fields(data.draw, _TURN_FIELDS)
    request = pb.AppendTurnRequest(
        tenant_id=pick("tenant_id", st.just(seeds.tenant), tenants(seeds.tenant)),
        session_id=pick("session_id", _FRESH_SESSION, identifiers()),
        subject=pick("subject", SANE_NAME, identifiers()),
        agent_id=pick("agent_id", SANE_NAME, identifiers()),
        role=pick("role", st.sampled_from(ROLES), enum_numbers(ROLES)),
        text=pick("text", SANE_TEXT, contents()),
        idempotency_key=pick("idempotency_key", st.one_of(st.just(""), st.uuids().map(str)), identifiers()),
    )
    entities = pick("entities", st.one_of(_MAYBE, SANE_ENTITIES), structs())
    if entities is not None:
        request.entities.CopyFrom(entities if isinstance(entities, struct_pb2.Struct) else _struct(entities))
    occurred_at = pick("occurred_at", st.one_of(_MAYBE, PAST), timestamps())
    if occurred_at is not None:
        request.occurred_at.CopyFrom(occurred_at)
    response = await answered("AppendTurn", stub.AppendTurn(request, timeout=TIMEOUT_S))
    if response is not None:
        assert response.turn.index >= 1
        if not request.idempotency_key:  # a reused key answers with its first turn, whatever the text
            assert response.turn.text == request.text.strip()
        assert response.summary.session_id == request.session_id
        same_tenant(request.tenant_id, response.remembered)


@examples(30)
@given(data=st.data())
async def test_summarize_and_end_session(
    stub: pb_grpc.MemoryServiceAsyncStub, seeds: Seeds, data: st.DataObject
) -> None:
    tenant, session_id = data.draw(tenants(seeds.tenant)), data.draw(_sessions(seeds))
    summarize = pb.SummarizeRequest(tenant_id=tenant, session_id=session_id)
    summary = await answered("Summarize", stub.Summarize(summarize, timeout=TIMEOUT_S))
    if summary is not None:
        assert summary.session_id == session_id and summary.turn_count >= 1
    end = pb.EndSessionRequest(
        tenant_id=tenant,
        session_id=session_id,
        reason=data.draw(st.one_of(st.just(""), texts())),
        idempotency_key=data.draw(st.one_of(st.just(""), identifiers())),
    )
    ended = await answered("EndSession", stub.EndSession(end, timeout=TIMEOUT_S))
    if ended is not None and ended.HasField("episode"):
        _check_memory(tenant, ended.episode)


# ------------------------------------------------------------------------------------------ bytes

METHODS: dict[str, Descriptor] = {
    method.name: method.input_type for method in pb.DESCRIPTOR.services_by_name["MemoryService"].methods
}
_OPAQUE = "google.protobuf.Struct"
_BAD_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"ok\xf4\x90\x80\x80", b"\xe7\x94"]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string_fields(descriptor: Descriptor, prefix: str = "") -> list[tuple[str, list[int], str]]:
    """(name, field numbers down to it, the field the server must name) for every string in reach."""
    found = []
    for field in descriptor.fields:
        index = "[0]" if field.is_repeated else ""
        name = f"{prefix}{field.name}{index}"
        if field.type == FieldDescriptor.TYPE_STRING:
            found.append((name, [field.number], name))
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.full_name == _OPAQUE:
            found.append((f"{name} (a key)", [field.number, 1, 1], name))  # Struct.fields -> entry.key
        elif field.type == FieldDescriptor.TYPE_MESSAGE and (
            field.message_type.full_name.startswith("hindsight.")
            or field.message_type.full_name == "google.protobuf.FieldMask"  # Update's update_mask.paths
        ):
            found += [
                (n, [field.number, *path], blamed)
                for n, path, blamed in _string_fields(field.message_type, f"{name}.")
            ]
    return found


def _nested(path: list[int], leaf: bytes) -> bytes:
    payload = leaf
    for number in reversed(path):
        payload = _field(number, payload)
    return payload


UTF8_CASES = [
    (method, *case) for method, descriptor in METHODS.items() for case in _string_fields(descriptor)
]


STREAMING = {
    method.name
    for method in pb.DESCRIPTOR.services_by_name["MemoryService"].methods
    if method.server_streaming
}


# A stream that never ends by itself (Watch: a heartbeat first, then events as they come) is read this far.
ENDLESS = {"Watch": 1}


async def _items(method: str, stream: Any) -> list[bytes]:
    """The whole stream, or its first items for an endless one (then the call is cancelled)."""
    items: list[bytes] = []
    async for item in stream:
        items.append(item)
        if len(items) >= ENDLESS.get(method, len(items) + 1):
            stream.cancel()
            break
    return items


@pytest.fixture(scope="module")
def raw_calls(channel: grpc.aio.Channel) -> dict[str, Any]:
    """Each method taking raw bytes; a streaming one's call collects the whole stream."""

    def call(method: str) -> Any:
        path = f"/hindsight.v1.MemoryService/{method}"
        if method in STREAMING:
            stream: grpc.aio.UnaryStreamMultiCallable[bytes, bytes]
            stream = channel.unary_stream(path, request_serializer=None, response_deserializer=None)
            return lambda raw, **options: _items(method, stream(raw, **options))
        return channel.unary_unary(path, request_serializer=None, response_deserializer=None)

    return {method: call(method) for method in METHODS}


@pytest.mark.parametrize(
    ("method", "name", "path", "blamed"), UTF8_CASES, ids=[f"{c[0]}.{c[1]}" for c in UTF8_CASES]
)
async def test_invalid_utf8_names_the_field(
    raw_calls: dict[str, Any], tenant: str, method: str, name: str, path: list[int], blamed: str
) -> None:
    """Protobuf's Python runtime refuses a `string` that is not UTF-8 before any handler runs; the
    server answers INVALID_ARGUMENT naming the field (gRPC's own answer would be UNKNOWN)."""
    base = _field(1, tenant.encode())  # every request's field 1 is tenant_id
    for bad in _BAD_UTF8:
        error = await refused(method, raw_calls[method](base + _nested(path, bad), timeout=TIMEOUT_S))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert named_field(error) == blamed
        assert error.details() == f"{blamed}: is not valid UTF-8"


@examples(100)
@given(method=st.sampled_from(sorted(METHODS)), raw=st.binary(max_size=400))
async def test_random_bytes(raw_calls: dict[str, Any], method: str, raw: bytes) -> None:
    await answered(method, raw_calls[method](raw, timeout=TIMEOUT_S))


@examples(100)
@given(data=st.data(), method=st.sampled_from(sorted(METHODS)))
async def test_mutated_requests(
    raw_calls: dict[str, Any], tenant: str, data: st.DataObject, method: str
) -> None:
    """A valid request with bytes flipped, cut or inserted: it parses as something else, or not at all."""
    message = _sample_request(method, tenant)
    raw = bytearray(message.SerializeToString())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw)))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip" and at < len(raw):
            raw[at] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del raw[at:]
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    await answered(method, raw_calls[method](bytes(raw), timeout=TIMEOUT_S))


def _sample_request(method: str, tenant: str) -> Message:
    memory = pb.MemoryInput(content="the user prefers aisle seats", tier=pb.TIER_SEMANTIC, kind=pb.KIND_FACT,
                            subject="u1", session_id="s1", intent="seat", confidence=0.9)  # fmt: skip
    memory.entities.update({"seat": "aisle", "count": 2, "nested": {"a": [1, "b"]}})
    memory.valid_from.FromSeconds(1_700_000_000)
    memory_id = "01a22b8a-0000-7000-8000-000000000000"
    samples: dict[str, Message] = {
        "Write": pb.WriteRequest(tenant_id=tenant, memory=memory),
        "WriteBatch": pb.WriteBatchRequest(tenant_id=tenant, memories=[memory, memory]),
        "Get": pb.GetRequest(tenant_id=tenant, id=memory_id, agent_id="a"),
        "Update": pb.UpdateRequest(
            tenant_id=tenant,
            id=memory_id,
            memory=memory,
            update_mask=FieldMask(paths=["content", "tier"]),
            expected_version=3,
            idempotency_key="k",
        ),
        "Delete": pb.DeleteRequest(tenant_id=tenant, id=memory_id, idempotency_key="k"),
        "List": pb.ListRequest(
            tenant_id=tenant,
            subject="u1",
            tiers=[pb.TIER_WORKING, pb.TIER_EPISODIC],
            statuses=[pb.STATUS_ACTIVE],
            page_size=10,
        ),
        "Recall": pb.RecallRequest(
            tenant_id=tenant,
            query="aisle seats",
            top_k=5,
            entities=memory.entities,
            weights=pb.ScoreWeights(similarity=1),
            min_score=0.1,
            explain=True,
        ),
        "AppendTurn": pb.AppendTurnRequest(
            tenant_id=tenant,
            session_id="s1",
            text="from now on aisle seats",
            role=pb.ROLE_USER,
            entities=memory.entities,
        ),
        "Summarize": pb.SummarizeRequest(tenant_id=tenant, session_id="s1"),
        "EndSession": pb.EndSessionRequest(tenant_id=tenant, session_id="s1", reason="task_done"),
        "ConfirmPending": pb.ConfirmPendingRequest(tenant_id=tenant, id=memory_id),
        "RejectPending": pb.RejectPendingRequest(tenant_id=tenant, id=memory_id),
        "History": pb.HistoryRequest(tenant_id=tenant, id=memory_id),
        "Export": pb.ExportRequest(
            tenant_id=tenant,
            subject="u1",
            tiers=[pb.TIER_SEMANTIC],
            include_history=True,
            include_embeddings=True,
        ),
        "Import": pb.ImportRequest(
            tenant_id=tenant,
            memories=[
                pb.ExportedMemory(
                    memory=pb.Memory(
                        id=memory_id,
                        content="imported",
                        tier=pb.TIER_SEMANTIC,
                        kind=pb.KIND_FACT,
                        status=pb.STATUS_ACTIVE,
                        created_at=memory.valid_from,
                        updated_at=memory.valid_from,
                    ),
                    embeddings=[pb.Embedding(space="multilingual", model="embed", values=[0.1, 0.2])],
                )
            ],
            models=[pb.EmbeddingModel(space="multilingual", name="embed", dimension=2)],
        ),
        "Erase": pb.EraseRequest(
            tenant_id=tenant, memories=pb.MemoryIds(ids=[memory_id]), reason="fuzz", idempotency_key="k"
        ),
        "Watch": pb.WatchRequest(
            tenant_id=tenant, cursor="oldest", subjects=["u1"], kinds=[pb.KIND_FACT], event_types=["created"]
        ),
        "AuditRecalls": pb.AuditRecallsRequest(
            tenant_id=tenant,
            memory_id=memory_id,
            subject="u1",
            time_range=pb.TimeRange(start=memory.valid_from),
            page_size=10,
            agent_id="a",
        ),
    }
    return samples[method]


# ------------------------------------------------------------------------------------------ injection


@pytest.mark.parametrize("content", SQL + PROMPT_INJECTION, ids=range(len(SQL + PROMPT_INJECTION)))
async def test_sql_and_prompt_injection_text_is_stored_byte_exact_and_recalled(
    stub: pb_grpc.MemoryServiceAsyncStub, tenant: str, content: str
) -> None:
    marker = f"zebracode{uuid.uuid4().hex[:8]}"
    text = f"{content} {marker}"
    label = " ".join(content.split())[:200]  # identifiers refuse control characters (new lines)
    memory = pb.MemoryInput(
        content=text, tier=pb.TIER_SEMANTIC, kind=pb.KIND_FACT, subject=label, intent=label
    )
    memory.entities.update({"payload": content})
    written = await stub.Write(pb.WriteRequest(tenant_id=tenant, memory=memory), timeout=TIMEOUT_S)
    stored = await stub.Get(pb.GetRequest(tenant_id=tenant, id=written.memory.id), timeout=TIMEOUT_S)
    assert stored.content.encode() == text.encode()
    assert stored.subject == label and stored.entities["payload"] == content
    for query in (marker, content):
        found = await stub.Recall(
            pb.RecallRequest(tenant_id=tenant, query=query[:4_000], min_score=0), timeout=TIMEOUT_S
        )
        assert written.memory.id in {hit.memory.id for hit in found.hits}, query
        same_tenant(tenant, [hit.memory for hit in found.hits])
    listed = await stub.List(pb.ListRequest(tenant_id=tenant, subject=label), timeout=TIMEOUT_S)
    assert [m.id for m in listed.memories] == [written.memory.id]  # the table is still there, and only this
