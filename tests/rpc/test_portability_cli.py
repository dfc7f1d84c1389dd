"""`hindsight export | import | erase` (hindsight_server/cli/portability.py) run as a user runs them: real
child processes, against the session's real server or, for what must fail before any call, against a
port where nothing listens (so a call that should not have been made shows up as "cannot reach", exit 3)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import pty
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.cli.portability import memory_line
from hindsight_server.process.running import RunningServer
from tests.support.eventually import eventually
from tests.support.processes import HINDSIGHT, CliResult, free_port, run_cli

HEADER = {"hindsight_export": 1, "format_version": 1, "tenant_id": "source", "count": "3"}


def _memory(number: int, **fields: Any) -> dict[str, Any]:
    memory = {
        "id": str(uuid.UUID(int=number)),
        "tenant_id": "source",
        "subject": "user-7",
        "tier": "TIER_SEMANTIC",
        "kind": "KIND_FACT",
        "content": f"fact number {number}",
        "status": "STATUS_ACTIVE",
        **fields,
    }
    return {"memory": memory}


def _export_file(path: Path, lines: Sequence[dict[str, Any] | str]) -> Path:
    text = [line if isinstance(line, str) else json.dumps(line, ensure_ascii=False) for line in lines]
    path.write_text("".join(f"{line}\n" for line in text), encoding="utf-8")
    return path


def _nowhere() -> list[str]:
    """--target of a port nothing listens on."""
    return ["--target", f"127.0.0.1:{free_port()}"]


async def _run(args: Sequence[str], stdin: int | None = None, input_bytes: bytes | None = None) -> CliResult:
    """run_cli with a chosen stdin (run_cli's child inherits the test's, which may be a terminal)."""
    process = await asyncio.create_subprocess_exec(
        *HINDSIGHT,
        *args,
        stdin=asyncio.subprocess.PIPE if input_bytes is not None else stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(input_bytes), 30)
    assert process.returncode is not None
    return CliResult(process.returncode, stdout.decode(), stderr.decode())


def _read_export(path: Path) -> tuple[dict[str, Any], list[pb.ExportedMemory]]:
    header, *lines = path.read_text(encoding="utf-8").splitlines()
    return json.loads(header), [
        json_format.ParseDict(json.loads(line), pb.ExportedMemory()) for line in lines
    ]


# ------------------------------------------------------------------------- import: the file, no server


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ('{"memory": {"id": "x", "content": ', "not JSON"),
        (_memory(9, colour="blue"), 'no field named "colour"'),
        (_memory(9, content=5), "Failed to parse content field"),
        (_memory(9, tier="TIER_NOPE"), "Invalid enum value TIER_NOPE"),
        ({"memory": {"content": "no id"}}, "memory.id is missing"),
        ("[1, 2]", "not a JSON object"),
    ],
    ids=["not-json", "unknown-field", "wrong-type", "unknown-enum", "no-id", "not-an-object"],
)
async def test_import_names_the_malformed_line_and_sends_nothing_of_its_batch(
    tmp_path: Path, bad_line: dict[str, Any] | str, problem: str
) -> None:
    path = _export_file(tmp_path / "export.jsonl", [HEADER, _memory(1), bad_line, _memory(3)])
    result = await run_cli(["import", str(path), "--tenant", "t", *_nowhere()])
    assert result.code == 2, result.stderr
    assert f"{path}:3: " in result.stderr and problem in result.stderr, result.stderr
    assert "Available Fields" not in result.stderr  # json_format's list of every field is left out
    assert "nothing of the batch holding line 3 was sent; nothing was imported" in result.stderr
    assert "UNAVAILABLE" not in result.stderr  # the whole batch was checked before any call


@pytest.mark.parametrize(
    ("first_line", "problem"),
    [
        (_memory(1), "not a hindsight export: the first line must be the export's header"),
        ("", "not a hindsight export"),
        ("not json", "not a hindsight export"),
        ({**HEADER, "hindsight_export": 2}, "hindsight_export 2 is a format this version does not read"),
        ({**HEADER, "format_version": 7}, "format_version 7 is not 1"),
        ({**HEADER, "count": "many"}, "not an export header: Failed to parse count field"),
    ],
    ids=["a-memory", "blank", "not-json", "newer-marker", "other-format-version", "bad-header-field"],
)
async def test_import_needs_the_header_on_line_1(
    tmp_path: Path, first_line: dict[str, Any] | str, problem: str
) -> None:
    path = _export_file(tmp_path / "export.jsonl", [first_line, _memory(2)])
    result = await run_cli(["import", str(path), "--tenant", "t", *_nowhere()])
    assert result.code == 2, result.stderr
    assert f"{path}:1: {problem}" in result.stderr, result.stderr
    assert "UNAVAILABLE" not in result.stderr


async def test_import_of_an_empty_file_or_a_missing_one(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    result = await run_cli(["import", str(empty), "--tenant", "t", *_nowhere()])
    assert result.code == 2 and f"{empty}:1: not a hindsight export" in result.stderr, result.stderr
    missing = await run_cli(["import", str(tmp_path / "nope.jsonl"), "--tenant", "t", *_nowhere()])
    assert missing.code == 2 and "cannot read" in missing.stderr and "No such file" in missing.stderr


async def test_import_reads_stdin_and_names_it(tmp_path: Path) -> None:
    lines = [json.dumps(HEADER), json.dumps(_memory(1)), "{broken"]
    result = await _run(["import", "-", "--tenant", "t", *_nowhere()], input_bytes="\n".join(lines).encode())
    assert result.code == 2 and "<stdin>:3: not JSON" in result.stderr, result.stderr


async def test_import_that_cannot_reach_the_server_says_which_lines_were_not_imported(
    tmp_path: Path,
) -> None:
    path = _export_file(tmp_path / "export.jsonl", [HEADER, _memory(1), _memory(2), _memory(3)])
    result = await run_cli(["import", str(path), "--tenant", "t", "--batch-size", "2", *_nowhere()])
    assert result.code == 3, result.stderr
    assert "error: cannot reach hindsight at 127.0.0.1:" in result.stderr
    assert "lines 2-3 were not imported (one transaction per batch); nothing was imported" in result.stderr


async def test_import_argument_errors() -> None:
    no_tenant = await run_cli(["import", "f.jsonl"])
    assert no_tenant.code == 2 and "--tenant" in no_tenant.stderr
    zero = await run_cli(["import", "f.jsonl", "--tenant", "t", "--batch-size", "0"])
    assert zero.code == 2 and "must be at least 1" in zero.stderr


# -------------------------------------------------------------------------------- erase, no server


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ([], "one of the arguments --subject --whole-tenant --id is required"),
        (["--subject", "u", "--whole-tenant"], "not allowed with argument"),
        (["--id", "a", "--subject", "u"], "not allowed with argument"),
    ],
    ids=["no-scope", "two-scopes", "ids-and-subject"],
)
async def test_erase_takes_exactly_one_scope(scope: list[str], message: str) -> None:
    result = await _run(["erase", "--tenant", "t", "--reason", "r", "--yes", *scope, *_nowhere()])
    assert result.code == 2 and message in result.stderr, result.stderr


async def test_erase_needs_a_reason() -> None:
    result = await _run(["erase", "--tenant", "t", "--subject", "u", "--yes", *_nowhere()])
    assert result.code == 2 and "--reason" in result.stderr, result.stderr


async def test_erase_refuses_without_yes_when_stdin_is_not_a_terminal() -> None:
    args = ["erase", "--tenant", "t", "--subject", "u", "--reason", "r", *_nowhere()]
    result = await _run(args, stdin=asyncio.subprocess.DEVNULL)
    assert result.code == 2, result.stderr
    assert "refusing to erase without --yes" in result.stderr
    assert "UNAVAILABLE" not in result.stderr  # nothing was called


@contextlib.asynccontextmanager
async def _terminal(answer: str) -> AsyncIterator[int]:
    """A pseudo-terminal whose input holds `answer`; yields the end a child reads as stdin."""
    controller, child_end = pty.openpty()
    try:
        os.write(controller, answer.encode() + b"\n")
        yield child_end
    finally:
        os.close(child_end)
        os.close(controller)


async def test_erase_on_a_terminal_asks_for_the_tenant_id() -> None:
    args = ["erase", "--tenant", "acme", "--whole-tenant", "--reason", "r", *_nowhere()]
    async with _terminal("not-acme") as terminal:
        declined = await _run(args, stdin=terminal)
    assert declined.code == 1, declined.stderr
    assert "everything of tenant acme" in declined.stderr
    assert "Type the tenant id (acme) to confirm" in declined.stderr
    assert "not confirmed: nothing was erased" in declined.stderr
    assert "UNAVAILABLE" not in declined.stderr

    async with _terminal("acme") as terminal:  # confirmed: it goes on to call (nobody answers here)
        confirmed = await _run(args, stdin=terminal)
    assert confirmed.code == 3 and "error: cannot reach hindsight" in confirmed.stderr, confirmed.stderr


# ------------------------------------------------------------------------------- export, no server


async def test_export_argument_errors() -> None:
    naive = await run_cli(["export", "--tenant", "t", "--since", "2026-01-01T00:00:00", *_nowhere()])
    assert naive.code == 2 and "add a UTC offset" in naive.stderr, naive.stderr
    tier = await run_cli(["export", "--tenant", "t", "--tier", "eternal", *_nowhere()])
    assert tier.code == 2 and "invalid choice: 'eternal'" in tier.stderr, tier.stderr


async def test_an_export_refused_at_once_leaves_the_output_file_as_it_was(tmp_path: Path) -> None:
    output = tmp_path / "before.jsonl"
    output.write_text("what was there\n")
    result = await run_cli(["export", "--tenant", "t", "--output", str(output), *_nowhere()])
    assert result.code == 3 and "error: cannot reach hindsight" in result.stderr, result.stderr
    assert "resume" not in result.stderr  # the stream never began: nothing to resume
    assert output.read_text() == "what was there\n"


async def test_resuming_onto_a_file_that_ends_inside_a_line_is_refused(tmp_path: Path) -> None:
    output = _export_file(tmp_path / "cut.jsonl", [HEADER, _memory(1)])
    with output.open("a") as cut:
        cut.write('{"memory": {"id": "0000')
    before = output.read_bytes()
    result = await run_cli(
        ["export", "--tenant", "t", "--after-id", str(uuid.UUID(int=1)), "--output", str(output), *_nowhere()]
    )
    assert result.code == 2 and "ends inside a line" in result.stderr, result.stderr
    assert output.read_bytes() == before


# ------------------------------------------------------------------------------- against the server


def _target(server: RunningServer) -> list[str]:
    return ["--target", f"127.0.0.1:{server.port}"]


async def _seed(client: HindsightClient, tenant: str) -> None:
    """Two subjects, every tier, a version chain and a deleted memory."""
    booking: dict[str, Any] = {
        "tier": "episodic",
        "kind": "task",
        "subject": "user-7",
        "intent": "book_meeting_room",
    }
    wednesday = await client.write(
        tenant, "Book meeting room, building A, Wednesday", entities={"date": "2026-12-02"}, **booking
    )
    friday = await client.write(
        tenant, "Book meeting room, building A, Friday", entities={"date": "2026-12-04"}, **booking
    )
    assert friday.resolution == "superseded" and friday.memory.supersedes == wednesday.memory.id
    await client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference", subject="user-7")
    await client.write(tenant, "prefers CSV exports", tier="semantic", kind="preference", subject="user-8")
    remark = await client.write(tenant, "a passing remark", tier="working", kind="fact", subject="user-8")
    await client.delete(tenant, remark.memory.id)


def _shape(memory: pb.Memory) -> tuple[Any, ...]:
    """What an import must keep of a memory (its tenant is the importing one)."""
    return (
        memory.id,
        memory.content,
        memory.tier,
        memory.kind,
        memory.subject,
        memory.status,
        memory.intent,
        json_format.MessageToDict(memory.entities),
        memory.supersedes,
        memory.superseded_by,
        list(memory.derived_from),
    )


async def _export(server: RunningServer, tenant: str, path: Path, *more: str) -> CliResult:
    result = await run_cli(["export", "--tenant", tenant, "--output", str(path), *_target(server), *more])
    assert result.code == 0, result.stderr
    return result


async def test_export_then_import_into_another_tenant_keeps_every_memory_and_its_links(
    server: RunningServer, client: HindsightClient, tenant: str, tmp_path: Path
) -> None:
    await _seed(client, tenant)
    exported = tmp_path / "export.jsonl"
    said = await _export(server, tenant, exported)
    header, memories = _read_export(exported)
    assert len(memories) == 5  # the full history: the superseded and the deleted one too
    assert f"exported 5 memories of tenant {tenant} to {exported}" in said.stderr
    assert header["hindsight_export"] == 1 and header["format_version"] == 1
    assert header["tenant_id"] == tenant and header["count"] == "5" and "exported_at" in header
    assert {m.memory.status for m in memories} == {pb.STATUS_ACTIVE, pb.STATUS_SUPERSEDED, pb.STATUS_DELETED}
    ids = [m.memory.id for m in memories]
    assert ids == sorted(ids)  # in id order: what --after-id resumes by

    other = f"{tenant}-copy"
    first = await run_cli(["import", str(exported), "--tenant", other, "--json", *_target(server)])
    assert first.code == 0, first.stderr
    assert json.loads(first.stdout)["imported"] == 5 and json.loads(first.stdout)["already_present"] == 0
    assert f"5 memories from {exported} into tenant {other}: 5 imported, 0 already present" in first.stderr

    copied = tmp_path / "copy.jsonl"
    await _export(server, other, copied)
    _, again = _read_export(copied)
    assert {m.memory.tenant_id for m in again} == {other}
    assert sorted(_shape(m.memory) for m in again) == sorted(_shape(m.memory) for m in memories)
    chain = await client.history(other, next(m.memory.id for m in memories if m.memory.supersedes))
    assert [m.content for m in chain.versions] == [
        "Book meeting room, building A, Wednesday",
        "Book meeting room, building A, Friday",
    ]

    second = await run_cli(["import", str(exported), "--tenant", other, "--json", *_target(server)])
    assert second.code == 0, second.stderr
    counts = json.loads(second.stdout)
    assert (counts["imported"], counts["already_present"]) == (0, 5)
    assert (await client.list(other, statuses=["active"])).memories  # the copy is recallable data


async def test_import_with_new_ids_remaps_the_links_and_stays_idempotent(
    server: RunningServer, client: HindsightClient, tenant: str, tmp_path: Path
) -> None:
    await _seed(client, tenant)
    exported = tmp_path / "export.jsonl"
    await _export(server, tenant, exported)
    _, memories = _read_export(exported)
    other = f"{tenant}-new"
    for expected in ((5, 0), (0, 5)):
        result = await run_cli(
            ["import", str(exported), "--tenant", other, "--new-ids", "--json", *_target(server)]
        )
        assert result.code == 0, result.stderr
        counts = json.loads(result.stdout)
        assert (counts["imported"], counts["already_present"]) == expected

    copied = tmp_path / "copy.jsonl"
    await _export(server, other, copied)
    _, again = _read_export(copied)
    by_content = {m.memory.content: m.memory for m in again}
    assert not {m.memory.id for m in again} & {m.memory.id for m in memories}
    wednesday = by_content["Book meeting room, building A, Wednesday"]
    friday = by_content["Book meeting room, building A, Friday"]
    assert (friday.supersedes, wednesday.superseded_by) == (wednesday.id, friday.id)


async def test_a_malformed_line_leaves_its_batch_unwritten_and_a_rerun_finishes(
    server: RunningServer, client: HindsightClient, tenant: str, tmp_path: Path
) -> None:
    await _seed(client, tenant)
    exported = tmp_path / "export.jsonl"
    await _export(server, tenant, exported)
    header, *lines = exported.read_text(encoding="utf-8").splitlines()
    broken = _export_file(tmp_path / "broken.jsonl", [header, *lines[:3], "{oops", *lines[3:]])
    other = f"{tenant}-copy"
    args = ["--tenant", other, "--batch-size", "2", *_target(server)]

    failed = await run_cli(["import", str(broken), *args])
    assert failed.code == 2, failed.stderr
    assert f"{broken}:5: not JSON" in failed.stderr
    assert "the 2 memories of lines 2-3 before it were imported (committed)" in failed.stderr
    assert "a rerun skips them as already present" in failed.stderr
    copied = tmp_path / "copy.jsonl"
    await _export(server, other, copied)
    _, present = _read_export(copied)
    first_two = [json.loads(line)["memory"]["id"] for line in lines[:2]]
    assert [m.memory.id for m in present] == first_two  # line 4 shared the bad line's batch: not sent

    rerun = await run_cli(["import", str(exported), "--json", *args])
    assert rerun.code == 0, rerun.stderr
    counts = json.loads(rerun.stdout)
    assert (counts["imported"], counts["already_present"]) == (3, 2)


class _CuttingProxy:
    """A TCP proxy to the server that stops passing the server's bytes on after `limit` of them and,
    once `holding()` is true (the client has taken in what came), aborts both connections: a stream
    cut partway. (Aborted as soon as the bytes were passed on, the call failed before the client's
    reader took any memory that had come: seen here, a file with the header only.)"""

    def __init__(self, port: int, limit: int, holding: Callable[[], bool]) -> None:
        self._port, self._limit, self._holding = port, limit, holding
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> _CuttingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._port)

        async def upstream() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await reader.read(65536):
                    up_writer.write(data)
                    await up_writer.drain()

        async def downstream() -> None:
            sent = 0
            with contextlib.suppress(ConnectionError, OSError):
                while sent < self._limit and (data := await up_reader.read(65536)):
                    writer.write(data[: self._limit - sent])
                    await writer.drain()
                    sent += len(data)
            # Another process's file, so no event to wait on: polled, within a deadline (then cut anyway).
            with contextlib.suppress(AssertionError):
                await eventually(self._holding, timeout_s=10, poll_s=0.02)
            writer.transport.abort()
            up_writer.transport.abort()

        for work in (upstream(), downstream()):
            task = asyncio.create_task(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


async def test_a_cut_export_says_where_to_resume_and_the_resumed_file_is_whole(
    server: RunningServer, client: HindsightClient, tenant: str, tmp_path: Path
) -> None:
    from hindsight.client import memory_input

    items = [
        memory_input(f"memory number {n}: " + "words " * 20, tier="semantic", kind="fact", subject="u")
        for n in range(60)
    ]
    await client.write_batch(tenant, items, verbatim=True)
    whole = tmp_path / "whole.jsonl"
    await _export(server, tenant, whole)
    _, expected = _read_export(whole)
    assert len(expected) == 60

    output = tmp_path / "cut.jsonl"

    def holding() -> bool:  # the header and at least one memory are in the file
        return output.exists() and output.read_bytes().count(b"\n") >= 2

    async with _CuttingProxy(server.port, limit=6_000, holding=holding) as proxy:
        cut = await run_cli(
            ["export", "--tenant", tenant, "--output", str(output), "--target", f"127.0.0.1:{proxy.port}"]
        )
    assert cut.code == 1, cut.stderr
    assert "error: UNAVAILABLE" in cut.stderr or "error: INTERNAL" in cut.stderr, cut.stderr
    header, written = _read_export(output)
    assert header["count"] == "60" and 0 < len(written) < 60
    last = written[-1].memory.id
    assert f"{len(written)} memories written; resume with --after-id {last} --output {output}" in cut.stderr

    resumed = await _export(server, tenant, output, "--after-id", last)
    assert f"exported {60 - len(written)} memories of tenant {tenant}" in resumed.stderr
    header_after, complete = _read_export(output)
    assert header_after == header  # appended, no second header
    assert [m.memory.id for m in complete] == [m.memory.id for m in expected]
    imported = await run_cli(
        ["import", str(output), "--tenant", f"{tenant}-copy", "--json", *_target(server)]
    )
    assert imported.code == 0 and json.loads(imported.stdout)["imported"] == 60, imported.stderr


async def test_erase_a_subject_then_its_export_is_empty(
    server: RunningServer, client: HindsightClient, tenant: str, tmp_path: Path
) -> None:
    await _seed(client, tenant)
    erased = await _run(
        [
            "erase",
            "--tenant",
            tenant,
            "--subject",
            "user-7",
            "--reason",
            "test",
            "--yes",
            "--json",
            *_target(server),
        ],
        stdin=asyncio.subprocess.DEVNULL,
    )
    assert erased.code == 0, erased.stderr
    shown = json.loads(erased.stdout)
    assert shown["memories"] == 3 and shown["erasure_id"] and shown["erased_at"]
    # Typed: the int64 counts are JSON numbers, not protobuf's JSON strings.
    assert all(type(shown[count]) is int for count in ("memories", "sessions", "turns", "replies"))

    gone = tmp_path / "gone.jsonl"
    await _export(server, tenant, gone, "--subject", "user-7")
    header, memories = _read_export(gone)
    assert memories == [] and header.get("count", "0") == "0" and header["subject"] == "user-7"
    kept = tmp_path / "kept.jsonl"
    await _export(server, tenant, kept, "--subject", "user-8")
    assert {m.memory.content for m in _read_export(kept)[1]} == {"prefers CSV exports", "a passing remark"}


async def test_erase_named_memories_prints_what_it_erased(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    one = await client.write(tenant, "erase me", tier="semantic", kind="fact", subject="u")
    two = await client.write(tenant, "and me", tier="semantic", kind="fact", subject="u")
    keep = await client.write(tenant, "not me", tier="semantic", kind="fact", subject="u")
    ids = ["--id", one.memory.id, "--id", two.memory.id]
    erased = await _run(
        ["erase", "--tenant", tenant, *ids, "--reason", "t", "--yes", *_target(server)],
        stdin=asyncio.subprocess.DEVNULL,
    )
    assert erased.code == 0, erased.stderr
    assert f"erased 2 memories of tenant {tenant}, with their versions" in erased.stdout
    assert ": 2 memories, 0 sessions" in erased.stdout and "erasure " in erased.stdout
    assert [m.id for m in (await client.list(tenant)).memories] == [keep.memory.id]


@pytest.mark.parametrize("scale", [1.0, 1e-6, 1e6, 1e-38])
def test_a_line_gives_back_every_float32_exactly(scale: float) -> None:
    """The CLI writes vectors itself (nine significant digits): parsed back, each float32 is the same."""
    values = (np.random.default_rng(3).standard_normal(896) * scale).astype(np.float32)
    exported = pb.ExportedMemory(
        memory=pb.Memory(id="01a22b8a-0000-7000-8000-000000000001", content="向量 vector"),
        embeddings=[
            pb.Embedding(space="multilingual", model="embed", values=values[:512].tolist()),
            pb.Embedding(space="english", values=values[512:].tolist()),
        ],
    )
    line = memory_line(exported)
    assert json_format.ParseDict(json.loads(line), pb.ExportedMemory()) == exported
    assert json.loads(line).keys() == json_format.MessageToDict(exported).keys()


def test_a_vector_that_is_not_finite_keeps_the_mappings_own_words() -> None:
    exported = pb.ExportedMemory(memory=pb.Memory(id="x"), embeddings=[pb.Embedding(values=[math.inf])])
    assert json.loads(memory_line(exported))["embeddings"] == [{"values": ["Infinity"]}]
