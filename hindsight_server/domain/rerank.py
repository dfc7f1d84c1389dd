"""Which recalls the cross-encoder rescores, and how deep: routed by the query's script.

The shipped cross-encoder (ms-marco-MiniLM-L-12-v2) is English: its vocabulary holds 244 Han characters,
so a Chinese query reaches it mostly as unknown tokens and its scores then harm the ranking. Until a
Chinese cross-encoder ships, only queries that are mostly Latin script are reranked.
"""

from __future__ import annotations

import re

from hindsight_server.domain.policy import RecallPolicy

# Scripts written without spaces, where one character is about a word: Han, kana, Hangul syllables.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
# A unit of text: one CJK character, or a run of other letters (a word of a spaced script). Counting
# units, not letters, keeps "我想订 Hilton hotel" Chinese: 3 characters and 2 words, not 3 and 11 letters.
_UNIT = re.compile(f"[{_CJK}]|(?:(?![{_CJK}])[^\\W\\d_])+")
# Basic Latin, Latin-1 and the Latin Extended blocks (accented letters: café, naïve, Dvořák). Fullwidth
# Latin (ＡＢＣ) is left out: the model's tokenizer does not fold it and its vocabulary lacks it.
_LATIN_WORD = re.compile("[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff]+")


def latin_share(text: str) -> float:
    """The share of the text's units (CJK characters, words of other scripts) that are Latin words;
    digits, punctuation and symbols are not counted. 0 for a text without letters."""
    units = _UNIT.findall(text)
    if not units:
        return 0.0
    return sum(1 for unit in units if _LATIN_WORD.fullmatch(unit)) / len(units)


def rerank_depth(query_text: str, profile: str, policy: RecallPolicy, *, on_gpu: bool) -> int:
    """How many of a recall's best candidates the cross-encoder rescores (0: none). On when the recall's
    profile says so (rerank_by_profile, else the `rerank` default; unset, where the cross-encoder runs on
    a GPU: `on_gpu`) and the query is mostly (more than half) Latin script; a query without letters
    ("2023-05-07", "???") gives the model nothing to judge."""
    chosen = policy.rerank_by_profile.get(profile, policy.rerank)
    if not (on_gpu if chosen is None else chosen):
        return 0
    return policy.rerank_candidates if latin_share(query_text) > 0.5 else 0
