"""Property-based tests against the session's real server: a raw stub (no client-side keys or retries,
so the requests arrive exactly as built), a health check after every test (the server still answers),
and the number of cases tried, by method and status code, in the run's summary.

HINDSIGHT_FUZZ_EXAMPLES scales every test's examples (default 1.0; e.g. 20 for a long hunt).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, settings

from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight_server.process.running import RunningServer
from tests.fuzz.checks import TALLY
from tests.support.figures import by_code, print_section, report

SECTION = "fuzz"
SCALE = float(os.environ.get("HINDSIGHT_FUZZ_EXAMPLES", "1"))


def examples(count: int) -> settings:
    """Hypothesis settings for a test of `count` examples (scaled), bounded by count rather than time."""
    return settings(
        max_examples=max(1, int(count * SCALE)),
        deadline=None,
        database=None,  # nothing written into the tree; a failure prints its reproducing example
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.function_scoped_fixture,  # the tenant is the test's, shared by its examples
        ],
    )


@pytest.fixture(scope="module")
async def channel(server: RunningServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{server.port}", options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]
    ) as opened:
        yield opened


@pytest.fixture(scope="module")
def stub(channel: grpc.aio.Channel) -> pb_grpc.MemoryServiceAsyncStub:
    return pb_grpc.MemoryServiceStub(channel)


@pytest.fixture(autouse=True)
async def still_serving(channel: grpc.aio.Channel) -> AsyncIterator[None]:
    yield
    health = health_pb2_grpc.HealthStub(channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not TALLY:
        return
    grpc_calls = {m: codes for m, codes in TALLY.items() if not m.startswith("mcp:")}
    tool_calls = {m: codes for m, codes in TALLY.items() if m.startswith("mcp:")}
    internal = sum(codes["INTERNAL"] + codes["UNKNOWN"] for codes in grpc_calls.values())
    report(
        SECTION,
        f"{sum(sum(c.values()) for c in grpc_calls.values())} gRPC calls over {len(grpc_calls)} RPCs "
        f"(INTERNAL or UNKNOWN: {internal}); {sum(sum(c.values()) for c in tool_calls.values())} MCP calls "
        "(tracebacks or gateway catch-alls: 0, else the run failed)",
        echo=False,
    )
    for method, codes in sorted(TALLY.items()):
        report(SECTION, f"  {method}: {sum(codes.values())} ({by_code(codes)})", echo=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    print_section(terminalreporter, SECTION)
