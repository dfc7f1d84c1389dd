"""`hindsight bench feed`: how soon a committed Write reaches a Watch reader, at a steady write rate.

Memories are written open loop (a call every batch/rate seconds, whatever the answers' pace, so a slow
answer does not lower the offered load) into one tenant, while one Watch of that tenant reads their
`created` events. With --batch N each call is a WriteBatch of N memories (a single Write costs the
embedded stack ~8 ms of CPU: two cores take ~150 a second, not 500). A memory's feed latency is from
its call's acknowledgement (the commit is just before it) to the arrival of its event at the reader:
the outbox's order horizon, the poll interval and the stream together.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from dataclasses import asdict, dataclass, field

from hindsight.client import HindsightClient, memory_input
from hindsight_server.bench import cpu
from hindsight_server.bench.corpus import synthetic_memories
from hindsight_server.bench.recall import server_pids
from hindsight_server.telemetry.window import LatencySummary

_IN_FLIGHT = 256  # writes outstanding at most: past it the offered rate is not met, and the report says so
_DRAIN_S = 10.0  # after the last write, how long events may still arrive


@dataclass(frozen=True, slots=True)
class FeedBenchResult:
    rate_offered: float  # memories a second sent
    rate_acknowledged: float  # memories a second acknowledged
    write: LatencySummary  # each call's own latency (a Write, or a WriteBatch of --batch)
    commit_to_watch: LatencySummary  # acknowledgement -> its event at the Watch reader
    missing: int  # acknowledged writes whose event did not arrive within the drain
    errors: int  # calls refused or failed
    cpu_ms_per_write: dict[str, float] = field(default_factory=dict)  # the stack's, with the Watch


async def run_feed_bench(
    target: str, *, rate: float, seconds: float, batch: int = 1, seed: int = 11
) -> FeedBenchResult:
    tenant = f"bench-feed-{uuid.uuid4().hex[:8]}"
    memories = synthetic_memories(seed)
    acknowledged: dict[str, float] = {}  # memory id -> when its Write was answered
    arrived: dict[str, float] = {}  # memory id -> when its event reached the reader
    write_s: list[float] = []
    errors = 0
    async with HindsightClient(target, timeout_s=30) as client:
        for memory in itertools.islice(memories, 20):  # warm the channel, the pool and the plans
            await client.write(
                tenant, memory.content, tier=memory.tier, kind=memory.kind, subject=memory.subject
            )
        ready, all_arrived = asyncio.Event(), asyncio.Event()

        async def read() -> None:
            async for item in client.watch(tenant, event_types=["created"], heartbeats=True):
                ready.set()
                if item.HasField("event"):
                    arrived.setdefault(item.event.memory_id, time.perf_counter())
                    if acknowledged.keys() <= arrived.keys():
                        all_arrived.set()

        reader = asyncio.create_task(read())
        await asyncio.wait_for(ready.wait(), 10)
        slots = asyncio.Semaphore(_IN_FLIGHT)

        async def write(payload: list[tuple[str, str, str, str]]) -> None:
            nonlocal errors
            try:
                started = time.perf_counter()
                if len(payload) == 1:
                    content, tier, kind, subject = payload[0]
                    one = await client.write(tenant, content, tier=tier, kind=kind, subject=subject)
                    ids = [one.memory.id]
                else:
                    inputs = [memory_input(c, tier=t, kind=k, subject=s) for c, t, k, s in payload]
                    many = await client.write_batch(tenant, inputs, verbatim=True)
                    ids = [result.memory.id for result in many.results]
                now = time.perf_counter()
                write_s.append(now - started)
                acknowledged.update(dict.fromkeys(ids, now))
            except Exception:  # a refused write is counted, the run goes on
                errors += 1
            finally:
                slots.release()

        pids = await server_pids(target)
        before = cpu.sample(pids)
        start = time.perf_counter()
        writes: set[asyncio.Task[None]] = set()
        calls = int(rate * seconds / batch)
        for index in range(calls):
            await asyncio.sleep(max(0.0, start + index * batch / rate - time.perf_counter()))
            await slots.acquire()
            # A word of its own: no write merges into another's memory (each has its `created` event).
            payload = [
                (f"{m.content} (note {uuid.uuid4().hex[:10]})", m.tier, m.kind, m.subject)
                for m in itertools.islice(memories, batch)
            ]
            task = asyncio.create_task(write(payload))
            writes.add(task)
            task.add_done_callback(writes.discard)
        sent_s = time.perf_counter() - start
        await asyncio.gather(*writes)
        answered_s = time.perf_counter() - start
        all_arrived.clear()
        if not acknowledged.keys() <= arrived.keys():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_arrived.wait(), _DRAIN_S)
        spent = before.per_call_ms(cpu.sample(pids), len(acknowledged))
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    delays = [arrived[m] - at for m, at in acknowledged.items() if m in arrived]
    return FeedBenchResult(
        rate_offered=calls * batch / sent_s,
        rate_acknowledged=len(acknowledged) / answered_s,
        write=LatencySummary.of(write_s),
        commit_to_watch=LatencySummary.of(delays),
        missing=len(acknowledged.keys() - arrived.keys()),
        errors=errors,
        cpu_ms_per_write=spent,
    )


def report(result: FeedBenchResult, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(result), indent=2)
    spent = ", ".join(f"{group} {ms:.2f} ms" for group, ms in sorted(result.cpu_ms_per_write.items()))
    return "\n".join(
        [
            f"{'memories a second':<28} offered {result.rate_offered:,.0f}, acknowledged "
            f"{result.rate_acknowledged:,.0f} ({result.errors} refused or failed)",
            result.write.line("Write call"),
            result.commit_to_watch.line("commit -> Watch"),
            f"{'events missing':<28} {result.missing} (not arrived {_DRAIN_S:g} s after the last write)",
            f"{'CPU per memory':<28} {spent or 'n/a'}",
        ]
    )
