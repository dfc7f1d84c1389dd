"""Who is calling: an API key names a tenant, and a call may only touch its own tenant. Also the
per-tenant request rate. Runs inside the error mapping, so its refusals get the table's status codes
(UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED)."""

from __future__ import annotations

import time
from typing import Any

import grpc

from hindsight_server.domain.errors import PermissionDenied, ResourceExhausted, Unauthenticated
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.pipelines.tenants import ApiKeys
from hindsight_server.rpc.errors import Behavior
from hindsight_server.rpc.interceptors import UnaryInterceptor

__all__ = ["AUTHORIZATION_HEADER", "AuthInterceptor"]

AUTHORIZATION_HEADER = "authorization"
_GUARDED_SERVICE = "/hindsight.v1.MemoryService/"  # health and reflection stay open, as probes need


class AuthInterceptor(UnaryInterceptor):
    def __init__(self, keys: ApiKeys, *, required: bool, limiter: RateLimiter) -> None:
        self._keys = keys
        self._required = required
        self._limiter = limiter

    def wrap(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        if not details.method.startswith(_GUARDED_SERVICE):
            return behavior
        header = str(dict(details.invocation_metadata or ()).get(AUTHORIZATION_HEADER, ""))
        scheme, _, credential = header.partition(" ")

        async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            tenant = request.tenant_id
            if header:
                if scheme.lower() != "bearer" or not credential.strip():
                    raise Unauthenticated("authorization must be 'Bearer <API key>'")
                owner = await self._keys.tenant_of(credential.strip())
                if owner != tenant:
                    raise PermissionDenied(f"this API key belongs to another tenant than {tenant!r}")
            elif self._required:
                raise Unauthenticated("an API key is required: send metadata 'authorization: Bearer <key>'")
            if not self._limiter.allow(tenant, time.monotonic()):
                raise ResourceExhausted(f"tenant {tenant!r} is over its request rate; retry after a pause")
            return await behavior(request, context)

        return guarded
