"""MemoryStore: every statement about memories, one module per concern (writes.py, reads.py,
channels.py, scope_index.py, embeddings.py, stats.py, sql.py); the pipelines each depend on the part
they use."""

from __future__ import annotations

from hindsight_server.store.channels import RecallChannels
from hindsight_server.store.embeddings import EmbeddingQueue
from hindsight_server.store.scope_index import ScopeIndexRows
from hindsight_server.store.stats import PlannerStatistics
from hindsight_server.store.writes import MemoryWrites


class MemoryStore(MemoryWrites, RecallChannels, ScopeIndexRows, EmbeddingQueue, PlannerStatistics):
    """All of them on one pool."""


__all__ = ["MemoryStore"]
