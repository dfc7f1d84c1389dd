"""The embeddings as the pipelines, the store and the inference tier pass them to each other: numpy arrays
of float32, one definition for every layer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import numpy.typing as npt

from hindsight_server.domain.model import VectorSpace

FloatVector = npt.NDArray[np.float32]  # [dimension]
FloatMatrix = FloatVector  # [n, dimension]: the same array type, named for its shape

Vectors = dict[VectorSpace, dict[str, FloatVector]]  # per space, by memory id
# Spaces whose cosine joins the judging space's instead of standing in for it where a memory lacks that
# one (a Chinese query's second multilingual model): a channel reads a memory's vector there whatever
# other vector it has, where the other spaces are read in order of preference, the first one a memory has.
COMPANION_SPACES = frozenset({VectorSpace.CHINESE})
# What a write stores: per space, vectors parallel to its memories (None: not embedded yet).
WriteVectors = Mapping[VectorSpace, Sequence[FloatVector | None]]


@dataclass(frozen=True, slots=True)
class DocumentEmbeddings:
    vectors: FloatMatrix  # [n, dimension]
    truncated: Sequence[bool]


@dataclass(frozen=True, slots=True)
class QueryVector:
    vector: FloatVector
    truncated: bool
    cached: bool = False  # from the query-embedding cache


@dataclass(frozen=True, slots=True)
class PendingEmbedding:
    """A memory waiting for its vectors, as the embedding worker claimed it."""

    memory_id: str
    tenant_id: str
    subject: str
    content: str
    has_english: bool  # before this claim (a Chinese memory never gets one)
    missing: frozenset[VectorSpace]  # the spaces whose vector this memory still lacks and can get
    attempts: int = 0  # earlier embeddings of it that failed
    digest: str = ""  # md5 of the content claimed: completion checks the row still holds it


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """What the embedding worker asks of the queue: up to `limit` rows leased for `lease`, the tenants
    waiting taken in turn from the one after `after_tenant` (the claim before's `last_tenant`). `own`:
    the languages' own spaces computed at all; `own_now`: those that can be right now (rows lacking only
    another one are left for later, so they do not hold back the rest)."""

    limit: int
    lease: timedelta
    own: frozenset[VectorSpace]
    own_now: frozenset[VectorSpace]
    after_tenant: str = ""


@dataclass(frozen=True, slots=True)
class EmbeddingClaim:
    """One claim of the embedding queue: the rows leased (in the order to embed them), whether more may
    be due at once (the batch was full, or tenants were left for the next turn), and the tenant the turn
    stopped at."""

    rows: list[PendingEmbedding]
    more: bool
    last_tenant: str
