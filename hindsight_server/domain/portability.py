"""Export and import, the pure parts: what an export selects, which embeddings an import may keep, and
the ids of memories imported under new ids."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from hindsight_server.domain.model import (
    CommitPosition,
    EmbeddingState,
    Kind,
    Memory,
    Status,
    Tier,
    TimeWindow,
    VectorSpace,
)
from hindsight_server.domain.vectors import FloatVector

FORMAT_VERSION = 1
CURRENT_STATUSES = (Status.ACTIVE, Status.PENDING)  # an export without its history
# Every new id is derived from (tenant, source id) under this namespace: the same import gives the same
# ids every time, so a repeated one finds what the first one wrote.
_IMPORT_NAMESPACE = uuid.UUID("6b1f0f4e-5d1c-4f3e-9a55-9e0d2c5b7a11")


@dataclass(frozen=True, slots=True)
class ExportQuery:
    tenant_id: str
    subject: str | None = None  # None: every subject
    tiers: Sequence[Tier] = ()
    kinds: Sequence[Kind] = ()
    window: TimeWindow = field(default_factory=TimeWindow)  # by created_at
    include_history: bool = False
    include_embeddings: bool = False
    after_id: str | None = None
    read_after: CommitPosition | None = None
    # Whose PRIVATE memories it includes: None every agent's (a key bound to no agent), else only this
    # agent's (domain/principal.py); SHARED ones always.
    viewer: str | None = None


@dataclass(frozen=True, slots=True)
class EmbeddingModel:
    """A model as the deployment names it: its vectors are reused only by a deployment naming the same
    model in the same space with the same dimension."""

    space: VectorSpace
    name: str
    dimension: int


@dataclass(frozen=True, slots=True)
class PortableMemory:
    memory: Memory
    vectors: Mapping[VectorSpace, FloatVector] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExportHeader:
    tenant_id: str
    subject: str | None
    count: int
    models: tuple[EmbeddingModel, ...]
    exported_at: datetime


@dataclass(frozen=True, slots=True)
class ImportOutcome:
    ids: list[str]  # each memory's id here, in request order
    imported: int
    already_present: int
    embeddings_reused: int
    embeddings_pending: int


def imported_id(tenant_id: str, source_id: str) -> str:
    return str(uuid.uuid5(_IMPORT_NAMESPACE, f"{tenant_id}/{source_id}"))


def retargeted(memory: Memory, tenant_id: str, *, new_ids: bool) -> Memory:
    """The memory as it is stored in `tenant_id`: with new ids, every id it holds (its own, its version
    links, its sources) mapped the same way; a new id also drops the idempotency key, which would
    otherwise collide with the source's memory in the same tenant."""
    if not new_ids:
        return replace(memory, tenant_id=tenant_id)

    def mapped(source: str | None) -> str | None:
        return None if source is None else imported_id(tenant_id, source)

    return replace(
        memory,
        tenant_id=tenant_id,
        id=imported_id(tenant_id, memory.id),
        supersedes=mapped(memory.supersedes),
        superseded_by=mapped(memory.superseded_by),
        derived_from=tuple(imported_id(tenant_id, source) for source in memory.derived_from),
        idempotency_key="",
    )


def reusable_spaces(
    exported: Sequence[EmbeddingModel], here: Sequence[EmbeddingModel]
) -> frozenset[VectorSpace]:
    """The spaces whose exported vectors this deployment can use: the same model name and dimension."""
    ours = {model.space: model for model in here}
    return frozenset(model.space for model in exported if ours.get(model.space) == model)


def embedding_state(
    vectors: Mapping[VectorSpace, FloatVector], needed: frozenset[VectorSpace], inference: bool
) -> EmbeddingState:
    """READY when every vector the memory needs here came with it; otherwise PENDING for the worker. A
    deployment without an inference tier keeps what came (READY) or marks it DISABLED."""
    if not inference:
        return EmbeddingState.READY if VectorSpace.MULTILINGUAL in vectors else EmbeddingState.DISABLED
    return EmbeddingState.READY if needed <= vectors.keys() else EmbeddingState.PENDING


def first_loop(supersedes: Mapping[str, str | None]) -> str | None:
    """A memory on a loop of `supersedes` links (id -> the id it supersedes), or None: version chains
    must end. Linear: each id is walked once; a link out of the map ends its walk."""
    done: set[str] = set()
    for start in supersedes:
        on_walk: set[str] = set()
        current: str | None = start
        while current is not None and current in supersedes and current not in done:
            if current in on_walk:
                return current
            on_walk.add(current)
            current = supersedes[current]
        done |= on_walk
    return None
