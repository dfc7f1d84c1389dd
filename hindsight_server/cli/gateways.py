"""`hindsight mcp | console`: the MCP gateway and the web console, each a client of the memory servers."""

from __future__ import annotations

import argparse
from typing import Any

from console.cli import add_arguments as add_console_arguments
from gateway_mcp.cli import add_arguments as add_mcp_arguments
from hindsight_server.cli.args import add_tls_options, client_tls


def cmd_mcp(args: argparse.Namespace) -> int:
    from gateway_mcp.cli import run

    return run(args)


def cmd_console(args: argparse.Namespace) -> int:
    from console.cli import run

    return run(args, client_tls(args))


def add_gateway_commands(commands: Any) -> None:
    """Adds mcp and console to the command parser."""
    mcp = commands.add_parser(
        "mcp", help="the MCP gateway: tool calls -> gRPC, over stdio or streamable HTTP"
    )
    add_mcp_arguments(mcp)
    mcp.set_defaults(handler=cmd_mcp)

    console = commands.add_parser(
        "console", help="the web console: memories, recall explained, pending, erasure, operations"
    )
    add_console_arguments(console)
    add_tls_options(console)
    console.set_defaults(handler=cmd_console)
