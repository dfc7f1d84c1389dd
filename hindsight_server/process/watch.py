"""The health entries' watchers: readiness follows the database, and the inference entry the tier."""

from __future__ import annotations

import asyncio
import logging

from grpc_health.v1._async import HealthServicer

from hindsight_server.domain.errors import HindsightError
from hindsight_server.inference.tier import DimensionMismatch, InferenceTier
from hindsight_server.rpc.server import set_inference_serving, set_serving
from hindsight_server.store.memories import MemoryStore

log = logging.getLogger(__name__)


async def watch_database(store: MemoryStore, health: HealthServicer, interval_s: float) -> None:
    """Readiness follows the database: NOT_SERVING while it cannot be reached, SERVING when it is back."""
    serving = True
    while True:
        await asyncio.sleep(interval_s)
        try:
            async with asyncio.timeout(interval_s):
                await store.ping()
            healthy = True
        except (HindsightError, TimeoutError):
            healthy = False
        if healthy != serving:
            log.warning("database %s", "reachable again" if healthy else "unreachable: reporting NOT_SERVING")
            await set_serving(health, healthy)
            serving = healthy


async def watch_inference(tier: InferenceTier, health: HealthServicer, interval_s: float) -> None:
    """Probes the tier; its health entry follows. A model of the wrong dimension is never used."""
    while True:
        try:
            available = await tier.refresh()
        except DimensionMismatch as exc:
            log.error("%s", exc)
            available = False
        await set_inference_serving(health, available)
        await asyncio.sleep(interval_s)
