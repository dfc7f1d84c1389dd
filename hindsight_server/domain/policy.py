"""Policies with the defaults of docs/design.md: values the configuration composes and the pipelines read."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import Kind, ScoreWeights, Tier


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on every request, so no caller can make the server do unbounded work."""

    max_content_bytes: int = 16_384
    max_batch_size: int = 1_000
    max_page_size: int = 500
    default_page_size: int = 50
    max_top_k: int = 100
    max_token_budget: int = 32_000
    max_query_bytes: int = 4_096
    max_identifier_chars: int = 256
    max_entity_keys: int = 64
    max_entity_depth: int = 4
    max_entities_bytes: int = 8_192


@dataclass(frozen=True, slots=True)
class TtlPolicy:
    """Time to live by tier and by kind; None means the memory does not expire."""

    working: timedelta | None = timedelta(hours=24)
    episodic: timedelta | None = timedelta(days=30)
    semantic: timedelta | None = None
    # A kind's TTL overrides the tier's outside working memory (which is always short-lived).
    by_kind: dict[Kind, timedelta | None] = field(
        default_factory=lambda: {Kind.EVENT: timedelta(days=90), Kind.PREFERENCE: None}
    )

    # A replaced version stays in History this long after it was superseded, then the purge deletes
    # it (with an audit row); None or zero: superseded versions are kept for good.
    superseded: timedelta | None = timedelta(days=90)

    def __post_init__(self) -> None:
        if self.superseded is not None and self.superseded < timedelta(0):
            # A ValueError: the configuration reports it as a validation error of this field.
            raise ValueError("ttl.superseded must not be negative (zero keeps every version)")

    def for_tier(self, tier: Tier) -> timedelta | None:
        return {Tier.WORKING: self.working, Tier.EPISODIC: self.episodic, Tier.SEMANTIC: self.semantic}[tier]

    def superseded_cutoff(self, now: datetime) -> datetime | None:
        """Versions superseded at or before this are purged; None: none are."""
        return None if not self.superseded else now - self.superseded

    def turns_cutoff(self, now: datetime, grace: timedelta) -> datetime | None:
        """Session turns stored at or before this are purged: a turn lives as long as its working
        memory does, the purge grace included. None (working memory never expires): none are."""
        return None if self.working is None else now - self.working - grace


@dataclass(frozen=True, slots=True)
class WritePolicy:
    # Below this confidence a memory waits in the pending area; recall does not use it.
    pending_below_confidence: float = 0.7


DEFAULT_PROFILES: dict[str, ScoreWeights] = {
    "default": ScoreWeights(similarity=0.4, recency=0.3, tier_priority=0.2, entity_match=0.1),
    "support": ScoreWeights(similarity=0.3, recency=0.4, tier_priority=0.2, entity_match=0.1),
    "knowledge_qa": ScoreWeights(similarity=0.5, recency=0.2, tier_priority=0.2, entity_match=0.1),
}


@dataclass(frozen=True, slots=True)
class RecallPolicy:
    default_top_k: int = 5
    default_token_budget: int = 2_000
    # Candidates each channel contributes before fusion (docs/design.md: 20 a channel, 50 merged).
    channel_limit: int = 20
    max_candidates: int = 50
    rrf_k: int = 60
    recency_half_life: timedelta = timedelta(days=30)
    access_flush_s: float = 1.0  # how often recalled memories' access counters are written
    # Similarity mixes standardised BM25 and cosine: this share for BM25, by the query's language. The
    # default embedding model (USE-multilingual) is strong on Chinese and weak on English, so English
    # leans on BM25 (measured on LoCoMo / MADial dev, BENCHMARKS.md).
    lexical_weight: dict[str, float] = field(default_factory=lambda: {"zh": 0.23, "en": 0.7})
    # BM25 for the lexical channel. Terms in more than common_term_share of a tenant's memories are
    # dropped from the query (like stopwords: they match everything and rank nothing). Candidates are
    # the memories holding one of the match_terms rarest query terms, which bounds the rows scored.
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    max_query_terms: int = 64
    common_term_share: float = 0.3
    bm25_match_terms: int = 8
    bm25_match_rows: int = 300
    rare_term_df: int = 3  # see domain/bm25.py: exact evidence of a rare query term
    rare_term_min_documents: int = 50
    # The turns right before and after the context_candidates strongest matches join the candidates,
    # and each candidate gains context_weight x its best neighbour's score (conversations answer a
    # question in the next turn; LoCoMo dev R@5 +4 in the measurements).
    context_weight: float = 0.5
    context_candidates: int = 20
    # The turn right after a turn that ends asking a question borrows this share of it: it is the answer
    # to what the query matched, mostly in other words ("What did you take away from it?" / "It taught
    # me self-acceptance"). Other neighbours lend nothing: memories written one after another may be
    # unrelated facts. LoCoMo dev (BENCHMARKS.md): R@1 +7, R@5 +2.4.
    answer_weight: float = 1.0
    # The query's own structure, in deviations of the hybrid mix: a memory inside the time the query
    # names (not a vague one: "on 25 May, 2022", "last week") and one whose subject the query names
    # ("what did Caroline ..." for subject "Caroline") rank as that much more similar. Preferred, never
    # filtered: a memory dated a day off or filed under another subject is still found. LoCoMo dev
    # (BENCHMARKS.md): R@5 +1.6 for the time, +1.6 for the subject.
    spoken_time_lift: float = 1.0
    named_subject_lift: float = 0.25
    # With a cross-encoder in the inference tier, a recall whose query is mostly Latin script (the
    # shipped one is English; domain/rerank.py) has its rerank_candidates best rescored, their
    # similarity becoming (1 - rerank_weight) x similarity + rerank_weight x sigmoid(logit), and
    # reordered among themselves. `rerank` is the default of every profile, rerank_by_profile (profile
    # -> on or off) overrides it per profile. Unset (None), it is on where the tier runs the cross-encoder
    # on a GPU (a few ms a recall) and off on a CPU tier, where it costs ~0.4 s of Triton CPU a recall at
    # this depth (BENCHMARKS.md, "The cross-encoder's depth and weight, measured again"). Depth 30 and
    # weight 0.3 from a curve on LoCoMo dev, against the ranking alone: +1.9 R@5 and +1.5 R@10; depth 10
    # lifts R@5 alike but not R@10, 40 no more than 30; weights 0.3-0.5 lie within 1 point, while the
    # 0.7 chosen when the ranking was weaker now costs R@1 and R@5 (the cross-encoder ignores who spoke,
    # which LoCoMo's adversarial questions turn on). Depth 0: never.
    rerank: bool | None = None
    rerank_by_profile: dict[str, bool] = field(default_factory=dict)
    rerank_candidates: int = 30
    rerank_weight: float = 0.3
    # Returned memories need at least this final score (similarity is relative to the candidates,
    # 0.5 for an average one; the absolute "is anything relevant" gate is min_similarity / a BM25 match).
    # The design's first 0.5 assumed an absolute similarity; calibrated on the dev sets (BENCHMARKS.md).
    min_score: float = 0.15
    # Cosine at which a memory counts as matching the query's meaning. The design's first 0.65 came from
    # another model; calibrated for USE-multilingual v3 on the dev sets (BENCHMARKS.md).
    min_similarity: float = 0.3
    # The same two knobs when an English query searches the English model's vectors (bge-small-en:
    # its cosines run higher, and it carries English meaning well enough to lean less on BM25).
    # Measured on LoCoMo dev (BENCHMARKS.md): lexical weight 0.15 / 0.23 / 0.3 / 0.4 / 0.5 gave R@5
    # 62.5 / 64.0 / 64.5 / 64.2 / 63.0; min similarity 0.3 / 0.4 / 0.55 gave 63.7 / 64.0 / 63.2.
    english_lexical_weight: float = 0.3
    english_min_similarity: float = 0.4
    # The vector channel scans a tenant exactly instead of through HNSW while its memories number
    # under sqrt(exact_search_factor x the table's), domain/search_plan.py; 0: always HNSW.
    exact_search_factor: float = 180.0
    profiles: dict[str, ScoreWeights] = field(default_factory=lambda: dict(DEFAULT_PROFILES))

    def __post_init__(self) -> None:
        # ValueErrors: the configuration reports them as validation errors of the field they name.
        if self.rerank_candidates < 0:
            raise ValueError(
                f"recall.rerank_candidates must be 0 (never rerank) or more, not {self.rerank_candidates}"
            )
        for name in ("context_weight", "answer_weight", "spoken_time_lift", "named_subject_lift"):
            if getattr(self, name) < 0:
                raise ValueError(f"recall.{name} must be 0 (off) or more, not {getattr(self, name)}")
        if not 0 <= self.rerank_weight <= 1:
            raise ValueError(f"recall.rerank_weight must be between 0 and 1, not {self.rerank_weight}")
        unknown = sorted(set(self.rerank_by_profile) - set(self.profiles))
        if unknown:
            raise ValueError(
                f"recall.rerank_by_profile names unknown profiles {', '.join(unknown)}; "
                f"known: {', '.join(sorted(self.profiles))}"
            )


@dataclass(frozen=True, slots=True)
class RecallDefaults:
    """A recall's knobs once resolved: every one set."""

    top_k: int
    token_budget: int
    min_score: float
    profile: str
    weights: ScoreWeights


@dataclass(frozen=True, slots=True)
class RecallKnobs:
    """A recall's knobs as the caller set them (0, None or "": not set)."""

    top_k: int = 0
    token_budget: int = 0
    min_score: float | None = None
    profile: str = ""
    weights: ScoreWeights | None = None

    def resolved(self, policy: RecallPolicy) -> RecallDefaults:
        """The caller's value, else the policy's default; the weights an explicit override ("custom"),
        else the named profile's (empty: "default"; an unknown one is refused)."""
        profile, weights = resolve_weights(self.profile, self.weights, policy)
        return RecallDefaults(
            top_k=self.top_k or policy.default_top_k,
            token_budget=self.token_budget or policy.default_token_budget,
            min_score=policy.min_score if self.min_score is None else self.min_score,
            profile=profile,
            weights=weights,
        )


def resolve_weights(
    profile: str, override: ScoreWeights | None, policy: RecallPolicy
) -> tuple[str, ScoreWeights]:
    """The weights a recall uses: an explicit override, else the named profile (empty: "default")."""
    name = profile or "default"
    if name not in policy.profiles:
        known = ", ".join(sorted(policy.profiles))
        raise InvalidArgument("profile", f"unknown profile {name!r}; known: {known}")
    if override is not None:
        return "custom", override
    return name, policy.profiles[name]
