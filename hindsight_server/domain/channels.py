"""What a recall channel reads: its hits and their vectors."""

from __future__ import annotations

from dataclasses import dataclass

from hindsight_server.domain.model import ChannelHit
from hindsight_server.domain.vectors import Vectors


@dataclass(frozen=True, slots=True)
class ChannelRows:
    """A channel's hits, and the embeddings of those that have one, in the first space asked for that
    each has a vector in (to score every candidate by similarity, not only those the vector channel
    found)."""

    hits: list[ChannelHit]
    vectors: Vectors
    rare_terms: tuple[str, ...] = ()  # the lexical channel's: the query terms rare in the tenant
