"""Admission control at the door of MemoryService (domain/admission.py has the rules): every call is
weighed by what it asks for and let in, or refused at once with RESOURCE_EXHAUSTED and a retry delay.
Runs inside auth, so the tenant is the key's, and only admitted calls hold a place."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from hindsight_server.domain.admission import Admission, CallShape, call_cost
from hindsight_server.domain.errors import ResourceExhausted
from hindsight_server.rpc.errors import Behavior, StreamBehavior, stream_items
from hindsight_server.rpc.interceptors import UnaryInterceptor
from hindsight_server.telemetry.counters import count_shed

__all__ = ["AdmissionInterceptor", "shape_of"]

_GUARDED_SERVICE = "/hindsight.v1.MemoryService/"


def shape_of(method: str, request: Any) -> CallShape:
    """What a MemoryService request asks for: the items it writes or the results it wants, its size."""
    items = 1
    if method in ("WriteBatch", "Import"):
        items = len(request.memories)
    elif method == "Recall":
        items = request.top_k
    elif method == "List":
        items = request.page_size
    return CallShape(method, items, request.ByteSize())


class AdmissionInterceptor(UnaryInterceptor):
    def __init__(self, admission: Admission, max_items: int) -> None:
        self._admission = admission
        self._max_items = max_items  # the batch limit: more is refused by validation, not weighed

    def wrap(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        if not details.method.startswith(_GUARDED_SERVICE):
            return behavior
        method = details.method.removeprefix(_GUARDED_SERVICE)

        async def admitted(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            tenant, cost = self._admit(method, request)
            try:
                return await behavior(request, context)
            finally:
                self._admission.release(tenant, cost, time.monotonic())

        return admitted

    def wrap_stream(self, behavior: StreamBehavior, details: grpc.HandlerCallDetails) -> StreamBehavior:
        if not details.method.startswith(_GUARDED_SERVICE):
            return behavior
        method = details.method.removeprefix(_GUARDED_SERVICE)

        async def admitted(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            tenant, cost = self._admit(method, request)
            try:
                async for item in stream_items(behavior, request, context):
                    yield item
            finally:
                self._admission.release(tenant, cost, time.monotonic())

        return admitted

    def _admit(self, method: str, request: Any) -> tuple[str, float]:
        """The tenant and the call's cost, once admitted; ResourceExhausted (with when to retry) if not."""
        tenant = str(request.tenant_id)
        cost = call_cost(shape_of(method, request), self._max_items)
        refused = self._admission.admit(tenant, cost, time.monotonic())
        if refused is not None:
            count_shed(method, refused.limit)
            wait_s = refused.retry_after_s
            raise ResourceExhausted(f"{refused.reason}; retry in {wait_s:.2f} s", retry_after_s=wait_s)
        return tenant, cost
