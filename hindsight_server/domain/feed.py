"""The change feed (Watch): its events, their cursor and the filters a reader sets. Pure.

A cursor is a position (xid, seq) in a tenant's feed, sent as the opaque text "<xid>.<seq>": the
events after it are the ones not yet seen (store/feed.py says why this order misses none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from hindsight_server.domain.errors import InvalidArgument

__all__ = [
    "OLDEST",
    "ChangeEvent",
    "Cursor",
    "EventType",
    "FeedQuery",
    "Heartbeat",
    "NewEvent",
    "parse_cursor",
    "parse_event_types",
]

MAX_SEQ = 2**63 - 1
MAX_XID = 2**64 - 1
OLDEST = "oldest"  # the cursor text that starts at the oldest event still kept
_CURSOR = re.compile(r"(\d{1,20})\.(\d{1,19})")


class EventType(StrEnum):
    CREATED = "created"  # a new memory (its resolution: created, or superseded when it replaced one)
    MERGED = "merged"  # the same memory was written again: seen_count grew
    SUPERSEDED = "superseded"  # an older version was replaced (memory_id: the old one)
    UPDATED = "updated"  # Update changed the fields named
    DELETED = "deleted"  # soft-deleted (Delete, or evicted by the quota)
    CONFIRMED = "confirmed"  # a pending memory became active
    REJECTED = "rejected"  # a pending memory was rejected (deleted)
    EXPIRED = "expired"  # the expiry job marked it expired
    PURGED = "purged"  # the purge job removed it for good
    ERASED = "erased"  # Erase removed it (the event names no subject and carries no content)
    CONSOLIDATED = "consolidated"  # a session's turns became the episode memory_id (session_id names it)
    ERASURE_FINISHED = "erasure_finished"  # an Erase ended (erasure_id; its resolution: the scope's kind)
    # A recall of a tenant whose recalls are audited (audit.tenants): memory_ids are the memories it
    # returned, packed_ids those packed into its injection text; memory_id is empty.
    RECALL_SERVED = "recall.served"


@dataclass(frozen=True, slots=True, order=True)
class Cursor:
    xid: int
    seq: int

    def __str__(self) -> str:
        return f"{self.xid}.{self.seq}"

    @classmethod
    def before(cls, xid: int) -> Cursor:
        """The position just before every event of transaction `xid` and all later ones."""
        return cls(max(xid - 1, 0), MAX_SEQ)


START = Cursor(0, 0)


def parse_cursor(text: str, field: str = "cursor") -> Cursor | None:
    """A cursor's text as a position; None for "" (from now). "oldest" is the caller's to handle."""
    if not text:
        return None
    match = _CURSOR.fullmatch(text)
    if match is None or int(match[1]) > MAX_XID or int(match[2]) > MAX_SEQ:
        raise InvalidArgument(
            field, f"{text[:64]!r} is not a cursor: send one the feed gave, {OLDEST!r}, or empty (now)"
        )
    return Cursor(int(match[1]), int(match[2]))


def parse_event_types(names: list[str], field: str = "event_types") -> frozenset[EventType]:
    known = {t.value for t in EventType}
    for index, name in enumerate(names):
        if name not in known:
            raise InvalidArgument(
                f"{field}[{index}]", f"unknown event type {name[:64]!r}; known: {', '.join(known)}"
            )
    return frozenset(EventType(name) for name in names)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event a write records in its transaction."""

    tenant_id: str
    type: EventType
    at: datetime
    memory_id: str
    subject: str = ""
    kind: str = ""
    visibility: str = "shared"
    agent_id: str = ""
    resolution: str = ""
    version: int = 0
    fields: tuple[str, ...] = ()
    content: str | None = None


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    id: str
    cursor: Cursor
    tenant_id: str
    type: EventType
    at: datetime
    memory_id: str
    subject: str
    kind: str
    resolution: str
    version: int
    fields: tuple[str, ...]
    content: str | None
    session_id: str = ""
    erasure_id: str = ""
    memory_ids: tuple[str, ...] = ()  # recall.served: the memories returned
    packed_ids: tuple[str, ...] = ()  # recall.served: those packed into the injection text


@dataclass(frozen=True, slots=True)
class Heartbeat:
    cursor: Cursor


@dataclass(frozen=True, slots=True)
class FeedQuery:
    tenant_id: str
    after: Cursor | None  # None: from now
    oldest: bool = False  # from the oldest event still kept (after is None)
    subjects: frozenset[str] = frozenset()  # empty: every subject
    kinds: frozenset[str] = frozenset()
    types: frozenset[EventType] = frozenset()
    viewer: str | None = None  # an agent-bound key: shared memories and its own private ones only
