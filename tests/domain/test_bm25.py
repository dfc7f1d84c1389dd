import math
from dataclasses import replace

import pytest

from hindsight_server.domain.bm25 import Bm25, idf, plan_bm25_query

BM25 = Bm25(k1=1.2, b=0.75, common_term_share=0.3, match_terms=3, match_rows=100)


@pytest.mark.parametrize(
    ("dfs", "documents", "scoring", "match"),
    [
        # the rarest terms select candidates; a term in over 30% of the memories is dropped entirely
        (
            {"pay": 11, "wechat": 21, "user": 400, "靠窗": 2},
            1000,
            {"pay", "wechat", "靠窗"},
            ("靠窗", "pay", "wechat"),
        ),
        ({"a": 5, "b": 6, "c": 7, "d": 8}, 1000, {"a", "b", "c", "d"}, ("a", "b", "c")),  # at most 3
        ({"a": 60, "b": 50, "c": 10}, 1000, {"a", "b", "c"}, ("c", "b")),  # 10 + 50 fits, + 60 would not
        ({"a": 150, "b": 200}, 1000, {"a", "b"}, ("a",)),  # the rarest always selects, even over budget
        ({"gone": 0, "common": 900}, 1000, set(), ()),
        ({"x": 9}, 10, {"x"}, ("x",)),  # a tiny tenant keeps every term
    ],
)
def test_plan(dfs: dict[str, int], documents: int, scoring: set[str], match: tuple[str, ...]) -> None:
    plan = plan_bm25_query(dfs, documents, BM25)
    assert set(plan.idf) == scoring
    assert plan.match == match


def test_idf_falls_with_document_frequency_and_stays_positive() -> None:
    assert idf(1000, 1) > idf(1000, 10) > idf(1000, 900) > 0
    assert idf(1000, 1) == pytest.approx(math.log(1 + 999.5 / 1.5))


@pytest.mark.parametrize(
    ("dfs", "documents", "rare"),
    [
        ({"3f9a0c21de": 1, "order": 200}, 200, ("3f9a0c21de",)),  # a code in one memory
        ({"88231": 2, "订单": 150}, 200, ("88231",)),  # five digits: an order number
        ({"inv-20931": 3}, 200, ("inv-20931",)),
        ({"3f9a0c21de": 4}, 200, ()),  # in more memories than rare_df: a common code
        ({"pottery": 1}, 200, ()),  # a word is never lifted, however rare
        ({"2023": 1, "18th": 2}, 200, ("18th",)),  # a year is not a code; letters and digits are
        ({"3f9a0c21de": 1}, 30, ()),  # too few memories for statistics to mean anything
    ],
)
def test_rare_codes(dfs: dict[str, int], documents: int, rare: tuple[str, ...]) -> None:
    assert plan_bm25_query(dfs, documents, replace(BM25, match_terms=8)).rare == rare
