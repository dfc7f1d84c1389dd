"""v1 within itself: what clients built against the last release (proto/buf-baseline.binpb, the image
`buf breaking` compares with) send still parses and means the same.

buf's WIRE rules compare an RPC's request type by name; ConfirmPending and RejectPending took one shared
PendingDecisionRequest and now take one each (buf.yaml ignores that rule for memory.proto), so the
structural check is here: every RPC of the baseline still takes and answers messages with the same
fields (number, type, cardinality). Then the real thing: requests built from the baseline's own
descriptors, sent as bytes to the running server, the way an old client's would arrive.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, field_mask_pb2, message_factory
from google.protobuf.descriptor_pb2 import DescriptorProto, FieldDescriptorProto, FileDescriptorProto

from hindsight.client import HindsightClient
from hindsight.ops.v1 import ops_pb2
from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight_server.process.running import RunningServer

BASELINE = Path(__file__).resolve().parents[2] / "proto" / "buf-baseline.binpb"
_MESSAGE_TYPES = (FieldDescriptorProto.TYPE_MESSAGE, FieldDescriptorProto.TYPE_GROUP)


def _baseline() -> descriptor_pb2.FileDescriptorSet:
    # A buf image is a FileDescriptorSet on the wire: its ImageFile is a FileDescriptorProto with one field
    # of buf's own (8042), left here as an unknown field.
    return descriptor_pb2.FileDescriptorSet.FromString(BASELINE.read_bytes())


def _current() -> list[FileDescriptorProto]:
    files = []
    for descriptor in (pb.DESCRIPTOR, ops_pb2.DESCRIPTOR):
        for file in (descriptor, *descriptor.dependencies):
            proto = FileDescriptorProto()
            file.CopyToProto(proto)
            files.append(proto)
    return files


def _messages(files: Iterable[FileDescriptorProto]) -> dict[str, DescriptorProto]:
    """Every message by its fully qualified name, as type_name writes it (".pkg.Outer.Inner")."""
    found: dict[str, DescriptorProto] = {}

    def walk(prefix: str, messages: Iterable[DescriptorProto]) -> None:
        for message in messages:
            name = f"{prefix}.{message.name}"
            found[name] = message
            walk(name, message.nested_type)

    for file in files:
        walk(f".{file.package}" if file.package else "", file.message_type)
    return found


def _wire_problems(
    old: dict[str, DescriptorProto], new: dict[str, DescriptorProto], old_name: str, new_name: str
) -> list[str]:
    """What of `old_name`'s fields (and of the messages they hold) `new_name` no longer reads alike."""
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()

    def compare(old_name: str, new_name: str, where: str) -> None:
        if (old_name, new_name) in seen:
            return
        seen.add((old_name, new_name))
        now = {field.number: field for field in new[new_name].field}
        reserved = [(r.start, r.end) for r in new[new_name].reserved_range]
        for field in old[old_name].field:
            at = f"{where}.{field.name} ({field.number})"
            current = now.get(field.number)
            if current is None:
                if not any(start <= field.number < end for start, end in reserved):
                    problems.append(f"{at}: gone, its number not reserved")
            elif (current.type, current.label) != (field.type, field.label):
                problems.append(f"{at}: type or cardinality changed")
            elif field.type in _MESSAGE_TYPES:
                compare(field.type_name, current.type_name, at)
            elif field.type == FieldDescriptorProto.TYPE_ENUM and field.type_name != current.type_name:
                problems.append(f"{at}: another enum")

    compare(old_name, new_name, new_name.lstrip("."))
    return problems


def test_every_rpc_of_the_baseline_reads_its_messages_alike() -> None:
    baseline = _baseline()
    old, new = _messages(baseline.file), _messages(_current())
    current = {
        f"{file.package}.{service.name}": {method.name: method for method in service.method}
        for file in _current()
        for service in file.service
    }
    checked = 0
    for file in baseline.file:
        for service in file.service:
            methods = current[f"{file.package}.{service.name}"]  # buf: PACKAGE_SERVICE_NO_DELETE
            for method in service.method:
                now = methods[method.name]  # buf: RPC_NO_DELETE
                for old_type, new_type in (
                    (method.input_type, now.input_type),
                    (method.output_type, now.output_type),
                ):
                    assert not _wire_problems(old, new, old_type, new_type), (method.name, old_type, new_type)
                    checked += 1
    assert checked == 2 * 16  # the baseline's 16 RPCs (MemoryService), request and response each


def test_the_check_sees_a_field_that_changed() -> None:
    old = _messages(_baseline().file)
    changed = DescriptorProto()
    changed.CopyFrom(old[".hindsight.v1.PendingDecisionRequest"])
    changed.name = "Changed"
    changed.field[2].type = FieldDescriptorProto.TYPE_INT64  # agent_id
    del changed.field[3]  # idempotency_key
    problems = _wire_problems(
        old, {**old, ".x.Changed": changed}, ".hindsight.v1.PendingDecisionRequest", ".x.Changed"
    )
    assert problems == [
        "x.Changed.agent_id (3): type or cardinality changed",
        "x.Changed.idempotency_key (4): gone, its number not reserved",
    ]


def test_the_pending_requests_are_the_old_shared_one_on_the_wire() -> None:
    old = {
        (f.number, f.type, f.label == FieldDescriptorProto.LABEL_REPEATED)
        for f in _messages(_baseline().file)[".hindsight.v1.PendingDecisionRequest"].field
    }
    for request in (pb.ConfirmPendingRequest, pb.RejectPendingRequest):
        assert {(f.number, f.type, f.is_repeated) for f in request.DESCRIPTOR.fields} == old
        sent = pb.PendingDecisionRequest(tenant_id="acme", id="m", agent_id="a", idempotency_key="k")
        parsed = request.FromString(sent.SerializeToString())
        assert (parsed.tenant_id, parsed.id, parsed.agent_id, parsed.idempotency_key) == (
            "acme",
            "m",
            "a",
            "k",
        )


# ------------------------------------------------------------------------ an old client, on the wire


@pytest.fixture(scope="module")
def old_v1() -> dict[str, Any]:
    """The baseline's hindsight.v1 message classes, from its own descriptors in a pool of their own."""
    pool = descriptor_pool.DescriptorPool()
    # types-protobuf leaves DescriptorPool's methods unannotated.
    for file in _baseline().file:  # in dependency order, as buf writes an image
        pool.AddSerializedFile(file.SerializeToString())  # type: ignore[no-untyped-call]
    names = ("UpdateRequest", "PendingDecisionRequest", "MemoryInput")
    found = {name: pool.FindMessageTypeByName(f"hindsight.v1.{name}") for name in names}  # type: ignore[no-untyped-call]
    return {name: message_factory.GetMessageClass(descriptor) for name, descriptor in found.items()}


@pytest.fixture(scope="module")
async def channel(server: RunningServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as opened:
        yield opened


async def _raw(channel: grpc.aio.Channel, method: str, request: Any) -> pb.Memory:
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, pb.Memory] = channel.unary_unary(
        f"/hindsight.v1.MemoryService/{method}",
        request_serializer=None,
        response_deserializer=pb.Memory.FromString,
    )
    answer: pb.Memory = await call(request.SerializeToString(), timeout=10)
    return answer


async def test_an_old_clients_update_and_decisions_still_work(
    channel: grpc.aio.Channel, client: HindsightClient, tenant: str, old_v1: dict[str, Any]
) -> None:
    written = await client.write(tenant, "likes tea", tier="semantic", kind="preference")
    confirm = await client.write(
        tenant, "maybe likes jazz", tier="semantic", kind="preference", confidence=0.5
    )
    reject = await client.write(tenant, "maybe vegetarian", tier="semantic", kind="fact", confidence=0.4)
    assert confirm.memory.status == reject.memory.status == pb.STATUS_PENDING
    update = old_v1["UpdateRequest"](
        tenant_id=tenant,
        id=written.memory.id,
        memory=old_v1["MemoryInput"](content="likes green tea"),
        update_mask=["content"],  # field 4, as the baseline named it
    )
    updated = await _raw(channel, "Update", update)
    decision = old_v1["PendingDecisionRequest"]
    confirmed = await _raw(channel, "ConfirmPending", decision(tenant_id=tenant, id=confirm.memory.id))
    rejected = await _raw(channel, "RejectPending", decision(tenant_id=tenant, id=reject.memory.id))
    assert (updated.content, updated.version) == ("likes green tea", 2)
    assert confirmed.status == pb.STATUS_ACTIVE
    assert rejected.status == pb.STATUS_DELETED


async def test_update_takes_either_form_of_the_mask_or_both_alike(
    channel: grpc.aio.Channel, client: HindsightClient, tenant: str
) -> None:
    written = await client.write(tenant, "v1", tier="semantic", kind="fact", intent="a")
    stub = pb_grpc.MemoryServiceStub(channel)  # requests exactly as built here
    forms: list[dict[str, Any]] = [
        {"update_mask": field_mask_pb2.FieldMask(paths=["content"])},
        {"deprecated_update_mask": ["content"]},
        {
            "update_mask": field_mask_pb2.FieldMask(paths=["content", "intent"]),
            "deprecated_update_mask": ["intent", "content"],
        },
    ]
    for version, form in enumerate(forms, start=2):
        request = pb.UpdateRequest(
            tenant_id=tenant,
            id=written.memory.id,
            memory=pb.MemoryInput(content=f"v{version}", intent="b"),
            **form,
        )
        updated = await stub.Update(request, timeout=10)
        assert (updated.content, updated.version) == (f"v{version}", version), form
    assert updated.intent == "b"  # named by the last one only
    # The shared client sends both (servers older than the FieldMask read only field 4).
    assert (await client.update(tenant, written.memory.id, content="v5")).version == 5


async def test_masks_that_disagree_are_refused_naming_update_mask(
    channel: grpc.aio.Channel, client: HindsightClient, tenant: str
) -> None:
    written = await client.write(tenant, "v1", tier="semantic", kind="fact")
    request = pb.UpdateRequest(
        tenant_id=tenant,
        id=written.memory.id,
        memory=pb.MemoryInput(content="v2"),
        update_mask=field_mask_pb2.FieldMask(paths=["content"]),
        deprecated_update_mask=["intent"],
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await pb_grpc.MemoryServiceStub(channel).Update(request, timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith("update_mask: ")
    assert (await client.get(tenant, written.memory.id)).content == "v1"
