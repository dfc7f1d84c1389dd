"""The client commands (hindsight_server/cli/client.py, args.py) run as a user runs them: real child
processes against the session's real server. Sessions, the pending area and history from a shell; `get`
readable and typed; the hint when no server answers; `--version`; help on every flag; progress on stderr
only when asked for."""

from __future__ import annotations

import argparse
import json
import re
import uuid
from pathlib import Path
from typing import Any

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.cli.parser import build_parser
from hindsight_server.process.running import RunningServer
from tests.support.memory_fields import MemoryFields
from tests.support.processes import CliResult, free_port, run_cli


def _common(server: RunningServer, tenant: str) -> list[str]:
    return ["--target", f"127.0.0.1:{server.port}", "--tenant", tenant]


async def _ok(args: list[str]) -> CliResult:
    result = await run_cli(args)
    assert result.code == 0, result.stderr
    return result


async def _json(args: list[str]) -> Any:
    return json.loads((await _ok([*args, "--json"])).stdout)


async def test_a_session_from_the_shell(server: RunningServer, tenant: str) -> None:
    common = _common(server, tenant)
    session = f"s-{uuid.uuid4().hex[:8]}"
    first = await _ok(
        ["session", "append", session, *common, "--text", "我要订下周三下午的会议室, 10个人, A栋",
         "--subject", "u1"]
    )  # fmt: skip
    assert first.stdout.startswith(f"turn 1 (user) in session {session}\n")
    assert "summary: " in first.stdout
    reply = await _json(
        ["session", "append", session, *common, "--role", "assistant", "--text", "好的，A栋301有空"]
    )
    assert reply["turn"]["index"] == 2 and reply["turn"]["role"] == "ROLE_ASSISTANT"
    assert reply["summary"]["turn_count"] == 2  # int64 fields are JSON numbers

    summary = await _ok(["session", "summarize", session, *common])
    lines = summary.stdout.splitlines()
    assert lines[0].split() == ["session", session]
    assert any(line.startswith("confirmed ") and '"people": 10' in line for line in lines)
    assert any(line.split()[:2] == ["turns", "2"] for line in lines)
    assert "recent turns" in lines and lines[-1].split()[:2] == ["2.", "assistant"]
    typed = await _json(["session", "summarize", session, *common])
    assert typed["turn_count"] == 2 and [t["index"] for t in typed["recent_turns"]] == [1, 2]

    ended = await _json(["session", "end", session, *common, "--reason", "task_done"])
    assert ended["consolidated"] is True and ended["session_id"] == session
    assert ended["episode"]["tier"] == "TIER_EPISODIC" and type(ended["episode"]["version"]) is int
    again = await _ok(["session", "end", session, *common])
    assert again.stdout.startswith(f"nothing new in session {session} since its last episode")

    unknown = await run_cli(["session", "summarize", "no-such-session", *common])
    assert unknown.code == 1 and unknown.stderr.startswith("error: NOT_FOUND: ")


async def test_pending_memories_from_the_shell(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    common = _common(server, tenant)
    for text in ("I think maybe I like jazz", "我可能喜欢爵士乐"):
        await client.append_turn(tenant, "s", text, subject="u1")
    listed = await _ok(["pending", "list", *common])
    rows = [line.split(maxsplit=3) for line in listed.stdout.splitlines()]
    assert {row[3] for row in rows} == {"I think maybe I like jazz", "我可能喜欢爵士乐"}
    assert all(float(row[2]) < 0.7 for row in rows)  # id, kind, confidence, content
    ids = {row[3]: row[0] for row in rows}
    typed = await _json(["pending", "list", *common, "--page-size", "1"])
    assert len(typed["memories"]) == 1 and typed["next_page_token"]

    confirmed = await _ok(["pending", "confirm", ids["I think maybe I like jazz"], *common])
    assert confirmed.stdout.startswith(f"confirmed {ids['I think maybe I like jazz']}  I think maybe")
    rejected = await _json(["pending", "reject", ids["我可能喜欢爵士乐"], *common])
    assert rejected["status"] == "STATUS_DELETED" and type(rejected["version"]) is int
    twice = await run_cli(["pending", "reject", ids["我可能喜欢爵士乐"], *common])
    assert twice.code == 1 and "FAILED_PRECONDITION" in twice.stderr and "not pending" in twice.stderr
    none_left = await _ok(["pending", "list", *common])
    assert none_left.stdout == "(no memory waits for confirmation)\n"
    assert (await client.get(tenant, ids["I think maybe I like jazz"])).status == pb.STATUS_ACTIVE


async def test_an_agents_private_pending_memory_is_settled_with_its_agent(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    common = _common(server, tenant)
    ids = []
    for text in ("likes jazz, maybe", "likes opera, maybe"):
        written = await client.write(
            tenant, text, tier="semantic", kind="preference", agent_id="agent-a",
            visibility="private", confidence=0.4,
        )  # fmt: skip
        ids.append(written.memory.id)
    kept, dropped = ids
    for action, memory_id in (("confirm", kept), ("reject", dropped)):
        for agent in ([], ["--agent", "agent-b"]):  # no agent, or another agent: it is not theirs to see
            refused = await run_cli(["pending", action, memory_id, *common, *agent])
            assert refused.code == 1 and "NOT_FOUND" in refused.stderr, (action, agent, refused.stderr)
    listed = await _ok(["pending", "list", *common, "--agent", "agent-a"])
    assert {line.split()[0] for line in listed.stdout.splitlines()} == {kept, dropped}
    confirmed = await _ok(["pending", "confirm", kept, *common, "--agent", "agent-a"])
    assert confirmed.stdout.startswith(f"confirmed {kept}  likes jazz")
    rejected = await _json(["pending", "reject", dropped, *common, "--agent", "agent-a"])
    assert rejected["status"] == "STATUS_DELETED"
    assert (await client.get(tenant, kept, agent_id="agent-a")).status == pb.STATUS_ACTIVE


async def test_history_and_a_readable_get(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    common = _common(server, tenant)
    booking = MemoryFields(tier="episodic", kind="task", subject="u1", intent="book_meeting_room")
    wednesday = await client.write(
        tenant, "Book room A, Wednesday", entities={"date": "2026-12-02"}, **booking
    )
    friday = await client.write(tenant, "Book room A, Friday", entities={"date": "2026-12-04"}, **booking)
    assert friday.resolution == "superseded"

    shown = await _ok(["history", wednesday.memory.id, *common])
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"1. {wednesday.memory.id}  ") and lines[0].endswith("superseded")
    assert lines[1].strip() == "Book room A, Wednesday"
    assert lines[2].startswith(f"2. {friday.memory.id}  ") and lines[2].endswith("active  (believed now)")
    typed = await _json(["history", friday.memory.id, *common])
    assert [v["id"] for v in typed["versions"]] == [wednesday.memory.id, friday.memory.id]

    got = await _ok(["get", wednesday.memory.id, *common])
    # One field a line: its label, at least two spaces, its value.
    fields = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in got.stdout.splitlines())
    assert fields["id"] == wednesday.memory.id and fields["content"] == "Book room A, Wednesday"
    assert fields["status"] == "superseded" and fields["tier"] == "episodic" and fields["kind"] == "task"
    assert fields["entities"] == '{"date": "2026-12-02"}' and fields["intent"] == "book_meeting_room"
    assert fields["superseded by"] == friday.memory.id and fields["seen"] == "1 time"
    typed_get = await _json(["get", wednesday.memory.id, *common])
    for number in ("version", "seen_count", "access_count"):
        assert type(typed_get[number]) is int, number
    assert typed_get["superseded_by"] == friday.memory.id and typed_get["entities"] == {"date": "2026-12-02"}


async def test_an_unreachable_server_is_one_line_with_a_hint_and_exit_3() -> None:
    port = free_port()  # nothing listens there
    for args in (
        ["get", "some-id"],
        ["session", "append", "s", "--text", "hi"],
        ["pending", "list"],
        ["history", "some-id"],
        ["export"],
    ):
        result = await run_cli([*args, "--target", f"127.0.0.1:{port}", "--tenant", "t", "--timeout", "3"])
        assert result.code == 3, (args, result.stderr)
        assert result.stderr == (
            f"error: cannot reach hindsight at 127.0.0.1:{port} (UNAVAILABLE: connection refused): "
            "is `hindsight up` running? (--target)\n"
        ), args
        assert result.stdout == ""
    # The target can come from the environment too, and so can the tenant.
    env = {"HINDSIGHT_TARGET": f"127.0.0.1:{port}", "HINDSIGHT_TENANT": "t"}
    from_env = await run_cli(["pending", "list"], env=env)
    assert from_env.code == 3 and f"127.0.0.1:{port}" in from_env.stderr


async def test_version() -> None:
    result = await run_cli(["--version"])
    assert result.code == 0
    assert result.stdout.startswith("hindsight 0.") and "(client 0." in result.stdout


def _actions(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _actions(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            found.append((path, action))
    return found


def test_every_flag_has_help_and_every_client_command_the_same_connection_options() -> None:
    actions = _actions(build_parser(), "hindsight")
    missing = [
        f"{path} {action.option_strings or action.dest}" for path, action in actions if not action.help
    ]
    assert missing == []
    client_commands = [
        "write", "get", "list", "recall", "update", "delete", "history", "session append",
        "session summarize", "session end", "pending list", "pending confirm", "pending reject",
        "export", "import", "erase",
    ]  # fmt: skip
    for command in client_commands:
        options = {
            option
            for path, action in actions
            if path == f"hindsight {command}"
            for option in action.option_strings
        }
        expected = {"--target", "--tenant", "--api-key", "--timeout", "--tls", "--tls-ca-file"}
        expected |= {"--tls-cert-file", "--tls-key-file", "--tls-server-name"}
        assert expected <= options, command


async def test_progress_goes_to_stderr_only_when_asked(
    server: RunningServer, client: HindsightClient, tenant: str, tmp_path: Path
) -> None:
    for number in range(3):
        await client.write(tenant, f"fact number {number}", tier="semantic", kind="fact", subject="u")
    common = _common(server, tenant)
    quiet = await _ok(["export", *common])  # stderr is a pipe here: no progress unless asked
    assert "exported 3/3" not in quiet.stderr
    loud = await _ok(["export", *common, "--progress"])
    assert "exported 3/3 memories\n" in loud.stderr and "\r" not in loud.stderr
    # stdout is the export and nothing else (the header's exported_at differs between the two runs).
    assert loud.stdout.splitlines()[1:] == quiet.stdout.splitlines()[1:]
    assert json.loads(loud.stdout.splitlines()[0])["count"] == "3"
    path = tmp_path / "export.jsonl"
    path.write_text(loud.stdout)
    imported = await _ok(["import", str(path), *_common(server, f"{tenant}-copy"), "--progress", "--json"])
    assert "imported 3/3 memories (through line 4)" in imported.stderr
    assert json.loads(imported.stdout)["imported"] == 3
    copy = _common(server, f"{tenant}-copy")
    erased = await _ok(["erase", *copy, "--whole-tenant", "--reason", "t", "--yes", "--progress", "--json"])
    assert "erasing... 0 s" in erased.stderr and "erased in " in erased.stderr
    counts = json.loads(erased.stdout)
    assert counts["memories"] == 3 and type(counts["sessions"]) is int
