"""The `hindsight` command: run the stack or a server, and talk to a server through the shared client.

hindsight up [--servers N] [--replicas N]
                                  the embedded stack in the foreground (servers > 1: behind an nginx
                                  gateway; replicas: streaming PostgreSQL standbys)
hindsight serve                   one memory server (needs HINDSIGHT_DATABASE__DSN)
hindsight migrate                 apply schema migrations and exit
hindsight jobs list|run NAME      the lifecycle jobs: their schedule, or one run now (JSON)
hindsight mcp --stdio|--http      the MCP gateway (tools -> gRPC), see gateway_mcp/README.md
hindsight console [--listen ...]  the web console (gRPC with an API key), see console/README.md
hindsight status [--target ...]   each server's recall p50/p95/p99 against the P99 target, backlog, pool
hindsight write|get|list|recall|update|delete|history ...   calls over gRPC (--target, --tenant, --json)
hindsight session append|summarize|end SESSION ...   a conversation's turns, summary and episode
hindsight pending list|confirm|reject ...           memories waiting for confirmation
hindsight export|import|erase ...  a tenant's memories to a JSON Lines file, back in, or erased
hindsight --version               the installed server and client versions
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from hindsight_server.cli.args import EXIT_USAGE
from hindsight_server.cli.bench import add_bench_commands
from hindsight_server.cli.client import add_client_commands
from hindsight_server.cli.evaluation import add_eval_command
from hindsight_server.cli.gateways import add_gateway_commands
from hindsight_server.cli.jobs import add_jobs_commands
from hindsight_server.cli.portability import add_portability_commands
from hindsight_server.cli.server import add_server_commands
from hindsight_server.cli.status import add_status_command
from hindsight_server.cli.tenants import add_tenants_commands
from hindsight_server.cli.webhooks import add_webhook_commands
from hindsight_server.config import ConfigError


def _version() -> str:
    """`hindsight --version`: the server's distribution and the client's (installed apart)."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for label, distribution in (
        ("hindsight", "hindsight-memory-server"),
        ("client", "hindsight-memory-client"),
    ):
        try:
            found.append(f"{label} {version(distribution)}")
        except PackageNotFoundError:
            found.append(f"{label} (not installed)")
    return f"{found[0]} ({found[1]})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hindsight", description="Agent memory as a service.")
    parser.add_argument("--version", action="version", version=_version(), help="print the version and exit")
    parser.add_argument("--config", help="TOML configuration file (also HINDSIGHT_CONFIG)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # In this order in `hindsight --help`.
    add_server_commands(commands)
    add_status_command(commands)
    add_jobs_commands(commands)
    add_tenants_commands(commands)
    add_client_commands(commands)
    add_webhook_commands(commands)
    add_portability_commands(commands)
    add_gateway_commands(commands)
    add_eval_command(commands)
    add_bench_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ConfigError as exc:  # a line per problem, naming the key and its file or variable
        for problem in exc.problems:
            print(f"hindsight: config error: {problem}", file=sys.stderr)
        return EXIT_USAGE
