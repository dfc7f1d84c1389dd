"""`hindsight bench write`: single Write and Get latency, and WriteBatch throughput, over gRPC."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
import uuid
from dataclasses import asdict, dataclass

from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.bench.corpus import synthetic_memories
from hindsight_server.telemetry.window import LatencySummary


@dataclass(frozen=True, slots=True)
class WriteBenchResult:
    write: LatencySummary
    get: LatencySummary
    batch: LatencySummary
    batch_size: int
    batch_concurrency: int
    batch_memories_per_s: float
    embedded_inline: float  # share of the batch-written memories embedded before the acknowledgement


async def run_write_bench(
    target: str, *, singles: int, batches: int, batch_size: int, concurrency: int, seed: int = 7
) -> WriteBenchResult:
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    corpus = synthetic_memories(seed)
    async with HindsightClient(target, timeout_s=60) as client:
        for memory in itertools.islice(corpus, 20):  # warm the channel, the pool and the plans
            await client.write(tenant, memory.content, tier=memory.tier, kind=memory.kind)

        write_s: list[float] = []
        ids: list[str] = []
        for memory in itertools.islice(corpus, singles):
            started = time.perf_counter()
            response = await client.write(
                tenant,
                memory.content,
                tier=memory.tier,
                kind=memory.kind,
                subject=memory.subject,
                session_id=memory.session_id,
            )
            write_s.append(time.perf_counter() - started)
            ids.append(response.memory.id)

        get_s: list[float] = []
        rng = random.Random(seed)
        for memory_id in rng.choices(ids, k=singles):
            started = time.perf_counter()
            await client.get(tenant, memory_id)
            get_s.append(time.perf_counter() - started)

        payloads = [
            [
                memory_input(m.content, tier=m.tier, kind=m.kind, subject=m.subject, session_id=m.session_id)
                for m in itertools.islice(corpus, batch_size)
            ]
            for _ in range(batches)
        ]
        queue: asyncio.Queue[list[pb.MemoryInput]] = asyncio.Queue()
        for payload in payloads:
            queue.put_nowait(payload)
        batch_s: list[float] = []
        states: list[int] = []

        async def worker() -> None:
            while not queue.empty():
                payload = queue.get_nowait()
                started = time.perf_counter()
                response = await client.write_batch(tenant, payload, verbatim=True)
                batch_s.append(time.perf_counter() - started)
                states.extend(r.memory.embedding_state for r in response.results)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return WriteBenchResult(
        write=LatencySummary.of(write_s),
        get=LatencySummary.of(get_s),
        batch=LatencySummary.of(batch_s),
        batch_size=batch_size,
        batch_concurrency=concurrency,
        batch_memories_per_s=batches * batch_size / elapsed,
        embedded_inline=states.count(pb.EMBEDDING_STATE_READY) / len(states),
    )


def report(result: WriteBenchResult, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(result), indent=2)
    return "\n".join(
        [
            result.write.line("Write (1 memory)"),
            result.get.line("Get"),
            result.batch.line(f"WriteBatch ({result.batch_size})"),
            f"{'WriteBatch throughput':<28} {result.batch_memories_per_s:,.0f} memories/s "
            f"(concurrency {result.batch_concurrency}, {result.embedded_inline:.0%} embedded before the ack)",
        ]
    )
