"""Writers that keep writing through the shared client while a test breaks something, and what they saw."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

import grpc

from hindsight.client import HindsightClient, new_idempotency_key


@dataclass
class WriteLoad:
    """`writers` tasks, each writing one memory after another until stopped. A call that fails with
    UNAVAILABLE (after the client's own retries) is sent again with the same idempotency key, as the
    contract asks of callers: a key is written once however often it is sent."""

    client: HindsightClient
    tenant: str
    writers: int = 4
    timeout_s: float = 2.0
    acknowledged: dict[str, str] = field(default_factory=dict)  # id -> content, every OK answer
    answers: Counter[str] = field(default_factory=Counter)  # status code of every call, OK included
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._write(n)) for n in range(self.writers)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def _write(self, writer: int) -> None:
        number = 0
        while not self._stop.is_set():
            content, key = f"writer {writer} memory {number}", new_idempotency_key()
            while not self._stop.is_set():
                try:
                    written = await self.client.write(
                        self.tenant, content, tier="episodic", kind="event", idempotency_key=key,
                        timeout_s=self.timeout_s,
                    )  # fmt: skip
                except grpc.aio.AioRpcError as error:
                    self.answers[error.code().name] += 1
                    if error.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    await asyncio.sleep(0.05)
                    continue
                self.answers["OK"] += 1
                assert written.memory.content == content
                self.acknowledged[written.memory.id] = content
                break
            number += 1

    async def run_for(self, seconds: float) -> None:
        """Lets the writers run this long; a writer that saw anything but OK or UNAVAILABLE fails here."""
        if seconds > 0:
            await asyncio.wait(self._tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
        for task in self._tasks:
            if task.done():
                task.result()
