"""Waiting for a server's whole embedding backlog, as its Ops/Status counts it: what is left once every
memory written is READY (the English context vectors, computed after the vectors a memory needs to be
found; store/embeddings.py)."""

from __future__ import annotations

import asyncio
import time

from hindsight_server.rpc.ops import StatusUnavailable, fetch_status

__all__ = ["wait_backlog_drained"]


async def wait_backlog_drained(target: str, since: float, timeout_s: float) -> bool:
    """Polls the server's status until a count of the backlog taken after `since` (time.monotonic())
    finds nothing waiting (at once for a server without an inference tier); False when it still found
    some at the deadline, or the server does not answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        asked = time.monotonic()
        try:
            figures = (await fetch_status(target, timeout_s=5)).figures
        except StatusUnavailable:
            return False
        if figures.get("inference") is None:
            return True  # no inference tier: nothing is ever embedded
        backlog = figures["embedding_backlog"]
        counted_after = backlog["age_s"] is not None and asked - backlog["age_s"] >= since
        if counted_after and backlog["pending"] == 0:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.5)
