"""Log lines carry the trace context of the request they were logged in: a real traced call that fails
inside the server logs "unhandled error in request ..." ending with the server span's trace_id and
span_id; `hindsight serve`'s logging (cli/local.py configure_logging) formats every line that way. With
log_format = "json" the line is one JSON object carrying the call's request id and trace context."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from hindsight.client import HindsightClient
from hindsight.telemetry import JsonFormatter, TraceContextFormatter
from hindsight_server.process.running import RunningServer
from hindsight_server.rpc.context import RequestIdFilter
from tests.conftest import REPO_ROOT
from tests.telemetry.conftest import Telemetry, context_of, spans_of_trace

RECALL = "hindsight.v1.MemoryService/Recall"


@pytest.fixture
def server_log() -> Iterator[io.StringIO]:
    """What the server's error mapper logs, through the formatter `hindsight serve` uses."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TraceContextFormatter())
    logger = logging.getLogger("hindsight_server.rpc.errors")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


@pytest.fixture
def json_server_log() -> Iterator[io.StringIO]:
    """The same, through what `hindsight serve` installs with log_format = "json"."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestIdFilter())
    logger = logging.getLogger("hindsight_server.rpc.errors")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


async def test_a_json_log_line_carries_the_calls_request_id_and_trace(
    otel: Telemetry,
    traced_server: RunningServer,
    tenant: str,
    json_server_log: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the answer could not be built")

    monkeypatch.setattr("hindsight_server.rpc.convert.recall_result_to_proto", broken)
    trace_id, caller = uuid.uuid4().int, uuid.uuid4().int >> 64
    request_id = f"req-{uuid.uuid4().hex[:8]}"
    metadata = [("traceparent", f"00-{trace_id:032x}-{caller:016x}-01"), ("x-request-id", request_id)]
    async with HindsightClient(f"127.0.0.1:{traced_server.port}", timeout_s=10, metadata=metadata) as client:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await client.recall(tenant, "window seat")
    assert failed.value.code() is grpc.StatusCode.INTERNAL

    def served(spans: Sequence[ReadableSpan]) -> bool:
        return any(s.name == RECALL and context_of(s).trace_id == trace_id for s in spans)

    spans = await spans_of_trace(otel, served)
    (server,) = [s for s in spans if s.name == RECALL and context_of(s).trace_id == trace_id]
    (line,) = json_server_log.getvalue().splitlines()  # the traceback is inside the object
    entry = json.loads(line)
    assert entry["level"] == "ERROR" and entry["logger"] == "hindsight_server.rpc.errors"
    assert entry["message"] == f"unhandled error in request {request_id}"
    assert entry["request_id"] == request_id
    assert entry["trace_id"] == f"{trace_id:032x}"
    assert entry["span_id"] == f"{context_of(server).span_id:016x}"
    assert "RuntimeError: the answer could not be built" in entry["exception"]
    assert entry["time"].endswith("+00:00")

    logging.getLogger("hindsight_server.rpc.errors").error("outside any request")
    outside = json.loads(json_server_log.getvalue().splitlines()[-1])
    assert outside["message"] == "outside any request"
    assert "request_id" not in outside and "trace_id" not in outside


async def test_a_log_line_of_a_traced_call_names_its_trace_and_span(
    otel: Telemetry,
    traced_server: RunningServer,
    tenant: str,
    server_log: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the answer could not be built")

    monkeypatch.setattr("hindsight_server.rpc.convert.recall_result_to_proto", broken)
    trace_id, caller = uuid.uuid4().int, uuid.uuid4().int >> 64
    async with HindsightClient(
        f"127.0.0.1:{traced_server.port}",
        timeout_s=10,
        metadata=[("traceparent", f"00-{trace_id:032x}-{caller:016x}-01")],
    ) as client:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await client.recall(tenant, "靠窗")
    assert failed.value.code() is grpc.StatusCode.INTERNAL

    def served(spans: Sequence[ReadableSpan]) -> bool:
        return any(s.name == RECALL and context_of(s).trace_id == trace_id for s in spans)

    spans = await spans_of_trace(otel, served)
    (server,) = [s for s in spans if s.name == RECALL and context_of(s).trace_id == trace_id]
    assert server.kind is SpanKind.SERVER
    # INTERNAL is the server's failure: an error, with the code as error.type.
    assert server.attributes is not None and server.attributes["rpc.response.status_code"] == "INTERNAL"
    assert server.attributes["error.type"] == "INTERNAL" and server.status.status_code is StatusCode.ERROR

    lines = server_log.getvalue().splitlines()
    (line,) = [line for line in lines if "unhandled error in request" in line]
    span_id = context_of(server).span_id
    assert line.endswith(f" trace_id={trace_id:032x} span_id={span_id:016x}"), line
    assert "Traceback (most recent call last):" in lines  # the traceback follows, on lines of its own

    logging.getLogger("hindsight_server.rpc.errors").error("outside any request")
    assert server_log.getvalue().splitlines()[-1].endswith("outside any request")


def test_the_servers_log_format_carries_the_trace_context() -> None:
    """cli/local.py configure_logging (what `hindsight serve` and `up` run) in a process of its own."""
    script = """
import logging
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from hindsight_server.cli.local import configure_logging
from hindsight_server.config import load_settings

trace.set_tracer_provider(TracerProvider())
configure_logging(load_settings(None))
with trace.get_tracer("probe").start_as_current_span("request") as span:
    context = span.get_span_context()
    print(f"{context.trace_id:032x} {context.span_id:016x}", flush=True)
    logging.getLogger("probe").warning("inside")
logging.getLogger("probe").warning("outside")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False
    )
    assert result.returncode == 0, result.stderr
    trace_id, span_id = result.stdout.split()
    inside, outside = [line for line in result.stderr.splitlines() if " probe: " in line]
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d [\d:,]+ WARNING \d+ probe: inside trace_id={trace_id} span_id={span_id}", inside
    ), inside
    assert outside.endswith("probe: outside") and "trace_id=" not in outside  # outside any span
