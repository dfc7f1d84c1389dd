"""Admission control at the door of MemoryService (domain/admission.py has the rules): every call is
weighed by what it asks for and let in, or refused at once with RESOURCE_EXHAUSTED and a retry delay.
Runs inside auth, so the tenant is the key's, and only admitted calls hold a place.

A tenant already refused whatever it asks (its calls in flight at the limit, its share taken, its
bucket empty) is refused before its request is even parsed: a client that ignores the retry delay and
resends megabyte batches at once costs the server a refusal, not a parse. That early refusal reads the
tenant from the request's first bytes and is given only to a caller whose credentials (the
authorization header, or none where keys are not required) were admitted for that tenant before, so a
caller without the tenant's key learns nothing of its load and is answered by auth as before (a key
revoked since is answered so until its pair ages out of the last 10,000)."""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any

import grpc

from hindsight_server.domain.admission import LEAST_COST, Admission, CallShape, Refusal, call_cost
from hindsight_server.domain.errors import ResourceExhausted, Shed
from hindsight_server.rpc.auth import AUTHORIZATION_HEADER
from hindsight_server.rpc.errors import Behavior, StreamBehavior, stream_items
from hindsight_server.rpc.interceptors import UnaryInterceptor
from hindsight_server.rpc.wire import Undecodable, leading_string
from hindsight_server.telemetry.counters import count_shed

__all__ = ["AdmissionInterceptor", "Reranking", "shape_of"]

_GUARDED_SERVICE = "/hindsight.v1.MemoryService/"
# The request's size on the wire, as its deserializer saw it; gRPC runs the deserializer and the handler
# in the call's own task, so the handler reads its own call's. Weighing by ByteSize() instead serialised
# every megabyte WriteBatch again on the loop, refused ones included: a tenth of a flooded server's CPU.
_WIRE_BYTES: ContextVar[int | None] = ContextVar("hindsight_wire_bytes", default=None)
# (authorization header, tenant) pairs admitted on this server, most recent last.
_MAX_VOUCHED = 10_000


# (query text, profile) -> (pairs the cross-encoder would score for that recall now, whether on a GPU).
Reranking = Callable[[str, str], tuple[int, bool]]


def shape_of(method: str, request: Any, request_bytes: int, reranking: Reranking | None = None) -> CallShape:
    """What a MemoryService request asks for: the items it writes or the results it wants, its size, and
    for a recall the cross-encoder's work (`reranking`; None: never reranked)."""
    items, pairs, on_gpu = 1, 0, False
    if method in ("WriteBatch", "Import"):
        items = len(request.memories)
    elif method == "Recall":
        items = request.top_k
        if reranking is not None:
            pairs, on_gpu = reranking(request.query, request.profile)
    elif method in ("List", "AuditRecalls"):
        items = request.page_size
    return CallShape(method, items, request_bytes, rerank_pairs=pairs, rerank_on_gpu=on_gpu)


class AdmissionInterceptor(UnaryInterceptor):
    def __init__(self, admission: Admission, max_items: int, reranking: Reranking | None = None) -> None:
        self._admission = admission
        self._max_items = max_items  # the batch limit: more is refused by validation, not weighed
        self._reranking = reranking
        self._vouched: OrderedDict[tuple[str, str], None] = OrderedDict()

    def wrap(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        if not details.method.startswith(_GUARDED_SERVICE):
            return behavior
        method = details.method.removeprefix(_GUARDED_SERVICE)
        header = _authorization(details)

        async def admitted(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            tenant, cost = self._admit(method, request, header)
            try:
                return await behavior(request, context)
            finally:
                self._admission.release(tenant, cost, time.monotonic())

        return admitted

    def wrap_stream(self, behavior: StreamBehavior, details: grpc.HandlerCallDetails) -> StreamBehavior:
        if not details.method.startswith(_GUARDED_SERVICE):
            return behavior
        method = details.method.removeprefix(_GUARDED_SERVICE)
        header = _authorization(details)

        async def admitted(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            tenant, cost = self._admit(method, request, header)
            try:
                async for item in stream_items(behavior, request, context):
                    yield item
            finally:
                self._admission.release(tenant, cost, time.monotonic())

        return admitted

    def deserializer(
        self, deserializer: Callable[[bytes], Any] | None, details: grpc.HandlerCallDetails
    ) -> Callable[[bytes], Any] | None:
        if deserializer is None:
            return None
        guarded = details.method.startswith(_GUARDED_SERVICE)
        method = details.method.removeprefix(_GUARDED_SERVICE)
        header = _authorization(details)

        @functools.wraps(deserializer)
        def measured(data: bytes) -> Any:
            _WIRE_BYTES.set(len(data))
            refused = self._refused_unread(method, header, data) if guarded else None
            return deserializer(data) if refused is None else Undecodable(refused)

        return measured

    def _refused_unread(self, method: str, header: str, data: bytes) -> ResourceExhausted | None:
        """The refusal of a vouched-for caller's tenant that is refused whatever it asks; else None."""
        tenant = leading_string(data)
        if tenant is None or (header, tenant) not in self._vouched:
            return None
        refused = self._admission.refusal(tenant, LEAST_COST, time.monotonic())
        if refused is None:
            return None
        self._admission.charge_refusal(tenant)
        return _shed(method, refused)

    def _admit(self, method: str, request: Any, header: str) -> tuple[str, float]:
        """The tenant and the call's cost, once admitted; ResourceExhausted (with when to retry) if not.
        Auth has let the call through: its credentials are vouched for this tenant from now on."""
        tenant = str(request.tenant_id)
        self._vouch(header, tenant)
        wire_bytes = _WIRE_BYTES.get()
        size = request.ByteSize() if wire_bytes is None else wire_bytes  # None: called without gRPC
        cost = call_cost(shape_of(method, request, size, self._reranking), self._max_items)
        refused = self._admission.admit(tenant, cost, time.monotonic())
        if refused is not None:
            raise _shed(method, refused)
        return tenant, cost

    def _vouch(self, header: str, tenant: str) -> None:
        self._vouched[(header, tenant)] = None
        self._vouched.move_to_end((header, tenant))
        if len(self._vouched) > _MAX_VOUCHED:
            self._vouched.popitem(last=False)


def _authorization(details: grpc.HandlerCallDetails) -> str:
    return str(dict(details.invocation_metadata or ()).get(AUTHORIZATION_HEADER, ""))


def _shed(method: str, refused: Refusal) -> Shed:
    count_shed(method, refused.limit)
    wait_s = refused.retry_after_s
    return Shed(f"{refused.reason}; retry in {wait_s:.2f} s", retry_after_s=wait_s)
