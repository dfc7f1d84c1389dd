"""Recall's ranking (domain/ranking.py): the relevance gate, the context turns, the score breakdown."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain import scoring
from hindsight_server.domain.model import Channel, ChannelHit, Tier, TimeWindow
from hindsight_server.domain.policy import DEFAULT_PROFILES
from hindsight_server.domain.ranking import (
    Around,
    Candidate,
    RankQuery,
    exact_evidence,
    is_relevant,
    names,
    rank,
    reranked,
    rescored,
    strongest,
)
from tests.domain.builders import memory

NOW = datetime(2024, 3, 20, tzinfo=UTC)
QUERY = RankQuery(
    weights=DEFAULT_PROFILES["default"],
    entities={},
    now=NOW,
    spoken_window=None,
    lexical_weight=0.3,
    context_weight=0.5,
    recency_half_life=timedelta(days=30),
)


def candidate(n: int, *, channels: tuple[Channel, ...] = (Channel.LEXICAL,), **signals: Any) -> Candidate:
    m = memory(id=f"m{n}", created_at=NOW - timedelta(days=n))
    hits = {channel: ChannelHit(m, 1, 0.0) for channel in channels}
    return Candidate(m, hits, 1.0 / (60 + n), **signals)


@pytest.mark.parametrize(
    ("signals", "matches"),
    [
        ({"lexical": 2.5}, True),  # a BM25 match
        ({"lexical": 0.0}, False),  # matched only common terms
        ({"dense": 0.45, "min_similarity": 0.4}, True),  # close enough in meaning for its model
        ({"dense": 0.35, "min_similarity": 0.4}, False),
        ({"dense": 0.35}, False),  # no vector in a searched space: no threshold to pass
        ({"lexical": 2.5, "from_context": True}, False),  # a context turn is judged by its neighbour
    ],
)
def test_a_candidate_matches_by_its_words_or_its_meaning(signals: dict[str, Any], matches: bool) -> None:
    assert candidate(1, **signals).matches is matches


@pytest.mark.parametrize(
    ("built", "context_of", "entities", "relevant"),
    [
        (candidate(1, lexical=1.0), set(), {}, True),
        (candidate(1), set(), {}, False),  # found, but matches nothing: never returned, however recent
        (candidate(1), {"m1"}, {}, True),  # next to a turn that matches
        (candidate(1, channels=(Channel.SESSION,)), set(), {}, True),  # the ongoing session
        (candidate(1), set(), {"city": "Lisbon"}, False),
    ],
)
def test_only_relevant_candidates_pass_the_gate(
    built: Candidate, context_of: set[str], entities: dict[str, str], relevant: bool
) -> None:
    assert is_relevant(built, context_of, entities) is relevant


def test_a_candidate_carrying_a_wanted_entity_is_relevant() -> None:
    with_entity = Candidate(memory(id="m1", entities={"city": "lisbon "}), {}, 0.0)
    assert is_relevant(with_entity, set(), {"city": "Lisbon"})


def test_the_strongest_matching_candidates_get_their_context() -> None:
    candidates = [
        candidate(1, lexical=1.0),
        candidate(2, lexical=5.0),
        candidate(3),  # does not match: never expanded
        candidate(4, lexical=3.0),
    ]
    assert strongest(candidates, 0.3, 2) == ["m2", "m4"]
    assert strongest(candidates, 0.3, 10) == ["m2", "m4", "m1"]
    assert strongest([candidate(1)], 0.3, 2) == []


def test_ranking_drops_the_irrelevant_and_keeps_the_turn_next_to_a_match() -> None:
    best = candidate(1, lexical=6.0)
    weak = candidate(2, lexical=1.0)
    unrelated = candidate(3)
    turn_after = candidate(4, from_context=True)
    ranked = rank([best, weak, unrelated, turn_after], {"m1": (None, "m4")}, QUERY)
    # m3 matches nothing; m4 neither, but it is the turn right after the best match.
    assert [hit.memory.id for hit in ranked] == ["m1", "m2", "m4"]
    assert [hit.directly_relevant for hit in ranked] == [True, True, False]
    top = ranked[0].score
    assert top.similarity == pytest.approx(1.0)  # relative to the best candidate
    assert top.recency == pytest.approx(0.5 ** (1 / 30))
    assert top.tier_priority == pytest.approx(0.3)  # semantic
    assert 0 < ranked[2].score.final < ranked[1].score.final < top.final
    # Without its neighbour known, the context turn is not returned.
    assert [hit.memory.id for hit in rank([best, weak, unrelated, turn_after], {}, QUERY)] == ["m1", "m2"]


def test_a_match_borrows_from_its_neighbours_by_the_context_weight() -> None:
    lone, framed = candidate(1, lexical=2.0), candidate(2, lexical=2.0)
    neighbour = candidate(3, lexical=6.0, from_context=True)
    ranked = {hit.memory.id: hit for hit in rank([lone, framed, neighbour], {"m2": ("m3", None)}, QUERY)}
    assert ranked["m2"].score.similarity > ranked["m1"].score.similarity
    flat = {
        hit.memory.id: hit
        for hit in rank([lone, framed, neighbour], {"m2": ("m3", None)}, replace(QUERY, context_weight=0.0))
    }
    assert flat["m2"].score.similarity == pytest.approx(flat["m1"].score.similarity)


def similarities(candidates: list[Candidate], around: Around, query: RankQuery) -> dict[str, float]:
    return {hit.memory.id: hit.score.similarity for hit in rank(candidates, around, query)}


def turn(n: int, content: str, **signals: Any) -> Candidate:
    m = memory(id=f"m{n}", content=content, created_at=NOW - timedelta(days=1))
    return Candidate(m, {Channel.LEXICAL: ChannelHit(m, 1, 0.0)}, 1.0 / (60 + n), **signals)


@pytest.mark.parametrize(
    ("asking", "lends"),
    [
        ('Melanie said, "Wow, great pic! Where did you go on that road trip?"', True),
        ("What did you take away from the book?", True),
        ("你周末去哪儿了？", True),
        ("那本书你看完了吗", True),
        ("Did you? I went to the lake on Sunday.", False),  # asked first, then told: not a question to answer
        ("I went to the lake on Sunday.", False),
    ],
)
def test_the_turn_after_a_question_borrows_the_answer_weight_of_it(asking: str, lends: bool) -> None:
    """The question matched the query; the turn after it answers it, in other words."""
    question = turn(1, asking, lexical=6.0)
    answer = turn(2, "It taught me self-acceptance.", from_context=True)
    other = turn(3, "Unrelated.", lexical=1.0)
    around = {"m1": (None, "m2")}
    ranked = similarities([question, answer, other], around, replace(QUERY, answer_weight=1.0))
    alone = similarities([question, answer, other], around, QUERY)
    mix = scoring.hybrid_mix([6.0, None, 1.0], [None, None, None], QUERY.lexical_weight)
    # Without a question to answer it borrows what any candidate without a lending neighbour does.
    gained = mix[0] - 0.5 * min(mix) if lends else 0.0
    assert math.log(ranked["m2"]) - math.log(alone["m2"]) == pytest.approx(gained)
    # The question borrows context_weight of its answer whatever it asks.
    assert ranked["m1"] == pytest.approx(alone["m1"])


def test_only_an_answer_borrows_from_the_strong_turn_before_it() -> None:
    """The strong turn borrows from the turns around it; they borrow from it only when it asks what they
    answer. Memories written one after another in a session may be unrelated facts: a statement lends
    its neighbour nothing (a recall for a seat preference should not rank the booking written next)."""
    statement, after = turn(1, "The user prefers a window seat.", lexical=6.0), turn(2, "Booked room A-301.")
    question, answer = turn(1, "Where do you like to sit?", lexical=6.0), turn(2, "By the window.")
    around = {"m1": (None, "m2")}
    for strong, neighbour, lends in ((statement, after, False), (question, answer, True)):
        candidates = [strong, replace(neighbour, from_context=True)]
        ranked = similarities(candidates, around, replace(QUERY, answer_weight=1.0))
        flat = similarities(candidates, around, QUERY)
        assert (ranked["m2"] > flat["m2"]) is lends


def test_a_memory_inside_the_time_the_query_names_is_lifted_not_filtered() -> None:
    window = TimeWindow(NOW - timedelta(days=3), NOW - timedelta(days=2))
    inside = Candidate(
        memory(id="in", created_at=NOW - timedelta(days=10), valid_from=NOW - timedelta(days=3)),
        {},
        0.01,
        lexical=2.0,
    )
    outside = Candidate(memory(id="out", created_at=NOW - timedelta(days=10)), {}, 0.01, lexical=2.0)
    query = replace(QUERY, spoken_window=window, spoken_time_lift=1.0)
    hits = similarities([inside, outside], {}, query)
    assert math.log(hits["in"]) - math.log(hits["out"]) == pytest.approx(1.0)  # one deviation of the mix
    unlifted = similarities([inside, outside], {}, replace(query, spoken_time_lift=0))
    assert unlifted["in"] == pytest.approx(unlifted["out"])
    # No time named: nothing lifted.
    plain = similarities([inside, outside], {}, replace(query, spoken_window=None))
    assert plain["in"] == pytest.approx(plain["out"])


@pytest.mark.parametrize(
    ("text", "subject", "named"),
    [
        ("what did caroline take away from the book?", "Caroline", True),
        ("what did caroline's sister say?", "Caroline", True),
        ("what did carol say?", "Caroline", False),
        ("what did alice say?", "Al", False),  # a whole word, not a piece of one
        ("what did mary ann bake?", "Mary Ann", True),
        ("妈妈上周说了什么", "妈妈", True),
        ("妈妈上周说了什么", "爸爸", False),
        ("what did the user say?", "user-123", False),
        ("ｃａｒｏｌｉｎｅ".casefold(), "Caroline", False),  # the pipeline normalises the query (NFKC) first
    ],
)
def test_names_finds_a_subject_the_query_names(text: str, subject: str, named: bool) -> None:
    assert names(text, subject) is named


def test_a_memory_whose_subject_the_query_names_is_lifted() -> None:
    hers = Candidate(memory(id="hers", subject="Caroline"), {}, 0.01, lexical=2.0)
    his = Candidate(memory(id="his", subject="Melanie"), {}, 0.01, lexical=2.0)
    query = replace(QUERY, named_subject_lift=0.25, text="what did caroline paint?")
    hits = similarities([hers, his], {}, query)
    assert math.log(hits["hers"]) - math.log(hits["his"]) == pytest.approx(0.25)
    same = similarities([hers, his], {}, replace(query, text="what was painted?"))
    assert same["hers"] == pytest.approx(same["his"])


def test_the_time_the_query_speaks_of_counts_as_a_match_of_structure() -> None:
    inside = candidate(2, lexical=2.0)
    window_query = replace(QUERY, spoken_window=TimeWindow(NOW - timedelta(days=3), NOW))
    (hit,) = rank([inside], {}, window_query)
    assert hit.score.entity_match == 1.0
    (outside,) = rank([candidate(9, lexical=2.0)], {}, window_query)
    assert outside.score.entity_match == 0.0


def test_exact_evidence_of_a_rare_code_outranks_every_look_alike() -> None:
    """The lexical channel found the memory holding the query's order number; twenty near-identical
    neighbours have higher cosines and are newer. Exact evidence ranks first, and explain shows it."""
    held = replace(
        candidate(30, lexical=3.0, dense=0.70, min_similarity=0.4),
        memory=memory(
            id="m30", content="用户的订单NJDJKA5U37下周寄往苏州。", created_at=NOW - timedelta(days=30)
        ),
    )
    neighbours = [
        replace(
            candidate(
                n, channels=(Channel.VECTOR, Channel.LEXICAL), lexical=2.5, dense=0.93, min_similarity=0.4
            ),
            memory=memory(
                id=f"m{n}", content=f"用户的订单AB{n:02d}CD{n:02d}EF下周寄往南京。", created_at=NOW
            ),
        )
        for n in range(20)
    ]
    ranked = rank([*neighbours, held], {}, replace(QUERY, rare_terms=("njdjka5u37",)))
    assert ranked[0].memory.id == "m30"
    assert ranked[0].score.exact_evidence == 1.0 and ranked[1].score.exact_evidence == 0.0
    assert ranked[0].score.final > ranked[1].score.final
    # without the statistics' rare term, the look-alikes win, as before
    assert rank([*neighbours, held], {}, QUERY)[0].memory.id != "m30"


@pytest.mark.parametrize(
    ("content", "held"),
    [
        ("Order 3F9A0C21DE ships", 1.0),
        ("用户的订单3F9A0C21DE下周寄往杭州", 1.0),  # a code inside Chinese text
        ("Order 3F9A0C21DEX ships", 0.0),  # a longer code is another code
        ("Order X3F9A0C21DE ships", 0.0),
    ],
)
def test_a_code_is_held_as_a_whole_word(content: str, held: float) -> None:
    found = replace(candidate(1, lexical=1.0), memory=memory(id="m1", content=content))
    assert exact_evidence(found, ("3f9a0c21de",)) == held


def test_the_cross_encoder_blends_into_the_similarity() -> None:
    (hit,) = rank([candidate(1, lexical=2.0, channels=(Channel.LEXICAL,))], {}, QUERY)
    confident = rescored(hit, 8.0, 0.5, QUERY.weights)
    doubtful = rescored(hit, -8.0, 0.5, QUERY.weights)
    assert confident.score.rerank == pytest.approx(1 / (1 + math.exp(-8.0)))
    assert doubtful.score.similarity < confident.score.similarity <= hit.score.similarity
    assert doubtful.score.final < confident.score.final
    assert confident.memory.tier is Tier.SEMANTIC and confident.score.recency == hit.score.recency


def test_the_cross_encoder_reorders_the_head_and_never_drops_it_below_the_tail() -> None:
    hits = rank([candidate(i, lexical=10.0 - i, channels=(Channel.LEXICAL,)) for i in range(4)], {}, QUERY)
    head = hits[:3]
    # A candidate it does not judge, scoring above what the head's worst will score once judged.
    tail = [replace(hits[3], score=replace(hits[3].score, final=0.5))]
    # The cross-encoder finds the head's last the best and its first the worst ...
    order = reranked(head, [-9.0, 1.0, 9.0], tail, 0.7, QUERY.weights)
    assert [hit.memory.id for hit in order] == ["m2", "m1", "m0", "m3"]
    # ... the worst still ahead of the candidate it did not judge, which is untouched.
    assert order[2].score.final < order[3].score.final and order[3] == tail[0]
    assert [hit.score.rerank > 0 for hit in order] == [True, True, True, False]


def test_the_cross_encoder_does_not_undo_exact_evidence() -> None:
    base = rank([candidate(1, lexical=1.0), candidate(2, lexical=2.0)], {}, QUERY)
    evidence = [replace(base[1], score=replace(base[1].score, exact_evidence=1.0)), base[0]]
    # the cross-encoder much prefers the look-alike: the memory holding the code still comes first
    again = reranked(evidence, [-8.0, 8.0], [], 0.7, QUERY.weights)
    assert [hit.score.exact_evidence for hit in again] == [1.0, 0.0]


def test_a_hit_carries_what_lifted_its_similarity() -> None:
    """explain shows the context lent and the query's named time and subject, in deviations of the mix."""
    question = turn(1, "Where did you go on that trip?", lexical=6.0)
    answer = replace(
        turn(2, "Porto, for a week.", from_context=True),
        memory=replace(turn(2, "Porto, for a week.").memory, subject="Ana"),
    )
    window = TimeWindow(NOW - timedelta(days=2), NOW)
    query = replace(
        QUERY,
        answer_weight=1.0,
        spoken_time_lift=1.0,
        named_subject_lift=0.25,
        spoken_window=window,
        text="ana",
    )
    hits = {hit.memory.id: hit.score for hit in rank([question, answer], {"m1": (None, "m2")}, query)}
    mix = scoring.hybrid_mix([6.0, None], [None, None], QUERY.lexical_weight)
    assert hits["m2"].context_lift == pytest.approx(mix[0])  # all of the question's score
    assert hits["m1"].context_lift == pytest.approx(0.5 * mix[1])  # half of its answer's
    assert hits["m1"].query_lift == pytest.approx(1.0)  # inside the time named
    assert hits["m2"].query_lift == pytest.approx(1.25)  # and the subject named


def test_looking_for_named_subjects_is_bounded_by_the_candidates_not_the_text() -> None:
    """A 4 KB query against 70 candidates of 70 different 256-character subjects: one search per
    distinct subject, each linear in the query."""
    text = ("a" * 255 + " ") * 16
    candidates = [
        Candidate(memory(id=f"m{n}", subject=f"{n:03d}" + "a" * 253), {}, 0.01, lexical=float(n % 7))
        for n in range(70)
    ]
    query = replace(QUERY, named_subject_lift=0.25, text=text)
    started = time.process_time()  # CPU time: a CI core taken away for a moment is not the code's cost
    ranked = rank(candidates, {}, query)
    assert time.process_time() - started < 0.2
    assert all(hit.score.query_lift == 0.0 for hit in ranked)  # "000aaa..." is not a word of the text


@pytest.mark.parametrize("keep", [0, 1, 5, 69, 70, 100])
def test_keep_returns_the_head_of_the_whole_ranking(keep: int) -> None:
    """A recall reads its top_k (after a rerank of the head): only those are built, in the same order
    and with the same scores as the whole ranking's head, ties included."""
    candidates = [
        Candidate(memory(id=f"m{n:02d}"), {}, 0.01 * (n % 3), lexical=1.0 + n % 7, dense=0.1 * (n % 5))
        for n in range(70)
    ]
    whole = rank(candidates, {}, QUERY)
    assert len(whole) == 70
    assert rank(candidates, {}, QUERY, keep) == whole[:keep]
