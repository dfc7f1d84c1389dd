"""One recall's trace as a table, from the console exporter's output (BENCHMARKS.md, "Tracing").

    HINDSIGHT_TELEMETRY__EXPORTER=console hindsight serve ... 2> spans.jsonl
    python -m hindsight_server.bench.trace spans.jsonl [--pick median|slowest|fastest|TRACE_ID]

Reads the one-JSON-object-per-line spans, finds every recall's trace (its server span), picks one (by
default the one of median duration: a typical recall), and prints its spans in start order, indented by
depth, with the start offset from the server span and the duration, as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

RECALL_SPAN = "hindsight.v1.MemoryService/Recall"
# The attributes worth a column: counts and flags (the spans carry nothing else).
_SHOWN = (
    "hindsight.rows",
    "hindsight.candidates",
    "hindsight.packed",
    "hindsight.hits",
    "hindsight.cache_hit",
    "hindsight.inference.batch_size",
    "db.response.returned_rows",
)


@dataclass(frozen=True, slots=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str
    start: datetime
    end: datetime
    attributes: dict[str, Any]

    @property
    def duration_ms(self) -> float:
        return (self.end - self.start).total_seconds() * 1000


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def read_spans(lines: TextIO) -> list[Span]:
    spans = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{") or '"context"' not in line:
            continue  # log lines and metrics share stderr
        data = json.loads(line)
        spans.append(
            Span(
                name=data["name"],
                trace_id=data["context"]["trace_id"],
                span_id=data["context"]["span_id"],
                parent_id=data.get("parent_id"),
                kind=data["kind"].removeprefix("SpanKind."),
                start=_time(data["start_time"]),
                end=_time(data["end_time"]),
                attributes=data.get("attributes") or {},
            )
        )
    return spans


def pick(spans: Sequence[Span], how: str) -> Span:
    recalls = sorted((s for s in spans if s.name == RECALL_SPAN), key=lambda s: s.duration_ms)
    if not recalls:
        raise SystemExit(f"no {RECALL_SPAN} server span in the input")
    if how == "median":
        return recalls[(len(recalls) - 1) // 2]
    if how == "slowest":
        return recalls[-1]
    if how == "fastest":
        return recalls[0]
    by_id = [s for s in recalls if s.trace_id.removeprefix("0x") == how.removeprefix("0x")]
    if not by_id:
        raise SystemExit(f"no recall with trace id {how}")
    return by_id[0]


def table(spans: Sequence[Span], root: Span) -> str:
    in_trace = [s for s in spans if s.trace_id == root.trace_id]
    children: dict[str | None, list[Span]] = {}
    for span in in_trace:
        children.setdefault(span.parent_id, []).append(span)
    rows = [
        "| span | kind | start (ms) | duration (ms) | figures |",
        "|---|---|---:|---:|---|",
    ]

    def walk(span: Span, depth: int) -> None:
        offset = (span.start - root.start).total_seconds() * 1000
        figures = ", ".join(
            f"{key.rsplit('.', 1)[-1]}={span.attributes[key]}" for key in _SHOWN if key in span.attributes
        )
        indent = "&nbsp;&nbsp;" * depth
        kind = span.kind.lower()
        rows.append(f"| {indent}{span.name} | {kind} | {offset:.2f} | {span.duration_ms:.2f} | {figures} |")
        for child in sorted(children.get(span.span_id, []), key=lambda s: (s.start, s.name)):
            walk(child, depth + 1)

    walk(root, 0)
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hindsight_server.bench.trace", description=__doc__)
    parser.add_argument("file", help="the console exporter's output (one span per line); - for stdin")
    parser.add_argument("--pick", default="median", help="median (default), slowest, fastest or a trace id")
    args = parser.parse_args(argv)
    if args.file == "-":
        spans = read_spans(sys.stdin)
    else:
        with open(args.file, encoding="utf-8") as handle:
            spans = read_spans(handle)
    root = pick(spans, args.pick)
    recalls = sum(1 for s in spans if s.name == RECALL_SPAN)
    print(f"trace {root.trace_id}: {root.duration_ms:.2f} ms ({args.pick} of {recalls} recalls)\n")
    print(table(spans, root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
