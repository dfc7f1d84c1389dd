"""The memory server's side of the inference tier (Triton, reached through `embedder.client`).

Knows whether the tier answers now, checks the model's dimension against the table's, and turns the
embedder's errors into domain errors, so pipelines degrade instead of failing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from embedder.client import TritonEmbedder, TritonReranker
from embedder.errors import InferenceError
from hindsight_server.domain.errors import InferenceUnavailable

log = logging.getLogger(__name__)

FloatMatrix = npt.NDArray[np.float32]


class DimensionMismatch(RuntimeError):
    """The embedding model's dimension differs from the one the memories table was built for."""


@dataclass(frozen=True, slots=True)
class DocumentEmbeddings:
    vectors: FloatMatrix  # [n, dimension]
    truncated: Sequence[bool]


@dataclass(frozen=True, slots=True)
class QueryVector:
    vector: FloatMatrix  # [dimension]
    truncated: bool


class InferenceTier:
    def __init__(
        self, embedder: TritonEmbedder, expected_dimension: int, reranker: TritonReranker | None = None
    ) -> None:
        self._embedder = embedder
        self._reranker = reranker
        self._expected_dimension = expected_dimension
        self._available = False
        self._can_rerank = False
        self.problem = "not checked yet"

    @property
    def available(self) -> bool:
        return self._available

    @property
    def can_rerank(self) -> bool:
        """The tier serves a cross-encoder and it answered the last probe."""
        return self._available and self._can_rerank

    async def refresh(self, timeout_s: float = 2.0) -> bool:
        """Probes the tier; on (re)connection reads the model's dimension and checks it. Never raises
        for an unreachable tier; raises DimensionMismatch when the model cannot fit the table."""
        if not await self._embedder.ready(timeout_s=timeout_s):
            self._mark(False, f"model {self._embedder.model!r} at {self._embedder.url} is not ready")
            return False
        if not self._available:
            try:
                dimension = await self._embedder.connect(timeout_s=timeout_s)
            except InferenceError as exc:
                self._mark(False, str(exc))
                return False
            if dimension != self._expected_dimension:
                self._mark(
                    False, f"model dimension {dimension} != table dimension {self._expected_dimension}"
                )
                raise DimensionMismatch(
                    f"the inference tier's {self._embedder.model!r} model makes {dimension}-dimensional "
                    f"embeddings but the memories table stores {self._expected_dimension}: configure the "
                    f"model the database was built with, or HINDSIGHT_EMBEDDING__DIMENSION for a new one"
                )
        self._mark(True, "")
        self._can_rerank = self._reranker is not None and await self._reranker.ready(timeout_s=timeout_s)
        return True

    def _mark(self, available: bool, problem: str) -> None:
        if available != self._available:
            if available:
                log.info("inference tier available")
            else:
                log.warning("inference tier unavailable: %s", problem)
        self._available, self.problem = available, problem

    async def embed_documents(self, texts: Sequence[str], timeout_s: float) -> DocumentEmbeddings:
        if not self._available:
            raise InferenceUnavailable(f"inference tier unavailable: {self.problem}")
        try:
            result = await self._embedder.embed(texts, timeout_s=timeout_s)
        except InferenceError as exc:
            raise self._failed(exc) from exc
        return DocumentEmbeddings(result.vectors, [bool(flag) for flag in result.truncated])

    async def embed_query(self, text: str, timeout_s: float) -> QueryVector:
        if not self._available:
            raise InferenceUnavailable(f"inference tier unavailable: {self.problem}")
        try:
            result = await self._embedder.embed_query(text, timeout_s=timeout_s)
        except InferenceError as exc:
            raise self._failed(exc) from exc
        return QueryVector(result.vector, result.truncated)

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

    def _failed(self, error: InferenceError) -> InferenceUnavailable:
        # Until the next probe (refresh) calls skip the tier at once instead of each waiting for a deadline.
        self._mark(False, str(error))
        return InferenceUnavailable(f"inference tier: {error}")

    async def close(self) -> None:
        await self._embedder.close()
        if self._reranker is not None:
            await self._reranker.close()
