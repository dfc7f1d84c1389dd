"""`hindsight bench write | feed | webhooks | recall | neighbour | conflicts | replicas | mcp | console`:
benchmarks that print p50/p95/p99 figures."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from hindsight_server.cli.args import EXIT_USAGE
from hindsight_server.cli.stack_target import on_stack

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


# A write benchmark's private stack measures what the stack can take; the per-tenant fair-share limits
# (which refuse one tenant's flood by design, BENCHMARKS.md "One tenant cannot slow another") would
# measure themselves instead.
UNMETERED = {
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

    print(on_stack(args, work, env=UNMETERED))
    return 0


def cmd_bench_feed(args: argparse.Namespace) -> int:
    from hindsight_server.bench.feed import report, run_feed_bench

    async def work(target: str) -> str:
        result = await run_feed_bench(target, rate=args.rate, seconds=args.seconds, batch=args.batch)
        return report(result, args.json)

    print(on_stack(args, work, env=UNMETERED))
    return 0


def cmd_bench_webhooks(args: argparse.Namespace) -> int:
    from hindsight_server.bench.webhooks import report, run_webhook_bench

    async def work(target: str) -> str:
        return report(await run_webhook_bench(target, events=args.events), args.json)

    # The receiver is on loopback: the private stack allows it (a real one refuses loopback endpoints).
    env = {
        **UNMETERED,
        "HINDSIGHT_WEBHOOKS__ALLOW_PRIVATE_NETWORKS": "true",
        "HINDSIGHT_WEBHOOKS__RATE_PER_S": str(args.rate_limit),
        "HINDSIGHT_WEBHOOKS__BURST": str(max(1, int(args.rate_limit))),
    }
    print(on_stack(args, work, env=env))
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

    print(on_stack(args, work, env))
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

    print(on_stack(args, work))
    return 0


def cmd_bench_conflicts(args: argparse.Namespace) -> int:
    from hindsight_server.bench.conflicts import load_cases, report, run_conflict_bench

    cases = load_cases(Path(args.cases)) if args.cases else load_cases()

    async def work(target: str) -> str:
        return report(await run_conflict_bench(target, cases), args.json)

    print(on_stack(args, work))
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

    print(on_stack(args, work))
    return 0


def cmd_bench_mcp(args: argparse.Namespace) -> int:
    from hindsight_server.bench.mcp import report, run_mcp_bench

    async def work(target: str) -> str:
        result = await run_mcp_bench(target, memories=args.memories, calls=args.calls, warmup=args.warmup)
        return report(result, args.json)

    print(on_stack(args, work))
    return 0


def add_bench_commands(commands: Any) -> None:
    """Adds bench and its benchmarks to the command parser."""
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
