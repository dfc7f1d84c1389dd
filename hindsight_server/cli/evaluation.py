"""`hindsight eval FILE`: recall@k on a memory-eval v1 file, through the gRPC API."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import grpc

from hindsight_server.cli.args import EXIT_RPC_ERROR, EXIT_USAGE, rpc_failure
from hindsight_server.cli.stack_target import on_stack


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
        print(on_stack(args, work, env))
    except grpc.aio.AioRpcError as error:
        if args.target and error.code() == grpc.StatusCode.UNAVAILABLE:
            # No server there (or it went away): the client commands' one line, hint and exit code 3.
            message, code = rpc_failure(error, args.target, reached=False)
            print(message, file=sys.stderr)
            return code
        print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
        return EXIT_RPC_ERROR
    return 0


def add_eval_command(commands: Any) -> None:
    """Adds eval to the command parser."""
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
