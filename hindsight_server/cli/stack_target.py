"""Where the measuring commands (bench, eval) send their calls: --target, or a private embedded stack."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping


def on_stack(
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
