"""Memory ids: UUIDv7 (RFC 9562), time-ordered so new rows land at the right edge of the btree."""

from __future__ import annotations

import os
import time
import uuid


def new_memory_id() -> str:
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    rand = int.from_bytes(os.urandom(10), "big")
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # RFC 4122 variant
    value |= rand & ((1 << 62) - 1)  # rand_b, 62 bits
    return str(uuid.UUID(int=value))


def canonical_memory_id(text: str) -> str | None:
    """The canonical form of a memory id, or None when the text is not one."""
    if len(text) > 64:
        return None
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None
