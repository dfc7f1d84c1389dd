"""Okapi BM25's query plan: which terms count, with which weight, and which ones select candidates.

The statistics come from the store; the choices are here so they can be tested without a database.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Bm25:
    k1: float
    b: float
    # Terms in more than this share of a tenant's memories are dropped, like stopwords: they match
    # everything and rank nothing (unless the tenant is tiny).
    common_term_share: float
    # Candidates are the memories holding one of the rarest terms: at most match_terms of them, and
    # no more once their document frequencies add up to match_rows, so the rows scored stay bounded.
    match_terms: int
    match_rows: int
    # Rare terms, once the tenant holds at least rare_min_documents: a code (letters and digits mixed,
    # or five digits and more: 3F9A0C21DE, 88231) in at most rare_df of its memories. A memory holding
    # the query's rare codes is exact evidence, ranked above memories that only resemble it
    # (domain/ranking.py). Words are not lifted: a word in one or two turns of a conversation is weak
    # evidence (lifting words found in one memory cost LoCoMo dev 1.4 points of R@5).
    rare_df: int = 3
    rare_min_documents: int = 50


@dataclass(frozen=True, slots=True)
class TermStatistics:
    """A tenant's lexical statistics, kept by the writes: its memories, their terms, and the document
    frequency of the terms asked about."""

    documents: int
    terms: int
    df: Mapping[str, int]

    @property
    def average_terms(self) -> float:
        """BM25's avgdl, at least 1."""
        return max(self.terms / max(self.documents, 1), 1.0)


@dataclass(frozen=True, slots=True)
class Bm25Plan:
    idf: Mapping[str, float]  # every term that scores
    match: tuple[str, ...]  # the terms whose memories become candidates, rarest first
    rare: tuple[str, ...] = ()  # the query terms rare in the tenant (Bm25.rare_df)


def _rare(term: str, df: int, bm25: Bm25) -> bool:
    return df <= bm25.rare_df and _CODE.fullmatch(term) is not None


# Letters and digits mixed, or five digits and more: an order or ticket number, not a year or a count.
_CODE = re.compile(r"(?=.*[0-9])(?=.*[a-z])[a-z0-9-]{4,}|[0-9]{5,}")


def idf(documents: int, df: int) -> float:
    """BM25's idf, never negative (the +1 inside the log)."""
    return math.log(1 + (documents - df + 0.5) / (df + 0.5))


def term_scores(
    tf: FloatArray, weight: float, lengths: FloatArray, average_terms: float, bm25: Bm25
) -> FloatArray:
    """One term's BM25 contribution for each document (its count in it, the document's length in
    terms), as the lexical statement computes it in SQL (store/channels.py)."""
    saturation = bm25.k1 * (1 - bm25.b + bm25.b * lengths / average_terms)
    scores: FloatArray = weight * tf * (bm25.k1 + 1) / (tf + saturation)
    return scores


def plan_bm25_query(dfs: Mapping[str, int], documents: int, bm25: Bm25) -> Bm25Plan:
    limit = bm25.common_term_share * documents
    usable = {term: df for term, df in dfs.items() if df > 0 and (df <= limit or documents < 20)}
    rarest = sorted(usable, key=lambda term: (usable[term], term))[: bm25.match_terms]
    match: list[str] = []
    rows = 0
    for term in rarest:
        if match and rows + usable[term] > bm25.match_rows:
            break
        match.append(term)
        rows += usable[term]
    rare = (
        tuple(term for term in rarest if _rare(term, usable[term], bm25))
        if documents >= bm25.rare_min_documents
        else ()
    )
    return Bm25Plan({term: idf(documents, df) for term, df in usable.items()}, tuple(match), rare)
