"""`hindsight export | import | erase`: a tenant's (or one subject's) memories out to a file, back in
(into the same tenant or another, here or on another deployment), and erased with every trace, over the
shared client's Export, Import and Erase.

The file is JSON Lines in protobuf's JSON mapping with the proto's field names (json_format):

    {"hindsight_export": 1, "format_version": 1, "tenant_id": "acme", "count": "2", "models": [...], ...}
    {"memory": {"id": "...", "tenant_id": "acme", "content": "...", ...}, "embeddings": [...]}
    ...

line 1 the ExportHeader under the marker `hindsight_export`, then one ExportedMemory a line. Export
writes it line by line as the stream arrives and import reads it batch by batch: neither holds the whole
file, however large. Import sends a batch only once every line of it parsed (the server's Import is one
transaction per call), so a malformed line leaves nothing of its batch half-written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import IO, Any

import grpc
import numpy as np
from google.protobuf import json_format
from google.protobuf.message import Message

from hindsight.v1 import memory_pb2 as pb
from hindsight_server.cli.args import (
    EXIT_RPC_ERROR,
    EXIT_USAGE,
    KINDS,
    TIERS,
    Connection,
    Progress,
    add_connection_options,
    add_progress_option,
    rpc_failure,
    timestamp,
    typed_dict,
)

# The exit codes of every client command (args.py); declining the confirmation is a refusal too.
EXIT_DECLINED = 1

MARKER = "hindsight_export"
FORMAT_VERSION = 1
DEFAULT_BATCH_SIZE = 200


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _to_dict(message: Message, **options: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True, **options)


def _json_line(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


class _Calls:
    """The command's connection, opened inside its event loop: a failed call is described by it (was
    the server ever reached?)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._connection: Connection | None = None

    def open(self, timeout_s: float) -> Connection:
        self._connection = Connection(self._args, timeout_s)
        return self._connection

    def failure(self, error: grpc.aio.AioRpcError) -> tuple[str, int]:
        if self._connection is None:
            return rpc_failure(error, self._args.target, reached=False)
        return self._connection.failure(error)


def _parse_problem(exc: json_format.ParseError) -> str:
    """json_format's message without the list of every field it appends, nor its doubled full stop."""
    return str(exc).split("\n")[0].rstrip(".")


def _say(command: str, text: str) -> None:
    print(f"hindsight {command}: {text}", file=sys.stderr)


# -------------------------------------------------------------------------------------------- export


def header_line(header: pb.ExportHeader) -> bytes:
    return _json_line({MARKER: FORMAT_VERSION, **_to_dict(header)})


def memory_line(memory: pb.ExportedMemory) -> bytes:
    """One memory as protobuf's JSON mapping writes it, its vectors by hand: the mapping's float takes
    ~1.7 us (16 of the 17.7 s of exporting 10,139 memories with both vectors), format .9g ~0.15 us, and nine
    significant digits still give back every float32 exactly, as the same JSON numbers."""
    if not all(np.isfinite(np.asarray(e.values, dtype=np.float32)).all() for e in memory.embeddings):
        return _json_line(_to_dict(memory))  # NaN and infinities: the mapping's own strings for them
    head = json.dumps({"memory": _to_dict(memory.memory)}, ensure_ascii=False, separators=(",", ":"))
    if not memory.embeddings:
        return (head + "\n").encode()
    vectors = ",".join(_vector_json(embedding) for embedding in memory.embeddings)
    return (head[:-1] + ',"embeddings":[' + vectors + "]}\n").encode()


def _vector_json(embedding: pb.Embedding) -> str:
    named = {key: value for key, value in (("space", embedding.space), ("model", embedding.model)) if value}
    values = ",".join([f"{value:.9g}" for value in embedding.values])
    opening = json.dumps(named, separators=(",", ":"))[:-1] + ("," if named else "")
    return f'{opening}"values":[{values}]}}'


class _Output:
    """Where the export goes: stdout, a new file, or (resuming) the end of the file a cut export left.
    Opened when the header arrives, so an export refused at once leaves an existing file as it was."""

    def __init__(self, path: str | None, append: bool, files: ExitStack) -> None:
        self.path, self.append, self._files = path, append, files
        self.name = path or "stdout"
        self.stream: IO[bytes] | None = None
        self.wants_header = not append

    def check(self) -> str | None:
        """Why appending to the file would corrupt it, if it would."""
        if not (self.append and self.path and os.path.exists(self.path)):
            return None
        with open(self.path, "rb") as existing:
            existing.seek(0, os.SEEK_END)
            if existing.tell() == 0:
                return None
            existing.seek(-1, os.SEEK_END)
            if existing.read(1) != b"\n":
                return (
                    f"{self.path} ends inside a line (a write cut short): remove that partial last line,"
                    " then resume after the id of the last whole one"
                )
        return None

    def open(self) -> IO[bytes]:
        if self.stream is None:
            if self.path is None:
                self.stream = sys.stdout.buffer
            else:
                opened = open(self.path, "ab" if self.append else "wb")  # noqa: SIM115 (closed by the ExitStack)
                self.stream = self._files.enter_context(opened)
                # Resuming into a new or empty file: it still needs its header.
                self.wants_header = self.wants_header or self.stream.tell() == 0
        return self.stream


@dataclass
class _Exported:
    written: int = 0
    last_id: str = ""
    announced: int | None = None  # the header's count, once it came

    def shown(self) -> str:
        of = f"/{self.announced}" if self.announced is not None else ""
        return f"exported {self.written}{of} memories"


class _BadStream(Exception):
    """The server's stream broke the contract (no header first)."""


async def _export(
    args: argparse.Namespace, calls: _Calls, output: _Output, progress: _Exported, shown: Progress
) -> None:
    async with calls.open(timeout_s=args.timeout or 10.0) as client:
        items = client.export(
            args.tenant,
            subject=args.subject,
            tiers=args.tier or (),
            kinds=args.kind or (),
            start=args.since,
            end=args.until,
            include_history=not args.current_only,
            include_embeddings=args.embeddings,
            after_id=args.after_id,
            timeout_s=args.timeout,  # None: the whole stream takes as long as the tenant needs
        )
        async for item in items:
            if item.HasField("header"):
                stream = output.open()
                progress.announced = item.header.count
                if output.wants_header:
                    stream.write(header_line(item.header))
                    stream.flush()
                continue
            if progress.announced is None:
                raise _BadStream("the export stream began without its header")
            stream = output.open()
            stream.write(memory_line(item.memory))
            # Flushed line by line: what is in the file is what the resume hint counts.
            stream.flush()
            progress.written += 1
            progress.last_id = item.memory.memory.id
            shown.show(progress.shown())


def _resume_hint(args: argparse.Namespace, progress: _Exported) -> str:
    after = progress.last_id or args.after_id
    if not after:
        return "nothing was written; run the export again"
    where = (
        f"--output {args.output} (it appends)" if args.output else "and append (>>) its output to the rest"
    )
    return f"{progress.written} memories written; resume with --after-id {after} {where}"


def cmd_export(args: argparse.Namespace) -> int:
    with ExitStack() as files:
        output = _Output(args.output, append=bool(args.after_id), files=files)
        problem = output.check()
        if problem:
            _say("export", problem)
            return EXIT_USAGE
        progress = _Exported()
        calls = _Calls(args)
        shown = Progress(args.progress)
        try:
            asyncio.run(_export(args, calls, output, progress, shown))
        except grpc.aio.AioRpcError as error:
            shown.done()
            message, code = calls.failure(error)
            print(message, file=sys.stderr)
            if progress.announced is not None:  # the stream had begun: it was cut
                _say("export", f"the export stopped: {_resume_hint(args, progress)}")
            return code
        except _BadStream as exc:
            shown.done()
            _say("export", str(exc))
            return EXIT_RPC_ERROR
        except BrokenPipeError:
            shown.done()
            # The reader went away (`| head`): stdout is closed, say so on stderr and stop quietly.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            _say("export", f"the output was closed after {progress.written} memories")
            return EXIT_RPC_ERROR
        except (ValueError, OSError) as exc:  # TLS options: a certificate without its key, a missing file
            shown.done()
            _say("export", str(exc))
            return EXIT_USAGE
    shown.show(progress.shown(), now=True)
    shown.done()
    if progress.announced is None:
        _say("export", "the server sent no header: nothing was exported")
        return EXIT_RPC_ERROR
    if progress.written != progress.announced:
        _say(
            "export",
            f"the header announced {progress.announced} memories but {progress.written} came: "
            + _resume_hint(args, progress),
        )
        return EXIT_RPC_ERROR
    subject = f" (subject {args.subject!r})" if args.subject is not None else ""
    _say("export", f"exported {progress.written} memories of tenant {args.tenant}{subject} to {output.name}")
    return 0


# -------------------------------------------------------------------------------------------- import


class ExportFileError(ValueError):
    """A line of an export file that cannot be imported: `FILE:LINE: what is wrong`."""

    def __init__(self, name: str, line: int, problem: str) -> None:
        super().__init__(f"{name}:{line}: {problem}")
        self.line = line


def _json_object(name: str, number: int, raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ExportFileError(name, number, f"not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ExportFileError(name, number, f"not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(value, dict):
        raise ExportFileError(name, number, f"not a JSON object but {type(value).__name__}")
    return value


def read_header(name: str, raw: bytes | None) -> pb.ExportHeader:
    """Line 1: {"hindsight_export": 1, ...ExportHeader}."""
    expected = f'the first line must be the export\'s header, {{"{MARKER}": {FORMAT_VERSION}, ...}}'
    if raw is None or not raw.strip():
        raise ExportFileError(name, 1, f"not a hindsight export: {expected}, and it is empty")
    try:
        value = _json_object(name, 1, raw)
    except ExportFileError as exc:
        raise ExportFileError(name, 1, f"not a hindsight export: {expected} ({exc})") from None
    marker = value.pop(MARKER, None)
    if marker is None:
        raise ExportFileError(name, 1, f"not a hindsight export: {expected}")
    if marker != FORMAT_VERSION:
        raise ExportFileError(
            name, 1, f"{MARKER} {marker!r} is a format this version does not read (it reads {FORMAT_VERSION})"
        )
    header = pb.ExportHeader()
    try:
        json_format.ParseDict(value, header)
    except json_format.ParseError as exc:
        raise ExportFileError(name, 1, f"not an export header: {_parse_problem(exc)}") from None
    if header.format_version != FORMAT_VERSION:
        raise ExportFileError(name, 1, f"format_version {header.format_version} is not {FORMAT_VERSION}")
    return header


def parse_memory(name: str, number: int, raw: bytes) -> pb.ExportedMemory:
    value = _json_object(name, number, raw)
    if MARKER in value:
        raise ExportFileError(name, number, "a second export header: import each export file by itself")
    memory = pb.ExportedMemory()
    try:
        json_format.ParseDict(value, memory)
    except json_format.ParseError as exc:
        raise ExportFileError(name, number, f"not an exported memory: {_parse_problem(exc)}") from None
    if not memory.memory.id:
        raise ExportFileError(name, number, "memory.id is missing")
    return memory


@dataclass
class Batch:
    first_line: int
    last_line: int
    memories: list[pb.ExportedMemory] = field(default_factory=list)


def batches(name: str, lines: Iterable[tuple[int, bytes]], size: int) -> Iterator[Batch]:
    """The memory lines (numbered from 2) in batches of `size`, each yielded only once all of its lines
    parsed: an ExportFileError is raised before the batch holding the bad line is handed out."""
    batch: Batch | None = None
    for number, raw in lines:
        if not raw.strip():
            continue  # a blank line (a trailing newline, an editor's) holds nothing
        memory = parse_memory(name, number, raw)
        if batch is None:
            batch = Batch(number, number)
        batch.memories.append(memory)
        batch.last_line = number
        if len(batch.memories) == size:
            yield batch
            batch = None
    if batch is not None:
        yield batch


@dataclass
class _Imported:
    imported: int = 0
    already_present: int = 0
    embeddings_reused: int = 0
    embeddings_pending: int = 0
    memories: int = 0
    last_line: int = 1
    sending: Batch | None = None  # the batch whose Import call is in flight

    def add(self, batch: Batch, response: pb.ImportResponse) -> None:
        self.imported += response.imported
        self.already_present += response.already_present
        self.embeddings_reused += response.embeddings_reused
        self.embeddings_pending += response.embeddings_pending
        self.memories += len(batch.memories)
        self.last_line = batch.last_line

    def before(self) -> str:
        if not self.memories:
            return "nothing was imported"
        return (
            f"the {self.memories} memories of lines 2-{self.last_line} before it were imported (committed); "
            "Import is idempotent, so a rerun skips them as already present"
        )

    def summary(self) -> str:
        return (
            f"{self.imported} imported, {self.already_present} already present, "
            f"embeddings: {self.embeddings_reused} reused, {self.embeddings_pending} pending"
        )

    def shown(self, announced: int) -> str:
        of = f"/{announced}" if announced else ""
        return f"imported {self.memories}{of} memories (through line {self.last_line})"


async def _import(
    args: argparse.Namespace,
    calls: _Calls,
    name: str,
    header: pb.ExportHeader,
    lines: Iterator[tuple[int, bytes]],
    done: _Imported,
    shown: Progress,
) -> None:
    async with calls.open(timeout_s=args.timeout or 10.0) as client:
        for batch in batches(name, lines, args.batch_size):
            done.sending = batch
            response = await client.import_memories(
                args.tenant,
                batch.memories,
                new_ids=args.new_ids,
                models=header.models,
                timeout_s=args.timeout,
            )
            done.add(batch, response)
            done.sending = None
            shown.show(done.shown(header.count))


def cmd_import(args: argparse.Namespace) -> int:
    with ExitStack() as files:
        if args.file == "-":
            source: IO[bytes] = sys.stdin.buffer
        else:
            try:
                source = files.enter_context(open(args.file, "rb"))
            except OSError as exc:
                _say("import", f"cannot read {args.file}: {exc.strerror}")
                return EXIT_USAGE
        name = "<stdin>" if args.file == "-" else args.file
        lines = enumerate(source, start=1)
        first = next(lines, None)
        done = _Imported()
        calls = _Calls(args)
        shown = Progress(args.progress)
        try:
            header = read_header(name, first[1] if first else None)
            asyncio.run(_import(args, calls, name, header, lines, done, shown))
        except ExportFileError as exc:
            shown.done()
            _say("import", str(exc))
            if exc.line > 1:
                _say("import", f"nothing of the batch holding line {exc.line} was sent; {done.before()}")
            return EXIT_USAGE
        except grpc.aio.AioRpcError as error:
            shown.done()
            message, code = calls.failure(error)
            print(message, file=sys.stderr)
            failed = done.sending
            if failed is not None:
                _say(
                    "import",
                    f"lines {failed.first_line}-{failed.last_line} were not imported (one transaction per "
                    f"batch); {done.before()}",
                )
            return code
        except (ValueError, OSError) as exc:  # TLS options: a certificate without its key, a missing file
            shown.done()
            _say("import", str(exc))
            return EXIT_USAGE
    if done.memories:
        shown.show(done.shown(header.count), now=True)
    shown.done()
    if header.count and done.memories != header.count:
        _say(
            "import",
            f"note: the header announced {header.count} memories, the file holds {done.memories} "
            "(an export that was cut and not resumed is incomplete)",
        )
    if args.json:
        print(json.dumps({"tenant_id": args.tenant, "memories": done.memories, **_counts(done)}, indent=2))
    _say("import", f"{done.memories} memories from {name} into tenant {args.tenant}: {done.summary()}")
    return 0


def _counts(done: _Imported) -> dict[str, int]:
    return {
        "imported": done.imported,
        "already_present": done.already_present,
        "embeddings_reused": done.embeddings_reused,
        "embeddings_pending": done.embeddings_pending,
    }


# --------------------------------------------------------------------------------------------- erase


def _scope(args: argparse.Namespace) -> str:
    if args.whole_tenant:
        return f"everything of tenant {args.tenant} (its API keys stay)"
    if args.subject is not None:
        return f"every memory, session and turn of subject {args.subject!r} in tenant {args.tenant}"
    return (
        f"{len(args.id)} memories of tenant {args.tenant}, with their versions and what was derived from them"
    )


def _confirmed(args: argparse.Namespace) -> bool:
    sys.stderr.write(
        f"This erases {_scope(args)}, for good.\nType the tenant id ({args.tenant}) to confirm: "
    )
    sys.stderr.flush()
    tenant: str = args.tenant
    return sys.stdin.readline().strip() == tenant


def cmd_erase(args: argparse.Namespace) -> int:
    if not args.yes:
        if not sys.stdin.isatty():
            _say("erase", "refusing to erase without --yes: stdin is not a terminal to confirm on")
            return EXIT_USAGE
        if not _confirmed(args):
            _say("erase", "not confirmed: nothing was erased")
            return EXIT_DECLINED

    calls = _Calls(args)
    shown = Progress(args.progress)

    async def erase() -> pb.EraseResponse:
        async with calls.open(timeout_s=10.0) as client:
            ticking = asyncio.create_task(_tick(shown))
            try:
                return await client.erase(
                    args.tenant,
                    subject=args.subject,
                    whole_tenant=args.whole_tenant,
                    memory_ids=args.id or (),
                    reason=args.reason,
                    timeout_s=args.timeout,
                )
            finally:
                ticking.cancel()

    started = time.monotonic()
    try:
        response = asyncio.run(erase())
    except grpc.aio.AioRpcError as error:
        shown.done()
        message, code = calls.failure(error)
        print(message, file=sys.stderr)
        return code
    except (ValueError, OSError) as exc:  # TLS options: a certificate without its key, a missing file
        shown.done()
        _say("erase", str(exc))
        return EXIT_USAGE
    shown.show(f"erased in {time.monotonic() - started:.1f} s", now=True)
    shown.done()
    if args.json:
        print(json.dumps(typed_dict(response), ensure_ascii=False, indent=2))
    else:
        erased_at = response.erased_at.ToJsonString()
        print(
            f"erased {_scope(args)}: {response.memories} memories, {response.sessions} sessions, "
            f"{response.turns} turns, {response.replies} replies\n"
            f"erasure {response.erasure_id} at {erased_at}"
        )
    return 0


async def _tick(shown: Progress) -> None:
    """Erase is one call: the time it has taken, every second, while it runs."""
    started = time.monotonic()
    while True:
        shown.show(f"erasing... {time.monotonic() - started:.0f} s", now=True)
        await asyncio.sleep(1.0)


# -------------------------------------------------------------------------------------------- parser


def _connection(sub: argparse.ArgumentParser, timeout_help: str) -> None:
    """The options every client command takes (args.py), TLS included; progress on stderr."""
    add_connection_options(sub, timeout=None, timeout_help=timeout_help)
    add_progress_option(sub)


def add_portability_commands(commands: Any) -> None:
    """Registers export, import and erase on the `hindsight` parser's subcommands."""
    export = commands.add_parser(
        "export", help="a tenant's (or subject's) memories as JSON Lines: a header, then one memory a line"
    )
    _connection(export, "deadline of the whole stream (default: none)")
    export.add_argument("--subject", help='only this subject ("" is the default subject)')
    export.add_argument("--tier", action="append", choices=TIERS, help="only this tier; repeat for more")
    export.add_argument("--kind", action="append", choices=KINDS, help="only this kind; repeat for more")
    export.add_argument("--since", type=timestamp, help="created at or after (ISO 8601 with offset)")
    export.add_argument("--until", type=timestamp, help="created before (ISO 8601 with offset)")
    export.add_argument(
        "--current-only",
        action="store_true",
        help="only ACTIVE and PENDING memories (default: the full history, superseded, expired and "
        "deleted versions too)",
    )
    export.add_argument("--embeddings", action="store_true", help="include each memory's vectors")
    export.add_argument(
        "--after-id",
        default="",
        help="resume a cut export after this id (the last one written); with --output it appends",
    )
    export.add_argument("--output", "-o", help="the file to write (default stdout)")
    export.set_defaults(handler=cmd_export)

    importing = commands.add_parser(
        "import", help="an export file into a tenant, in batches (one transaction each; idempotent)"
    )
    importing.add_argument("file", help="the export file (- for stdin)")
    _connection(importing, "deadline of each batch (default 300)")
    importing.add_argument(
        "--new-ids",
        action="store_true",
        help="give every memory a new id (stable per source id and tenant): when the tenant may hold the "
        "source's ids",
    )
    importing.add_argument(
        "--batch-size",
        type=_positive,
        default=DEFAULT_BATCH_SIZE,
        help=f"memories per Import call (default {DEFAULT_BATCH_SIZE})",
    )
    importing.add_argument("--json", action="store_true", help="also print the counts as JSON on stdout")
    importing.set_defaults(handler=cmd_import)

    erase = commands.add_parser(
        "erase", help="erase a subject, a whole tenant or named memories with every trace (audited)"
    )
    _connection(erase, "deadline of the erasure (default 300)")
    scope = erase.add_mutually_exclusive_group(required=True)
    scope.add_argument("--subject", help='every memory, session and turn of this subject ("" is the default)')
    scope.add_argument("--whole-tenant", action="store_true", help="everything of the tenant (keys stay)")
    scope.add_argument("--id", action="append", help="a memory, with its versions; repeat for more")
    erase.add_argument("--reason", required=True, help='kept in the audit record, e.g. "GDPR art. 17, #4711"')
    erase.add_argument("--yes", action="store_true", help="do not ask (needed when stdin is not a terminal)")
    erase.add_argument("--json", action="store_true", help="machine-readable output")
    erase.set_defaults(handler=cmd_erase)
