"""`hindsight up | serve | migrate`: the embedded stack, one memory server, the schema."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hindsight_server.cli.args import EXIT_USAGE
from hindsight_server.cli.local import add_database_options, configure_logging, settings_from


def cmd_up(args: argparse.Namespace) -> int:
    from hindsight_server.stack.supervisor import Stack

    settings = settings_from(args)
    configure_logging(settings)
    stack = Stack(
        settings,
        servers=args.servers,
        mcp=args.mcp,
        mcp_port=args.mcp_port,
        console=args.console,
        console_port=args.console_port,
        gateway=args.gateway,
        replicas=args.replicas,
    )
    return asyncio.run(stack.run())


def cmd_serve(args: argparse.Namespace) -> int:
    from hindsight_server.process.errors import StartupError
    from hindsight_server.process.server import serve
    from hindsight_server.store.migrate import SchemaMismatch

    settings = settings_from(args)
    configure_logging(settings)
    try:
        asyncio.run(serve(settings))
    except (StartupError, SchemaMismatch) as exc:
        print(f"hindsight serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from hindsight_server.process.builders import schema_shape
    from hindsight_server.stack.postgres import EmbeddedPostgres, server_settings
    from hindsight_server.store.migrate import SchemaMismatch, migrate

    settings = settings_from(args)
    configure_logging(settings)
    postgres = EmbeddedPostgres(Path(settings.data_dir) / "postgres", server_settings(settings.stack))
    dsn = settings.database.dsn or postgres.start()

    try:
        applied = asyncio.run(migrate(dsn, schema_shape(settings), settings.database.connect_timeout_s))
    except SchemaMismatch as exc:
        print(f"hindsight migrate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        postgres.stop()
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def add_server_commands(commands: Any) -> None:
    """Adds up, serve and migrate to the command parser."""

    def server_command(name: str, handler: Callable[[argparse.Namespace], int], help_text: str) -> Any:
        sub = commands.add_parser(name, help=help_text)
        add_database_options(sub)
        sub.set_defaults(handler=handler)
        return sub

    up = server_command("up", cmd_up, "start the embedded stack in the foreground")
    up.add_argument("--servers", type=int, default=1, help="memory servers to run (default 1)")
    up.add_argument(
        "--port", type=int, help="where clients call: the gateway, or the only server (default 50051)"
    )
    up.add_argument(
        "--gateway",
        choices=["auto", "nginx", "none"],
        help="nginx in front of the servers on --port: auto (default: with more than one server), "
        "nginx (always), none (servers on consecutive ports)",
    )
    up.add_argument(
        "--replicas",
        type=int,
        help="streaming standbys of the embedded PostgreSQL, in <data-dir>/postgres-replica-K "
        "(default stack.postgres_replicas: 0; at most 8)",
    )
    up.add_argument("--mcp-port", type=int, help="the MCP gateway's HTTP port (default 8765)")
    up.add_argument(
        "--mcp", action=argparse.BooleanOptionalAction, default=True, help="start the MCP gateway (default)"
    )
    up.add_argument("--console-port", type=int, help="the web console's HTTP port (default 8766)")
    up.add_argument(
        "--console",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start the web console (default; needs the console extra)",
    )
    serve = server_command("serve", cmd_serve, "run one memory server")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default 50051; 0 picks a free one)")
    server_command("migrate", cmd_migrate, "apply schema migrations and exit")
