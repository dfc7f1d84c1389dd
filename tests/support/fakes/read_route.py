"""A read route over two in-memory stores (ReadRoute, store/routing.py): reads run on a replica that has
replayed up to a position, and one carrying a later position runs on the primary, as the real route does
when no replica catches up in time. A test makes the replica stale by giving it an older copy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from hindsight_server.domain.model import CommitPosition

S = TypeVar("S")
T = TypeVar("T")


@dataclass
class LaggingReplicaRoute(Generic[S]):
    primary: S
    replica: S
    replayed: CommitPosition  # how far the replica has replayed the primary's changes

    async def read(self, after: CommitPosition | None, run: Callable[[S], Awaitable[T]]) -> T:
        caught_up = after is None or (
            after.database == self.replayed.database and after.lsn <= self.replayed.lsn
        )
        return await run(self.replica if caught_up else self.primary)

    def on_primary(self, store: object) -> bool:
        return store is self.primary
