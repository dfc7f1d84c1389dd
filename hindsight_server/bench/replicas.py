"""`hindsight bench replicas`: what reading from replicas costs and how far they lag, over gRPC against a
server with database.replica_dsns (store/routing.py).

1. Read-your-writes: `rounds` times, a Write followed at once by a Recall for it, alternating between a
   client that sends the consistency token (the default) and one that does not. Both recalls' latency,
   how many found the memory just written, and where the server ran the reads (Ops/Status: the
   primary, each replica). The difference between the two is the token check: the replica asked how far
   it has replayed, a wait for it, or the primary.
2. Lag under writes: WriteBatch calls (`concurrency` in flight) for `seconds`, while the server's view of
   each replica's lag is read every `sample_s` (the lag as the server measures it, against the primary
   positions it sampled; store/routing.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from hindsight.client import HindsightClient, memory_input
from hindsight_server.bench.corpus import synthetic_memories
from hindsight_server.rpc.ops import fetch_status
from hindsight_server.telemetry.window import LatencySummary


@dataclass(frozen=True, slots=True)
class RecallAfterWrite:
    recall: LatencySummary
    found: int  # recalls that returned the memory written just before
    rounds: int


@dataclass(frozen=True, slots=True)
class WhereReadsRan:
    primary: int
    replicas: int
    failed_over: int  # reads a replica failed under, run again on the primary


@dataclass(frozen=True, slots=True)
class LagUnderWrites:
    memories_per_s: float
    lag: LatencySummary  # the server's figure for the first replica, sampled
    left_out_samples: int  # samples in which the replica was not serving reads
    samples: int


@dataclass(frozen=True, slots=True)
class ReplicasBenchResult:
    replicas: int  # that the server reads from
    with_token: RecallAfterWrite
    without_token: RecallAfterWrite
    reads_with_token: WhereReadsRan
    reads_without_token: WhereReadsRan
    under_writes: LagUnderWrites


async def _reads(target: str) -> dict[str, Any]:
    figures: dict[str, Any] = (await fetch_status(target, timeout_s=5)).figures["reads"]
    return figures


def _ran(before: dict[str, Any], after: dict[str, Any]) -> WhereReadsRan:
    def total(figures: dict[str, Any], key: str) -> int:
        return sum(int(replica[key]) for replica in figures["replicas"])

    return WhereReadsRan(
        primary=after["primary_reads"] - before["primary_reads"],
        replicas=total(after, "reads") - total(before, "reads"),
        failed_over=total(after, "failed_reads") - total(before, "failed_reads"),
    )


async def _recall_after_write(
    client: HindsightClient, tenant: str, rounds: int, tag: str
) -> tuple[list[float], int]:
    seconds: list[float] = []
    found = 0
    for index in range(rounds):
        word = f"{tag}{index}x{uuid.uuid4().hex[:6]}"
        written = await client.write(
            tenant, f"The spare key is kept in locker {word}", tier="semantic", kind="fact"
        )
        started = time.perf_counter()
        response = await client.recall(tenant, f"locker {word}")
        seconds.append(time.perf_counter() - started)
        found += written.memory.id in [hit.memory.id for hit in response.hits]
    return seconds, found


async def run_replicas_bench(
    target: str,
    *,
    rounds: int,
    seconds: float,
    concurrency: int,
    batch_size: int,
    sample_s: float,
    seed: int = 7,
) -> ReplicasBenchResult:
    tenant = f"bench-replicas-{uuid.uuid4().hex[:8]}"
    async with (
        HindsightClient(target, timeout_s=30) as tracked,
        HindsightClient(target, timeout_s=30, read_your_writes=False) as untracked,
    ):
        replicas = len((await _reads(target))["replicas"])
        await _recall_after_write(tracked, tenant, 20, "warm")  # the channels, pools and plans
        before = await _reads(target)
        with_token, found_with = await _recall_after_write(tracked, tenant, rounds, "t")
        middle = await _reads(target)
        without_token, found_without = await _recall_after_write(untracked, tenant, rounds, "u")
        after = await _reads(target)
        under_writes = await _lag_under_writes(
            target, tracked, tenant, seconds, concurrency, batch_size, sample_s, seed
        )
    return ReplicasBenchResult(
        replicas=replicas,
        with_token=RecallAfterWrite(LatencySummary.of(with_token), found_with, rounds),
        without_token=RecallAfterWrite(LatencySummary.of(without_token), found_without, rounds),
        reads_with_token=_ran(before, middle),
        reads_without_token=_ran(middle, after),
        under_writes=under_writes,
    )


async def _lag_under_writes(
    target: str,
    client: HindsightClient,
    tenant: str,
    seconds: float,
    concurrency: int,
    batch_size: int,
    sample_s: float,
    seed: int,
) -> LagUnderWrites:
    memories = synthetic_memories(seed)
    written = 0
    stop = time.monotonic() + seconds

    async def write_until_done() -> None:
        nonlocal written
        while time.monotonic() < stop:
            batch = [
                memory_input(m.content, tier=m.tier, kind=m.kind, subject=m.subject)
                for m in itertools.islice(memories, batch_size)
            ]
            await client.write_batch(tenant, batch)
            written += len(batch)

    lags: list[float] = []
    left_out = samples = 0

    async def sample_until_done() -> None:
        nonlocal left_out, samples
        while time.monotonic() < stop:
            figures = await _reads(target)
            for replica in figures["replicas"][:1]:
                samples += 1
                left_out += not replica["usable"]
                if replica["lag_s"] is not None:
                    lags.append(replica["lag_s"])
            await asyncio.sleep(sample_s)

    started = time.monotonic()
    writers = [asyncio.create_task(write_until_done()) for _ in range(concurrency)]
    try:
        await sample_until_done()
        await asyncio.gather(*writers)
    finally:
        for writer in writers:
            writer.cancel()
        await asyncio.gather(*writers, return_exceptions=True)
    elapsed = time.monotonic() - started
    return LagUnderWrites(written / elapsed, LatencySummary.of(lags), left_out, samples)


def _where(ran: WhereReadsRan) -> str:
    return (
        f"reads on the primary {ran.primary:,}, on replicas {ran.replicas:,}"
        f"{f', failed over {ran.failed_over:,}' if ran.failed_over else ''}"
    )


def report(result: ReplicasBenchResult, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(result), indent=2)
    lag = result.under_writes.lag
    lines = [
        f"{'replicas':<28} {result.replicas} (that the server reads from)",
        result.with_token.recall.line("Recall after Write, token"),
        f"{'':<28} found {result.with_token.found}/{result.with_token.rounds}; "
        + _where(result.reads_with_token),
        result.without_token.recall.line("Recall after Write, none"),
        f"{'':<28} found {result.without_token.found}/{result.without_token.rounds}; "
        + _where(result.reads_without_token),
        f"{'writes under the lag watch':<28} {result.under_writes.memories_per_s:,.0f} memories/s",
        f"{'replica lag (server view)':<28} n={lag.count} p50={lag.p50_ms:.0f} ms p95={lag.p95_ms:.0f} ms "
        f"max={lag.max_ms:.0f} ms; left out in {result.under_writes.left_out_samples} of "
        f"{result.under_writes.samples} samples",
    ]
    return "\n".join(lines)


__all__ = ["ReplicasBenchResult", "report", "run_replicas_bench"]
