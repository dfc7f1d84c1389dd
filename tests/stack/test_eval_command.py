"""`hindsight eval FILE`: loads a memory-eval v1 file through the gRPC API and prints recall@k."""

from __future__ import annotations

import json
from pathlib import Path

from hindsight_server.process.running import RunningServer
from tests.support.processes import free_port, run_cli

EVAL_FILE = {
    "name": "tiny",
    "conversations": [
        {
            "conversation_id": "c1",
            "items": [
                {"id": "a1", "session_id": "s1", "speaker": "Ann",
                 "text": "I adopted a grey kitten named Pixel", "timestamp": "2024-01-05T10:00:00"},
                {"id": "a2", "session_id": "s1", "speaker": "Bob",
                 "text": "Nice! I started learning the cello", "timestamp": "2024-01-05T10:00:00"},
                {"id": "a3", "session_id": "s2", "speaker": "Ann", "text": "我下周要去杭州出差",
                 "timestamp": "2024-03-01T09:00:00"},
            ],
            "queries": [
                {"id": "q1", "question": "What is the name of Ann's kitten?", "category": 1,
                 "evidence": ["a1"]},
                {"id": "q2", "question": "Which instrument is Bob learning?", "category": 1,
                 "evidence": ["a2"]},
                {"id": "q3", "question": "Ann要去哪里出差？", "category": 2, "evidence": ["a3"]},
                {"id": "q4", "question": "no evidence, skipped", "category": 2, "evidence": []},
            ],
        }
    ],
}  # fmt: skip


async def test_eval_prints_recall_at_k_overall_and_by_category(server: RunningServer, tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(EVAL_FILE, ensure_ascii=False), encoding="utf-8")
    result = await run_cli(
        ["eval", str(path), "--target", f"127.0.0.1:{server.port}", "--k", "1,3", "--json"]
    )
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["queries"] == 3  # the query without evidence is skipped
    assert set(report["overall"]) == {"R@1", "R@3"}
    assert report["overall"]["R@3"] == 100.0  # every answer shares a rare word with its question
    assert report["by_category"]["1"]["queries"] == 2
    assert report["by_category"]["2"]["R@1"] == 100.0
    assert report["reranked"] == 0  # the test server has no inference tier


async def test_eval_refuses_reranker_flags_with_a_target(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(EVAL_FILE, ensure_ascii=False), encoding="utf-8")
    result = await run_cli(["eval", str(path), "--target", "127.0.0.1:9", "--rerank", "--rerank-depth", "10"])
    assert result.code == 2
    assert "--rerank, --rerank-depth configure the private stack" in result.stderr


async def test_the_recall_bench_refuses_the_reranker_flag_with_a_target() -> None:
    result = await run_cli(["bench", "recall", "--target", "127.0.0.1:9", "--rerank"])
    assert result.code == 2
    assert "--rerank configures the private stack; not with --target" in result.stderr


async def test_eval_rejects_a_file_that_is_not_memory_eval(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"conversations": [{"items": [{"id": "x"}]}]}', encoding="utf-8")
    result = await run_cli(["eval", str(path), "--target", "127.0.0.1:9"])
    assert result.code == 2
    assert "conversations[0] lacks 'text'" in result.stderr and "Traceback" not in result.stderr


async def test_eval_against_no_server_is_one_line_with_a_hint_and_exit_3(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(EVAL_FILE, ensure_ascii=False), encoding="utf-8")
    port = free_port()  # nothing listens there
    result = await run_cli(["eval", str(path), "--target", f"127.0.0.1:{port}"])
    assert result.code == 3, result.stderr
    assert result.stderr == (  # as the client commands say it (tests/rpc/test_client_cli.py)
        f"error: cannot reach hindsight at 127.0.0.1:{port} (UNAVAILABLE: connection refused): "
        "is `hindsight up` running? (--target)\n"
    )
    assert result.stdout == ""
