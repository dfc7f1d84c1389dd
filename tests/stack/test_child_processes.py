"""The supervisor's children (stack/children.py) die with it: each is started through a launcher that
sets PR_SET_PDEATHSIG and then becomes the child's own program, keeping its pid."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.eventually import eventually_blocking

SUPERVISOR = """
import asyncio, os
from hindsight_server.stack.children import Child

async def main():
    child = Child("sleeper", "", ["sleep", "60"], dict(os.environ))
    await child.spawn()
    print(child.process.pid, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def _state(pid: int) -> str:
    """The process's state letter (R, S, Z, ...); "" once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return ""
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_keeps_its_pid_and_dies_with_the_supervisor() -> None:
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        assert supervisor.stdout is not None
        child = int(supervisor.stdout.readline())
        # The launcher became the program: the pid the supervisor holds is sleep's own.
        eventually_blocking(
            lambda: Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0] == b"sleep", timeout_s=10
        )
        assert _state(child) in {"S", "R"}
        supervisor.kill()  # no chance to stop its children itself
        supervisor.wait()
        eventually_blocking(lambda: _state(child) in {"", "Z"}, timeout_s=10)
    finally:
        supervisor.kill()
        supervisor.wait()
