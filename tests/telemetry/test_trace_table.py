"""The console exporter's lines of a real recall, read back as BENCHMARKS.md's trace table."""

from __future__ import annotations

import io

from hindsight.client import HindsightClient
from hindsight.telemetry import _one_line_span
from hindsight_server.bench.trace import RECALL_SPAN, pick, read_spans, table
from tests.telemetry.conftest import Telemetry, spans_of_trace


async def test_console_lines_make_the_stage_table(
    otel: Telemetry, traced_client: HindsightClient, tenant: str
) -> None:
    await traced_client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference")
    otel.spans.clear()
    await traced_client.recall(tenant, "靠窗")
    finished = await spans_of_trace(otel, lambda spans: any(s.name == RECALL_SPAN for s in spans))
    console = "".join(_one_line_span(span) for span in finished)

    spans = read_spans(io.StringIO("a log line on stderr\n" + console))
    root = pick(spans, "median")
    rendered = table(spans, root)
    lines = rendered.splitlines()
    assert lines[2].startswith(f"| {RECALL_SPAN} | server | 0.00 |")
    for stage in ("recall.channel.lexical", "recall.fuse", "recall.rank", "recall.pack"):
        assert any(f"&nbsp;&nbsp;&nbsp;&nbsp;{stage} | internal |" in line for line in lines), stage
    assert any("SELECT memories | client |" in line for line in lines)
