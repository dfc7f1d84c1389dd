"""Which recalls the cross-encoder rescores (domain/rerank.py): by the query's script and the profile."""

from __future__ import annotations

import pytest

from hindsight_server.domain.policy import RecallPolicy
from hindsight_server.domain.rerank import latin_share, rerank_depth

ON = RecallPolicy(rerank=True, rerank_candidates=20)  # the depth set apart from the default (30)
QA = RecallPolicy(rerank_by_profile={"knowledge_qa": True})


@pytest.mark.parametrize(
    ("text", "share", "reranked"),
    [
        ("When did Caroline go to the LGBTQ support group?", 1.0, True),
        ("Où est le café de Zoë?", 1.0, True),  # accented Latin letters are Latin
        ("用户偏好靠窗座位", 0.0, False),
        ("上周三我们讨论了什么？", 0.0, False),
        ('<Bart>:"嘿，你知道吗？元旦晚会我要表演魔术！"', 1 / 16, False),  # a Chinese dialogue, a Latin name
        ("我想订 Hilton hotel", 0.4, False),  # 3 characters and 2 words: mostly Chinese
        ("book the 靠窗 seat for me", 5 / 7, True),  # 5 words and 2 characters: mostly English
        ("Hilton 酒店", 1 / 3, False),
        ("ok 好", 0.5, False),  # half is not mostly
        ("What did we pay on 2023-05-07, $120?", 1.0, True),  # digits and symbols are not counted
        ("2023-05-07 12:30", 0.0, False),  # nothing for the model to judge
        ("?!...  ", 0.0, False),
        ("", 0.0, False),
        ("Где мой заказ?", 0.0, False),  # Cyrillic: a spaced script, but not the model's language
        ("ＡＢＣ ｈｏｔｅｌ", 0.0, False),  # fullwidth Latin: not in the model's vocabulary
        ("東京タワー tickets", 1 / 6, False),  # Han and kana count a unit each
        ("카페 reservation", 1 / 3, False),  # so do Hangul syllables
    ],
)
def test_only_mostly_latin_queries_are_reranked(text: str, share: float, reranked: bool) -> None:
    assert latin_share(text) == pytest.approx(share)
    assert rerank_depth(text, "default", ON, on_gpu=False) == (20 if reranked else 0)


@pytest.mark.parametrize(
    ("policy", "profile", "on_gpu", "depth"),
    [
        (RecallPolicy(), "default", False, 0),  # unset: off where the cross-encoder runs on CPU
        (RecallPolicy(), "default", True, 30),  # ... on where it runs on a GPU
        (RecallPolicy(), "knowledge_qa", True, 30),
        (RecallPolicy(rerank=False), "default", True, 0),  # set: as set, wherever it runs
        (RecallPolicy(rerank=False, rerank_by_profile={"knowledge_qa": True}), "knowledge_qa", True, 30),
        (QA, "knowledge_qa", False, 30),  # a profile turns it on
        (QA, "custom", False, 0),  # explicit weights follow the default
        (QA, "custom", True, 30),
        (RecallPolicy(rerank_by_profile={"support": False}), "support", True, 0),
        (RecallPolicy(rerank=True), "support", False, 30),
        (RecallPolicy(rerank=True, rerank_by_profile={"support": False}), "support", False, 0),
        (RecallPolicy(rerank=True, rerank_candidates=40), "default", False, 40),
        (RecallPolicy(rerank_candidates=0), "default", True, 0),  # depth 0: never
    ],
)
def test_the_profile_the_default_or_the_tier_turns_it_on(
    policy: RecallPolicy, profile: str, on_gpu: bool, depth: int
) -> None:
    assert rerank_depth("Which instrument is Bob learning?", profile, policy, on_gpu=on_gpu) == depth


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"rerank_by_profile": {"nope": True}}, "rerank_by_profile names unknown profiles nope"),
        ({"rerank_candidates": -1}, "rerank_candidates must be 0"),
        ({"rerank_weight": 1.5}, "rerank_weight must be between 0 and 1, not 1.5"),
    ],
)
def test_a_wrong_rerank_setting_is_refused_by_name(knobs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecallPolicy(**knobs)  # type: ignore[arg-type]
