"""Erasure: a subject, a tenant, or named memories removed with every trace (store/erasure.py says what
goes), an audit record left that holds no content.

The call runs the removal batch by batch and returns once nothing of the scope can be read. Each batch
moves the record's heartbeat on; a record left running by a server that died is finished by the
`erasures` job on any server (`resume_stale`), and calling Erase again does the rest at once. Once an
erasure is done, every server drops the tenant's cached query vectors and scope sizes (the queries may
have named what was erased): this one at once, the others when their watch sees the finished erasure.
Other tenants' caches stay as they are, so erasures in one tenant cannot keep everyone's caches cold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import HindsightError, InvalidArgument
from hindsight_server.domain.model import ErasureKind, ErasureRecord, ErasureScope
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.validation import require_memory_id, validate_identifiers, validate_tenant
from hindsight_server.pipelines.ports import ErasureLog

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class ErasureSettings:
    limits: Limits
    batch_size: int  # memories per transaction
    stale_after: timedelta  # a running erasure whose last batch is older was left by a dead server


class ErasurePipeline:
    def __init__(
        self,
        store: ErasureLog,
        settings: ErasureSettings,
        clock: Clock,
        forget_caches: Callable[[str], None] = lambda _tenant: None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._forget_caches = forget_caches
        self._last_seen: datetime | None = None

    async def erase(
        self, scope: ErasureScope, *, reason: str, requested_by: str, request_id: str = ""
    ) -> ErasureRecord:
        scope = self._validated(scope, reason)
        record = await self._store.begin(scope, reason, requested_by, request_id, self._clock())
        log.info("erasure %s of %s (%s) by %s begins", record.id, scope.tenant_id, scope.kind, requested_by)
        return await self._finish(record)

    async def resume_stale(self, now: datetime) -> int:
        """The `erasures` job: finishes the erasures a dead server left running. Returns how many."""
        finished = 0
        for record in await self._store.stale(now - self._settings.stale_after, limit=10):
            log.warning("erasure %s of %s was left running; finishing it", record.id, record.scope.tenant_id)
            await self._finish(record)
            finished += 1
        return finished

    async def watch_forever(self, interval_s: float) -> None:
        """Drops this server's caches of each tenant an erasure finished in anywhere since the last
        look (the first look only notes where to start)."""
        while True:
            try:
                latest, tenants = await self._store.finished_since(self._last_seen)
            except HindsightError as exc:
                log.warning("could not look for finished erasures: %s", exc)
            else:
                if self._last_seen is not None:
                    for tenant_id in tenants:
                        self._forget_caches(tenant_id)
                self._last_seen = latest or self._last_seen
            await asyncio.sleep(interval_s)

    async def _finish(self, record: ErasureRecord) -> ErasureRecord:
        while not (await self._store.remove_batch(record, self._settings.batch_size, self._clock())).finished:
            pass
        self._forget_caches(record.scope.tenant_id)
        done = await self._store.get(record.scope.tenant_id, record.id)
        log.info(
            "erasure %s of %s done: %d memories, %d sessions, %d turns, %d kept answers",
            done.id,
            done.scope.tenant_id,
            done.memories,
            done.sessions,
            done.turns,
            done.replies,
        )
        return done

    def _validated(self, scope: ErasureScope, reason: str) -> ErasureScope:
        limits = self._settings.limits
        validate_tenant(scope.tenant_id, limits)
        if scope.kind is ErasureKind.SUBJECT:
            validate_identifiers(limits, subject=scope.subject)
        if len(reason) > MAX_REASON_CHARS:
            raise InvalidArgument("reason", f"at most {MAX_REASON_CHARS} characters")
        if scope.kind is not ErasureKind.MEMORIES:
            return scope
        if not scope.memory_ids:
            raise InvalidArgument("memories.ids", "required: the ids of the memories to erase")
        if len(scope.memory_ids) > limits.max_batch_size:
            raise InvalidArgument("memories.ids", f"at most {limits.max_batch_size} ids a call")
        ids = tuple(
            dict.fromkeys(
                require_memory_id(memory_id, f"memories.ids[{index}]")
                for index, memory_id in enumerate(scope.memory_ids)
            )
        )
        return ErasureScope(scope.tenant_id, ErasureKind.MEMORIES, memory_ids=ids)
