"""Reciprocal-rank fusion: merges the channels' candidate lists into one, deduplicated by memory id."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hindsight_server.domain.model import Channel, ChannelHit, ChannelResult, Memory


@dataclass(frozen=True, slots=True)
class FusedCandidate:
    memory: Memory
    channels: dict[Channel, ChannelHit]
    fusion: float


def reciprocal_rank_fusion(results: Sequence[ChannelResult], k: int, limit: int) -> list[FusedCandidate]:
    """Each channel adds 1/(k + rank) for every memory it returned; best fused score first.

    RRF needs no score calibration between channels (a cosine and a text rank are not comparable),
    and a memory several channels agree on rises above one only a single channel found.
    """
    memories: dict[str, Memory] = {}
    seen_by: dict[str, dict[Channel, ChannelHit]] = {}
    fused: dict[str, float] = {}
    for result in results:
        for hit in result.hits:
            memory_id = hit.memory.id
            memories.setdefault(memory_id, hit.memory)
            seen_by.setdefault(memory_id, {})[result.channel] = hit
            fused[memory_id] = fused.get(memory_id, 0.0) + 1.0 / (k + hit.rank)
    ordered = sorted(fused, key=lambda memory_id: (-fused[memory_id], memory_id))
    return [FusedCandidate(memories[i], seen_by[i], fused[i]) for i in ordered[:limit]]
