"""docs/examples/eval-sample.json, the memory-eval v1 example of docs/eval-format.md: `hindsight eval`'s
loader reads it, it holds what the format page says a file must (evidence that names items of its own
conversation, declared categories), the benchmarks' corpus builds from it, and no command of the CLI
defaults to a file outside the repository."""

from __future__ import annotations

import argparse
import json
from datetime import UTC
from pathlib import Path

import pytest

from hindsight_server.bench.eval_corpus import eval_corpus
from hindsight_server.bench.evaluate import EvalFileError, RecallScores, load_eval_file
from hindsight_server.cli.args import EXIT_USAGE
from hindsight_server.cli.parser import build_parser, main

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "docs" / "examples" / "eval-sample.json"


def test_the_loader_reads_the_sample() -> None:
    conversations = load_eval_file(SAMPLE)
    assert [c.id for c in conversations] == ["sample-en", "sample-zh"]
    english, chinese = conversations
    assert len(english.items) == 10 and len(english.queries) == 5
    assert len(chinese.items) == 6 and len(chinese.queries) == 4
    # Timestamps without an offset are read as UTC; items keep the file's order.
    assert all(item.timestamp.tzinfo == UTC for c in conversations for item in c.items)
    assert [item.id for item in english.items][:3] == ["e1", "e2", "e3"]
    # What is written as a memory: the speaker's words, and the caption of a shared image.
    mug = next(item for item in english.items if item.id == "e5")
    assert mug.content == (
        'Noor said, "Look what came out of the kiln this week." and shared a lopsided blue mug with a '
        "thumb-sized handle"
    )
    assert chinese.queries[0].evidence == ("z1",)


def test_the_sample_is_consistent() -> None:
    """What eval-format.md asks of a file beyond what the loader checks: item ids unique within a
    conversation, every evidence id one of its items, every category declared, at least one query the
    metric counts."""
    document = json.loads(SAMPLE.read_text(encoding="utf-8"))
    declared = set(document["categories"])
    for conversation in load_eval_file(SAMPLE):
        ids = [item.id for item in conversation.items]
        assert len(ids) == len(set(ids)), conversation.id
        for query in conversation.queries:
            assert set(query.evidence) <= set(ids), (conversation.id, query.id)
            assert query.category in declared, query.category
        assert any(query.evidence for query in conversation.queries)


def test_recall_at_k_of_a_perfect_and_a_partial_ranking() -> None:
    """The metric the format is scored with: the share of a query's evidence in its top k."""
    english = load_eval_file(SAMPLE)[0]
    scores = RecallScores((1, 5))
    two_hop = next(q for q in english.queries if q.id == "eq2")  # evidence e5 and e7
    scores.add(two_hop.category, two_hop.evidence, ["e5", "e1", "e7"])
    result = scores.as_dict()
    assert result["overall"] == {"R@1": 50.0, "R@5": 100.0}
    assert result["queries"] == 1


def test_the_benchmarks_corpus_builds_from_the_sample() -> None:
    corpus = eval_corpus(SAMPLE, 40, users=2)
    assert len(corpus.memories) == 40
    assert {m.subject for m in corpus.memories} == {"user-0", "user-1"}
    assert len(corpus.questions) == 9  # every query's question, the unanswerable one included


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ({"conversations": [{"items": [{"id": "a", "timestamp": "2025-01-01"}], "queries": []}]}, "text"),
        (
            {"conversations": [{"items": [{"id": "a", "text": "x", "timestamp": "monday"}], "queries": []}]},
            "ISO 8601",
        ),
        ({"conversations": [{"items": [], "queries": [{"id": "q", "question": "?"}]}]}, "evidence"),
        ({"items": []}, "not a memory-eval v1 file"),
    ],
    ids=["item-without-text", "timestamp", "query-without-evidence", "no-conversations"],
)
def test_the_loader_names_what_is_wrong(tmp_path: Path, document: dict[str, object], complaint: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(EvalFileError, match=complaint):
        load_eval_file(path)


def _defaults(parser: argparse.ArgumentParser) -> list[str]:
    """Every string default of the parser and of its subcommands, at any depth."""
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _defaults(sub)
        for value in (action.default, action.const):
            if isinstance(value, str):
                found.append(value)
    return found


def test_no_command_defaults_to_a_file_outside_the_repository() -> None:
    defaults = _defaults(build_parser())
    assert [value for value in defaults if value.startswith("..") or "/shared/" in value] == []


def test_the_neighbour_bench_asks_for_its_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "neighbour"]) == EXIT_USAGE
    error = capsys.readouterr().err
    assert "--corpus FILE is required" in error and "docs/eval-format.md" in error


def test_a_bare_corpus_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--corpus takes a file: it no longer stands for a default one."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["bench", "recall", "--corpus"])
    assert exited.value.code == 2
    assert "--corpus" in capsys.readouterr().err
