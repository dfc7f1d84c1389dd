"""Export and import rules (domain/portability.py), table-driven: ids under a new tenant, which
embeddings an import may keep, and the embedding state a memory is imported with."""

from __future__ import annotations

import numpy as np
import pytest

from hindsight_server.domain.model import EmbeddingState, VectorSpace
from hindsight_server.domain.portability import (
    EmbeddingModel,
    embedding_state,
    first_loop,
    imported_id,
    retargeted,
    reusable_spaces,
)
from hindsight_server.domain.vectors import FloatVector
from tests.domain.builders import memory

A, B, C = (f"01a22b8a-0000-7000-8000-00000000000{n}" for n in (1, 2, 3))
M = VectorSpace.MULTILINGUAL
E = VectorSpace.ENGLISH
EMBED, EMBED_EN = EmbeddingModel(M, "embed", 512), EmbeddingModel(E, "embed_en", 384)


def test_new_ids_map_every_id_the_same_way_and_drop_the_key() -> None:
    source = memory(id=B, tenant_id="from", supersedes=A, superseded_by=C, derived_from=(A, C),
                    idempotency_key="k")  # fmt: skip
    moved = retargeted(source, "to", new_ids=True)
    assert (moved.tenant_id, moved.id) == ("to", imported_id("to", B))
    assert (moved.supersedes, moved.superseded_by) == (imported_id("to", A), imported_id("to", C))
    assert moved.derived_from == (imported_id("to", A), imported_id("to", C))
    assert moved.idempotency_key == "" and moved.content == source.content
    assert retargeted(source, "to", new_ids=True) == moved  # the same every time: a repeat finds it
    assert imported_id("other", B) != moved.id  # but per tenant


def test_kept_ids_change_only_the_tenant() -> None:
    source = memory(id=B, tenant_id="from", supersedes=A, idempotency_key="k")
    kept = retargeted(source, "to", new_ids=False)
    assert kept == source.__class__(
        **{**{f: getattr(source, f) for f in source.__slots__}, "tenant_id": "to"}
    )


@pytest.mark.parametrize(
    ("exported", "here", "reusable"),
    [
        ([EMBED, EMBED_EN], [EMBED, EMBED_EN], {M, E}),
        ([EMBED], [EMBED, EMBED_EN], {M}),
        ([EmbeddingModel(M, "embed", 768)], [EMBED], set()),  # another dimension
        ([EmbeddingModel(M, "e5-large", 512)], [EMBED], set()),  # another model
        ([EmbeddingModel(E, "embed", 512)], [EMBED], set()),  # another space
        ([EMBED, EMBED_EN], [], set()),  # no inference tier here
    ],
)
def test_which_embeddings_an_import_keeps(
    exported: list[EmbeddingModel], here: list[EmbeddingModel], reusable: set[VectorSpace]
) -> None:
    assert reusable_spaces(exported, here) == reusable


VECTOR = np.zeros(3, dtype=np.float32)


@pytest.mark.parametrize(
    ("vectors", "needed", "inference", "state"),
    [
        ({M: VECTOR}, {M}, True, EmbeddingState.READY),
        ({M: VECTOR}, {M, E}, True, EmbeddingState.PENDING),  # English memory: its English vector too
        ({M: VECTOR, E: VECTOR}, {M, E}, True, EmbeddingState.READY),
        ({}, {M}, True, EmbeddingState.PENDING),
        ({}, {M}, False, EmbeddingState.DISABLED),
        ({M: VECTOR}, {M}, False, EmbeddingState.READY),
    ],
)
def test_the_state_an_import_gives(
    vectors: dict[VectorSpace, FloatVector], needed: set[VectorSpace], inference: bool, state: EmbeddingState
) -> None:
    assert embedding_state(vectors, frozenset(needed), inference) is state


@pytest.mark.parametrize(
    ("links", "on_loop"),
    [
        ({}, set()),
        ({A: None}, set()),
        ({A: B, B: C, C: None}, set()),
        ({A: B, B: "elsewhere"}, set()),  # a link out of what was read ends the walk
        ({A: A}, {A}),
        ({A: B, B: A}, {A, B}),
        ({C: A, A: B, B: A}, {A, B}),  # a tail into a loop
    ],
)
def test_first_loop(links: dict[str, str | None], on_loop: set[str]) -> None:
    found = first_loop(links)
    assert (found in on_loop) if on_loop else found is None
