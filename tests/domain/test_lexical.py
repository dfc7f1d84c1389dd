import pytest

from hindsight_server.domain.lexical import analyse, document_terms, query_terms, tsquery_literal


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("靠窗", ["靠窗"]),
        ("窗", ["窗"]),
        ("用户偏好靠窗座位", ["用户", "户偏", "偏好", "好靠", "靠窗", "窗座", "座位"]),
        ("Where is the CSV export?", ["csv", "export"]),
        ("订A栋会议室", ["订", "栋会", "会议", "议室"]),  # "a" is an English stopword
        ("ＣＳＶ　导出", ["csv", "导出"]),  # full-width letters normalised
        ("the a of", []),
        ("!!! ...", []),
        ("Meeting meeting MEETING", ["meeting"]),
    ],
)
def test_query_terms(text: str, expected: list[str]) -> None:
    assert query_terms(text) == expected


def test_document_terms_index_cjk_unigrams_and_bigrams_with_positions() -> None:
    assert document_terms("靠窗座") == [("靠", 1), ("靠窗", 1), ("窗", 2), ("窗座", 2), ("座", 3)]
    assert document_terms("User likes 靠窗") == [("user", 1), ("likes", 2), ("靠", 3), ("靠窗", 3), ("窗", 4)]


def test_every_query_term_of_a_text_is_among_its_document_terms() -> None:
    text = "用户偏好靠窗座位, prefers aisle seats on Friday 10:30"
    indexed = {term for term, _ in document_terms(text)}
    assert set(query_terms(text)) <= indexed


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        (["靠窗"], "'靠窗'"),
        (["o'neil", "a\\b"], "'o''neil' | 'a\\\\b'"),
        ([], ""),
    ],
)
def test_tsquery_literal_quotes_terms(terms: list[str], expected: str) -> None:
    assert tsquery_literal(terms) == expected


def test_analyse_gives_the_index_literal_the_length_and_the_distinct_terms() -> None:
    document = analyse("go go 走")
    assert document.tsvector == "'go':1,2 '走':3"
    assert document.length == 3
    assert document.distinct == {"go", "走"}
    assert analyse("") == analyse("!!!")
    assert analyse("").tsvector == "" and analyse("").length == 0
