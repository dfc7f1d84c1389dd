"""`hindsight console` as a person starts it: its own process, the line saying where it listens, a clean
stop on Ctrl-C, and a clear refusal (exit 2) of a bad flag or variable."""

from __future__ import annotations

import httpx2

from tests.support.processes import Background, run_cli


async def test_the_console_command_serves_and_stops(memory_target: str) -> None:
    console = Background(["console", "--listen", "127.0.0.1:0", "--target", memory_target])
    await console.start()
    try:
        listening = r"hindsight console listening on (http://127\.0\.0\.1:\d+/) -> ([^,\s]+)"
        match = await console.wait_for(listening)
        assert match.group(2) == memory_target
        async with httpx2.AsyncClient(base_url=match.group(1), timeout=10) as http:
            assert (await http.get("/healthz")).text == "ok"
            assert "API key" in (await http.get("/login")).text
    finally:
        assert await console.stop() == 0


async def test_bad_settings_stop_it_at_start_naming_them() -> None:
    flag = await run_cli(["console", "--listen", "localhost"])
    assert flag.code == 2 and "--listen: HOST:PORT" in flag.stderr
    variable = await run_cli(["console"], env={"HINDSIGHT_CONSOLE__SESSION_IDLE_S": "-1"})
    assert variable.code == 2
    assert "HINDSIGHT_CONSOLE__SESSION_IDLE_S: Input should be greater than 0" in variable.stderr
    assert "Traceback" not in variable.stderr
