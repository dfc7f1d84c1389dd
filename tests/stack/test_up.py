"""`hindsight up` (what `make up` runs): the whole embedded stack, the README's example (also through the
MCP gateway it starts), a clean Ctrl-C that leaves no process behind, and memories that survive a restart."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from hindsight_server.config import Settings
from hindsight_server.stack.supervisor import Stack
from tests.support.eventually import eventually
from tests.support.mcp_sessions import http_session
from tests.support.processes import Background, free_port, free_ports, pid_alive, run_cli


async def _up(data_dir: Path, port: int) -> tuple[Background, list[int]]:
    """Starts the stack; returns it and the pids of PostgreSQL and Triton from its banner."""
    # Chosen together: ports picked one by one can be handed out twice (two of them once were).
    http, grpc, metrics, mcp, console = [p for p in free_ports(6) if p != port][:5]
    triton_ports = {
        "HINDSIGHT_STACK__TRITON_HTTP_PORT": str(http),
        "HINDSIGHT_STACK__TRITON_GRPC_PORT": str(grpc),
        "HINDSIGHT_STACK__TRITON_METRICS_PORT": str(metrics),
    }
    gateway = {
        "HINDSIGHT_MCP__PORT": str(mcp),
        "HINDSIGHT_MCP__TENANT": "acme",
        "HINDSIGHT_CONSOLE__PORT": str(console),
    }
    stack = Background(["up", "--data-dir", str(data_dir), "--port", str(port)], env=triton_ports | gateway)
    await stack.start()
    await stack.wait_for(r"hindsight is up:[\s\S]*Ctrl-C stops everything", timeout_s=90)
    pids = re.findall(r"(?:postgres\s+embedded|triton\s+grpc://\S+ \(embed[^)]*\)), pid (\d+)", stack.output)
    assert len(pids) == 2, stack.output
    return stack, [int(pid) for pid in pids]


@pytest.mark.timeout(180)
async def test_up_serves_the_readme_example_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    target = f"127.0.0.1:{port}"
    stack, pids = await _up(tmp_path / "data", port)
    try:
        assert f"memory server    grpc://{target}" in stack.output
        common = f"--target {target} --tenant acme".split()
        written = await run_cli(
            ["write", *common, *"--subject user-7 --session s1 --tier semantic --kind preference".split(),
             "--content", "用户偏好靠窗座位", "--json"]
        )  # fmt: skip
        assert written.code == 0, written.stderr
        memory_id = re.search(r'"id": "([0-9a-f-]{36})"', written.stdout).group(1)  # type: ignore[union-attr]
        await _embedded_soon(
            target, memory_id
        )  # Triton embedded it (inline, or the worker on a busy machine)
        recalled = await run_cli(["recall", *common, "--query", "靠窗", "--json"])
        assert recalled.code == 0, recalled.stderr
        assert memory_id in recalled.stdout
        # The embedded Triton connects a query in another language to the memory.
        english = await run_cli(["recall", *common, "--query", "window seat", "--json"])
        assert memory_id in english.stdout and "CHANNEL_VECTOR" in english.stdout
        # The MCP gateway `up` started serves the same memories (loopback, no token: the configured tenant).
        mcp_url = re.search(r"mcp gateway\s+(http://127\.0\.0\.1:\d+/mcp)", stack.output).group(1)  # type: ignore[union-attr]
        async with http_session(mcp_url) as session:
            through_mcp = await session.call_tool("memory_recall", {"session_id": "s9", "query": "靠窗"})
        assert through_mcp.structured_content is not None, through_mcp
        assert memory_id in [hit["id"] for hit in through_mcp.structured_content["hits"]]
        server_pids = [int(p) for p in re.findall(r"INFO (\d+) hindsight_server\.process\.", stack.output)]
        server_pids += [
            int(p) for p in re.findall(r"hindsight mcp listening on \S+ .*pid (\d+)", stack.output)
        ]
        assert len(set(server_pids)) == 2, stack.output
    finally:
        code = await stack.stop(signal.SIGINT)
    assert code == 0, stack.output
    assert "hindsight stopped" in stack.output
    assert server_pids
    assert not [pid for pid in pids + server_pids if pid_alive(pid)]

    # Data lives under the data directory: a new stack finds what the old one stored.
    stack, _ = await _up(tmp_path / "data", port)
    try:
        got = await run_cli(["get", "--target", target, "--tenant", "acme", memory_id])
        assert got.code == 0 and "用户偏好靠窗座位" in got.stdout
    finally:
        assert await stack.stop(signal.SIGTERM) == 0


async def test_cli_reports_errors_without_tracebacks() -> None:
    port = free_port()  # nothing listens there
    result = await run_cli(
        ["get", "--target", f"127.0.0.1:{port}", "--tenant", "acme", "x", "--timeout", "1"]
    )
    assert result.code == 3  # not reached: a code of its own
    assert result.stderr.startswith(f"error: cannot reach hindsight at 127.0.0.1:{port}")
    assert "Traceback" not in result.stderr
    bad_json = await run_cli(
        ["write", *"--tenant a --tier semantic --kind fact --content x --entities".split(), "{not json"]
    )
    assert bad_json.code == 2
    assert "--entities: not valid JSON" in bad_json.stderr


async def _embedded_soon(target: str, memory_id: str, timeout_s: float = 20.0) -> None:
    shown = [""]  # what the last `get` printed

    async def embedded() -> bool:
        got = await run_cli(["get", "--target", target, "--tenant", "acme", memory_id, "--json"])
        assert got.code == 0, got.stderr
        shown[0] = got.stdout
        return '"embedding_state": "EMBEDDING_STATE_READY"' in got.stdout

    await eventually(embedded, timeout_s, poll_s=0.2, message=lambda: shown[0])


@pytest.mark.parametrize("keys", [None, "false"])
async def test_up_refuses_keyless_mode_off_loopback_before_starting_anything(
    tmp_path: Path, keys: str | None
) -> None:
    env = {"HINDSIGHT_SERVER__HOST": "0.0.0.0"}
    if keys is not None:
        env["HINDSIGHT_SECURITY__REQUIRE_API_KEYS"] = keys
    result = await run_cli(["up", "--data-dir", str(tmp_path), "--port", str(free_port())], env=env)
    assert result.code == 1
    assert "hindsight up failed: refusing to serve on 0.0.0.0 without API keys" in result.stderr
    assert not (tmp_path / "postgres").exists()


@pytest.mark.parametrize(
    ("host", "keys", "refused"),
    [("127.0.0.1", None, False), ("::1", None, False), ("10.0.0.5", None, True), ("0.0.0.0", True, False)],
)
def test_keys_are_needed_off_loopback_only(host: str, keys: bool | None, refused: bool) -> None:
    security = {} if keys is None else {"require_api_keys": keys}
    stack = Stack(Settings(server={"host": host}, security=security))
    assert (stack.keyless_refusal() is not None) == refused
    assert stack.keys_required == bool(keys)
