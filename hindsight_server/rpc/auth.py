"""Who is calling: an API key names a tenant, and a call may only touch its own tenant. Also the
per-tenant request rate. Runs inside the error mapping, so its refusals get the table's status codes
(UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from hindsight_server.domain.errors import PermissionDenied, ResourceExhausted, Unauthenticated
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.pipelines.tenants import ApiKeys, key_id_of
from hindsight_server.rpc.context import UNAUTHENTICATED_CALLER, bind_caller
from hindsight_server.rpc.errors import Behavior, StreamBehavior, stream_items
from hindsight_server.rpc.interceptors import UnaryInterceptor

__all__ = ["AUTHORIZATION_HEADER", "AuthInterceptor"]

AUTHORIZATION_HEADER = "authorization"
_GUARDED_SERVICE = "/hindsight.v1.MemoryService/"  # health and reflection stay open, as probes need
# Ops/Status: one server's figures, aggregated over its tenants (latency, backlog, pool; no tenant's name
# or data), for its operators: any valid key may read them when keys are required.
_OPS_SERVICE = "/hindsight.ops.v1.Ops/"


class AuthInterceptor(UnaryInterceptor):
    def __init__(self, keys: ApiKeys, *, required: bool, limiter: RateLimiter) -> None:
        self._keys = keys
        self._required = required
        self._limiter = limiter

    def wrap(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        header = str(dict(details.invocation_metadata or ()).get(AUTHORIZATION_HEADER, ""))
        if details.method.startswith(_OPS_SERVICE):

            async def operator(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                if header or self._required:
                    await self._key_owner(header)  # any tenant's valid key
                return await behavior(request, context)

            return operator
        if not details.method.startswith(_GUARDED_SERVICE):
            return behavior

        async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await self._admit(header, request.tenant_id)
            return await behavior(request, context)

        return guarded

    def wrap_stream(self, behavior: StreamBehavior, details: grpc.HandlerCallDetails) -> StreamBehavior:
        if not details.method.startswith(_GUARDED_SERVICE):  # the health service's Watch: open, as Check
            return behavior
        header = str(dict(details.invocation_metadata or ()).get(AUTHORIZATION_HEADER, ""))

        async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            await self._admit(header, request.tenant_id)
            async for item in stream_items(behavior, request, context):
                yield item

        return guarded

    async def _admit(self, header: str, tenant: str) -> None:
        """The key's tenant must be the request's (when a key is sent or required), within its rate;
        binds who called for the audit of what it does (an erasure's record)."""
        if header or self._required:
            owner, key_id = await self._key_owner(header)
            if owner != tenant:
                raise PermissionDenied(f"this API key belongs to another tenant than {tenant!r}")
            bind_caller(f"api key {key_id}")
        else:
            bind_caller(UNAUTHENTICATED_CALLER)
        if not self._limiter.allow(tenant, time.monotonic()):
            wait_s = self._limiter.wait_s(tenant)
            raise ResourceExhausted(
                f"tenant {tenant!r} is over its request rate; retry in {wait_s:.2f} s",
                retry_after_s=wait_s,
            )

    async def _key_owner(self, header: str) -> tuple[str, str]:
        """The tenant and id of the key in an authorization header; Unauthenticated without a valid
        one."""
        if not header:
            raise Unauthenticated(
                "an API key is required: send metadata 'authorization: Bearer <key>'",
                cause="API_KEY_MISSING",
            )
        scheme, _, credential = header.partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            raise Unauthenticated("authorization must be 'Bearer <API key>'")
        api_key = credential.strip()
        return await self._keys.tenant_of(api_key), key_id_of(api_key)
