"""`hindsight bench mcp`: the latency an MCP recall adds over a direct gRPC recall.

1. Load (not timed): the first N memories of the recall benchmark's corpus (`corpus.recall_corpus`, one
   tenant), idempotently, as `hindsight bench recall` does.
2. Start the gateway as its own process, the way it is deployed: `hindsight mcp --http` on a free
   loopback port, pointed at the target, with a bearer token for the corpus's tenant.
3. Drive, one call at a time: each query (`corpus.recall_query`: zh / en / mixed, with the filters
   agents set) is sent both ways, as gRPC Recall through the shared client and as the `memory_recall`
   tool through the MCP SDK's client over streamable HTTP; which goes first alternates. Each call is
   timed by the client around the call; both see the same server, data and caches.
4. Report: percentiles of both, the difference of the percentiles, and the percentiles of the
   per-query difference (MCP minus gRPC for the same query, measured back to back).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import grpc
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from gateway_mcp.auth import hash_token
from hindsight.client import HindsightClient
from hindsight_server.bench.corpus import RecallQuerySpec, recall_corpus, recall_query
from hindsight_server.bench.recall import LoadResult, ensure_loaded
from hindsight_server.telemetry.window import LatencySummary, percentile

__all__ = ["McpBenchResult", "report", "run_mcp_bench"]

_SESSION = "mcp-bench"  # memory_recall requires a session; queries without one use this (empty) session


@dataclass(frozen=True, slots=True)
class McpBenchResult:
    target: str
    gateway: str
    load: LoadResult
    calls: int
    warmup: int
    grpc: LatencySummary
    mcp: LatencySummary
    added_p50_ms: float  # per-query difference (MCP - gRPC), nearest-rank percentiles
    added_p95_ms: float
    added_p99_ms: float
    errors: int  # tool errors or failed gRPC calls among the measured ones
    different_results: int  # queries whose hit ids differed between the two paths
    gateway_cpu_s: float  # CPU time the gateway process used during the measured calls


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cpu_s(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def _gateway(target: str, tenant: str, token: str) -> AsyncIterator[tuple[str, int]]:
    """`hindsight mcp --http` in its own process; yields its URL and pid once it listens."""
    env = {**os.environ, "HINDSIGHT_MCP__TOKENS": json.dumps({hash_token(token): tenant})}
    argv = ["-m", "hindsight_server", "mcp", "--http", "--port", str(_free_port()), "--target", target]
    process = await asyncio.create_subprocess_exec(
        sys.executable, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    assert process.stdout is not None
    output: list[str] = []
    drain: asyncio.Task[None] | None = None
    try:
        while True:
            line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
            output.append(line)
            if not line:
                raise RuntimeError("the gateway exited:\n" + "".join(output))
            if line.startswith("hindsight mcp listening on "):
                break
        drain = asyncio.create_task(_drain(process.stdout))
        yield line.split()[4], process.pid
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()
        if drain is not None:
            await drain


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


def _tool_arguments(spec: RecallQuerySpec) -> dict[str, Any]:
    arguments: dict[str, Any] = {"session_id": spec.session_id or _SESSION, "query": spec.text}
    if spec.subject:
        arguments["subject"] = spec.subject
    if spec.tiers:
        arguments["memory_types"] = list(spec.tiers)
    if spec.kinds:
        arguments["kinds"] = list(spec.kinds)
    if spec.entities:
        arguments["entities"] = spec.entities
    if spec.start is not None:
        arguments["start"] = spec.start.isoformat()
    if spec.top_k:
        arguments["top_k"] = spec.top_k
    return arguments


Timed = tuple[float, list[str] | None]  # seconds, and the hit ids (None: the call failed)


async def _by_grpc(client: HindsightClient, tenant: str, spec: RecallQuerySpec) -> Timed:
    started = time.perf_counter()
    try:
        response = await client.recall(
            tenant,
            spec.text,
            session_id=spec.session_id or _SESSION,
            subject=spec.subject,
            tiers=spec.tiers,
            kinds=spec.kinds,
            entities=spec.entities,
            start=spec.start,
            top_k=spec.top_k,
        )
    except grpc.aio.AioRpcError:
        return time.perf_counter() - started, None
    return time.perf_counter() - started, [hit.memory.id for hit in response.hits]


async def _by_mcp(session: ClientSession, arguments: dict[str, Any]) -> Timed:
    started = time.perf_counter()
    result = await session.call_tool("memory_recall", arguments)
    elapsed = time.perf_counter() - started
    if result.is_error or not isinstance(result.structured_content, dict):
        return elapsed, None
    return elapsed, [hit["id"] for hit in result.structured_content["hits"]]


async def run_mcp_bench(
    target: str,
    *,
    memories: int = 2_000,
    calls: int = 1_000,
    warmup: int = 50,
    seed: int = 7,
    progress: TextIO | None = sys.stderr,
) -> McpBenchResult:
    if memories < 1 or calls < 1 or warmup < 0:
        raise ValueError("memories and calls must be positive")
    corpus = recall_corpus(memories, tenants=1, seed=seed)
    tenant = corpus.tenant_id(0)
    async with HindsightClient(target, timeout_s=60) as loader:
        load = await ensure_loaded(loader, corpus, progress=progress)
    token = secrets.token_urlsafe(24)
    rng = random.Random(f"mcp-bench:{seed}")
    grpc_s: list[float] = []
    mcp_s: list[float] = []
    errors = different = 0
    async with (
        _gateway(target, tenant, token) as (url, gateway_pid),
        HindsightClient(target, timeout_s=10) as direct,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        if progress is not None:
            print(f"mcp: {warmup} warm-up then {calls} measured recalls each way via {url}", file=progress)
        cpu_start = 0.0
        for number in range(warmup + calls):
            if number == warmup:
                cpu_start = _cpu_s(gateway_pid)
            spec = recall_query(corpus, rng, datetime.now(UTC))
            arguments = _tool_arguments(spec)
            if number % 2:
                (g_s, g_ids), (m_s, m_ids) = (
                    await _by_grpc(direct, tenant, spec),
                    await _by_mcp(session, arguments),
                )
            else:
                (m_s, m_ids), (g_s, g_ids) = (
                    await _by_mcp(session, arguments),
                    await _by_grpc(direct, tenant, spec),
                )
            if number < warmup:
                continue
            if g_ids is None or m_ids is None:
                errors += 1
                continue
            grpc_s.append(g_s)
            mcp_s.append(m_s)
            different += g_ids != m_ids
        gateway_cpu = _cpu_s(gateway_pid) - cpu_start
    added = sorted((m - g) * 1000 for m, g in zip(mcp_s, grpc_s, strict=True))
    return McpBenchResult(
        target=target,
        gateway=url,
        load=load,
        calls=calls,
        warmup=warmup,
        grpc=LatencySummary.of(grpc_s),
        mcp=LatencySummary.of(mcp_s),
        added_p50_ms=percentile(added, 50),
        added_p95_ms=percentile(added, 95),
        added_p99_ms=percentile(added, 99),
        errors=errors,
        different_results=different,
        gateway_cpu_s=gateway_cpu,
    )


def report(result: McpBenchResult, as_json: bool) -> str:
    if as_json:
        values = asdict(result)
        return json.dumps(
            values, indent=2, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v
        )
    g, m = result.grpc, result.mcp
    per_call = result.gateway_cpu_s / max(m.count, 1) * 1000
    lines = [
        f"{'corpus':<28} {result.load.memories:,} memories in 1 tenant; target {result.target}",
        f"{'run':<28} {result.calls} queries each way, one at a time, after {result.warmup} warm-up; "
        f"gateway {result.gateway}",
        g.line("Recall, gRPC direct"),
        m.line("Recall, MCP over HTTP"),
        f"{'MCP adds (percentiles)':<28} p50={m.p50_ms - g.p50_ms:+7.2f} ms  "
        f"p95={m.p95_ms - g.p95_ms:+7.2f} ms  p99={m.p99_ms - g.p99_ms:+7.2f} ms",
        f"{'MCP adds (same query)':<28} p50={result.added_p50_ms:+7.2f} ms  "
        f"p95={result.added_p95_ms:+7.2f} ms  p99={result.added_p99_ms:+7.2f} ms",
        f"{'gateway CPU':<28} {per_call:.2f} ms per MCP recall",
        f"{'':<28} errors: {result.errors}; queries with different hits: {result.different_results}",
    ]
    return "\n".join(lines)
