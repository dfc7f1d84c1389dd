"""`hindsight status [--target HOST:PORT ...] [--json]`: each memory server's health, its recall
p50/p95/p99 over the last window against the P99 target (met / missed), write latency, the
deferred-embedding backlog, the pool and the query-embedding caches (from `hindsight.ops.v1.Ops/Status`,
rpc/ops.py).

Give every server's own address: behind the nginx gateway a call reaches one server chosen by it, so
the gateway's address shows whichever server answered. Exit status: 0 when every target answered, 3
(the client commands' "not reached", args.py) when one could not be reached (its line says why).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hindsight.client import DEFAULT_TARGET
from hindsight.tls import ClientTls
from hindsight_server.cli.args import EXIT_UNREACHABLE, add_tls_options, client_tls

if TYPE_CHECKING:
    from hindsight_server.stack.replicas import ReplicaStatus


def add_status_command(commands: Any) -> None:
    """Registers the command on the `hindsight` parser's subcommands."""
    status = commands.add_parser(
        "status", help="each memory server's recall p99 against its target, latency, backlog, pool, caches"
    )
    status.add_argument(
        "--target",
        action="append",
        help=f"a memory server's HOST:PORT; repeat for each server (default {DEFAULT_TARGET})",
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--timeout", type=float, default=5.0, help="deadline per server in seconds (default 5)"
    )
    add_tls_options(status)
    status.add_argument(
        "--data-dir",
        default=os.environ.get("HINDSIGHT_DATA_DIR", "data"),
        help="the embedded stack's data directory, for its PostgreSQL replicas (default ./data)",
    )
    status.add_argument(
        "--api-key",
        default=os.environ.get("HINDSIGHT_API_KEY", ""),
        help="a key with the admin scope, where servers require keys ($HINDSIGHT_API_KEY)",
    )
    status.set_defaults(handler=cmd_status)


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _latency(figures: dict[str, Any]) -> str:
    if not figures.get("count"):
        return "none in the window"
    return (
        f"p50 {_ms(figures['p50_ms'])}  p95 {_ms(figures['p95_ms'])}  p99 {_ms(figures['p99_ms'])}"
        f"  max {_ms(figures['max_ms'])}  ({figures['count']:,})"
    )


def _verdict(recall: dict[str, Any]) -> str:
    met = recall.get("target_met")
    target = f"target p99 <= {recall['target_p99_ms']:g} ms"
    if met is None:
        return f"{target}: no recall in the window"
    return f"{target}: {'met' if met else 'MISSED'}"


def render(target: str, serving: str, inference: str, figures: dict[str, Any]) -> str:
    """One server's figures as a few lines for a terminal."""
    recall = figures["recall"]
    lines = [
        f"{target}  {serving}  (inference {inference.lower().replace('_', ' ')})"
        f"  pid {figures['pid']}, up {figures['uptime_s']:,.0f} s",
        f"  {'recall':<12}{_latency(recall)} over {figures['window_s']:g} s; {_verdict(recall)}",
    ]
    stages = recall.get("stages", {})
    if stages:
        worst = ", ".join(
            f"{name.removeprefix('recall.')} {_ms(s.get('p99_ms'))}"
            for name, s in stages.items()
            if name.startswith("recall.") and s.get("count")
        )
        if worst:
            lines.append(f"  {'stages':<12}p99: {worst}")
    for operation, latency in figures.get("write", {}).items():
        lines.append(f"  {operation:<12}{_latency(latency)}")
    backlog = figures["embedding_backlog"]
    if backlog["pending"] is None:
        lines.append(
            f"  {'backlog':<12}not counted yet{': ' + backlog['problem'] if backlog['problem'] else ''}"
        )
    else:
        more = "+" if backlog["capped"] else ""
        lines.append(
            f"  {'backlog':<12}{backlog['pending']:,}{more} memories waiting for an embedding"
            f" (counted {backlog['age_s']:g} s ago)"
        )
    pool = figures["pool"]
    lines.append(
        f"  {'pool':<12}{pool['size']} connections: {pool['in_use']} in use, {pool['idle']} idle"
        f" (min {pool['min_size']}, max {pool['max_size']})"
    )
    reads = figures.get("reads") or {"primary_reads": 0, "replicas": []}
    if reads["replicas"]:
        lines.append(f"  {'reads':<12}{reads['primary_reads']:,} on the primary")
    for replica in reads["replicas"]:
        lag = "lag unknown" if replica["lag_s"] is None else f"lag {replica['lag_s'] * 1000:,.0f} ms"
        state = "serving reads" if replica["usable"] else f"left out: {replica['reason']}"
        failed = f", {replica['failed_reads']:,} failed over" if replica["failed_reads"] else ""
        lines.append(
            f"  {'replica':<12}{replica['name']}: {state} ({lag}), {replica['reads']:,} reads{failed}"
        )
    for space, cache in figures.get("query_cache", {}).items():
        lookups = cache["hits"] + cache["misses"]
        share = f" ({cache['hits'] / lookups:.0%} hits)" if lookups else ""
        lines.append(
            f"  {'cache':<12}{space}: {cache['hits']:,} hits, {cache['misses']:,} misses{share},"
            f" {cache['size']:,} of {cache['capacity']:,} entries"
        )
    hot = figures.get("hot_scopes")
    if hot:
        lines.append(
            f"  {'subjects':<12}{hot['held']:,} held in memory ({hot['memories']:,} memories,"
            f" {hot['bytes'] / 1024 / 1024:,.1f} MB); {hot['served']:,} recalls answered there,"
            f" {hot['missed']:,} of subjects not held; {hot['loads']:,} read in"
            # An older server does not report its vector searches.
            + (
                f"; {hot['vector_searches']:,} vector searches in {hot['vector_passes']:,} passes"
                if "vector_passes" in hot
                else ""
            )
        )
    return "\n".join(lines)


async def _gather(
    targets: list[str], timeout_s: float, tls: ClientTls | None, api_key: str
) -> list[dict[str, Any]]:
    from hindsight_server.rpc.ops import StatusUnavailable, fetch_status

    async def one(target: str) -> dict[str, Any]:
        try:
            status = await fetch_status(target, timeout_s, tls, api_key)
        except StatusUnavailable as error:
            return {"target": target, "error": str(error)}
        return {
            "target": target,
            "serving": status.serving,
            "inference": status.inference,
            "figures": status.figures,
        }

    return list(await asyncio.gather(*(one(target) for target in targets)))


async def _embedded_replicas(data_dir: Path, timeout_s: float) -> list[ReplicaStatus]:
    """The embedded stack's PostgreSQL replicas and their lag: none unless its primary and some
    replicas run under data_dir (a deployed server's image has no embedded stack to look at)."""
    if not (data_dir / "postgres").is_dir():
        return []
    from hindsight_server.stack.replicas import replica_status, running_primary_dsn, running_replica_dsns

    primary, replicas = running_primary_dsn(data_dir), running_replica_dsns(data_dir)
    if primary is None or not replicas:
        return []
    return await replica_status(primary, replicas, timeout_s)


async def _servers_and_replicas(
    targets: list[str], data_dir: Path, timeout_s: float, tls: ClientTls | None, api_key: str
) -> tuple[list[dict[str, Any]], list[ReplicaStatus]]:
    """Both asked at once, each within the timeout."""
    servers, replicas = await asyncio.gather(
        _gather(targets, timeout_s, tls, api_key), _embedded_replicas(data_dir, timeout_s)
    )
    return servers, replicas


def cmd_status(args: argparse.Namespace) -> int:
    targets = [part.strip() for given in args.target or [DEFAULT_TARGET] for part in given.split(",")]
    results, replicas = asyncio.run(
        _servers_and_replicas(
            [t for t in targets if t], Path(args.data_dir), args.timeout, client_tls(args), args.api_key
        )
    )
    unreachable = [result for result in results if "error" in result]
    if args.json:
        shown = [{"dsn": r.dsn, "state": r.state, "lag_bytes": r.lag_bytes} for r in replicas]
        print(json.dumps({"servers": results, "replicas": shown}, ensure_ascii=False, indent=2))
    else:
        for result in results:
            if "error" not in result:
                print(render(result["target"], result["serving"], result["inference"], result["figures"]))
        from hindsight_server.stack.replicas import replica_number  # the embedded stack's, as above

        for replica in replicas:  # numbered as the stack numbers them: a stopped one is not shown
            print(f"postgres replica {replica_number(replica.dsn)}  {replica.describe()}  {replica.dsn}")
    for result in unreachable:
        print(f"hindsight status: cannot reach {result['error']}", file=sys.stderr)
    return EXIT_UNREACHABLE if unreachable else 0
