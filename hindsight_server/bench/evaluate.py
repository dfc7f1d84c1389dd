"""`hindsight eval FILE`: recall quality on a memory-eval v1 file, measured through the gRPC API.

Each conversation is loaded into its own tenant (items in order, with their timestamps), then every
query is recalled with `now` just after the conversation's last item. recall@k of a query is the share
of its evidence ids among the top k returned (LoCoMo's metric); queries without evidence are skipped.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.bench import cpu
from hindsight_server.bench.backlog import wait_backlog_drained

# Items of one session often share a timestamp; a microsecond per item keeps their order.
_ORDER_STEP = timedelta(microseconds=1)
_BATCH = 500


class EvalFileError(ValueError):
    """The file is not memory-eval v1; the message says where."""


@dataclass(frozen=True, slots=True)
class EvalItem:
    id: str
    session_id: str
    speaker: str
    text: str
    timestamp: datetime
    image_caption: str = ""

    @property
    def content(self) -> str:
        """The item as the LoCoMo authors embed it."""
        said = f'{self.speaker} said, "{self.text}"' if self.speaker else self.text
        return f"{said} and shared {self.image_caption}" if self.image_caption else said


@dataclass(frozen=True, slots=True)
class EvalQuery:
    id: str
    question: str
    category: str
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EvalConversation:
    id: str
    items: tuple[EvalItem, ...]
    queries: tuple[EvalQuery, ...]


def _timestamp(value: Any, where: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise EvalFileError(f"{where}: timestamp {value!r} is not ISO 8601") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def load_eval_file(path: Path) -> list[EvalConversation]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        raw_conversations = document["conversations"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise EvalFileError(f"{path}: not a memory-eval v1 file ({exc})") from exc
    conversations = []
    for c_index, raw in enumerate(raw_conversations):
        where = f"conversations[{c_index}]"
        try:
            items = tuple(
                EvalItem(
                    id=str(item["id"]),
                    session_id=str(item.get("session_id", "")),
                    speaker=str(item.get("speaker", "")),
                    text=str(item["text"]),
                    timestamp=_timestamp(item["timestamp"], f"{where}.items[{i}]"),
                    image_caption=str(item.get("image_caption") or ""),
                )
                for i, item in enumerate(raw["items"])
            )
            queries = tuple(
                EvalQuery(
                    str(q["id"]),
                    str(q["question"]),
                    str(q.get("category", "")),
                    tuple(map(str, q["evidence"])),
                )
                for q in raw["queries"]
            )
            conversations.append(EvalConversation(str(raw.get("conversation_id", c_index)), items, queries))
        except (KeyError, TypeError) as exc:
            raise EvalFileError(f"{path}: {where} lacks {exc}") from exc
    return conversations


@dataclass
class RecallScores:
    """recall@k sums per category; averages on demand."""

    ks: tuple[int, ...]
    sums: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, category: str, evidence: Sequence[str], ranked: Sequence[str]) -> None:
        wanted = set(evidence)
        for k in self.ks:
            self.sums[category][k] += len(wanted & set(ranked[:k])) / len(wanted)
        self.counts[category] += 1

    def _average(self, categories: Sequence[str]) -> dict[str, float]:
        total = sum(self.counts[c] for c in categories)
        return {
            f"R@{k}": round(100 * sum(self.sums[c][k] for c in categories) / total, 1) if total else 0.0
            for k in self.ks
        }

    def as_dict(self) -> dict[str, Any]:
        categories = sorted(self.counts)
        return {
            "overall": self._average(categories),
            "by_category": {c: {**self._average([c]), "queries": self.counts[c]} for c in categories},
            "queries": sum(self.counts.values()),
        }


def _tenant_for(run: str, conversation: EvalConversation) -> str:
    return f"eval-{run}-" + re.sub(r"[^A-Za-z0-9._:@-]", "-", conversation.id)


async def _load(client: HindsightClient, tenant: str, conversation: EvalConversation) -> dict[str, str]:
    """Writes the conversation's items; returns memory id -> item id."""
    item_of: dict[str, str] = {}
    pending: list[str] = []
    for start in range(0, len(conversation.items), _BATCH):
        chunk = conversation.items[start : start + _BATCH]
        inputs = [
            memory_input(
                item.content,
                # Benchmark conversations span months: a tier and kind without a TTL keep every item
                # visible at `now` (episodic events would expire after 90 days).
                tier="semantic",
                kind="fact",
                subject=item.speaker,
                session_id=item.session_id,
                occurred_at=item.timestamp + _ORDER_STEP * (start + offset),
                idempotency_key=item.id,
            )
            for offset, item in enumerate(chunk)
        ]
        # Every item is its own record (evidence names items), so nothing merges: an import.
        response = await client.write_batch(tenant, inputs, verbatim=True, timeout_s=120)
        for result in response.results:
            item_of[result.memory.id] = result.memory.idempotency_key
            if result.memory.embedding_state == pb.EMBEDDING_STATE_PENDING:
                pending.append(result.memory.id)
    await _wait_embedded(client, tenant, pending)
    return item_of


_CONTEXT_WAIT_S = 120.0


async def _wait_embedded(
    client: HindsightClient, tenant: str, pending: list[str], timeout_s: float = 120
) -> None:
    """Recall quality is measured on embedded memories: waits for the background worker if needed."""
    deadline = time.monotonic() + timeout_s
    # A few reads at a time: hundreds at once are one tenant flooding the server, which sheds them.
    in_flight = asyncio.Semaphore(4)

    async def state_of(memory_id: str) -> pb.Memory:
        async with in_flight:
            return await client.get(tenant, memory_id)

    while pending and time.monotonic() < deadline:
        states = await asyncio.gather(*(state_of(memory_id) for memory_id in pending))
        pending = [m.id for m in states if m.embedding_state == pb.EMBEDDING_STATE_PENDING]
        if pending:
            await asyncio.sleep(0.2)


async def evaluate(
    target: str,
    conversations: Sequence[EvalConversation],
    ks: Sequence[int],
    concurrency: int = 4,
    min_score: float | None = 0.0,
    private_stack: bool = False,
) -> dict[str, Any]:
    """min_score 0 (default) measures the ranking alone; None applies the server's threshold too. Also
    counts the recalls the cross-encoder rescored and, for a stack on this machine, its processes' CPU
    per recall (cpu.py; Triton's is the reranker's cost beside the query embeddings): with
    `private_stack` (started by this process) only that stack's, else every stack's on the machine."""
    within = os.getpid() if private_stack else None
    scores = RecallScores(tuple(sorted(ks)))
    degraded: dict[str, int] = defaultdict(int)  # channel -> queries it could not answer
    reranked = 0
    cpu_ms: dict[str, float] = defaultdict(float)  # process group -> CPU ms spent during the recalls
    run = uuid.uuid4().hex[:8]
    semaphore = asyncio.Semaphore(concurrency)
    async with HindsightClient(target, timeout_s=30) as client:
        for conversation in conversations:
            tenant = _tenant_for(run, conversation)
            loaded_at = time.monotonic()
            item_of = await _load(client, tenant, conversation)
            # The context vectors come after the embeddings (_load waited for those): measured with them.
            if not await wait_backlog_drained(target, loaded_at, timeout_s=_CONTEXT_WAIT_S):
                print("warning: recalled before every context vector was in", file=sys.stderr)
            now = max(item.timestamp for item in conversation.items) + timedelta(minutes=1)

            async def recall(
                query: EvalQuery, tenant: str = tenant, now: datetime = now, item_of: dict[str, str] = item_of
            ) -> None:
                nonlocal reranked
                async with semaphore:
                    response = await client.recall(
                        tenant, query.question, top_k=max(ks), min_score=min_score, now=now
                    )
                ranked = [item_of.get(hit.memory.id, "") for hit in response.hits]
                scores.add(query.category, query.evidence, ranked)
                reranked += response.reranked
                for channel in response.channels_degraded:
                    degraded[pb.Channel.Name(channel)] += 1

            # Sampled around the recalls only: loading a conversation embeds it, which is not recall's cost.
            queries = [q for q in conversation.queries if q.evidence]
            before = cpu.sample((), within)
            await asyncio.gather(*(recall(q) for q in queries))
            for group, ms in before.per_call_ms(cpu.sample((), within), 1).items():
                cpu_ms[group] += ms
    if degraded:
        # The figures measure the method only if every channel answered: say so when one did not.
        counts = ", ".join(f"{channel} {n}" for channel, n in sorted(degraded.items()))
        print(f"warning: queries answered with a degraded channel: {counts}", file=sys.stderr)
    result = scores.as_dict()
    recalls = result["queries"]
    result["reranked"] = reranked
    result["cpu_ms_per_recall"] = {group: round(ms / recalls, 1) for group, ms in sorted(cpu_ms.items())}
    return result


def report(result: dict[str, Any], as_json: bool) -> str:
    if as_json:
        return json.dumps(result, ensure_ascii=False)
    ks = list(result["overall"])
    lines = [f"{'category':<12}{'queries':>8}" + "".join(f"{k:>8}" for k in ks)]
    for category, row in result["by_category"].items():
        lines.append(f"{category:<12}{row['queries']:>8}" + "".join(f"{row[k]:>8.1f}" for k in ks))
    lines.append(
        f"{'overall':<12}{result['queries']:>8}" + "".join(f"{result['overall'][k]:>8.1f}" for k in ks)
    )
    lines.append(f"reranked {result['reranked']} of {result['queries']} recalls")
    if result["cpu_ms_per_recall"]:
        cpu_figures = ", ".join(f"{group} {ms:.1f} ms" for group, ms in result["cpu_ms_per_recall"].items())
        lines.append(f"CPU per recall: {cpu_figures}")
    return "\n".join(lines)
