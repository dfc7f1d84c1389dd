"""Who is calling: an API key names a tenant, and a call may only touch its own tenant, with a scope
that allows the method, as the agent the key is bound to (domain/principal.py). Also the per-tenant
request rate. Runs inside the error mapping, so its refusals get the table's status codes
(UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED).

The agent binding is applied here, to the request itself, before any handler reads it: every `agent_id`
a request carries becomes the bound agent's (or the call is refused), so each read that honours
PRIVATE visibility honours it for the bound agent without knowing about keys. Export, which names no
agent, gets the principal from the handler (its `viewer`)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import grpc
from google.protobuf.message import Message

from hindsight.v1 import memory_pb2 as pb
from hindsight_server.domain.errors import PermissionDenied, Shed, Unauthenticated
from hindsight_server.domain.principal import UNRESTRICTED, Principal, Scope
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.pipelines.tenants import ApiKeys
from hindsight_server.rpc.context import bind_principal
from hindsight_server.rpc.errors import Behavior, StreamBehavior, stream_items
from hindsight_server.rpc.interceptors import UnaryInterceptor

__all__ = ["AUTHORIZATION_HEADER", "METHOD_SCOPES", "WEBHOOK_METHOD_SCOPES", "AuthInterceptor"]

AUTHORIZATION_HEADER = "authorization"
_GUARDED_SERVICE = "/hindsight.v1.MemoryService/"  # health and reflection stay open, as probes need
_WEBHOOKS_SERVICE = "/hindsight.v1.WebhooksService/"
# Ops/Status: one server's figures, aggregated over its tenants (latency, backlog, pool; no tenant's name
# or data), for its operators: a key with the admin scope when keys are required.
_OPS_SERVICE = "/hindsight.ops.v1.Ops/"

# The scope each MemoryService method needs. A method missing here is refused (a new RPC must be given
# one): tests/rpc/test_security.py checks that every method of the service has an entry.
METHOD_SCOPES: Mapping[str, Scope] = {
    **dict.fromkeys(("Get", "List", "Recall", "History", "Summarize", "Watch", "AuditRecalls"), Scope.READ),
    **dict.fromkeys(
        (
            "Write",
            "WriteBatch",
            "Update",
            "Delete",
            "AppendTurn",
            "EndSession",
            "ConfirmPending",
            "RejectPending",
        ),
        Scope.WRITE,
    ),
    "Export": Scope.EXPORT,
    "Erase": Scope.ERASE,
    # Import writes memories of any agent, with their ids and version links: restoring a tenant.
    "Import": Scope.ADMIN,
}
# WebhooksService: where the tenant's events (content too, for a tenant whose feed carries it) are sent
# is the tenant's administrators' decision.
WEBHOOK_METHOD_SCOPES: Mapping[str, Scope] = dict.fromkeys(
    ("AddEndpoint", "ListEndpoints", "RemoveEndpoint", "RotateSecret", "Replay"), Scope.ADMIN
)
# The tenant-scoped services: each method's scope, by the service's path prefix.
_GUARDED_SERVICES: Mapping[str, Mapping[str, Scope]] = {
    _GUARDED_SERVICE: METHOD_SCOPES,
    _WEBHOOKS_SERVICE: WEBHOOK_METHOD_SCOPES,
}


def _guarded(method_path: str) -> tuple[str, Mapping[str, Scope]] | None:
    """(method name, its service's scope table) for a tenant-scoped service's method; else None."""
    for prefix, scopes in _GUARDED_SERVICES.items():
        if method_path.startswith(prefix):
            return method_path.removeprefix(prefix), scopes
    return None


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
                    _, principal = await self._principal(header)  # any tenant's admin key
                    principal.require(Scope.ADMIN, "Ops/Status")
                return await behavior(request, context)

            return operator
        target = _guarded(details.method)
        if target is None:
            return behavior
        method, scopes = target

        async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await self._admit(header, method, request, scopes)
            return await behavior(request, context)

        return guarded

    def wrap_stream(self, behavior: StreamBehavior, details: grpc.HandlerCallDetails) -> StreamBehavior:
        target = _guarded(details.method)
        if target is None:  # the health service's Watch: open, as Check
            return behavior
        header = str(dict(details.invocation_metadata or ()).get(AUTHORIZATION_HEADER, ""))
        method, scopes = target

        async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            await self._admit(header, method, request, scopes)
            async for item in stream_items(behavior, request, context):
                yield item

        return guarded

    async def _admit(
        self, header: str, method: str, request: Message, scopes: Mapping[str, Scope] = METHOD_SCOPES
    ) -> None:
        """The key's tenant must be the request's (when a key is sent or required), its scopes must
        allow the method, its agent binding is applied to the request, within the tenant's rate; binds
        the principal for the handler."""
        tenant: str = getattr(request, "tenant_id")  # noqa: B009 (every guarded service request has one)
        if header or self._required:
            owner, principal = await self._principal(header)
            if owner != tenant:
                raise PermissionDenied(f"this API key belongs to another tenant than {tenant!r}")
            scope = scopes.get(method)
            if scope is None:
                raise PermissionDenied(f"{method}: no scope allows this method", cause="SCOPE_MISSING")
            principal.require(scope, method)
            _bind_agent(request, principal)
        else:
            principal = UNRESTRICTED
        bind_principal(principal)
        if not self._limiter.allow(tenant, time.monotonic()):
            wait_s = self._limiter.wait_s(tenant)
            raise Shed(
                f"tenant {tenant!r} is over its request rate; retry in {wait_s:.2f} s",
                retry_after_s=wait_s,
            )

    async def _principal(self, header: str) -> tuple[str, Principal]:
        """The tenant and principal of the key in an authorization header; Unauthenticated without a
        valid one."""
        if not header:
            raise Unauthenticated(
                "an API key is required: send metadata 'authorization: Bearer <key>'",
                cause="API_KEY_MISSING",
            )
        scheme, _, credential = header.partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            raise Unauthenticated("authorization must be 'Bearer <API key>'")
        return await self._keys.principal_of(credential.strip())


def _bind_agent(request: Message, principal: Principal) -> None:
    """Every agent the request names becomes the key's bound agent; naming another is refused."""
    if not principal.agent_id:
        return
    tenant_wide = {pb.ImportRequest: "Import restores", pb.EraseRequest: "Erase removes"}.get(type(request))
    if tenant_wide is not None:
        raise PermissionDenied(
            f"{tenant_wide} memories of every agent: this API key acts as agent {principal.agent_id!r} "
            "only (use a key bound to no agent)",
            cause="AGENT_MISMATCH",
        )
    for field, holder in _agent_fields(request):
        holder.agent_id = principal.agent_for(holder.agent_id, field)


def _agent_fields(request: Message) -> Iterator[tuple[str, Any]]:
    """(field path, message holding it) for each `agent_id` of a request."""
    if "agent_id" in request.DESCRIPTOR.fields_by_name:
        yield "agent_id", request
    if isinstance(request, pb.WriteRequest):
        yield "memory.agent_id", request.memory
    elif isinstance(request, pb.WriteBatchRequest):
        for index, memory in enumerate(request.memories):
            yield f"memories[{index}].agent_id", memory
