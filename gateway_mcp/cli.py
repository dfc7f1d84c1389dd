"""`hindsight mcp` (also `python -m gateway_mcp`): run the gateway, or hash a token for its configuration.

hindsight mcp --stdio [--target HOST:PORT] [--tenant T]     one desktop agent on stdin/stdout
hindsight mcp --http [--host H] [--port P] [--target ...]    streamable HTTP at http://H:P/mcp
hindsight mcp --hash-token < token-file                      the SHA-256 to put in `tokens`

Only light imports at module level: the `hindsight` command builds its parser from here.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from gateway_mcp.config import (
    GatewayConfigError,
    GatewaySettings,
    load_gateway_settings,
    unknown_environment,
)
from hindsight.telemetry import TelemetryConfigError, configure_logging

__all__ = ["add_arguments", "main", "run"]

EXIT_FAILED = 1
EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="serve one client on stdin/stdout")
    mode.add_argument(
        "--http", action="store_true", help="serve streamable HTTP (default 127.0.0.1:8765/mcp)"
    )
    mode.add_argument(
        "--hash-token",
        action="store_true",
        help="read a bearer token on stdin, print its SHA-256 for `tokens`",
    )
    parser.add_argument(
        "--target",
        action="append",
        help="memory server HOST:PORT; repeat (or comma-separate) for round robin (default 127.0.0.1:50051)",
    )
    parser.add_argument("--tenant", help="tenant for stdio, and for loopback HTTP without tokens")
    parser.add_argument("--host", help="HTTP address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (default 8765; 0 picks a free one)")
    parser.add_argument("--deadline", type=float, help="deadline of each gRPC call in seconds (default 5)")
    parser.add_argument(
        "--debug-tool",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="list memory_debug (off by default)",
    )
    parser.add_argument(
        "--gateway-config",
        help="the gateway's TOML file (also HINDSIGHT_MCP_CONFIG); see gateway_mcp/README.md",
    )


def _problems(error: ValidationError | GatewayConfigError) -> list[str]:
    if isinstance(error, GatewayConfigError):
        return list(error.problems)
    return [
        f"{'.'.join(str(p) for p in item['loc']) or 'configuration'}: {item['msg']}"
        for item in error.errors(include_url=False, include_input=False)
    ]


def _settings(args: argparse.Namespace) -> GatewaySettings:
    targets = [part for given in args.target or () for part in given.split(",") if part.strip()]
    return load_gateway_settings(
        Path(args.gateway_config) if args.gateway_config else None,
        targets=targets or None,
        tenant=args.tenant,
        host=args.host,
        port=args.port,
        deadline_s=args.deadline,
        debug_tool=args.debug_tool,
    )


def _hash_token() -> int:
    from gateway_mcp.auth import hash_token

    token = sys.stdin.readline().rstrip("\r\n")
    if not token:
        print(
            "hindsight mcp: give the token on stdin, e.g. `hindsight mcp --hash-token < token.txt`",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(hash_token(token))
    print('add it to the gateway\'s tokens: tokens = {"<hash>" = "<tenant>"}', file=sys.stderr)
    return 0


async def _serve_http(settings: GatewaySettings) -> int:
    from gateway_mcp.server import HttpGateway

    gateway = HttpGateway(settings)
    try:
        url = await gateway.start()
    except OSError as exc:
        print(
            f"hindsight mcp: cannot listen on {settings.host}:{settings.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    who = (
        f"{len(settings.tokens)} bearer token(s)"
        if settings.tokens
        else f"tenant {settings.tenant}, no token"
    )
    targets = ", ".join(settings.targets)
    print(f"hindsight mcp listening on {url} ({who}) -> {targets}, pid {os.getpid()}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    stopped = asyncio.create_task(stop.wait())
    ended = asyncio.create_task(gateway.wait())
    await asyncio.wait({stopped, ended}, return_when=asyncio.FIRST_COMPLETED)
    await gateway.stop()
    stopped.cancel()
    return 0 if stop.is_set() else EXIT_FAILED


def run(args: argparse.Namespace) -> int:
    if args.hash_token:
        return _hash_token()
    try:
        settings = _settings(args)
        if args.http:
            settings.require_safe_http()
    except (ValidationError, GatewayConfigError) as error:
        for problem in _problems(error):
            print(f"hindsight mcp: config error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    # stdout is the protocol's channel on stdio: logs go to stderr only.
    configure_logging(logging.INFO, sys.stderr, log_format=settings.log_format)
    for line in unknown_environment():  # a misspelt variable is no error, but is said
        logging.getLogger("gateway_mcp.config").warning("%s", line)
    # Stateless HTTP ends a "session" with every request, and the SDK logs each one at INFO.
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)
    from gateway_mcp.telemetry import install_telemetry

    try:
        telemetry = install_telemetry(settings)  # before the channel is made: it asks whether tracing is on
    except TelemetryConfigError as error:
        print(f"hindsight mcp: telemetry: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.stdio:
            from gateway_mcp.server import serve_stdio

            asyncio.run(serve_stdio(settings))
            return 0
        return asyncio.run(_serve_http(settings))
    finally:
        if telemetry is not None:
            telemetry.shutdown()  # exports what is still buffered


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_mcp", description="hindsight's MCP gateway")
    add_arguments(parser)
    return run(parser.parse_args(argv))
