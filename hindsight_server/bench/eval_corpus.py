"""The benchmarks' real-text corpus: one user's memory, as an agent produces it.

The items of a memory-eval v1 file (`hindsight eval`'s format, docs/eval-format.md; the caller names
it with --corpus, there is no default) cycled to N, all in one tenant and one subject, or
spread over `users` subjects of each of `tenants` tenants; their questions are the queries, each naming
the subject whose memory it searches, as an agent does. Later passes over the items get " (#c)"
appended (as the peers' benchmark does), so no two memories are identical. The synthetic corpus
(corpus.py) spreads 100k templated memories over 100 tenants and thousands of subjects, so a recall's
filtered set is rarely large: it once hid that recall cost grew with one user's memory.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from hindsight_server.bench.corpus import CorpusMemory, RecallCorpus, RecallQuerySpec
from hindsight_server.bench.evaluate import load_eval_file
from hindsight_server.domain.language import language

# One memory a second, memory i recorded (HORIZON - i) s before its load: a later, larger load of the
# same corpus continues it in order, and a million memories span 11.6 days (inside the episodic TTL).
TURN_GAP_S = 1.0
HORIZON = 1_000_000


def eval_corpus(path: Path, count: int, *, users: int = 1, tenants: int = 1) -> RecallCorpus:
    """The first `count` memories of the file's items cycled, memory i in tenant i % tenants and
    subject (i // tenants) % users, so every subject holds count / (users x tenants) of them."""
    if count < 1 or users < 1 or tenants < 1:
        raise ValueError("memories, users and tenants must be at least 1")
    conversations = load_eval_file(path)
    items = [(c.id, item) for c in conversations for item in c.items if item.text.strip()]
    questions = tuple(q.question for c in conversations for q in c.queries if q.question.strip())
    if not items or not questions:
        raise ValueError(f"{path}: no items or no questions to benchmark with")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    memories = []
    for index in range(count):
        cycle, position = divmod(index, len(items))
        conversation, item = items[position]
        scope = index % (users * tenants)
        memories.append(
            CorpusMemory(
                index=index,
                tenant=scope % tenants,
                subject=f"user-{scope // tenants}",
                session_id=f"{conversation}-{item.session_id}-c{cycle}",
                tier="episodic",
                kind="fact",
                cluster=-1,
                language="",
                content=item.content + (f" (#{cycle})" if cycle else ""),
                entities={},
                confidence=1.0,
                age_s=(HORIZON - index) * TURN_GAP_S,
                idempotency_key=f"ebench:{digest}:{index}",
            )
        )
    return RecallCorpus(
        seed=0,
        tenants=tenants,
        memories=memories,
        label=f"ebench-v1-{digest}-u{users}-t{tenants}",
        questions=questions,
        users=users,
    )


def eval_query(corpus: RecallCorpus, rng: random.Random) -> RecallQuerySpec:
    """One of the file's questions, asked of a random user's memory (every user holds as much)."""
    scope = rng.randrange(min(len(corpus.memories), corpus.users * corpus.tenants))
    text = rng.choice(corpus.questions)
    return RecallQuerySpec(
        tenant_id=corpus.tenant_id(scope % corpus.tenants),
        text=text,
        language=language(text),
        subject=f"user-{scope // corpus.tenants}",
    )
