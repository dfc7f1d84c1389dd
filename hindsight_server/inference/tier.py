"""The memory server's side of the inference tier (Triton, reached through `embedder.client`).

Knows whether the tier answers now, checks each model's dimension against the table's, and turns the
embedder's errors into domain errors, so pipelines degrade instead of failing. The multilingual model
is required for dense search at all; a language's own model (VectorSpace.ENGLISH, VectorSpace.CHINESE)
is optional: while it is configured but away, queries use the multilingual vectors alone and the
memories of its language wait for theirs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from embedder.cache import CacheStats
from embedder.client import TritonEmbedder, TritonReranker
from embedder.errors import InferenceBusy, InferenceError
from hindsight_server.domain.errors import InferenceUnavailable
from hindsight_server.domain.model import VectorSpace
from hindsight_server.domain.vectors import DocumentEmbeddings, QueryVector

log = logging.getLogger(__name__)
# The setting that sizes each space's column (HINDSIGHT_EMBEDDING__<setting>).
_DIMENSION_SETTING = {
    VectorSpace.MULTILINGUAL: "DIMENSION",
    VectorSpace.ENGLISH: "ENGLISH_DIMENSION",
    VectorSpace.CHINESE: "CHINESE_DIMENSION",
    VectorSpace.ENGLISH_CONTEXT: "ENGLISH_DIMENSION",
}


class DimensionMismatch(RuntimeError):
    """The embedding model's dimension differs from the one the memories table was built for."""


class InferenceTier:
    def __init__(
        self,
        embedders: Mapping[VectorSpace, TritonEmbedder],
        expected_dimensions: Mapping[VectorSpace, int],
        reranker: TritonReranker | None = None,
        query_embedders: Mapping[VectorSpace, TritonEmbedder] | None = None,
        twin_max_chars: int = 0,
    ) -> None:
        if VectorSpace.MULTILINGUAL not in embedders:
            raise ValueError("the inference tier needs the multilingual embedder")
        self._embedder = embedders[VectorSpace.MULTILINGUAL]
        # The languages' own models, and those of them that answered the last probe.
        self._own: dict[VectorSpace, TritonEmbedder] = {
            space: e for space, e in embedders.items() if space is not VectorSpace.MULTILINGUAL
        }
        self._own_available: set[VectorSpace] = set()
        self._reranker = reranker
        # Each model's query twin (a queue of its own), used while its last probe found it ready.
        self._query_twins = {
            space: twin for space, twin in (query_embedders or {}).items() if space in embedders
        }
        self._twins_ready: set[VectorSpace] = set()
        self._twin_max_chars = twin_max_chars  # longer queries go to the model itself; 0: no limit
        self._expected = dict(expected_dimensions)
        self._available = False
        self._can_rerank = False
        self._rerank_on_gpu = False
        self.problem = "not checked yet"

    @property
    def available(self) -> bool:
        """The multilingual model answers: writes can embed, recall can search densely."""
        return self._available

    def configured(self, space: VectorSpace) -> bool:
        """The deployment embeds in the space (whether or not its model answers now)."""
        return space is VectorSpace.MULTILINGUAL or space in self._own

    def serves(self, space: VectorSpace) -> bool:
        """The space's model answered the last probe."""
        if space is VectorSpace.MULTILINGUAL:
            return self._available
        return self._available and space in self._own_available

    @property
    def can_rerank(self) -> bool:
        """The tier serves a cross-encoder and it answered the last probe."""
        return self._available and self._can_rerank

    @property
    def rerank_on_gpu(self) -> bool:
        """The tier's cross-encoder answers and runs on a GPU, where it costs a few ms a recall: recall
        then reranks by default (RecallPolicy.rerank unset)."""
        return self.can_rerank and self._rerank_on_gpu

    async def refresh(self, timeout_s: float = 2.0) -> bool:
        """Probes the tier; on (re)connection reads the model's dimension and checks it. Never raises
        for an unreachable tier; raises DimensionMismatch when the model cannot fit the table."""
        problem = await self._probe(self._embedder, VectorSpace.MULTILINGUAL, self._available, timeout_s)
        if problem:
            self._mark(False, problem)
            return False
        self._mark(True, "")
        for space, embedder in self._own.items():
            up = space in self._own_available
            problem = await self._probe(embedder, space, up, timeout_s)
            if bool(problem) == up:
                log.log(
                    logging.WARNING if problem else logging.INFO,
                    "%s embedding model %s%s",
                    space.value,
                    "unavailable: " if problem else "available",
                    problem,
                )
            if problem:
                self._own_available.discard(space)
            else:
                self._own_available.add(space)
        self._can_rerank = self._reranker is not None and await self._reranker.ready(timeout_s=timeout_s)
        if self._can_rerank and self._reranker is not None:
            self._rerank_on_gpu = await self._placed_on_gpu(self._reranker, timeout_s)
        ready = await asyncio.gather(
            *(twin.ready(timeout_s=timeout_s) for twin in self._query_twins.values())
        )
        self._twins_ready = {space for space, up in zip(self._query_twins, ready, strict=True) if up}
        return True

    async def _placed_on_gpu(self, reranker: TritonReranker, timeout_s: float) -> bool:
        """Where the cross-encoder runs; a tier that does not say is taken for a CPU one (reranking off by
        default there: tens of ms of CPU a candidate)."""
        try:
            on_gpu = await reranker.on_gpu(timeout_s=timeout_s)
        except InferenceError as exc:  # the embedder's errors, unavailability included
            if self._rerank_on_gpu:  # said when it turns the default off, not at every probe
                log.warning("cross-encoder %r: placement unknown (%s); taken for a CPU", reranker.model, exc)
            return False
        if on_gpu != self._rerank_on_gpu:
            log.info("cross-encoder %r runs on %s", reranker.model, "a GPU" if on_gpu else "CPU")
        return on_gpu

    async def _probe(
        self, embedder: TritonEmbedder, space: VectorSpace, connected: bool, timeout_s: float
    ) -> str:
        """Why the model cannot answer now ("" when it can); on (re)connection checks its dimension."""
        if not await embedder.ready(timeout_s=timeout_s):
            return f"model {embedder.model!r} at {embedder.url} is not ready"
        if connected:
            return ""
        try:
            dimension = await embedder.connect(timeout_s=timeout_s)
        except InferenceError as exc:
            return str(exc)
        expected = self._expected[space]
        if dimension != expected:
            self._mark(False, f"model {embedder.model!r} dimension {dimension} != table dimension {expected}")
            setting = _DIMENSION_SETTING[space]
            raise DimensionMismatch(
                f"the inference tier's {embedder.model!r} model makes {dimension}-dimensional embeddings "
                f"but the memories table stores {expected}: configure the model the database was built "
                f"with, or HINDSIGHT_EMBEDDING__{setting} for a new one"
            )
        return ""

    def _mark(self, available: bool, problem: str) -> None:
        if available != self._available:
            if available:
                log.info("inference tier available")
            else:
                log.warning("inference tier unavailable: %s", problem)
        self._available, self.problem = available, problem

    def _model(self, space: VectorSpace) -> TritonEmbedder:
        if not self.serves(space):
            problem = self.problem if not self._available else f"the {space.value} model is not ready"
            raise InferenceUnavailable(f"inference tier unavailable: {problem}")
        return self._own.get(space, self._embedder)

    async def embed_documents(
        self, texts: Sequence[str], timeout_s: float, space: VectorSpace = VectorSpace.MULTILINGUAL
    ) -> DocumentEmbeddings:
        model = self._model(space)
        try:
            result = await model.embed(texts, timeout_s=timeout_s)
        except InferenceError as exc:
            raise self._failed(exc, space) from exc
        return DocumentEmbeddings(result.vectors, [bool(flag) for flag in result.truncated])

    async def embed_query(
        self,
        text: str,
        timeout_s: float,
        space: VectorSpace = VectorSpace.MULTILINGUAL,
        tenant_id: str = "",
    ) -> QueryVector:
        model = self._model(space)
        twin = self._query_twins.get(space) if space in self._twins_ready and self._fits_twin(text) else None
        try:
            result = await (twin or model).embed_query(text, timeout_s=timeout_s, tenant_id=tenant_id)
        except InferenceError as exc:
            if twin is None:
                raise self._failed(exc, space) from exc
            # The twin failed, not the model: documents still embed; queries go to the model itself
            # until the next probe finds the twin ready again (a busy twin is kept).
            if not isinstance(exc, InferenceBusy):
                self._twins_ready.discard(space)
            raise InferenceUnavailable(f"inference tier: {exc}") from exc
        return QueryVector(result.vector, result.truncated, result.cached)

    def _fits_twin(self, text: str) -> bool:
        return not self._twin_max_chars or len(text) <= self._twin_max_chars

    async def rerank(self, query: str, passages: Sequence[str], timeout_s: float) -> list[float]:
        """Cross-encoder logits, one per passage; InferenceUnavailable when it cannot answer in time."""
        if self._reranker is None or not self.can_rerank:
            raise InferenceUnavailable("the inference tier has no cross-encoder ready")
        try:
            # The gRPC deadline bounds the call on the wire; this bounds it here, whatever the transport.
            async with asyncio.timeout(timeout_s):
                return await self._reranker.rerank(query, passages, timeout_s=timeout_s)
        except TimeoutError as exc:
            raise InferenceUnavailable(f"reranker: no answer within {timeout_s * 1000:.0f} ms") from exc
        except InferenceError as exc:
            self._can_rerank = False  # until the next probe
            raise InferenceUnavailable(f"reranker: {exc}") from exc

    def _failed(self, error: InferenceError, space: VectorSpace) -> InferenceUnavailable:
        if isinstance(error, InferenceBusy):
            # Up, but this call's deadline passed (a bulk load keeps it busy): this call degrades, the
            # next one tries again. Taking the tier for down here made its health flap under load.
            return InferenceUnavailable(f"inference tier: {error}")
        # Until the next probe (refresh) calls skip the model at once instead of each waiting for a deadline.
        if space is VectorSpace.MULTILINGUAL:
            self._mark(False, str(error))
        else:
            self._own_available.discard(space)
        return InferenceUnavailable(f"inference tier: {error}")

    def forget_queries(self, tenant_id: str | None = None) -> None:
        """Every model's cached query vectors of the tenant (None: of all) dropped, after an erasure."""
        for embedder in [self._embedder, *self._own.values(), *self._query_twins.values()]:
            embedder.forget_queries(tenant_id)

    def query_cache_stats(self) -> dict[VectorSpace, CacheStats]:
        """Each space's query cache (its twin's, when it has one): hits, misses, entries."""
        embedders: dict[VectorSpace, TritonEmbedder] = {VectorSpace.MULTILINGUAL: self._embedder, **self._own}
        return {
            space: self._query_twins.get(space, embedder).query_cache_stats()
            for space, embedder in embedders.items()
        }

    async def close(self) -> None:
        for embedder in [self._embedder, *self._own.values()]:
            await embedder.close()
        for twin in self._query_twins.values():
            await twin.close()
        if self._reranker is not None:
            await self._reranker.close()
