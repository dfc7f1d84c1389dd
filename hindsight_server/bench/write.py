"""`hindsight bench write`: single Write and Get latency, and WriteBatch throughput, over gRPC.

With a real-text corpus (`--corpus`, bench/eval_corpus.py) the memories are one user's (one subject),
and the import (the WriteBatch calls) is followed until every embedding it left to the background
worker is filled: memories/s acknowledged and memories/s fully embedded, with a recall (the corpus's
questions, one at a time) measured during the import and again once it is embedded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.bench import cpu
from hindsight_server.bench.corpus import RecallCorpus, synthetic_memories
from hindsight_server.bench.recall import server_pids, wait_embedded
from hindsight_server.telemetry.window import LatencySummary

EMBED_WAIT_S = 1800.0  # at most this long for the import's embeddings


@dataclass(frozen=True, slots=True)
class ImportFigures:
    """The import followed until embedded, and recall beside it (real-text corpus only)."""

    memories: int
    embedded_s: (
        float  # from the first WriteBatch until every memory it left pending is embedded (-1: gave up)
    )
    memories_per_s_embedded: float  # memories / embedded_s
    recall_during: LatencySummary  # one at a time while the import is written and embedded
    recall_idle: LatencySummary  # as many, after


@dataclass(frozen=True, slots=True)
class WriteBenchResult:
    write: LatencySummary
    get: LatencySummary
    batch: LatencySummary
    batch_size: int
    batch_concurrency: int
    batch_memories_per_s: float
    embedded_inline: float  # share of the batch-written memories embedded before the acknowledgement
    corpus: str = "synthetic"
    imported: ImportFigures | None = None
    # The stack's CPU per single Write (server, PostgreSQL, Triton on this machine; cpu.py).
    cpu_ms_per_write: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Input:
    content: str
    tier: str
    kind: str
    subject: str
    session_id: str

    def message(self) -> pb.MemoryInput:
        return memory_input(
            self.content, tier=self.tier, kind=self.kind, subject=self.subject, session_id=self.session_id
        )


def _inputs(corpus: RecallCorpus | None, seed: int) -> Iterator[_Input]:
    if corpus is None:
        for m in synthetic_memories(seed):
            yield _Input(m.content, m.tier, m.kind, m.subject, m.session_id)
        return
    for turn in itertools.cycle(corpus.memories):  # one user: the corpus's first subject
        yield _Input(turn.content, turn.tier, turn.kind, "user-0", turn.session_id)


async def run_write_bench(
    target: str,
    *,
    singles: int,
    batches: int,
    batch_size: int,
    concurrency: int,
    seed: int = 7,
    corpus: RecallCorpus | None = None,
) -> WriteBenchResult:
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    inputs = _inputs(corpus, seed)
    async with HindsightClient(target, timeout_s=60) as client:
        for memory in itertools.islice(inputs, 20):  # warm the channel, the pool and the plans
            await client.write(
                tenant, memory.content, tier=memory.tier, kind=memory.kind, subject=memory.subject
            )

        write_s: list[float] = []
        ids: list[str] = []
        pids = await server_pids(target)
        before = cpu.sample(pids)
        for memory in itertools.islice(inputs, singles):
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
        write_cpu = before.per_call_ms(cpu.sample(pids), singles)

        get_s: list[float] = []
        rng = random.Random(seed)
        for memory_id in rng.choices(ids, k=singles):
            started = time.perf_counter()
            await client.get(tenant, memory_id)
            get_s.append(time.perf_counter() - started)

        payloads = [[m.message() for m in itertools.islice(inputs, batch_size)] for _ in range(batches)]
        queue: asyncio.Queue[list[pb.MemoryInput]] = asyncio.Queue()
        for payload in payloads:
            queue.put_nowait(payload)
        batch_s: list[float] = []
        states: list[int] = []
        pending: list[tuple[datetime, str, str]] = []  # (recorded at, tenant, id), embedded later

        async def worker() -> None:
            while not queue.empty():
                payload = queue.get_nowait()
                started = time.perf_counter()
                response = await client.write_batch(tenant, payload, verbatim=True)
                batch_s.append(time.perf_counter() - started)
                states.extend(r.memory.embedding_state for r in response.results)
                pending.extend(
                    (r.memory.created_at.ToDatetime(tzinfo=UTC), tenant, r.memory.id)
                    for r in response.results
                    if r.memory.embedding_state == pb.EMBEDDING_STATE_PENDING
                )

        # A real-text import is followed until embedded, with recalls on its user meanwhile.
        probe = _RecallProbe(client, tenant, corpus.questions) if corpus else None
        probing = asyncio.ensure_future(probe.run()) if probe else None
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        imported = None
        if probe is not None and probing is not None:
            drained = await wait_embedded(client, pending, EMBED_WAIT_S, None, seed)
            embedded_s = time.perf_counter() - started if drained else -1.0
            probing.cancel()
            during = LatencySummary.of(probe.latencies)
            idle = await probe.measure(max(50, len(probe.latencies)))
            imported = ImportFigures(
                memories=batches * batch_size,
                embedded_s=embedded_s,
                memories_per_s_embedded=batches * batch_size / embedded_s if embedded_s > 0 else 0.0,
                recall_during=during,
                recall_idle=idle,
            )
    return WriteBenchResult(
        write=LatencySummary.of(write_s),
        get=LatencySummary.of(get_s),
        batch=LatencySummary.of(batch_s),
        batch_size=batch_size,
        batch_concurrency=concurrency,
        batch_memories_per_s=batches * batch_size / elapsed,
        embedded_inline=states.count(pb.EMBEDDING_STATE_READY) / len(states),
        corpus=corpus.prefix if corpus else "synthetic",
        imported=imported,
        cpu_ms_per_write=write_cpu,
    )


class _RecallProbe:
    """Recalls one at a time on the importing tenant's user, until cancelled."""

    def __init__(self, client: HindsightClient, tenant: str, questions: tuple[str, ...]) -> None:
        self._client, self._tenant, self._questions = client, tenant, questions
        self.latencies: list[float] = []

    async def run(self) -> None:
        for question in itertools.cycle(self._questions):
            self.latencies.append(await self._recall(question))

    async def measure(self, calls: int) -> LatencySummary:
        questions = itertools.islice(itertools.cycle(self._questions), calls)
        return LatencySummary.of([await self._recall(q) for q in questions])

    async def _recall(self, question: str) -> float:
        started = time.perf_counter()
        await self._client.recall(self._tenant, question, subject="user-0", top_k=10)
        return time.perf_counter() - started


def report(result: WriteBenchResult, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(result), indent=2)
    lines = [
        f"{'corpus':<28} {result.corpus}",
        result.write.line("Write (1 memory)"),
        f"{'CPU per Write':<28} "
        + (", ".join(f"{g} {ms:.2f} ms" for g, ms in sorted(result.cpu_ms_per_write.items())) or "n/a"),
        result.get.line("Get"),
        result.batch.line(f"WriteBatch ({result.batch_size})"),
        f"{'WriteBatch throughput':<28} {result.batch_memories_per_s:,.0f} memories/s acknowledged "
        f"(concurrency {result.batch_concurrency}, {result.embedded_inline:.0%} embedded before the ack)",
    ]
    imported = result.imported
    if imported is not None:
        if imported.embedded_s > 0:
            lines.append(
                f"{'import fully embedded':<28} {imported.memories:,} memories in "
                f"{imported.embedded_s:.1f} s: {imported.memories_per_s_embedded:,.0f} memories/s"
            )
        else:
            lines.append(f"{'import fully embedded':<28} NOT within {EMBED_WAIT_S:g} s (or no status)")
        lines.append(imported.recall_during.line("Recall during the import"))
        lines.append(imported.recall_idle.line("Recall after it"))
    return "\n".join(lines)
