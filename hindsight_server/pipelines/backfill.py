"""The background embedding worker: fills pending embeddings in batches whenever the tier answers.

Every server runs one. Rows are leased (store/embeddings.py), not locked, while their vectors are
computed, so several workers share the backlog without embedding a row twice, a worker that dies leaves
its rows to the others once their lease ends, and a write to a claimed row never waits for inference.
A chunk that fails costs its rows a backoff (growing with their attempts; a row that failed before is
embedded alone, so one text the model cannot take fails only itself); the rest of the backlog goes on.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from hindsight_server.domain.errors import InferenceUnavailable
from hindsight_server.domain.language import OWN_SPACE
from hindsight_server.domain.model import VectorSpace
from hindsight_server.domain.vectors import (
    ClaimRequest,
    EmbeddingClaim,
    FloatVector,
    PendingContext,
    PendingEmbedding,
    context_text,
)
from hindsight_server.pipelines.activity import WriteActivity
from hindsight_server.pipelines.ports import DocumentEmbedder, EmbeddingClaims
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from hindsight_server.telemetry.counters import count_failure

log = logging.getLogger(__name__)

WORKER = "embedding-backfill"


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
    # A failed row waits retry_s, doubled for each earlier failure, at most max_retry_s.
    retry_s: float = 10.0
    max_retry_s: float = 3_600.0

    @property
    def lease(self) -> timedelta:
        """Longer than a round can take (every chunk at its deadline and give-way), so a live worker's
        rows are never offered to another; a dead worker's wait this long. A row needs at most three
        vectors (the multilingual one, its language's own and an English memory's context vector); the
        languages' rows chunk apart, each language's last chunk maybe partial."""
        chunks = math.ceil(self.batch / self.chunk) * 3 + len(OWN_SPACE)
        return timedelta(seconds=max(60.0, 2 * chunks * (self.timeout_s + self.max_give_way_s)))

    @property
    def context_lease(self) -> timedelta:
        """As `lease`, for a batch of context vectors: one vector a row."""
        chunks = math.ceil(self.batch / self.chunk)
        return timedelta(seconds=max(60.0, 2 * chunks * (self.timeout_s + self.max_give_way_s)))

    def backoff(self, attempts: int) -> timedelta:
        return timedelta(seconds=min(self.max_retry_s, self.retry_s * 2.0 ** min(attempts, 30)))


class EmbeddingBackfill:
    def __init__(
        self,
        store: EmbeddingClaims,
        inference: DocumentEmbedder,
        settings: BackfillSettings,
        activity: WriteActivity | None = None,
        scope_sizes: ScopeSizes | None = None,
    ) -> None:
        self._store = store
        self._inference = inference
        self._settings = settings
        self._activity = activity
        self._scope_sizes = scope_sizes
        # The tenant the last claim's turn stopped at: the next claim starts after it (store/embeddings.py).
        self._last_tenant = ""

    async def run_once(self) -> int:
        """Embeds up to one batch of pending memories, then up to one of context vectors; returns how
        many pending memories were claimed (0 when the tier is away)."""
        claimed = len((await self._round()).rows)
        await self._contexts()
        return claimed

    async def _round(self) -> EmbeddingClaim:
        inference = self._inference
        if not inference.available:
            return EmbeddingClaim([], more=False, last_tenant=self._last_tenant)
        # While a language's configured model is away, its rows get their multilingual vector and wait for
        # their own; a server without a language's model never asks for that language's vectors.
        own = [space for space in OWN_SPACE.values() if inference.configured(space)]
        claim = await self._store.claim_pending_embeddings(
            ClaimRequest(
                self._settings.batch,
                self._settings.lease,
                own=frozenset(own),
                own_now=frozenset(space for space in own if inference.serves(space)),
                after_tenant=self._last_tenant,
            )
        )
        self._last_tenant = claim.last_tenant
        rows = claim.rows
        if not rows:
            return claim
        vectors: dict[VectorSpace, dict[str, FloatVector]] = {}
        failed: dict[str, timedelta] = {}
        for space in VectorSpace:
            todo = [row for row in rows if space in row.missing and row.memory_id not in failed]
            if todo and inference.serves(space):
                vectors[space] = await self._embed(inference, todo, space, failed)
        vectors[VectorSpace.ENGLISH_CONTEXT] = await self._with_english(
            rows, vectors.get(VectorSpace.ENGLISH, {})
        )
        await self._store.complete(rows, vectors, failed)
        self._note_embedded(rows, vectors)
        return claim

    async def _with_english(
        self, rows: Sequence[PendingEmbedding], english: Mapping[str, FloatVector]
    ) -> dict[str, FloatVector]:
        """The context vectors of the rows that want one and got their English vector in this round,
        stored in the same update (a second update of a row writes every index again, four HNSW graphs
        among them). A chunk the tier fails leaves its rows to the context pass (`_contexts`)."""
        if not self._inference.serves(VectorSpace.ENGLISH_CONTEXT):
            return {}
        wanting = [row for row in rows if row.wants_context and row.memory_id in english]
        found = {row.memory_id: english[row.memory_id] for row in wanting if row.previous is None}
        found.update(await self._context_vectors(wanting))
        return found

    async def _context_vectors(
        self, rows: Sequence[PendingEmbedding | PendingContext]
    ) -> dict[str, FloatVector]:
        """The English model's vectors of the rows that have a turn before them, each read after it, a
        chunk at a time after the writes have had their turn; a chunk the tier fails is left out
        (counted)."""
        inference, space = self._inference, VectorSpace.ENGLISH_CONTEXT
        pairs = [(row.memory_id, context_text(row.previous, row.content)) for row in rows if row.previous]
        found: dict[str, FloatVector] = {}
        size = self._settings.chunk
        # By length: a chunk's texts are padded to its longest, so like lengths chunk together.
        pairs = sorted(pairs, key=lambda pair: len(pair[1]))
        for chunk in (pairs[start : start + size] for start in range(0, len(pairs), size)):
            if not inference.serves(space):
                break
            await self._give_way()
            try:
                embedded = await inference.embed_documents(
                    [text for _, text in chunk], timeout_s=self._settings.timeout_s, space=space
                )
            except Exception as exc:  # whatever one chunk meets stays with it; the rest go on
                count_failure(WORKER, exc, len(chunk))
                continue
            found.update((memory_id, v) for (memory_id, _), v in zip(chunk, embedded.vectors, strict=True))
        return found

    async def _contexts(self) -> bool:
        """Gives up to one batch of English memories of a session their context vector (the English
        model reading the turn before, then the memory: domain/vectors.context_text), after the
        pending embeddings, which recall needs more; whether the batch was full. A session's first
        memory takes its own English vector, with no inference. A chunk the tier does not answer leaves
        its rows to be claimed again once their lease ends."""
        if not self._inference.serves(VectorSpace.ENGLISH_CONTEXT):
            return False
        rows = await self._store.claim_contexts(self._settings.batch, self._settings.context_lease)
        vectors: dict[str, FloatVector | None] = {row.memory_id: None for row in rows if row.previous is None}
        vectors.update(await self._context_vectors(rows))
        await self._store.complete_contexts(rows, vectors)
        return len(rows) == self._settings.batch

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
        self,
        inference: DocumentEmbedder,
        rows: list[PendingEmbedding],
        space: VectorSpace,
        failed: dict[str, timedelta],
    ) -> dict[str, FloatVector]:
        """The vectors of those rows the tier embedded; a chunk that failed adds its rows to `failed`
        with their backoff. Once the tier is taken for down, the rows left wait for the next round."""
        vectors: dict[str, FloatVector] = {}
        for chunk in self._chunks(rows):
            if not inference.serves(space):
                break
            await self._give_way()
            try:
                embedded = await inference.embed_documents(
                    [row.content for row in chunk], timeout_s=self._settings.timeout_s, space=space
                )
            except Exception as exc:  # whatever one chunk meets (a model error, a deadline) stays with it
                self._note_failed(chunk, exc, failed)
                continue
            vectors.update((row.memory_id, v) for row, v in zip(chunk, embedded.vectors, strict=True))
        return vectors

    def _chunks(self, rows: Sequence[PendingEmbedding]) -> list[list[PendingEmbedding]]:
        """Rows never failed in chunks of `chunk`; each row that failed before on its own."""
        fresh = [row for row in rows if row.attempts == 0]
        size = self._settings.chunk
        return [fresh[start : start + size] for start in range(0, len(fresh), size)] + [
            [row] for row in rows if row.attempts > 0
        ]

    def _note_failed(
        self, chunk: Sequence[PendingEmbedding], error: Exception, failed: dict[str, timedelta]
    ) -> None:
        for row in chunk:
            failed[row.memory_id] = self._settings.backoff(row.attempts)
        count_failure(WORKER, error, len(chunk))
        if not isinstance(error, InferenceUnavailable):  # the tier being away or busy is logged by its watch
            first = chunk[0]
            log.warning(
                "embedding failed for %d memories (first: tenant %s, memory %s, attempt %d): %s",
                len(chunk),
                first.tenant_id,
                first.memory_id,
                first.attempts + 1,
                type(error).__name__,
            )

    async def _give_way(self) -> None:
        if self._activity is None:
            return
        step, waited = self._settings.give_way_s, 0.0
        while not self._activity.quiet_for(step) and waited < self._settings.max_give_way_s:
            await asyncio.sleep(step)
            waited += step

    async def run_forever(self) -> None:
        """Rounds until cancelled. Nothing a round raises ends the worker: it is logged (its class; no
        content), counted, and the next round comes after the idle pause."""
        while True:
            try:
                more = (await self._round()).more
                # The rest of the context vectors once no memory waits for the vectors it is found by.
                more = more or await self._contexts()
            except Exception as exc:  # the database away, or anything unforeseen: the worker carries on
                count_failure(WORKER, exc)
                log.warning("embedding backfill round failed: %s", type(exc).__name__)
                more = False
            if not more:
                await asyncio.sleep(self._settings.idle_s)
