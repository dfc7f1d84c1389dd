"""`hindsight bench console`: what the web console costs a person, page by page, for a subject with
10k memories.

1. Load (not timed): `memories` memories into one subject of a fresh tenant (WriteBatch, 500 a call),
   a few of them pending, a superseded booking for the history; plus recalls, so Ops has figures.
2. Start the console in this process (`console.server.ConsoleServer`, as `hindsight console` runs it) on a
   free loopback port, pointed at the target, and give it one logged-in session (the login form is not a
   page load: the session is made in its table, with `--api-key` where the servers require keys).
3. Drive over real HTTP, one request at a time: each page `requests` times after `warmup`; each timed
   from the request to the last byte of the HTML.
4. Report p50/p95/p99 per page.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx2

from console.config import load_console_settings
from console.server import ConsoleServer
from console.web import COOKIE
from hindsight.client import HindsightClient, memory_input
from hindsight_server.telemetry.window import LatencySummary

__all__ = ["ConsoleBenchResult", "report", "run_console_bench"]

BATCH = 500
SUBJECT = "bench-subject"


@dataclass(frozen=True, slots=True)
class ConsoleBenchResult:
    target: str
    tenant: str
    memories: int
    requests: int
    pages: dict[str, LatencySummary]
    errors: int


async def _load(client: HindsightClient, tenant: str, memories: int) -> tuple[str, str]:
    """The subject's memories; returns the id of one with a history and of one plain memory."""
    for start in range(0, memories, BATCH):
        batch = [
            memory_input(
                f"bench memory {index}: the {index % 97}th note about project {index % 13}",
                tier="semantic",
                kind="fact",
                subject=SUBJECT,
                confidence=0.4 if index % 500 == 0 else None,  # a few pending ones
            )
            for index in range(start, min(start + BATCH, memories))
        ]
        await client.write_batch(tenant, batch, timeout_s=120)
    booking: dict[str, Any] = {
        "tier": "episodic",
        "kind": "task",
        "intent": "book_meeting_room",
        "subject": SUBJECT,
    }
    await client.write(tenant, "book room A on Wednesday", entities={"date": "2026-12-02"}, **booking)
    chained = await client.write(tenant, "book room A on Friday", entities={"date": "2026-12-04"}, **booking)
    plain = (await client.list(tenant, subject=SUBJECT, page_size=1)).memories[0].id
    for query in ("project 7 note", "room A"):
        await client.recall(tenant, query, subject=SUBJECT)
    return chained.memory.id, plain


async def run_console_bench(
    target: str,
    *,
    memories: int = 10_000,
    requests: int = 200,
    warmup: int = 20,
    api_key: str = "",
    tenant: str = "",
) -> ConsoleBenchResult:
    """`tenant`: the one the key belongs to ("" a new console-bench-* tenant, for keyless servers)."""
    tenant = tenant or f"console-bench-{uuid.uuid4().hex[:8]}"
    async with HindsightClient(target, timeout_s=60, api_key=api_key) as client:
        chained, plain = await _load(client, tenant, memories)
    server = ConsoleServer(load_console_settings(host="127.0.0.1", port=0, targets=(target,)))
    url = await server.start()
    pages = {
        "memories (50 a page)": f"/memories?subject={SUBJECT}",
        "memories, text filter": f"/memories?subject={SUBJECT}&text=project+7",
        "memory + history": f"/memories/{chained}",
        "memory, plain": f"/memories/{plain}",
        "subjects (scan)": "/memories",
        "pending": "/pending",
        "recall + explanation": f"/recall?query=project+7+note&subject={SUBJECT}&expected={plain}",
        "operations": "/ops",
    }
    errors = 0
    timings: dict[str, list[float]] = {name: [] for name in pages}
    try:
        session = server.app.state.console.pages.sessions.create(tenant, api_key)
        async with httpx2.AsyncClient(base_url=url.rstrip("/"), cookies={COOKIE: session.session_id}) as http:
            for name, path in pages.items():
                for index in range(warmup + requests):
                    started = time.perf_counter()
                    response = await http.get(path)
                    elapsed = time.perf_counter() - started
                    if response.status_code != 200:
                        errors += 1
                    elif index >= warmup:
                        timings[name].append(elapsed)
    finally:
        await server.stop()
    return ConsoleBenchResult(
        target=target,
        tenant=tenant,
        memories=memories,
        requests=requests,
        pages={name: LatencySummary.of(values) for name, values in timings.items() if values},
        errors=errors,
    )


def report(result: ConsoleBenchResult, as_json: bool) -> str:
    if as_json:
        values: dict[str, Any] = {
            "target": result.target,
            "tenant": result.tenant,
            "memories": result.memories,
            "requests": result.requests,
            "errors": result.errors,
            "pages": {name: summary.as_dict() for name, summary in result.pages.items()},
        }
        return json.dumps(values, indent=2)
    lines = [
        f"{'corpus':<28} {result.memories:,} memories in one subject of tenant {result.tenant}; "
        f"target {result.target}",
        f"{'run':<28} {result.requests} loads of each page, one at a time, after a warm-up",
        *(summary.line(name) for name, summary in result.pages.items()),
        f"{'':<28} errors: {result.errors}",
    ]
    return "\n".join(lines)
