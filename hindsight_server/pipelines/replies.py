"""Requests safe to retry: the first call with an idempotency key runs, later ones get its answer.

The answer is kept as the bytes the transport serialised, so this works for any mutating RPC without
knowing its messages. A retry that arrives while the first call still runs is told to retry later
(ABORTED) rather than running twice; a first call that fails frees the key. The same key sent with a
different request is refused: it would otherwise silently answer a question that was not asked.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import Aborted, FailedPrecondition
from hindsight_server.pipelines.ports import ReplyLedger

__all__ = ["IdempotentReplies", "ReplySettings"]


@dataclass(frozen=True, slots=True)
class ReplySettings:
    keep: timedelta  # how long an answer is kept for retries
    # A claim with no answer this long after it was made is abandoned (its server died): longer than
    # the longest deadline a client gives a call, so a retry never starts a second run of a live one.
    abandoned_after: timedelta
    forget_batch: int = 5_000  # rows per cleanup transaction
    # One cleanup run deletes batch after batch until nothing expired is left, or this long has passed
    # (the next run goes on), so it keeps up with any write rate without holding its job forever.
    forget_budget: timedelta = timedelta(minutes=2)


class IdempotentReplies:
    def __init__(
        self,
        store: ReplyLedger,
        clock: Clock,
        settings: ReplySettings,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._clock = clock
        self._settings = settings
        self._monotonic = monotonic

    async def once(
        self, tenant_id: str, method: str, key: str, request: bytes, run: Callable[[], Awaitable[bytes]]
    ) -> bytes:
        """The answer of `run` for this (tenant, method, key), computed once. The key is validated by
        the caller (rpc/servicer.py, like every identifier)."""
        if not key:
            return await run()
        fingerprint = hashlib.sha256(request).digest()
        claimed, answer, first = await self._store.claim(
            tenant_id, method, key, fingerprint, self._clock(), self._settings.abandoned_after
        )
        if not claimed:
            if first != fingerprint:
                message = f"idempotency_key {key!r} was used for a different {method} request; use a new key"
                raise FailedPrecondition.of(
                    "IDEMPOTENCY_KEY", f"idempotency_keys/{key}", message, cause="IDEMPOTENCY_KEY_REUSED"
                )
            if answer is None:
                raise Aborted(f"a {method} request with idempotency_key {key!r} is still running; retry")
            return answer
        try:
            answer = await run()
        except BaseException:
            await self._store.release(tenant_id, method, key)
            raise
        await self._store.complete(tenant_id, method, key, answer)
        return answer

    async def forget_expired(self, now: datetime) -> int:
        """The `replies` job: answers older than the retry window go, a batch per transaction, until
        none is left or the run's time budget is spent. Returns how many went."""
        before, size = now - self._settings.keep, self._settings.forget_batch
        deadline = self._monotonic() + self._settings.forget_budget.total_seconds()
        total = 0
        while True:
            done = await self._store.forget_older_than(before, size)
            total += done
            if done < size or self._monotonic() >= deadline:
                return total
