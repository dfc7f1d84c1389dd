"""An in-memory ledger of kept answers behind ReplyLedger (pipelines/ports.py), with store/replies.py's
rules: one entry per (tenant, method, key); a claim with no answer past `abandoned_after` can be taken
over; a release frees a key only while it has no answer; forgetting drops entries claimed before a time,
answered or not, a bounded number per call. The SQL itself is tested against PostgreSQL in tests/rpc."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

ReplyKey = tuple[str, str, str]  # (tenant, method, key)


@dataclass(frozen=True, slots=True)
class KeptReply:
    fingerprint: bytes
    claimed_at: datetime
    answer: bytes | None = None  # None while the first call runs


@dataclass
class InMemoryReplyLedger:
    replies: dict[ReplyKey, KeptReply] = field(default_factory=dict)

    async def claim(
        self,
        tenant_id: str,
        method: str,
        key: str,
        fingerprint: bytes,
        now: datetime,
        abandoned_after: timedelta,
    ) -> tuple[bool, bytes | None, bytes]:
        kept = self.replies.get((tenant_id, method, key))
        if kept is None or (kept.answer is None and kept.claimed_at < now - abandoned_after):
            self.replies[(tenant_id, method, key)] = KeptReply(fingerprint, now)
            return True, None, fingerprint
        return False, kept.answer, kept.fingerprint

    async def complete(self, tenant_id: str, method: str, key: str, response: bytes) -> None:
        kept = self.replies.get((tenant_id, method, key))
        if kept is not None:
            self.replies[(tenant_id, method, key)] = replace(kept, answer=response)

    async def release(self, tenant_id: str, method: str, key: str) -> None:
        kept = self.replies.get((tenant_id, method, key))
        if kept is not None and kept.answer is None:
            del self.replies[(tenant_id, method, key)]

    async def forget_older_than(self, before: datetime, limit: int) -> int:
        old = [key for key, kept in self.replies.items() if kept.claimed_at < before][:limit]
        for key in old:
            del self.replies[key]
        return len(old)
