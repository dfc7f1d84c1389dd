"""hindsight.v1.WebhooksService (proto/hindsight/v1/webhooks.proto): thin handlers over the webhook
registry. The admin scope is checked by the auth interceptor (rpc/auth.py), errors mapped by the error
interceptor, as for MemoryService."""

from __future__ import annotations

from typing import Any

import grpc

from hindsight.v1 import webhooks_pb2 as pb
from hindsight.v1 import webhooks_pb2_grpc as pb_grpc
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.validation import validate_tenant
from hindsight_server.domain.webhooks import Endpoint, EndpointState
from hindsight_server.pipelines.webhooks import WebhookRegistry
from hindsight_server.rpc.context import current_principal
from hindsight_server.rpc.convert import time_out

__all__ = ["WEBHOOKS_SERVICE", "WebhooksServicer", "add_webhooks_service", "endpoint_to_proto"]

WEBHOOKS_SERVICE = pb.DESCRIPTOR.services_by_name["WebhooksService"].full_name

_STATES = {EndpointState.ACTIVE: pb.WEBHOOK_STATE_ACTIVE, EndpointState.DEAD: pb.WEBHOOK_STATE_DEAD}


def endpoint_to_proto(endpoint: Endpoint) -> pb.WebhookEndpoint:
    message = pb.WebhookEndpoint(
        id=endpoint.id,
        url=endpoint.url,
        event_types=sorted(endpoint.filters.event_types),
        subjects=sorted(endpoint.filters.subjects),
        state=_STATES[endpoint.state],
        cursor=str(endpoint.cursor),
        attempts=endpoint.attempts,
        last_error=endpoint.last_error,
        delivered=endpoint.delivered,
    )
    time_out(message.next_attempt_at, endpoint.next_attempt_at)
    time_out(message.created_at, endpoint.created_at)
    time_out(message.dead_at, endpoint.dead_at)
    time_out(message.previous_secret_expires_at, endpoint.previous_secret_until)
    return message


class WebhooksServicer(pb_grpc.WebhooksServiceServicer):
    def __init__(self, registry: WebhookRegistry, limits: Limits) -> None:
        self._registry = registry
        self._limits = limits

    async def AddEndpoint(
        self, request: pb.AddEndpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AddEndpointResponse:
        validate_tenant(request.tenant_id, self._limits)
        endpoint, secret = await self._registry.add(
            request.tenant_id,
            request.url,
            list(request.event_types),
            list(request.subjects),
            current_principal().viewer,
        )
        return pb.AddEndpointResponse(endpoint=endpoint_to_proto(endpoint), secret=secret)

    async def ListEndpoints(
        self, request: pb.ListEndpointsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListEndpointsResponse:
        validate_tenant(request.tenant_id, self._limits)
        endpoints = await self._registry.endpoints(request.tenant_id)
        return pb.ListEndpointsResponse(endpoints=[endpoint_to_proto(e) for e in endpoints])

    async def RemoveEndpoint(
        self, request: pb.RemoveEndpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RemoveEndpointResponse:
        validate_tenant(request.tenant_id, self._limits)
        await self._registry.remove(request.tenant_id, request.endpoint_id)
        return pb.RemoveEndpointResponse()

    async def RotateSecret(
        self, request: pb.RotateSecretRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RotateSecretResponse:
        validate_tenant(request.tenant_id, self._limits)
        endpoint, secret = await self._registry.rotate(request.tenant_id, request.endpoint_id)
        return pb.RotateSecretResponse(endpoint=endpoint_to_proto(endpoint), secret=secret)

    async def Replay(
        self, request: pb.ReplayRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReplayResponse:
        validate_tenant(request.tenant_id, self._limits)
        endpoint = await self._registry.replay(request.tenant_id, request.endpoint_id, request.cursor)
        return pb.ReplayResponse(endpoint=endpoint_to_proto(endpoint))


def add_webhooks_service(server: grpc.aio.Server, registry: WebhookRegistry, limits: Limits) -> None:
    pb_grpc.add_WebhooksServiceServicer_to_server(WebhooksServicer(registry, limits), server)
