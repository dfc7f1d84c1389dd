"""`hindsight bench neighbour`: does one tenant at full tilt slow another on the same server?

1. Load (not timed): the quiet tenant's memory, one user's real text (a memory-eval file), as
   `hindsight bench recall --corpus` loads it.
2. Idle: the quiet tenant recalls at concurrency 1 (its own questions) for S seconds, alone.
3. Flood: the same again while a second tenant runs `flood_recalls` workers of maximal recalls (top_k
   100, a 4 KB query) and `flood_writers` workers of large WriteBatches (16 KB memories), as fast as
   the server answers. The flood's channels do not retry: every refusal is counted, with whether it
   carried a retry delay.
4. Report: the quiet tenant's p50/p95/p99 idle and under the flood, and their ratio; its errors; the
   flood's calls answered and shed; the server's event-loop lag (its probe: how late a 10 ms sleep
   wakes) in each phase; CPU per quiet recall of the stack's processes in each phase.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from multiprocessing.synchronize import Event as ProcessEvent
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.bench import cpu
from hindsight_server.bench.corpus import RecallCorpus
from hindsight_server.bench.eval_corpus import eval_query
from hindsight_server.bench.recall import ensure_loaded
from hindsight_server.rpc.ops import fetch_status
from hindsight_server.telemetry.window import LatencySummary

FLOOD_TENANT = "nbench-flood"
_WORDS = "meeting budget travel Lisbon Porto order invoice doctor dentist 会议 预算 出差 订单 医生".split()


@dataclass(frozen=True, slots=True)
class Phase:
    name: str  # "idle" or "flood"
    quiet: LatencySummary | None
    quiet_errors: dict[str, int]
    flood_answered: dict[str, int]  # "recall" / "write_batch" -> calls answered
    flood_refused: dict[str, int]  # status code name -> calls refused
    flood_refusals_with_retry_info: int
    loop_lag: dict[str, Any]  # the server's event-loop probe over the phase (its status window)
    collector_pauses: dict[str, Any]  # the garbage collector's pauses over the phase (the same window)
    cpu_ms_per_quiet_recall: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NeighbourResult:
    target: str
    quiet_tenant: str
    quiet_memories: int
    seconds: float
    flood_recalls: int
    flood_writers: int
    batch_size: int
    phases: list[Phase]

    def ratios(self) -> dict[str, float]:
        """Flood over idle, per percentile, of the quiet tenant's latency."""
        idle, flood = self.phases[0].quiet, self.phases[1].quiet
        if idle is None or flood is None:
            return {}
        return {
            name: round(getattr(flood, f"{name}_ms") / getattr(idle, f"{name}_ms"), 2)
            for name in ("p50", "p95", "p99")
        }


async def _quiet(
    client: HindsightClient, corpus: RecallCorpus, seconds: float
) -> tuple[list[float], Counter[str]]:
    rng = random.Random("nbench-quiet")
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        spec = eval_query(corpus, rng)
        started = time.perf_counter()
        try:
            await client.recall(
                spec.tenant_id, spec.text, subject=spec.subject, top_k=spec.top_k, timeout_s=10
            )
        except grpc.aio.AioRpcError as exc:
            errors[exc.code().name] += 1
            continue
        latencies.append(time.perf_counter() - started)
    return latencies, errors


@dataclass
class _FloodTally:
    answered: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    with_retry_info: int = 0


def _has_retry_info(error: grpc.aio.AioRpcError) -> bool:
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            return any(detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for detail in status.details)
    return False


async def _flood(target: str, recalls: int, writers: int, batch_size: int, stop: ProcessEvent) -> _FloodTally:
    tally = _FloodTally()
    rng = random.Random("nbench-flood")
    query = " ".join(rng.choice(_WORDS) for _ in range(600)).encode()[:4000].decode(errors="ignore")
    text = " ".join(rng.choice(_WORDS) for _ in range(2400)).encode()[:16000].decode(errors="ignore")
    # Serialised once: the flood's own CPU, on the cores the server shares here, goes to sending.
    recall_request = pb.RecallRequest(tenant_id=FLOOD_TENANT, query=query, top_k=100).SerializeToString()
    memories = [memory_input(f"{index} {text}", tier="episodic", kind="event") for index in range(batch_size)]
    batch = pb.WriteBatchRequest(tenant_id=FLOOD_TENANT, memories=memories).SerializeToString()
    channel = grpc.aio.insecure_channel(target, options=[("grpc.enable_retries", 0)])
    Send = grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]  # no serialiser: bytes in, bytes out
    recall: Send = channel.unary_unary("/hindsight.v1.MemoryService/Recall")
    write_batch: Send = channel.unary_unary("/hindsight.v1.MemoryService/WriteBatch")

    async def call(kind: str, send: Any, request: bytes, timeout_s: float) -> None:
        while not stop.is_set():
            try:
                await send(request, timeout=timeout_s)
                tally.answered[kind] += 1
            except grpc.aio.AioRpcError as exc:
                tally.refused[exc.code().name] += 1
                tally.with_retry_info += _has_retry_info(exc)
                await asyncio.sleep(0.01)  # a client that barely waits: the worst neighbour

    await asyncio.gather(
        *(call("recall", recall, recall_request, 30) for _ in range(recalls)),
        *(call("write_batch", write_batch, batch, 60) for _ in range(writers)),
    )
    await channel.close()
    return tally


def _flood_main(
    target: str, recalls: int, writers: int, batch_size: int, stop: ProcessEvent, results: Any
) -> None:
    tally = asyncio.run(_flood(target, recalls, writers, batch_size, stop))
    results.put((dict(tally.answered), dict(tally.refused), tally.with_retry_info))


class _FloodProcess:
    """The flooding tenant in a process of its own (spawned: no copy of this process's gRPC state)."""

    def __init__(self, target: str, recalls: int, writers: int, batch_size: int) -> None:
        spawn = multiprocessing.get_context("spawn")
        self._stop, self._results = spawn.Event(), spawn.Queue()
        self._process = spawn.Process(
            target=_flood_main,
            args=(target, recalls, writers, batch_size, self._stop, self._results),
            daemon=True,
        )
        self._process.start()

    async def stop(self) -> _FloodTally:
        self._stop.set()
        answered, refused, with_retry_info = await asyncio.to_thread(self._results.get, timeout=120)
        await asyncio.to_thread(self._process.join, 30)
        return _FloodTally(Counter(answered), Counter(refused), with_retry_info)


async def _stalls(target: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The server's event-loop lag and its garbage collector's pauses, over its status window."""
    figures = (await fetch_status(target, timeout_s=10)).figures
    return figures.get("event_loop_lag") or {}, (figures.get("garbage_collector") or {}).get("pauses") or {}


async def run_neighbour_bench(
    target: str,
    corpus: RecallCorpus,
    *,
    seconds: float,
    flood_recalls: int,
    flood_writers: int,
    batch_size: int,
) -> NeighbourResult:
    pids = [int((await fetch_status(target, timeout_s=10)).figures["pid"])]
    async with HindsightClient(target, timeout_s=60) as client:
        await ensure_loaded(client, corpus)
        await _quiet(client, corpus, 3.0)  # warm: caches, plans, connections
        phases = []
        for name in ("idle", "flood"):
            flood: _FloodProcess | None = None
            if name == "flood":
                flood = _FloodProcess(target, flood_recalls, flood_writers, batch_size)
                await asyncio.sleep(3.0)  # the flood at full tilt before the quiet tenant is measured
            before = cpu.sample(pids)
            latencies, errors = await _quiet(client, corpus, seconds)
            after = cpu.sample(pids)
            lag, pauses = await _stalls(target)  # the status window (60 s) covers the phase
            tally = await flood.stop() if flood is not None else _FloodTally()
            phases.append(
                Phase(
                    name=name,
                    quiet=LatencySummary.of(latencies),
                    quiet_errors=dict(errors),
                    flood_answered=dict(tally.answered),
                    flood_refused=dict(tally.refused),
                    flood_refusals_with_retry_info=tally.with_retry_info,
                    loop_lag=lag,
                    collector_pauses=pauses,
                    cpu_ms_per_quiet_recall=before.per_call_ms(after, max(len(latencies), 1)),
                )
            )
            await asyncio.sleep(62.0 if name == "idle" else 0)  # the next phase's lag in a fresh window
    return NeighbourResult(
        target, corpus.prefix, len(corpus.memories), seconds, flood_recalls, flood_writers, batch_size, phases
    )


def report(result: NeighbourResult, as_json: bool) -> str:
    if as_json:
        return json.dumps({**asdict(result), "ratios": result.ratios()}, default=str)
    lines = [
        f"neighbour bench against {result.target}: quiet tenant {result.quiet_tenant} "
        f"({result.quiet_memories:,} memories of real text) at c1, {result.seconds:.0f} s a phase; "
        f"flood: {result.flood_recalls} recall workers (top_k 100, 4 KB query) + {result.flood_writers} "
        f"WriteBatch workers ({result.batch_size} x 16 KB)"
    ]
    for phase in result.phases:
        quiet = phase.quiet
        figures = (
            f"p50 {quiet.p50_ms:.2f} / p95 {quiet.p95_ms:.2f} / p99 {quiet.p99_ms:.2f} ms over {quiet.count}"
            if quiet
            else "no recall answered"
        )
        lag = phase.loop_lag
        lines.append(
            f"  {phase.name:5s} quiet: {figures}; errors {phase.quiet_errors or 0}; "
            f"cpu/recall {phase.cpu_ms_per_quiet_recall}; loop lag p99 {lag.get('p99_ms')} ms, "
            f"max {lag.get('max_ms')} ms; collector pauses {phase.collector_pauses.get('count', 0)}, "
            f"max {phase.collector_pauses.get('max_ms')} ms"
        )
        if phase.name == "flood":
            lines.append(
                f"        flood answered {phase.flood_answered}, refused {phase.flood_refused} "
                f"({phase.flood_refusals_with_retry_info} with RetryInfo)"
            )
    lines.append(f"  quiet flood/idle: {result.ratios()}")
    return "\n".join(lines)
