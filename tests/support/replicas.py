"""An embedded primary and streaming replicas that the stack starts from it (stack/replicas.py), for the
tests that need real replication."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from hindsight_server.config import Settings
from hindsight_server.stack.children import ReplicaChild
from hindsight_server.stack.postgres import EmbeddedPostgres
from hindsight_server.stack.supervisor import Stack


@dataclass
class Replicated:
    stack: Stack
    postgres: EmbeddedPostgres
    dsn: str  # the primary's

    @property
    def replicas(self) -> list[ReplicaChild]:
        return self.stack.replica_children


@contextlib.asynccontextmanager
async def replicated_postgres(data_dir: Path, replicas: int) -> AsyncIterator[Replicated]:
    postgres = EmbeddedPostgres(data_dir / "postgres")
    dsn = await asyncio.to_thread(postgres.start)
    stack = Stack(Settings(data_dir=data_dir), replicas=replicas, mcp=False, start_timeout_s=30)
    stack.primary_dsn = dsn
    try:
        await stack._start_replicas(postgres, dsn)
        yield Replicated(stack, postgres, dsn)
    finally:
        await asyncio.gather(*(child.stop(10) for child in stack.replica_children))
        await asyncio.to_thread(postgres.stop)
