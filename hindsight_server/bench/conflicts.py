"""How well the conflict rules tell an update from a duplicate from a look-alike, through a real server:
`hindsight bench conflicts`.

Each labelled case (conflict_cases.tsv, shipped beside this module) is a pair of memories written one
after the other under a subject of its own, so the only memory the second can meet is the first, with
the real embeddings' similarity. The second write's resolution is the rules' answer; precision and
recall of "superseded" and "merged" are counted over all cases.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hindsight.client import HindsightClient

__all__ = ["CASES_FILE", "ConflictCase", "ConflictScores", "load_cases", "report", "run_conflict_bench"]

CASES_FILE = Path(__file__).with_name("conflict_cases.tsv")
_ANSWER = {"created": "new", "merged": "merge", "superseded": "supersede"}
_LABELS = ("supersede", "merge", "new")


@dataclass(frozen=True, slots=True)
class ConflictCase:
    expected: str  # supersede | merge | new
    first: str
    second: str


@dataclass(frozen=True, slots=True)
class Outcome:
    case: ConflictCase
    answered: str  # supersede | merge | new
    reason: str


@dataclass(frozen=True, slots=True)
class ConflictScores:
    cases: int
    confusion: dict[str, dict[str, int]]  # expected -> answered -> count
    precision: dict[str, float]  # of supersede and merge
    recall: dict[str, float]
    wrong: list[dict[str, str]]  # the cases answered otherwise, with the rules' reason


def load_cases(path: Path = CASES_FILE) -> list[ConflictCase]:
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3 or fields[0] not in _LABELS:
            raise ValueError(f"{path}:{number}: expected 'supersede|merge|new<TAB>first<TAB>second'")
        cases.append(ConflictCase(*fields))
    return cases


def score(outcomes: list[Outcome]) -> ConflictScores:
    confusion = {label: dict.fromkeys(_LABELS, 0) for label in _LABELS}
    for outcome in outcomes:
        confusion[outcome.case.expected][outcome.answered] += 1
    answered = Counter(outcome.answered for outcome in outcomes)
    expected = Counter(outcome.case.expected for outcome in outcomes)
    precision = {
        label: confusion[label][label] / answered[label] if answered[label] else float("nan")
        for label in ("supersede", "merge")
    }
    recall = {
        label: confusion[label][label] / expected[label] if expected[label] else float("nan")
        for label in ("supersede", "merge")
    }
    wrong = [
        {**asdict(outcome.case), "answered": outcome.answered, "reason": outcome.reason}
        for outcome in outcomes
        if outcome.answered != outcome.case.expected
    ]
    return ConflictScores(len(outcomes), confusion, precision, recall, wrong)


async def run_conflict_bench(target: str, cases: list[ConflictCase], concurrency: int = 4) -> ConflictScores:
    tenant = f"conflicts-{uuid.uuid4().hex[:8]}"
    in_flight = asyncio.Semaphore(concurrency)
    async with HindsightClient(target, timeout_s=30) as client:

        async def one(number: int, case: ConflictCase) -> Outcome:
            fields: dict[str, Any] = {"tier": "semantic", "kind": "fact", "subject": f"case-{number}"}
            async with in_flight:
                await client.write(tenant, case.first, **fields)
                response = await client.write(tenant, case.second, **fields)
            return Outcome(
                case, _ANSWER.get(response.resolution, response.resolution), response.resolution_reason
            )

        outcomes = await asyncio.gather(*(one(number, case) for number, case in enumerate(cases)))
    return score(list(outcomes))


def report(scores: ConflictScores, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(scores), ensure_ascii=False, indent=2)
    lines = [f"{scores.cases} labelled cases (rows: expected, columns: answered)"]
    lines.append(f"{'':12}" + "".join(f"{label:>11}" for label in _LABELS))
    for label in _LABELS:
        lines.append(f"{label:12}" + "".join(f"{scores.confusion[label][a]:>11}" for a in _LABELS))
    for label in ("supersede", "merge"):
        lines.append(f"{label}: precision {scores.precision[label]:.3f}, recall {scores.recall[label]:.3f}")
    for case in scores.wrong:
        lines.append(
            f"  expected {case['expected']}, answered {case['answered']}: "
            f"{case['first']!r} -> {case['second']!r} ({case['reason']})"
        )
    return "\n".join(lines)
