"""Server reflection in both of its protocols: grpc.reflection.v1, which grpcurl, buf curl and Postman ask
first, and grpc.reflection.v1alpha, for older clients.

grpcio-reflection (1.81, the version pyproject.toml pins) implements v1alpha only. v1's reflection.proto is
v1alpha's under another package: the same messages with the same fields, numbers and types, so the bytes
of a v1 call are those of a v1alpha call. v1 is therefore served by grpcio-reflection's own servicer, its
messages read and written with the v1alpha classes; and v1's file (v1alpha's descriptor, renamed) is added
to the descriptor pool, so that reflection can describe grpc.reflection.v1 as well. When grpcio-reflection
ships v1 itself (grpc_reflection.v1), use that instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME  # grpc.reflection.v1alpha.ServerReflection
_V1ALPHA_PACKAGE = "grpc.reflection.v1alpha"
_V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{_V1_PACKAGE}.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _renamed(type_name: str) -> str:
    prefix = f".{_V1ALPHA_PACKAGE}."
    return f".{_V1_PACKAGE}.{type_name.removeprefix(prefix)}" if type_name.startswith(prefix) else type_name


def v1_file(pool: Any) -> Any:
    """grpc/reflection/v1/reflection.proto in `pool` (a DescriptorPool), added from v1alpha's when absent."""
    try:
        return pool.FindFileByName(_V1_FILE)
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = _V1_FILE
    proto.package = _V1_PACKAGE
    proto.ClearField("options")  # v1alpha's language options (java_package, ...) are not v1's
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):  # descriptor.proto is proto2: assigning "" would set it
                field.type_name = _renamed(field.type_name)
    for service in proto.service:
        for method in service.method:
            method.input_type = _renamed(method.input_type)
            method.output_type = _renamed(method.output_type)
    pool.AddSerializedFile(proto.SerializeToString())
    return pool.FindFileByName(_V1_FILE)


def enable_reflection(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Reflection over `service_names` (fully qualified, their files in the default pool) and over both
    reflection services themselves, in both protocols."""
    pool = descriptor_pool.Default()  # type: ignore[no-untyped-call]  # the stubs leave it unannotated
    v1_file(pool)
    names = [*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME]
    reflection.enable_server_reflection(names, server, pool=pool)
    servicer = reflection.aio.ReflectionServicer(names, pool=pool)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {"ServerReflectionInfo": v1}),)
    )
