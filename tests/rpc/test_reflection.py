"""Server reflection in both protocols (v1, v1alpha), and Ops/Status as a generic client sees it: its
schema from reflection, the call made from that schema alone; then with the generated stub.

The Python calls use grpcio-reflection's v1alpha message classes on v1's path: v1's messages are the same
on the wire. `buf curl` is an independent client that speaks reflection v1 (`--reflect-protocol
grpc-v1`): the Makefile installs it for `make buf-check`; without it that test is skipped.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha import reflection_pb2

from hindsight.ops.v1 import ops_pb2, ops_pb2_grpc
from hindsight_server.process.running import RunningServer
from hindsight_server.rpc.ops import figures_from_answer

BUF = Path(__file__).resolve().parents[2] / ".venv" / "buf" / "node_modules" / ".bin" / "buf"
SERVICES = {
    "hindsight.v1.MemoryService",
    "hindsight.v1.WebhooksService",
    "hindsight.ops.v1.Ops",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
}


@pytest.fixture(scope="module")
async def channel(server: RunningServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as opened:
        yield opened


async def _reflect(
    channel: grpc.aio.Channel, version: str, *requests: reflection_pb2.ServerReflectionRequest
) -> list[reflection_pb2.ServerReflectionResponse]:
    call = channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    return [response async for response in call(iter(requests), timeout=10)]


def _pool(response: reflection_pb2.ServerReflectionResponse) -> Any:
    """A pool of its own (no generated code) from a file_descriptor_response, dependencies first."""
    files = {}
    for raw in response.file_descriptor_response.file_descriptor_proto:
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
        files[proto.name] = proto
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name: str) -> None:
        if name in added:
            return
        for dependency in files[name].dependency:
            add(dependency)
        pool.AddSerializedFile(files[name].SerializeToString())  # type: ignore[no-untyped-call]  # types-protobuf: unannotated
        added.add(name)

    for name in files:
        add(name)
    return pool


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_both_protocols_list_every_service(channel: grpc.aio.Channel, version: str) -> None:
    (answer,) = await _reflect(channel, version, reflection_pb2.ServerReflectionRequest(list_services=""))
    assert {service.name for service in answer.list_services_response.service} == SERVICES


async def test_v1_describes_itself(channel: grpc.aio.Channel) -> None:
    request = reflection_pb2.ServerReflectionRequest(
        file_containing_symbol="grpc.reflection.v1.ServerReflection"
    )
    (answer,) = await _reflect(channel, "v1", request)
    pool = _pool(answer)
    method = pool.FindServiceByName("grpc.reflection.v1.ServerReflection").methods_by_name[
        "ServerReflectionInfo"
    ]
    assert method.input_type.full_name == "grpc.reflection.v1.ServerReflectionRequest"
    assert method.client_streaming and method.server_streaming
    # The same fields as v1alpha's: what serving v1 with v1alpha's classes rests on.
    fields = {(f.name, f.number, f.type) for f in method.output_type.fields}
    assert fields == {
        (f.name, f.number, f.type) for f in reflection_pb2.ServerReflectionResponse.DESCRIPTOR.fields
    }


async def test_a_generic_client_calls_ops_status_from_reflection_alone(channel: grpc.aio.Channel) -> None:
    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol="hindsight.ops.v1.Ops")
    (answer,) = await _reflect(channel, "v1", request)
    method = _pool(answer).FindServiceByName("hindsight.ops.v1.Ops").methods_by_name["Status"]
    request_type = message_factory.GetMessageClass(method.input_type)
    response_type = message_factory.GetMessageClass(method.output_type)
    assert response_type is not ops_pb2.StatusResponse  # built from the reflected schema, not imported
    status = channel.unary_unary(
        f"/{method.containing_service.full_name}/{method.name}",
        request_serializer=request_type.SerializeToString,
        response_deserializer=response_type.FromString,
    )
    figures = json_format.MessageToDict(await status(request_type(), timeout=10))["figures"]
    assert figures["pid"] == os.getpid()  # the server runs in this process
    assert {"recall", "write", "embedding_backlog", "pool", "event_loop_lag"} <= figures.keys()


async def test_the_generated_ops_stub(channel: grpc.aio.Channel) -> None:
    answer = await ops_pb2_grpc.OpsStub(channel).Status(ops_pb2.StatusRequest(), timeout=10)
    figures = figures_from_answer(answer.SerializeToString())
    assert figures["pid"] == os.getpid() and isinstance(figures["pid"], int)
    assert isinstance(figures["pool"]["size"], int)


def test_status_answers_of_older_servers_still_read() -> None:
    """Servers from before ops.proto answered the bare JSON document (a rolling upgrade has both)."""
    assert figures_from_answer(b'{"pid": 7, "uptime_s": 1.5, "inference": null}') == {
        "pid": 7,
        "uptime_s": 1.5,
        "inference": None,
    }
    answer = ops_pb2.StatusResponse()
    answer.figures.update(
        {"pid": 7, "uptime_s": 1.5, "inference": None, "reads": {"replicas": [{"reads": 3}]}}
    )
    assert figures_from_answer(answer.SerializeToString()) == {
        "pid": 7,
        "uptime_s": 1.5,
        "inference": None,
        "reads": {"replicas": [{"reads": 3}]},
    }


async def _buf(*args: str) -> str:
    """buf's output; a subprocess the event loop waits on, as the server answering it runs on that loop."""
    process = await asyncio.create_subprocess_exec(
        str(BUF), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.skipif(not BUF.exists(), reason="buf is installed by `make buf-check` (make test runs it)")
async def test_buf_curl_speaks_reflection_v1(server: RunningServer) -> None:
    curl = ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "--reflect-protocol", "grpc-v1"]
    url = f"http://127.0.0.1:{server.port}"
    assert set((await _buf(*curl, "--list-services", url)).split()) == SERVICES
    called = await _buf(*curl, "--data", "{}", f"{url}/hindsight.ops.v1.Ops/Status")
    assert json.loads(called)["figures"]["pid"] == os.getpid()
