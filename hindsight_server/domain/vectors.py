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
COMPANION_SPACES = frozenset({VectorSpace.CHINESE, VectorSpace.ENGLISH_CONTEXT})
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
    # An English memory of a session without its context vector (VectorSpace.ENGLISH_CONTEXT), and the
    # turn before it (None: it opens the session): given with its English vector, in the same update.
    wants_context: bool = False
    previous: str | None = None


@dataclass(frozen=True, slots=True)
class PendingContext:
    """An English memory of a session waiting for its vector in VectorSpace.ENGLISH_CONTEXT, as the
    embedding worker claimed it: its text, and the text of the turn before it in its session (None:
    it opens the session, and its own English vector serves)."""

    memory_id: str
    tenant_id: str
    content: str
    previous: str | None
    digest: str  # md5 of the content claimed: completion checks the row still holds it


# The turn before is cut to its last characters, where a question ends: a long turn before would push
# the memory's own words past the model's token limit, and each character is the worker's CPU (200
# measured R@5 0.9 lower than 400 on LoCoMo dev; BENCHMARKS.md).
CONTEXT_PREVIOUS_CHARS = 400


def context_text(previous: str, content: str) -> str:
    """What the English model reads for a memory's context vector: the end of the turn before, then the
    memory (LoCoMo dev, dense alone: R@5 51.9 -> 57.0 beside the memory's own cosine; through the whole
    ranking a window with the turn after as well, recomputed when it comes, gained less; BENCHMARKS.md)."""
    return f"{previous[-CONTEXT_PREVIOUS_CHARS:]}\n{content}"


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


# Rounds of shares a claim takes at most: after the first, the tenants that filled theirs share what is
# left of the batch, so a batch is full whenever enough rows are due (each round fills it or runs a
# tenant dry, and a tenant that runs dry leaves the next round).
SHARE_ROUNDS = 4


class ShareRounds:
    """How one claim of `limit` rows is shared between the tenants waiting, in turn: each round says which
    tenants take a share and how large (`next`), and hears how many rows each took (`took`). The first
    round gives every tenant `limit // tenants`; the next ones split what is left between the tenants
    that filled their share; with fewer rows left than tenants, one each, in turn."""

    def __init__(self, tenants: Sequence[str], limit: int) -> None:
        self._active = list(tenants)
        self._left = limit
        self._share = 0
        self._rounds = 0

    def next(self) -> tuple[list[str], int] | None:
        """The next round's tenants and each one's share; None when the claim is done."""
        if self._rounds == SHARE_ROUNDS or not self._active or self._left <= 0:
            return None
        self._rounds += 1
        self._active = self._active[: self._left]
        self._share = self._left // len(self._active)
        return self._active, self._share

    def took(self, per_tenant: Mapping[str, int]) -> None:
        """The rows each tenant of the round gave."""
        self._left -= sum(per_tenant.values())
        self._active = [tenant for tenant in self._active if per_tenant.get(tenant, 0) == self._share]


def more_due(claimed: int, limit: int, waiting: int) -> bool:
    """Whether more rows may be due at once after a claim: the batch was full, or tenants were left for
    the next turn. Never after a claim of nothing (tenants whose rows wait for a model that is away, say),
    which would make the worker ask again at once, and again."""
    return claimed == limit or (claimed > 0 and waiting == limit)
