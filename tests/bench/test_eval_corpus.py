"""The benchmarks' real-text corpus (bench/eval_corpus.py): a memory-eval file's items as one user's
memory (or spread over users and tenants), its questions as recalls that name their user; loaded and
measured end to end against the session's server."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from hindsight.client import HindsightClient
from hindsight_server.bench import cpu
from hindsight_server.bench.eval_corpus import eval_corpus, eval_query
from hindsight_server.bench.evaluate import EvalFileError
from hindsight_server.bench.recall import report, run_recall_bench
from hindsight_server.process.running import RunningServer


def test_items_cycle_into_one_users_memory(eval_file: Path) -> None:
    corpus = eval_corpus(eval_file, 10)
    contents = [m.content for m in corpus.memories]
    assert contents[:4] == [
        'Ana said, "I adopted a grey cat named Pip"',
        'Ben said, "Pip sounds lovely"',
        'Ana said, "I start at the harbour office in May"',
        "用户喜欢靠窗的座位",
    ]
    assert contents[4] == 'Ana said, "I adopted a grey cat named Pip" (#1)'  # later passes differ
    assert len(set(contents)) == 10
    assert {(m.tenant, m.subject) for m in corpus.memories} == {(0, "user-0")}
    assert len({m.idempotency_key for m in corpus.memories}) == 10
    # The newest last, a second apart, whatever N: the session channel and recency see a
    # conversation's order, and a larger load of the same corpus continues it.
    ages = [m.age_s for m in corpus.memories]
    assert ages == sorted(ages, reverse=True) and ages[0] - ages[1] == 1.0
    assert [m.age_s for m in eval_corpus(eval_file, 4).memories] == ages[:4]
    assert corpus.memories[0].session_id == "c1-s1-c0" and corpus.memories[4].session_id == "c1-s1-c1"
    assert set(corpus.questions) == {"What is the cat called?", "Where does Ana work?", "座位偏好"}


def test_users_and_tenants_share_the_memories_evenly(eval_file: Path) -> None:
    corpus = eval_corpus(eval_file, 24, users=3, tenants=2)
    held = Counter((m.tenant, m.subject) for m in corpus.memories)
    assert len(held) == 6 and set(held.values()) == {4}
    rng = random.Random(1)
    asked = {(q.tenant_id, q.subject) for q in (eval_query(corpus, rng) for _ in range(200))}
    # Every recall names a user, and every user is asked about.
    assert asked == {(corpus.tenant_id(t), f"user-{u}") for t in range(2) for u in range(3)}


def test_a_file_that_is_not_memory_eval_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"rows": []}', encoding="utf-8")
    with pytest.raises(EvalFileError, match="not a memory-eval v1 file"):
        eval_corpus(path, 10)
    empty = tmp_path / "empty.json"
    empty.write_text('{"conversations": []}', encoding="utf-8")
    with pytest.raises(ValueError, match="no items or no questions"):
        eval_corpus(empty, 10)
    with pytest.raises(ValueError, match="at least 1"):
        eval_corpus(path, 10, users=0)


async def test_the_real_text_bench_loads_once_and_recalls_by_user(
    server: RunningServer, eval_file: Path
) -> None:
    target = f"127.0.0.1:{server.port}"
    corpus = eval_corpus(eval_file, 40, users=2)
    result = await run_recall_bench(target, corpus, concurrency=1, seconds=1, warmup_s=0.2, progress=None)

    assert (result.load.memories, result.load.created) == (40, 40)
    assert result.error_count == 0 and result.recalls > 0, result.errors
    assert result.query_mix.get("subject") == 1.0  # every recall names its user
    assert result.hits_per_recall > 0
    # The test server runs in this process beside a local PostgreSQL: both are measured.
    assert {"server", "postgres"} <= set(result.cpu_ms_per_recall)
    assert all(ms >= 0 for ms in result.cpu_ms_per_recall.values())
    assert "recall.channel.lexical" in result.stages
    async with HindsightClient(target, timeout_s=30) as client:
        held = Counter([m.subject async for m in client.list_all(corpus.tenant_id(0), page_size=500)])
    assert held == {"user-0": 20, "user-1": 20}
    text = report(result, as_json=False)
    assert corpus.prefix in text and "CPU per recall" in text


def test_cpu_per_call_counts_each_process_and_never_goes_negative() -> None:
    before = cpu.CpuSample({("postgres", 1): 2.0, ("postgres", 2): 5.0, ("server", 9): 1.0})
    # Process 2 ended (its time is gone), process 3 started: neither makes the figure negative.
    after = cpu.CpuSample({("postgres", 1): 2.5, ("postgres", 3): 0.3, ("server", 9): 1.2})
    assert after.seconds and before.per_call_ms(after, 10) == pytest.approx(
        {"postgres": 80.0, "server": 20.0}
    )
    assert before.per_call_ms(after, 0) == {}
