"""The background embedding worker: fills pending embeddings in batches whenever the tier answers.

Every server runs one; rows are claimed with FOR UPDATE SKIP LOCKED, so several workers share the
backlog without embedding a row twice, and a worker that dies releases its claim with its transaction.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from hindsight_server.domain.errors import HindsightError, InferenceUnavailable
from hindsight_server.inference.tier import InferenceTier
from hindsight_server.store.memories import MemoryStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackfillSettings:
    batch: int = 256
    idle_s: float = 0.5
    timeout_s: float = 10.0


class EmbeddingBackfill:
    def __init__(self, store: MemoryStore, inference: InferenceTier, settings: BackfillSettings) -> None:
        self._store = store
        self._inference = inference
        self._settings = settings

    async def run_once(self) -> int:
        """Embeds up to one batch of pending memories; returns how many (0 when the tier is away)."""
        if not self._inference.available:
            return 0
        async with self._store.claim_pending_embeddings(self._settings.batch) as claim:
            if not claim.rows:
                return 0
            embedded = await self._inference.embed_documents(
                [row.content for row in claim.rows], timeout_s=self._settings.timeout_s
            )
            await claim.complete(list(embedded.vectors))
            return len(claim.rows)

    async def run_forever(self) -> None:
        while True:
            try:
                done = await self.run_once()
            except InferenceUnavailable:
                done = 0  # the claim rolled back; the rows stay pending for the next round
            except HindsightError as exc:
                log.warning("embedding backfill paused: %s", exc)
                done = 0
            if done < self._settings.batch:
                await asyncio.sleep(self._settings.idle_s)
