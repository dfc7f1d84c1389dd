"""A memory-eval file of our own for the benchmarks' real-text corpus (docs/eval-format.md; public
benchmark files are named on the command line and never copied into the project)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

_FILE = {
    "name": "tiny",
    "conversations": [
        {
            "conversation_id": "c1",
            "items": [
                {
                    "id": "a1",
                    "session_id": "s1",
                    "speaker": "Ana",
                    "text": "I adopted a grey cat named Pip",
                    "timestamp": "2024-03-01T10:00:00",
                },
                {
                    "id": "a2",
                    "session_id": "s1",
                    "speaker": "Ben",
                    "text": "Pip sounds lovely",
                    "timestamp": "2024-03-01T10:01:00",
                },
                {
                    "id": "a3",
                    "session_id": "s2",
                    "speaker": "Ana",
                    "text": "I start at the harbour office in May",
                    "timestamp": "2024-04-02T09:00:00",
                },
            ],
            "queries": [
                {"id": "q1", "question": "What is the cat called?", "evidence": ["a1"]},
                {"id": "q2", "question": "Where does Ana work?", "evidence": ["a3"]},
            ],
        },
        {
            "conversation_id": "c2",
            "items": [
                {
                    "id": "b1",
                    "session_id": "s1",
                    "speaker": "",
                    "text": "用户喜欢靠窗的座位",
                    "timestamp": "2024-05-01T08:00:00",
                },
            ],
            "queries": [{"id": "q3", "question": "座位偏好", "evidence": ["b1"]}],
        },
    ],
}


@pytest.fixture
def eval_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(_FILE, ensure_ascii=False), encoding="utf-8")
    return path
