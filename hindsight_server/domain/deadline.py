"""The current call's deadline: bound by the transport (rpc/interceptors.py) as each call starts, read by
the store (store/budget.py), whose statements and pool waits get what the call has left. Here, below
both, so the transport never imports the store. A contextvar: each call's task sees its own."""

from __future__ import annotations

import time
from contextvars import ContextVar

_CALL_DEADLINE: ContextVar[float | None] = ContextVar("hindsight_call_deadline", default=None)


def bind_call_deadline(time_remaining_s: float | None) -> None:
    """The current call's deadline, from grpc's time_remaining() (None: the caller set none)."""
    _CALL_DEADLINE.set(None if time_remaining_s is None else time.monotonic() + time_remaining_s)


def call_deadline() -> float | None:
    """When the current call must be answered, on time.monotonic()'s clock (None: no deadline)."""
    return _CALL_DEADLINE.get()
