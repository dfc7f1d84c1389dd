"""`hindsight bench webhooks`: how fast the change feed reaches an HTTP endpoint, and how soon.

One endpoint of one tenant, on a receiver in this process that answers every POST 204 at once (so the
figures are the sender's, not a receiver's). The memories are written in WriteBatch calls of 100 as
fast as the stack takes them; each delivery's latency is from the acknowledgement of the batch that
made its event to the POST's arrival. Deliveries to one endpoint are one at a time, in order, and at
most `webhooks.rate_per_s` a second (the private stack's setting, from --rate-limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import asdict, dataclass, field

from hindsight.client import HindsightClient, memory_input
from hindsight_server.bench import cpu
from hindsight_server.bench.corpus import synthetic_memories
from hindsight_server.bench.recall import server_pids
from hindsight_server.telemetry.window import LatencySummary

_BATCH = 100
_MAX_REQUEST_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class WebhookBenchResult:
    events: int
    delivered: int  # distinct webhook-ids received within the wait
    duplicates: int  # POSTs of an id received before
    deliveries_per_s: float  # from the first delivery to the last
    latency: LatencySummary  # the batch's acknowledgement -> its event's POST
    cpu_ms_per_delivery: dict[str, float] = field(default_factory=dict)


class _Receiver:
    """A bare HTTP/1.1 endpoint: reads each request whole, records its webhook-id, answers 204."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}
        self.duplicates = 0
        self.all_in = asyncio.Event()
        self.expected = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/hooks"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ValueError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers = dict(
                    line.split(":", 1) for line in head.decode("latin-1").split("\r\n")[1:] if ":" in line
                )
                fields = {name.strip().lower(): value.strip() for name, value in headers.items()}
                await reader.readexactly(min(int(fields.get("content-length", "0")), _MAX_REQUEST_BYTES))
                self._record(fields.get("webhook-id", ""))
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        writer.close()

    def _record(self, webhook_id: str) -> None:
        if webhook_id in self.arrivals:
            self.duplicates += 1
            return
        self.arrivals[webhook_id] = time.perf_counter()
        if len(self.arrivals) >= self.expected:
            self.all_in.set()


async def run_webhook_bench(target: str, *, events: int, wait_s: float = 600.0) -> WebhookBenchResult:
    tenant = f"bench-hooks-{uuid.uuid4().hex[:8]}"
    receiver = _Receiver()
    receiver.expected = events
    url = await receiver.start()
    acknowledged: dict[str, float] = {}  # memory id -> its batch's acknowledgement
    try:
        async with HindsightClient(target, timeout_s=60) as client:
            await client.add_webhook(tenant, url, event_types=["created"])
            pids = await server_pids(target)
            before = cpu.sample(pids)
            memories = synthetic_memories(13)
            for _ in range(0, events, _BATCH):
                payload = [
                    memory_input(f"{m.content} (note {uuid.uuid4().hex[:10]})", tier=m.tier, kind=m.kind)
                    for m, _ in zip(memories, range(_BATCH), strict=False)
                ]
                response = await client.write_batch(tenant, payload, verbatim=True)
                now = time.perf_counter()
                acknowledged.update({result.memory.id: now for result in response.results})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(receiver.all_in.wait(), wait_s)
            spent = before.per_call_ms(cpu.sample(pids), len(receiver.arrivals))
            events_by_memory = await _event_memories(client, tenant)
    finally:
        await receiver.stop()
    arrivals = sorted(receiver.arrivals.values())
    latencies = [
        receiver.arrivals[event_id] - acknowledged[memory_id]
        for event_id, memory_id in events_by_memory.items()
        if event_id in receiver.arrivals and memory_id in acknowledged
    ]
    window = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
    return WebhookBenchResult(
        events=len(acknowledged),
        delivered=len(arrivals),
        duplicates=receiver.duplicates,
        deliveries_per_s=(len(arrivals) - 1) / window if window > 0 else 0.0,
        latency=LatencySummary.of(latencies),
        cpu_ms_per_delivery=spent,
    )


async def _event_memories(client: HindsightClient, tenant: str) -> dict[str, str]:
    """Each `created` event's id -> its memory's id, read back from the feed (webhook-id is the event's
    id)."""
    found: dict[str, str] = {}
    stream = client.watch(tenant, "oldest", event_types=["created"], heartbeats=True)
    try:
        async for item in stream:
            if item.HasField("heartbeat") and found:
                break
            if item.HasField("event"):
                found[item.event.id] = item.event.memory_id
    finally:
        await stream.aclose()
    return found


def report(result: WebhookBenchResult, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(result), indent=2)
    spent = ", ".join(f"{group} {ms:.2f} ms" for group, ms in sorted(result.cpu_ms_per_delivery.items()))
    return "\n".join(
        [
            f"{'events':<28} {result.events:,} written, {result.delivered:,} delivered, "
            f"{result.duplicates} duplicates",
            f"{'deliveries a second':<28} {result.deliveries_per_s:,.0f} (one endpoint, in order)",
            result.latency.line("ack -> POST"),
            f"{'CPU per delivery':<28} {spent or 'n/a'}",
        ]
    )
