"""`hindsight up` (what `make up` runs): the whole embedded stack, the README's example, a clean Ctrl-C
that leaves no process behind, and memories that survive a restart."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.support.processes import Background, free_port, pid_alive, run_cli


async def _up(data_dir: Path, port: int) -> tuple[Background, list[int]]:
    stack = Background(["up", "--data-dir", str(data_dir), "--port", str(port)])
    await stack.start()
    await stack.wait_for(r"hindsight is up:[\s\S]*Ctrl-C stops everything")
    postgres_pid = int(re.search(r"postgres\s+embedded, pid (\d+)", stack.output).group(1))  # type: ignore[union-attr]
    return stack, [postgres_pid]


@pytest.mark.timeout(120)
async def test_up_serves_the_readme_example_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    target = f"127.0.0.1:{port}"
    stack, pids = await _up(tmp_path / "data", port)
    try:
        assert f"memory server    grpc://{target}" in stack.output
        written = await run_cli(
            [
                "write",
                "--target",
                target,
                "--tenant",
                "acme",
                "--subject",
                "user-7",
                "--session",
                "s1",
                "--tier",
                "semantic",
                "--kind",
                "preference",
                "--content",
                "用户偏好靠窗座位",
                "--json",
            ]
        )
        assert written.code == 0, written.stderr
        memory_id = re.search(r'"id": "([0-9a-f-]{36})"', written.stdout).group(1)  # type: ignore[union-attr]
        recalled = await run_cli(
            ["recall", "--target", target, "--tenant", "acme", "--query", "靠窗", "--json"]
        )
        assert recalled.code == 0, recalled.stderr
        assert memory_id in recalled.stdout
        server_pids = [int(p) for p in re.findall(r"INFO (\d+) hindsight_server.app", stack.output)]
    finally:
        code = await stack.stop(signal.SIGINT)
    assert code == 0, stack.output
    assert "hindsight stopped" in stack.output
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
    assert result.code == 1
    assert result.stderr.startswith("error: UNAVAILABLE") or result.stderr.startswith(
        "error: DEADLINE_EXCEEDED"
    )
    assert "Traceback" not in result.stderr
    bad_json = await run_cli(
        [
            "write",
            "--tenant",
            "a",
            "--tier",
            "semantic",
            "--kind",
            "fact",
            "--content",
            "x",
            "--entities",
            "{not json",
        ]
    )
    assert bad_json.code == 2
    assert "--entities: not valid JSON" in bad_json.stderr
