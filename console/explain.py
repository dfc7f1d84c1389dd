"""A recall made readable: each hit's channels, ranks and score components, each channel's candidates,
and for a memory the user expected, why it was not returned. Pure: it reads the answers of Recall with
`explain` (the user's, and a probe with no score threshold and the largest top_k) and of Get."""

from __future__ import annotations

from dataclasses import dataclass, field

from hindsight.v1 import memory_pb2 as pb

__all__ = ["ChannelView", "HitView", "Reason", "channel_name", "channels_of", "hits_of", "why_not"]

COMPONENTS = (
    "similarity",
    "recency",
    "tier_priority",
    "entity_match",
    "exact_evidence",
    "context_lift",
    "query_lift",
    "fusion",
    "rerank",
    "final",
)


def channel_name(channel: int) -> str:
    return str(pb.Channel.Name(channel)).removeprefix("CHANNEL_").lower()  # type: ignore[arg-type]


def enum_name(enum: object, prefix: str, value: int) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class HitView:
    position: int
    memory: pb.Memory
    score: float
    packed: bool
    matches_query: bool
    channels: list[tuple[str, int, float]]  # (channel, rank, raw score)
    components: list[tuple[str, float]]


@dataclass(frozen=True, slots=True)
class ChannelView:
    name: str
    candidates: int
    elapsed_ms: float
    error: str


@dataclass(frozen=True, slots=True)
class Reason:
    """One catalogue message (console/i18n.py) and its values."""

    key: str
    values: dict[str, str] = field(default_factory=dict)


def hits_of(response: pb.RecallResponse) -> list[HitView]:
    return [
        HitView(
            position=index,
            memory=hit.memory,
            score=hit.score,
            packed=hit.packed,
            matches_query=hit.matches_query,
            channels=[(channel_name(c.channel), c.rank, c.score) for c in hit.channels],
            components=[(name, getattr(hit.components, name)) for name in COMPONENTS],
        )
        for index, hit in enumerate(response.hits, start=1)
    ]


def channels_of(response: pb.RecallResponse) -> list[ChannelView]:
    return [
        ChannelView(channel_name(c.channel), len(c.memory_ids), round(c.elapsed_ms, 1), c.error)
        for c in response.explanation.channels
    ]


def _score(value: float) -> str:
    return f"{value:.3f}"


def why_not(
    expected_id: str,
    expected: pb.Memory | None,
    asked_subject: str,
    response: pb.RecallResponse,
    probe: pb.RecallResponse | None,
) -> list[Reason]:
    """Why `expected_id` was (not) among `response`'s hits. `expected`: Get's answer (None: not
    visible); `probe`: the same recall without a score threshold and with the largest top_k."""
    for hit in hits_of(response):
        if hit.memory.id == expected_id:
            found_it = [Reason("why.returned", {"position": str(hit.position), "score": _score(hit.score)})]
            return found_it if hit.packed else [*found_it, Reason("why.not_packed")]
    if expected is None:
        return [Reason("why.missing", {"id": expected_id})]
    reasons: list[Reason] = []
    if expected.status != pb.STATUS_ACTIVE:
        reasons.append(Reason("why.status", {"status": enum_name(pb.Status, "STATUS_", expected.status)}))
    if asked_subject and expected.subject != asked_subject:
        reasons.append(Reason("why.subject", {"subject": expected.subject or "''", "asked": asked_subject}))
    explanation = (probe or response).explanation
    found = [channel_name(c.channel) for c in explanation.channels if expected_id in c.memory_ids]
    missed = [channel_name(c.channel) for c in explanation.channels if expected_id not in c.memory_ids]
    if not found:
        return reasons if reasons else [*reasons, Reason("why.no_channel")]
    reasons.append(Reason("why.channels_found", {"channels": ", ".join(found)}))
    if missed:
        reasons.append(Reason("why.channels_missed", {"channels": ", ".join(missed)}))
    probed = next((hit for hit in hits_of(probe) if hit.memory.id == expected_id), None) if probe else None
    if probed is None:
        reasons.append(Reason("why.dropped"))
        return reasons
    returned = hits_of(response)
    # Scored at least as well as the last one returned: only top_k can have left it out.
    if returned and probed.score >= returned[-1].score:
        top_k = str(len(returned))
        reasons.append(Reason("why.top_k", {"position": str(probed.position), "top_k": top_k}))
    elif returned:
        lowest = _score(returned[-1].score)
        reasons.append(Reason("why.threshold", {"score": _score(probed.score), "lowest": lowest}))
    else:
        reasons.append(Reason("why.threshold_none", {"score": _score(probed.score)}))
    return reasons
