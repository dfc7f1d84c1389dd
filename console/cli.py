"""`hindsight console [--listen HOST:PORT] [--target HOST:PORT] [TLS options]`: serve the web console.

Only light imports at module level: the `hindsight` command builds its parser from here. The TLS
options are the other client commands' (hindsight_server/cli/args.py adds them; `--tls-*`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from console.config import ConsoleConfigError, ConsoleSettings, load_console_settings, unknown_environment
from hindsight.telemetry import configure_logging
from hindsight.tls import ClientTls

__all__ = ["add_arguments", "run"]

EXIT_FAILED = 1
EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where the console listens (default 127.0.0.1:8766; port 0: any)",
    )
    parser.add_argument(
        "--target",
        action="append",
        metavar="HOST:PORT",
        help="memory server; repeat (or comma-separate) for round robin (default 127.0.0.1:50051)",
    )
    parser.add_argument(
        "--metrics-url", help="the servers' Prometheus metrics (the collector's :8889/metrics)"
    )


def _listen(value: str | None) -> tuple[str | None, int | None]:
    if not value:
        return None, None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ConsoleConfigError(f"--listen: HOST:PORT, such as 127.0.0.1:8766 (got {value!r})")
    return host.strip("[]"), int(port)


def settings_of(args: argparse.Namespace, tls: ClientTls | None) -> ConsoleSettings:
    host, port = _listen(args.listen)
    targets = [part.strip() for given in args.target or () for part in given.split(",") if part.strip()]
    overrides: dict[str, object] = {
        "host": host,
        "port": port,
        "targets": tuple(targets) or None,
        "metrics_url": args.metrics_url,
    }
    if tls is not None:
        overrides.update(
            targets_tls=True,
            targets_ca_file=tls.ca_file,
            targets_cert_file=tls.cert_file,
            targets_key_file=tls.key_file,
            targets_server_name=tls.server_name,
        )
    return load_console_settings(**overrides)


async def _serve(settings: ConsoleSettings) -> int:
    from console.server import ConsoleServer

    server = ConsoleServer(settings)
    try:
        url = await server.start()
    except OSError as exc:
        print(
            f"hindsight console: cannot listen on {settings.host}:{settings.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    targets = ", ".join(settings.targets)
    print(f"hindsight console listening on {url} -> {targets}, pid {os.getpid()}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    stopped = asyncio.create_task(stop.wait())
    ended = asyncio.create_task(server.wait())
    await asyncio.wait({stopped, ended}, return_when=asyncio.FIRST_COMPLETED)
    await server.stop()
    stopped.cancel()
    return 0 if stop.is_set() else EXIT_FAILED


def run(args: argparse.Namespace, tls: ClientTls | None) -> int:
    try:
        settings = settings_of(args, tls)
    except (ConsoleConfigError, ValueError) as error:
        for line in str(error).splitlines():
            print(f"hindsight console: config error: {line}", file=sys.stderr)
        return EXIT_USAGE
    try:
        import jinja2  # noqa: F401 (the console extra)
    except ImportError:
        print(
            "hindsight console: install the console extra: pip install 'hindsight-memory-server[console]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    configure_logging(logging.INFO, sys.stderr, log_format=settings.log_format)
    for line in unknown_environment():  # a misspelt variable is no error, but is said
        logging.getLogger("console.config").warning("%s", line)
    return asyncio.run(_serve(settings))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m console", description="hindsight's web console")
    add_arguments(parser)
    return run(parser.parse_args(), None)
