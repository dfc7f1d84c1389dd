"""The background embedding worker: fills pending embeddings in batches whenever the tier answers.

Every server runs one; rows are claimed with FOR UPDATE SKIP LOCKED, so several workers share the
backlog without embedding a row twice, and a worker that dies releases its claim with its transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hindsight_server.domain.errors import HindsightError, InferenceUnavailable
from hindsight_server.domain.model import VectorSpace
from hindsight_server.inference.tier import InferenceTier
from hindsight_server.pipelines.activity import WriteActivity
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from hindsight_server.store.embeddings import EmbeddingQueue, PendingEmbedding
from hindsight_server.store.sql import FloatVector

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackfillSettings:
    batch: int = 256
    # Texts per inference call, one call at a time: a recall's query embedding queues behind at most
    # one chunk on the model instance, not behind the whole backlog.
    chunk: int = 32
    idle_s: float = 0.5
    timeout_s: float = 10.0
    # Before each chunk, wait while writes embedded inline within the last give_way_s, for at most
    # max_give_way_s: bulk ingestion keeps the cores, the backlog still moves (one chunk per bound).
    give_way_s: float = 0.2
    max_give_way_s: float = 2.0


class EmbeddingBackfill:
    def __init__(
        self,
        store: EmbeddingQueue,
        inference: InferenceTier,
        settings: BackfillSettings,
        activity: WriteActivity | None = None,
        scope_sizes: ScopeSizes | None = None,
    ) -> None:
        self._store = store
        self._inference = inference
        self._settings = settings
        self._activity = activity
        self._scope_sizes = scope_sizes

    async def run_once(self) -> int:
        """Embeds up to one batch of pending memories; returns how many (0 when the tier is away)."""
        inference = self._inference
        if not inference.available:
            return 0
        # While a configured English model is away, English rows get their multilingual vector and wait
        # for the English one; a server without an English model never asks for English vectors.
        english_now = inference.serves(VectorSpace.ENGLISH)
        async with self._store.claim_pending_embeddings(
            self._settings.batch, english=inference.english_configured, english_now=english_now
        ) as claim:
            if not claim.rows:
                return 0
            vectors: dict[VectorSpace, dict[str, FloatVector]] = {}
            for space in VectorSpace:
                rows = [row for row in claim.rows if space in row.missing]
                if rows and inference.serves(space):
                    # InferenceUnavailable rolls the claim back: the rows stay pending for the next round.
                    vectors[space] = await self._embed(inference, rows, space)
            await claim.complete(vectors)
        self._note_embedded(claim.rows, vectors)
        return len(claim.rows)

    def _note_embedded(
        self, rows: Sequence[PendingEmbedding], vectors: Mapping[VectorSpace, Mapping[str, FloatVector]]
    ) -> None:
        """Tells the scope sizes what the claim changed, so a recall does not plan on counts from
        before the import was embedded (a multilingual search restricted to memories without an English
        vector, planned for 10,000 of them when none is left, walks the whole graph in vain)."""
        if self._scope_sizes is None:
            return
        rows_added: Counter[tuple[str, str]] = Counter()
        without_english: Counter[tuple[str, str]] = Counter()
        for row in rows:
            scope = (row.tenant_id, row.subject)
            had_multilingual = VectorSpace.MULTILINGUAL not in row.missing
            has_multilingual = had_multilingual or row.memory_id in vectors.get(VectorSpace.MULTILINGUAL, {})
            has_english = row.has_english or row.memory_id in vectors.get(VectorSpace.ENGLISH, {})
            rows_added[scope] += has_multilingual - had_multilingual
            without_english[scope] += (has_multilingual and not has_english) - (
                had_multilingual and not row.has_english
            )
        for (tenant_id, subject), added in rows_added.items():
            self._scope_sizes.note_written(tenant_id, subject, added, without_english[(tenant_id, subject)])

    async def _embed(
        self, inference: InferenceTier, rows: list[PendingEmbedding], space: VectorSpace
    ) -> dict[str, FloatVector]:
        vectors: dict[str, FloatVector] = {}
        size = self._settings.chunk
        for start in range(0, len(rows), size):
            await self._give_way()
            chunk = rows[start : start + size]
            embedded = await inference.embed_documents(
                [row.content for row in chunk], timeout_s=self._settings.timeout_s, space=space
            )
            vectors.update((row.memory_id, v) for row, v in zip(chunk, embedded.vectors, strict=True))
        return vectors

    async def _give_way(self) -> None:
        if self._activity is None:
            return
        step, waited = self._settings.give_way_s, 0.0
        while not self._activity.quiet_for(step) and waited < self._settings.max_give_way_s:
            await asyncio.sleep(step)
            waited += step

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
