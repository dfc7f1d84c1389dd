"""Memory ids: UUIDv7 (RFC 9562), time-ordered so new rows land at the right edge of the btree, and
monotonic within a process, so the memories of one batch, which share a time, keep the batch's order in
their session (store/channels.adjacent_turns orders a session by time, then id)."""

from __future__ import annotations

import os
import threading
import time
import uuid

_last = 0
_lock = threading.Lock()


def new_memory_id() -> str:
    global _last
    nanos = time.time_ns()
    value = ((nanos // 1_000_000) & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    # rand_a holds the millisecond's fraction in 12 bits (RFC 9562, 6.2 method 3): ids of one
    # millisecond sort in time too.
    value |= (nanos % 1_000_000 * 4096 // 1_000_000) << 64
    value |= 0b10 << 62  # RFC 4122 variant
    value |= int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)  # rand_b, 62 bits
    with _lock:
        # Two ids in the same fraction (or the clock set back): the next after the last, its random
        # bits counted up (they overflow into the variant only after 2**62 ids in one fraction).
        if value <= _last:
            value = _last + 1
        _last = value
    return str(uuid.UUID(int=value))


def canonical_memory_id(text: str) -> str | None:
    """The canonical form of a memory id, or None when the text is not one."""
    if len(text) > 64:
        return None
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None
