"""`hindsight bench recall`: Recall latency and throughput over gRPC against a realistic loaded corpus.

1. Load (not timed): N synthetic memories (`corpus.recall_corpus`: ~200 topic clusters of Chinese, English
   and mixed paraphrases, Zipf-sized tenants under a dedicated prefix, several subjects and sessions each,
   all tiers and kinds, `occurred_at` over the last 180 days) with WriteBatch, 500 a batch, several in
   flight. Idempotent: keys derive from (seed, index) and a marker memory in `<prefix>-meta` records each
   completed load and every 100,000 memories of one, so a rerun with the same or a smaller N writes
   nothing, a larger N writes only the rest (the corpus is prefix-stable), and an interrupted load
   resumes from its last marker.
2. Drive: C workers (asyncio tasks over `connections` gRPC channels) send Recall for a warm-up, then for S
   measured seconds; each query is about a random stored memory's topic (so tenants are queried as often
   as they hold data), in zh/en/mixed, sometimes with a subject, a session, a time expression, an explicit
   time range, tier/kind filters or entities.
3. Report: client-side latency of every successful call (time.perf_counter around the call; nearest-rank
   percentiles), recalls/s, errors by status code, hits and channel use from each response.

The bench's channels do not retry (gRPC retries are off): every failed call is counted as an error.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import grpc

from hindsight.client import HindsightClient, memory_input
from hindsight.tls import open_channel
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.bench import cpu
from hindsight_server.bench.backlog import wait_backlog_drained
from hindsight_server.bench.corpus import CorpusMemory, RecallCorpus, recall_query
from hindsight_server.bench.eval_corpus import eval_query
from hindsight_server.rpc.ops import STATUS_METHOD, StatusUnavailable, fetch_status, figures_from_answer
from hindsight_server.telemetry.window import LatencySummary

BATCH_SIZE = 500
# More in flight overruns the server's inline embedding budget on small machines, and the background
# worker (slower) then embeds the rest: 2 loaded 20k in 54 s on 2 cores, 4 took 88 s.
LOAD_IN_FLIGHT = 2
# A load records its progress every this many memories: a large one interrupted resumes from there.
CHECKPOINT = 100_000
_MARKER_SUBJECT = "loaded"
_RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
# occurred_at must not be in the server's future: keep a margin for clock skew with a remote server.
_CLOCK_MARGIN = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class LoadResult:
    memories: int  # N: the corpus size the run asked for
    tenants: int
    created: int  # written by this run
    already_present: int  # found loaded (the marker, or `created: false` on an idempotent rewrite)
    batches: int
    write_s: float  # the WriteBatch calls
    memories_per_s: float  # sent memories per second of write_s (0 when nothing was sent)
    embedded_inline: float  # share of the created memories embedded before the ack (NaN: none, or no tier)
    embed_wait_s: float  # waiting for the background worker to embed the rest, before any recall
    backlog_drained: bool  # False: the wait timed out (the vector channel sees part of the corpus)


@dataclass(frozen=True, slots=True)
class RecallBenchResult:
    target: str
    corpus: str  # its tenants' prefix: rbench-... synthetic, ebench-...-u<subjects>-t<tenants> real text
    load: LoadResult
    concurrency: int
    connections: int
    seconds: float  # asked for
    warmup_s: float
    elapsed_s: float  # from the measured window's start to the last measured call's end
    recalls: int  # successful measured calls
    recalls_per_s: float
    latency: LatencySummary  # successful calls only; errors are counted in `errors`
    latency_degraded: LatencySummary  # the successful calls where a channel could not answer
    error_count: int
    errors: dict[str, int]  # status code name -> count
    hits_per_recall: float
    empty_share: float  # share of recalls that returned no hit
    channels_used: dict[str, float]  # channel -> share of recalls that used it
    channels_degraded: dict[str, float]  # channel -> share of recalls where it could not answer
    query_mix: dict[str, float]  # what the measured queries carried, as shares
    distinct_queries: int  # distinct query texts among measured calls (the server caches query vectors)
    client_cpu_share: float  # CPU time of this process during the window / the window (1.0 = one core)
    # CPU per recall of the stack's processes on this machine (server, postgres, triton; empty when the
    # target runs elsewhere), and the server's own p50/p99 of each recall stage over its status window.
    cpu_ms_per_recall: dict[str, float] = field(default_factory=dict)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ load


async def ensure_loaded(
    client: HindsightClient,
    corpus: RecallCorpus,
    *,
    batch_size: int = BATCH_SIZE,
    in_flight: int = LOAD_IN_FLIGHT,
    trust_marker: bool = True,
    checkpoint: int = CHECKPOINT,
    embed_wait_s: float = 600.0,
    progress: TextIO | None = sys.stderr,
) -> LoadResult:
    """Writes what the target lacks of the corpus, then waits (up to embed_wait_s) until the memories
    committed with a pending embedding are embedded, so recall is measured on a settled corpus. Loads
    `checkpoint` memories at a time and records each finished step with a marker, so an interrupted
    load of a large corpus resumes from its last step. trust_marker=False re-sends everything (the
    idempotency keys then return the stored memories with `created: false`)."""
    count = len(corpus.memories)
    started = time.perf_counter()
    loaded = await _loaded_marker(client, corpus) if trust_marker else 0
    if loaded >= count:
        _say(progress, f"corpus {corpus.prefix}: {count:,} memories already loaded")
        return LoadResult(
            memories=count,
            tenants=corpus.tenants,
            created=0,
            already_present=count,
            batches=0,
            write_s=0.0,
            memories_per_s=0.0,
            embedded_inline=math.nan,
            embed_wait_s=0.0,
            backlog_drained=True,
        )
    _say(progress, f"corpus {corpus.prefix}: loading {count - loaded:,} memories from #{loaded:,}")
    now = datetime.now(UTC) - _CLOCK_MARGIN
    load = _Load(client, corpus, now, started, progress)
    for step_start in range(loaded, count, max(1, checkpoint)):
        step_end = min(count, step_start + max(1, checkpoint))
        await load.write(corpus.memories[step_start:step_end], batch_size, in_flight)
        if step_end < count:
            await _write_marker(client, corpus, step_end)
    write_s = time.perf_counter() - started
    waited = time.perf_counter()
    drained = await wait_embedded(client, load.pending, embed_wait_s, progress, corpus.seed)
    waited = time.perf_counter() - waited
    await _write_marker(client, corpus, count)
    created = load.tally["created"]
    _say(
        progress,
        f"corpus {corpus.prefix}: {created:,} memories written, "
        f"{count - created:,} already there ({write_s:.1f} s; {len(load.pending):,} embedded after the "
        f"ack, waited {waited:.1f} s{'' if drained else ', NOT drained'})",
    )
    embeddable = created - load.tally["disabled"]
    return LoadResult(
        memories=count,
        tenants=corpus.tenants,
        created=created,
        already_present=count - created,
        batches=load.batches,
        write_s=write_s,
        memories_per_s=load.tally["sent"] / write_s,
        embedded_inline=load.tally["ready"] / embeddable if embeddable else math.nan,
        embed_wait_s=waited,
        backlog_drained=drained,
    )


class _Load:
    """One load's WriteBatch calls and what their answers said."""

    def __init__(
        self,
        client: HindsightClient,
        corpus: RecallCorpus,
        now: datetime,
        started: float,
        progress: TextIO | None,
    ) -> None:
        self._client = client
        self._corpus = corpus
        self._now = now
        self._started = started
        self._progress = progress
        self._last_report = started
        self.tally = {"sent": 0, "created": 0, "ready": 0, "disabled": 0}
        self.pending: list[tuple[datetime, str, str]] = []  # (recorded at, tenant, id), embedded later
        self.batches = 0

    async def write(self, memories: Sequence[CorpusMemory], batch_size: int, in_flight: int) -> None:
        """Writes the memories, grouped by tenant into batches, `in_flight` batches at a time."""
        by_tenant: dict[int, list[CorpusMemory]] = {}
        for memory in memories:
            by_tenant.setdefault(memory.tenant, []).append(memory)
        queue: asyncio.Queue[tuple[int, list[CorpusMemory]]] = asyncio.Queue()
        for tenant, own in sorted(by_tenant.items()):
            for i in range(0, len(own), batch_size):
                queue.put_nowait((tenant, own[i : i + batch_size]))
                self.batches += 1
        await asyncio.gather(*(self._worker(queue) for _ in range(max(1, in_flight))))

    async def _worker(self, queue: asyncio.Queue[tuple[int, list[CorpusMemory]]]) -> None:
        while not queue.empty():
            tenant, memories = queue.get_nowait()
            payload = [_memory_input(memory, self._now) for memory in memories]
            response = await _write_batch(self._client, self._corpus.tenant_id(tenant), payload)
            self.tally["sent"] += len(memories)
            for result in response.results:
                if not result.created:
                    continue
                self.tally["created"] += 1
                state = result.memory.embedding_state
                self.tally["ready"] += state == pb.EMBEDDING_STATE_READY
                self.tally["disabled"] += state == pb.EMBEDDING_STATE_DISABLED
                if state == pb.EMBEDDING_STATE_PENDING:
                    recorded = result.memory.created_at.ToDatetime(tzinfo=UTC)
                    self.pending.append((recorded, result.memory.tenant_id, result.memory.id))
            if time.perf_counter() - self._last_report >= 2.0:
                self._last_report = time.perf_counter()
                rate = self.tally["sent"] / (self._last_report - self._started)
                _say(self._progress, f"  sent {self.tally['sent']:,} memories ({rate:,.0f}/s)")


async def _write_marker(client: HindsightClient, corpus: RecallCorpus, loaded: int) -> None:
    """Records that the first `loaded` memories of the corpus are in the target."""
    await client.write(
        corpus.meta_tenant,
        f"recall bench corpus {corpus.prefix}: the first {loaded} memories are loaded",
        tier="semantic",
        kind="fact",
        subject=_MARKER_SUBJECT,
        entities={"memories": loaded},
        idempotency_key=f"loaded:{loaded}",
    )


async def wait_embedded(
    client: HindsightClient,
    pending: list[tuple[datetime, str, str]],
    timeout_s: float,
    progress: TextIO | None,
    seed: int,
) -> bool:
    """Polls a sample of the pending memories until all are embedded: the newest (the background worker
    takes the oldest first, so they finish last) and a random spread. Stops a pass at the first memory
    still pending, so waiting costs about one Get a second."""
    if not pending:
        return True
    pending.sort(reverse=True)
    spread = random.Random(seed).sample(pending[50:], min(150, max(0, len(pending) - 50)))
    remaining = [(tenant, memory_id) for _, tenant, memory_id in pending[:50] + spread]
    _say(progress, f"  waiting for the background worker to embed {len(pending):,} memories")
    deadline = time.perf_counter() + timeout_s
    while True:
        while remaining:
            try:
                memory = await client.get(*remaining[0])
            except grpc.aio.AioRpcError as error:
                # The stack's lifecycle jobs soft-expire old working memories of the corpus (their TTL
                # passed before the load): gone, so not waiting for an embedding either.
                if error.code() != grpc.StatusCode.NOT_FOUND:
                    raise
            else:
                if memory.embedding_state == pb.EMBEDDING_STATE_PENDING:
                    break
            remaining.pop(0)
        if not remaining:
            return True
        if time.perf_counter() >= deadline:
            _say(progress, f"  gave up after {timeout_s:g} s: embeddings are still pending")
            return False
        await asyncio.sleep(1.0)


async def _loaded_marker(client: HindsightClient, corpus: RecallCorpus) -> int:
    """The largest N a completed earlier load recorded (0 when none)."""
    loaded = 0
    async for marker in client.list_all(corpus.meta_tenant, subject=_MARKER_SUBJECT, page_size=500):
        prefix, _, number = marker.idempotency_key.partition(":")
        if prefix == "loaded" and number.isdigit():
            loaded = max(loaded, int(number))
    return loaded


def _memory_input(memory: CorpusMemory, now: datetime) -> pb.MemoryInput:
    return memory_input(
        memory.content,
        tier=memory.tier,
        kind=memory.kind,
        subject=memory.subject,
        agent_id="rbench-agent",
        session_id=memory.session_id,
        entities=memory.entities,
        confidence=memory.confidence,
        occurred_at=now - timedelta(seconds=memory.age_s),
        idempotency_key=memory.idempotency_key,
    )


async def _write_batch(
    client: HindsightClient, tenant_id: str, payload: list[pb.MemoryInput]
) -> pb.WriteBatchResponse:
    """Retried on transient errors: the idempotency keys make a retry safe."""
    for attempt in range(4):
        try:
            return await client.write_batch(tenant_id, payload, verbatim=True, timeout_s=120)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in _RETRYABLE or attempt == 3:
                raise
            await asyncio.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def _say(progress: TextIO | None, line: str) -> None:
    if progress is not None:
        print(line, file=progress, flush=True)


# ----------------------------------------------------------------------------------------------- drive


@dataclass(slots=True)
class _Tally:
    latencies: list[float] = field(default_factory=list)
    degraded_latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    hits: int = 0
    empty: int = 0
    used: Counter[str] = field(default_factory=Counter)
    degraded: Counter[str] = field(default_factory=Counter)
    mix: Counter[str] = field(default_factory=Counter)
    texts: set[str] = field(default_factory=set)
    last_end: float = 0.0


def _channel_name(channel: int) -> str:
    return str(pb.Channel.Name(pb.Channel.ValueType(channel))).removeprefix("CHANNEL_").lower()


async def _drive(
    clients: Sequence[HindsightClient],
    corpus: RecallCorpus,
    *,
    concurrency: int,
    seconds: float,
    warmup_s: float,
    seed: int,
    server_pids: Sequence[int] = (),
) -> tuple[_Tally, float, float, dict[str, float]]:
    """Workers run through the warm-up into the window without a pause; a call belongs to the window when
    it starts inside it. Returns the window's tally, its start, the process CPU time it used, and the
    stack's CPU per recall (cpu.py)."""
    tally = _Tally()
    window_start = time.perf_counter() + warmup_s
    window_end = window_start + seconds
    cpu_at_start: list[float] = []
    stack_at_start: list[cpu.CpuSample] = []

    async def worker(number: int) -> None:
        rng = random.Random(f"rbench-query:{seed}:{number}")
        client = clients[number % len(clients)]
        while True:
            spec = (
                eval_query(corpus, rng) if corpus.questions else recall_query(corpus, rng, datetime.now(UTC))
            )
            started = time.perf_counter()
            if started >= window_end:
                return
            measured = started >= window_start
            if measured and not cpu_at_start:
                cpu_at_start.append(time.process_time())
                stack_at_start.append(cpu.sample(server_pids))
            try:
                response = await client.recall(
                    spec.tenant_id,
                    spec.text,
                    subject=spec.subject,
                    session_id=spec.session_id,
                    tiers=spec.tiers,
                    kinds=spec.kinds,
                    entities=spec.entities,
                    start=spec.start,
                    top_k=spec.top_k,
                    timeout_s=10,
                )
            except grpc.aio.AioRpcError as exc:
                ended = time.perf_counter()
                if measured:
                    tally.errors[exc.code().name] += 1
                    tally.last_end = max(tally.last_end, ended)
                continue
            ended = time.perf_counter()
            if not measured:
                continue
            tally.latencies.append(ended - started)
            tally.last_end = max(tally.last_end, ended)
            tally.hits += len(response.hits)
            tally.empty += not response.hits
            tally.used.update(_channel_name(c) for c in response.channels_used)
            tally.degraded.update(_channel_name(c) for c in response.channels_degraded)
            if response.channels_degraded:
                tally.degraded_latencies.append(ended - started)
            tally.texts.add(spec.text)
            tally.mix.update(
                name
                for name, present in (
                    (f"lang_{spec.language}", True),
                    ("subject", bool(spec.subject)),
                    ("session", bool(spec.session_id)),
                    ("time_expression", spec.time_expression),
                    ("time_range", spec.start is not None),
                    ("tier_or_kind_filter", bool(spec.tiers or spec.kinds)),
                    ("entities", bool(spec.entities)),
                    ("top_k_set", bool(spec.top_k)),
                )
                if present
            )

    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    client_cpu = time.process_time() - cpu_at_start[0] if cpu_at_start else 0.0
    stack = (
        stack_at_start[0].per_call_ms(cpu.sample(server_pids), len(tally.latencies)) if stack_at_start else {}
    )
    return tally, window_start, client_cpu, stack


def _channel(target: str) -> grpc.aio.Channel:
    """One connection per channel (no shared subchannel), and no automatic retries: errors must show."""
    return grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.enable_retries", 0),
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        ],
    )


async def run_recall_bench(
    target: str,
    corpus: RecallCorpus,
    *,
    concurrency: int,
    seconds: float,
    seed: int = 7,
    warmup_s: float = 2.0,
    connections: int = 1,
    embed_wait_s: float = 600.0,
    progress: TextIO | None = sys.stderr,
) -> RecallBenchResult:
    """Loads what the target lacks of the corpus (corpus.py: synthetic; eval_corpus.py: real text),
    then measures Recall at `concurrency`."""
    if concurrency < 1 or seconds <= 0 or connections < 1:
        raise ValueError("concurrency, connections and seconds must be positive")
    async with HindsightClient(target, timeout_s=60) as loader:
        load = await ensure_loaded(loader, corpus, embed_wait_s=embed_wait_s, progress=progress)
    # Then the English context vectors, which the worker computes once the memories are READY: the
    # load lasts until they are in too.
    waited = time.perf_counter()
    drained = await wait_backlog_drained(target, time.monotonic(), embed_wait_s)
    load = replace(
        load,
        embed_wait_s=load.embed_wait_s + time.perf_counter() - waited,
        backlog_drained=load.backlog_drained and drained,
    )
    pids = await server_pids(target)
    clients = [HindsightClient(target, timeout_s=10, channel=_channel(target)) for _ in range(connections)]
    try:
        _say(progress, f"recall: {concurrency} workers, {warmup_s:g} s warm-up, then {seconds:g} s measured")
        tally, window_start, client_cpu, stack_cpu = await _drive(
            clients,
            corpus,
            concurrency=concurrency,
            seconds=seconds,
            warmup_s=warmup_s,
            seed=seed,
            server_pids=pids,
        )
    finally:
        for client in clients:
            await client.close()
    stages = await _recall_stages(target)
    recalls = len(tally.latencies)
    error_count = sum(tally.errors.values())
    calls = recalls + error_count
    elapsed = max(tally.last_end - window_start, 1e-9) if calls else seconds
    return RecallBenchResult(
        target=target,
        corpus=corpus.prefix,
        load=load,
        concurrency=concurrency,
        connections=connections,
        seconds=seconds,
        warmup_s=warmup_s,
        elapsed_s=elapsed,
        recalls=recalls,
        recalls_per_s=recalls / elapsed,
        latency=LatencySummary.of(tally.latencies),
        latency_degraded=LatencySummary.of(tally.degraded_latencies),
        error_count=error_count,
        errors=dict(tally.errors.most_common()),
        hits_per_recall=tally.hits / recalls if recalls else math.nan,
        empty_share=tally.empty / recalls if recalls else math.nan,
        channels_used={name: n / recalls for name, n in sorted(tally.used.items())},
        channels_degraded={name: n / recalls for name, n in sorted(tally.degraded.items())},
        query_mix={name: n / recalls for name, n in sorted(tally.mix.items())},
        distinct_queries=len(tally.texts),
        client_cpu_share=client_cpu / elapsed,
        cpu_ms_per_recall=stack_cpu,
        stages=stages,
    )


async def _server_figures(target: str) -> dict[str, Any]:
    """The server's Ops/Status figures ({} when it does not answer: the bench still reports latency)."""
    try:
        return (await fetch_status(target, timeout_s=5)).figures
    except StatusUnavailable:
        return {}


async def server_pids(target: str, most_calls: int = 12) -> list[int]:
    """The memory servers' pids, from their Ops/Status (for their CPU time: cpu.py). Behind a gateway
    each call is answered by one of them: asked one at a time on one connection (nginx sends such calls
    round robin) until three calls in a row name no new one. Counting only the server that answered
    one Status halved "server" CPU a recall with two servers."""
    found: list[int] = []
    quiet = 0
    try:
        async with open_channel(target, None) as channel:
            status: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(STATUS_METHOD)
            for _ in range(most_calls):
                pid = figures_from_answer(await status(b"", timeout=5)).get("pid")
                if pid and int(pid) not in found:
                    found.append(int(pid))
                    quiet = 0
                else:
                    quiet += 1
                    if quiet == 3:
                        break
    except grpc.aio.AioRpcError:
        pass  # no Status: the bench reports latency without the servers' CPU
    return found


async def _recall_stages(target: str) -> dict[str, dict[str, float]]:
    """Each recall stage's p50 and p99 (ms) over the server's status window (its last 60 s)."""
    stages = (await _server_figures(target)).get("recall", {}).get("stages", {})
    return {
        name: {"p50_ms": figures["p50_ms"], "p99_ms": figures["p99_ms"]}
        for name, figures in sorted(stages.items())
        if figures.get("count")
    }


# ---------------------------------------------------------------------------------------------- report


def _finite(value: Any) -> Any:
    """JSON has no NaN: an undefined figure (no successful call) becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return value


def _shares(values: dict[str, float]) -> str:
    return ", ".join(f"{name} {share:.1%}" for name, share in values.items()) or "none"


def report(result: RecallBenchResult, as_json: bool) -> str:
    if as_json:
        return json.dumps(_finite(asdict(result)), indent=2)
    load = result.load
    if result.error_count:
        calls = result.recalls + result.error_count
        by_code = ", ".join(f"{code} {n}" for code, n in result.errors.items())
        errors = f"ERRORS: {result.error_count} of {calls} calls failed ({by_code})"
    else:
        errors = "errors: none"
    loaded = (
        f"{load.created:,} written now at {load.memories_per_s:,.0f}/s, "
        f"{load.already_present:,} already there"
        if load.batches
        else "already loaded"
    )
    if load.created and math.isfinite(load.embedded_inline):
        loaded += f"; {load.embedded_inline:.0%} embedded inline, then waited {load.embed_wait_s:.1f} s"
        loaded += " for the rest" if load.backlog_drained else " and GAVE UP (vector channel sees part)"
    elif load.created:
        loaded += "; the server has no inference tier (embeddings disabled)"
    lines = [
        f"{'corpus':<28} {result.corpus}: {load.memories:,} memories in {load.tenants} tenants ({loaded})",
        f"{'run':<28} concurrency {result.concurrency} on {result.connections} channel(s), "
        f"{result.seconds:g} s measured after {result.warmup_s:g} s warm-up, target {result.target}",
        result.latency.line("Recall"),
        f"{'throughput':<28} {result.recalls_per_s:,.1f} recalls/s "
        f"({result.recalls:,} in {result.elapsed_s:.2f} s)",
        f"{'':<28} {errors}",
        f"{'hits':<28} {result.hits_per_recall:.2f} per recall, "
        f"{result.empty_share:.1%} of recalls returned none",
        f"{'channels used':<28} {_shares(result.channels_used)}",
        f"{'channels degraded':<28} {_shares(result.channels_degraded)}",
        f"{'queries':<28} {_shares(result.query_mix)}; {result.distinct_queries:,} distinct texts",
        f"{'client CPU':<28} {result.client_cpu_share:.0%} of one core during the window",
    ]
    if result.cpu_ms_per_recall:
        spent = ", ".join(f"{group} {ms:.2f} ms" for group, ms in sorted(result.cpu_ms_per_recall.items()))
        lines.append(f"{'CPU per recall':<28} {spent}")
    for name, figures in result.stages.items():
        lines.append(
            f"{'  ' + name.removeprefix('recall.'):<28} p50 {figures['p50_ms']:7.2f} ms  "
            f"p99 {figures['p99_ms']:7.2f} ms (server, last 60 s)"
        )
    if result.latency_degraded.count:
        lines.insert(4, result.latency_degraded.line("Recall, a channel degraded"))
    if result.error_count:
        lines.insert(0, errors)
    return "\n".join(lines)
