"""An in-process inference tier behind the pipelines' ports (DocumentEmbedder and RecallInference,
pipelines/ports.py): deterministic hashed bag-of-words embeddings, so texts that share words are near and
the same text always gets the same vector, and a reranker that scores by the query's words a passage
holds. Either can be taken down, as a sick Triton is: its calls then raise InferenceUnavailable; a model
can be made to err on given texts."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hindsight_server.domain.errors import InferenceUnavailable
from hindsight_server.domain.lexical import analyse
from hindsight_server.domain.model import VectorSpace
from hindsight_server.domain.vectors import DocumentEmbeddings, FloatVector, QueryVector

DIMENSION = 64


def hashed_vector(text: str, space: VectorSpace = VectorSpace.MULTILINGUAL) -> FloatVector:
    """The text's terms hashed into signed buckets, normalised (each space hashes differently, as two
    models' vectors are not comparable)."""
    vector = np.zeros(DIMENSION, dtype=np.float32)
    model = VectorSpace.ENGLISH if space is VectorSpace.ENGLISH_CONTEXT else space  # one model, one hash
    for term in analyse(text).distinct:
        digest = hashlib.blake2b(f"{model.value}:{term}".encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % DIMENSION
        vector[bucket] += 1.0 if digest[4] % 2 else -1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


@dataclass
class FakeInferenceTier:
    up: bool = True  # the multilingual model answers
    english: bool = False  # an English model is configured (and answers while the tier and english_up are)
    english_up: bool = True
    chinese: bool = False  # a Chinese model is configured (and answers while the tier and chinese_up are)
    chinese_up: bool = True
    # With `english`: memories of a session also get the English model's vector of them read after the
    # turn before (VectorSpace.ENGLISH_CONTEXT).
    english_context: bool = False
    reranks: bool = False  # a cross-encoder is served
    on_gpu: bool = False  # ... on a GPU
    max_terms: int = 512  # a longer text is embedded truncated
    fails_on: frozenset[str] = frozenset()  # texts the model errs on: a call holding one fails whole
    embedded: list[tuple[VectorSpace, tuple[str, ...]]] = field(default_factory=list)  # documents, in order

    @property
    def available(self) -> bool:
        return self.up

    def configured(self, space: VectorSpace) -> bool:
        return {
            VectorSpace.MULTILINGUAL: True,
            VectorSpace.ENGLISH: self.english,
            VectorSpace.CHINESE: self.chinese,
            VectorSpace.ENGLISH_CONTEXT: self.english and self.english_context,
        }[space]

    def serves(self, space: VectorSpace) -> bool:
        up = {
            VectorSpace.MULTILINGUAL: True,
            VectorSpace.ENGLISH: self.english_up,
            VectorSpace.CHINESE: self.chinese_up,
            VectorSpace.ENGLISH_CONTEXT: self.english_up,
        }
        return self.up and self.configured(space) and up[space]

    @property
    def can_rerank(self) -> bool:
        return self.up and self.reranks

    @property
    def rerank_on_gpu(self) -> bool:
        return self.can_rerank and self.on_gpu

    def _model(self, space: VectorSpace) -> None:
        if not self.serves(space):
            raise InferenceUnavailable(f"inference tier unavailable: the {space.value} model is down")

    async def embed_documents(
        self, texts: Sequence[str], timeout_s: float, space: VectorSpace = VectorSpace.MULTILINGUAL
    ) -> DocumentEmbeddings:
        self._model(space)
        self.embedded.append((space, tuple(texts)))
        bad = next((text for text in texts if text in self.fails_on), None)
        if bad is not None:
            raise RuntimeError(f"the {space.value} model failed on {bad[:32]!r}")
        vectors = np.stack([hashed_vector(text, space) for text in texts])
        return DocumentEmbeddings(vectors, [self._truncates(text) for text in texts])

    async def embed_query(
        self, text: str, timeout_s: float, space: VectorSpace = VectorSpace.MULTILINGUAL, tenant_id: str = ""
    ) -> QueryVector:
        self._model(space)
        return QueryVector(hashed_vector(text, space), self._truncates(text))

    async def rerank(self, query: str, passages: Sequence[str], timeout_s: float) -> list[float]:
        """A logit per passage: the share of the query's terms it holds, centred on zero."""
        if not self.can_rerank:
            raise InferenceUnavailable("the inference tier has no cross-encoder ready")
        wanted = analyse(query).distinct
        return [
            8.0 * len(wanted & analyse(passage).distinct) / max(1, len(wanted)) - 4.0 for passage in passages
        ]

    def _truncates(self, text: str) -> bool:
        return analyse(text).length > self.max_terms
