"""Headless locust run with figures: `python -m loadtests.run` (or `loadtests/run.sh`).

1. The cluster: `--target HOST:PORT` (and `--mcp-url`) of a running one, or by default a private
   `hindsight up --servers N --gateway nginx` on a temporary data directory (nginx in front also for one
   server, so 1 and 3 servers are measured through the same gateway), with its own Triton unless
   `--no-embeddings`.
2. The corpus the recall queries are about: `--memories N` of the recall benchmark's corpus, loaded
   (idempotently) with WriteBatch before the clock starts.
3. locust headless (`loadtests/locustfile.py`, `--users`, `--seconds`, `--pace`), CSV files under
   `--csv PREFIX`; then a table of every request type: calls, failures, calls/s, p50/p95/p99/max from the
   exact latency of each call (locust's own CSV percentiles are rounded to its 1-100 ms buckets).

Exits with locust's status: 1 when any call failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hindsight.client import HindsightClient
from hindsight_server.bench.corpus import recall_corpus
from hindsight_server.bench.private_stack import private_stack
from hindsight_server.bench.recall import ensure_loaded
from hindsight_server.telemetry.window import LatencySummary

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
MCP_TENANT = "load-mcp"  # the private cluster's MCP gateway tenant: MCP writes never touch the corpus


@dataclass(frozen=True, slots=True)
class RequestFigures:
    name: str
    calls: int
    failures: int
    degraded: int  # recalls answered with a channel missing (the inference tier away, say)
    per_s: float
    latency: LatencySummary


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def locust_argv(
    *,
    target: str,
    mcp_url: str,
    users: int,
    spawn_rate: float,
    seconds: float,
    pace: float,
    memories: int,
    tenants: int = 100,
    csv_prefix: str,
    raw_out: str,
    mcp: bool,
) -> list[str]:
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary"]
    argv += ["-u", str(users), "-r", str(spawn_rate), "-t", f"{seconds:g}s", "--stop-timeout", "10"]
    argv += ["--csv", csv_prefix, "--exit-code-on-error", "1", "--loglevel", "WARNING"]
    argv += ["--grpc-target", target, "--mcp-url", mcp_url, "--corpus-memories", str(memories)]
    argv += ["--corpus-tenants", str(tenants)]
    argv += ["--pace", str(pace), "--raw-out", raw_out]
    return [*argv, "MemoryUser", *(["McpUser"] if mcp else [])]


def figures(raw: dict[str, Any], seconds: float) -> list[RequestFigures]:
    latencies: dict[str, list[float]] = raw["latencies_ms"]
    failures: dict[str, int] = raw["failures"]
    degraded: dict[str, int] = raw.get("degraded", {})
    rows = []
    for name in sorted(set(latencies) | set(failures)):
        ok = latencies.get(name, [])
        rows.append(
            RequestFigures(
                name=name,
                calls=len(ok),
                failures=failures.get(name, 0),
                degraded=degraded.get(name, 0),
                per_s=len(ok) / seconds,
                latency=LatencySummary.of([ms / 1000 for ms in ok]),
            )
        )
    return rows


def report(rows: Sequence[RequestFigures], header: str) -> str:
    columns = f"{'request':<24} {'calls':>7} {'fail':>5} {'degr':>5} {'per s':>8}"
    lines = [header, f"{columns}  p50 / p95 / p99 / max (ms)"]
    for row in rows:
        summary = row.latency
        lines.append(
            f"{row.name:<24} {row.calls:>7} {row.failures:>5} {row.degraded:>5} {row.per_s:>8.1f}  "
            f"{summary.p50_ms:.2f} / {summary.p95_ms:.2f} / {summary.p99_ms:.2f} / {summary.max_ms:.1f}"
        )
    total = sum(row.calls for row in rows)
    failed, degraded = sum(row.failures for row in rows), sum(row.degraded for row in rows)
    lines.append(f"{'all':<24} {total:>7} {failed:>5} {degraded:>5} {sum(r.per_s for r in rows):>8.1f}")
    return "\n".join(lines)


async def _run_locust(argv: Sequence[str], timeout_s: float) -> int:
    process = await asyncio.create_subprocess_exec(*argv, stdout=sys.stderr, stderr=sys.stderr)
    try:
        async with asyncio.timeout(timeout_s):
            return await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def run(args: argparse.Namespace) -> int:
    async with contextlib.AsyncExitStack() as stack:
        target, mcp_url = args.target, args.mcp_url
        if not target:
            mcp_port = _free_port()
            mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
            up_args = ["--servers", str(args.servers), "--gateway", "nginx"]
            env = {"HINDSIGHT_MCP__PORT": str(mcp_port), "HINDSIGHT_MCP__TENANT": MCP_TENANT}
            print(f"starting a private cluster: {args.servers} server(s) behind nginx", file=sys.stderr)
            target = await stack.enter_async_context(
                private_stack(inference=args.embeddings, up_args=up_args, env=env, timeout_s=180)
            )
        async with HindsightClient(target, timeout_s=120) as loader:
            await ensure_loaded(loader, recall_corpus(args.memories), progress=sys.stderr)
        csv_prefix = args.csv or str(Path(tempfile.mkdtemp(prefix="hindsight-load-")) / "locust")  # kept
        Path(csv_prefix).parent.mkdir(parents=True, exist_ok=True)
        raw_out = f"{csv_prefix}_raw.json"
        argv = locust_argv(
            target=target,
            mcp_url=mcp_url,
            users=args.users,
            spawn_rate=args.spawn_rate or args.users,
            seconds=args.seconds,
            pace=args.pace,
            memories=args.memories,
            csv_prefix=csv_prefix,
            raw_out=raw_out,
            mcp=args.mcp,
        )
        code = await _run_locust(argv, args.seconds + 120)
        rows = figures(json.loads(await asyncio.to_thread(Path(raw_out).read_text)), args.seconds)
    cluster = f"{target}" if args.target else f"private cluster, {args.servers} server(s) behind nginx"
    header = (
        f"locust: {args.users} users, pace {args.pace:g} s, {args.seconds:g} s, corpus {args.memories:,} "
        f"memories, {cluster}; CSV {csv_prefix}_stats.csv"
    )
    if args.json:
        print(json.dumps({"header": header, "requests": [asdict(row) for row in rows], "exit_code": code}))
    else:
        print(report(rows, header))
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtests.run", description=__doc__.split("\n")[0])
    parser.add_argument("--target", help="HOST:PORT of a running cluster (default: a private one)")
    parser.add_argument("--mcp-url", default="http://127.0.0.1:8765/mcp", help="with --target")
    parser.add_argument("--servers", type=int, default=1, help="the private cluster's memory servers")
    parser.add_argument("--embeddings", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--memories", type=int, default=10_000, help="corpus to load and query")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--spawn-rate", type=float, default=0, help="users started per second (default: all)")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--pace", type=float, default=0.0, help="seconds per task and user (0: no wait)")
    parser.add_argument("--mcp", action=argparse.BooleanOptionalAction, default=True, help="MCP users too")
    parser.add_argument("--csv", default="", help="CSV prefix (default: a new directory under /tmp)")
    parser.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
