"""What the client commands share (client.py, portability.py, status.py): argparse value types, one
set of connection options, a client that knows whether it ever reached its target, one wording of a
failed call (with a hint where the server could not be reached), typed JSON output, and progress on
stderr.

Exit codes of every client command: 0 done, 1 the server refused or failed the call, 2 a usage error
(caught before any call), 3 the server could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TextIO

import grpc
from google.protobuf import json_format, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from hindsight.client import CHANNEL_OPTIONS, DEFAULT_TARGET, HindsightClient
from hindsight.tls import ClientTls, open_channel
from hindsight.v1 import memory_pb2 as pb

EXIT_RPC_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def enum_names(enum: Any, prefix: str) -> list[str]:
    """A proto enum's values as choices: TIER_SEMANTIC -> semantic, without the _UNSPECIFIED one."""
    names: list[str] = list(enum.DESCRIPTOR.values_by_name)
    return [name.removeprefix(prefix).lower() for name in names if not name.endswith("_UNSPECIFIED")]


TIERS = enum_names(pb.Tier, "TIER_")
KINDS = enum_names(pb.Kind, "KIND_")


def timestamp(text: str) -> datetime:
    """An ISO 8601 time with its UTC offset: never a guess at the zone."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from exc
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"add a UTC offset, e.g. {text}+00:00")
    return value


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    """The TLS options of every command that calls the memory servers (one set, one meaning)."""
    tls = parser.add_argument_group("TLS (servers that listen with security.tls_cert_file)")
    tls.add_argument(
        "--tls",
        action="store_true",
        default=bool(os.environ.get("HINDSIGHT_TLS")),
        help="call over TLS, trusting the system's CAs ($HINDSIGHT_TLS); any option below implies it",
    )
    tls.add_argument(
        "--tls-ca-file",
        default=os.environ.get("HINDSIGHT_TLS_CA_FILE", ""),
        help="the CA (PEM) that signed the servers' certificate ($HINDSIGHT_TLS_CA_FILE)",
    )
    tls.add_argument(
        "--tls-cert-file",
        default=os.environ.get("HINDSIGHT_TLS_CERT_FILE", ""),
        help="this client's certificate (PEM), for servers that require one: mTLS ($HINDSIGHT_TLS_CERT_FILE)",
    )
    tls.add_argument(
        "--tls-key-file",
        default=os.environ.get("HINDSIGHT_TLS_KEY_FILE", ""),
        help="the key of --tls-cert-file ($HINDSIGHT_TLS_KEY_FILE)",
    )
    tls.add_argument(
        "--tls-server-name",
        default=os.environ.get("HINDSIGHT_TLS_SERVER_NAME", ""),
        help="the name in the servers' certificate, when --target is not it ($HINDSIGHT_TLS_SERVER_NAME)",
    )


def client_tls(args: argparse.Namespace) -> ClientTls | None:
    """The options of add_tls_options as the clients take them; None: plaintext."""
    tls = ClientTls(args.tls_ca_file, args.tls_cert_file, args.tls_key_file, args.tls_server_name)
    return tls if args.tls or tls != ClientTls() else None


# ------------------------------------------------------------------------------------------ connection


def add_connection_options(
    parser: argparse.ArgumentParser, *, timeout: float | None = 10.0, timeout_help: str = ""
) -> None:
    """The options every client command takes, with one meaning each: where (--target), as which tenant
    (--tenant), with which key (--api-key), how long (--timeout), over TLS or not (add_tls_options)."""
    connection = parser.add_argument_group("connection")
    connection.add_argument(
        "--target",
        default=os.environ.get("HINDSIGHT_TARGET", DEFAULT_TARGET),
        metavar="HOST:PORT",
        help=f"the memory server, or the gateway in front of several ($HINDSIGHT_TARGET; default "
        f"{DEFAULT_TARGET}, where `hindsight up` listens)",
    )
    tenant = os.environ.get("HINDSIGHT_TENANT", "")
    connection.add_argument(
        "--tenant",
        required=not tenant,
        default=tenant or None,
        help="the tenant whose memories the command reads or changes ($HINDSIGHT_TENANT)",
    )
    connection.add_argument(
        "--api-key",
        default=os.environ.get("HINDSIGHT_API_KEY", ""),
        help="the tenant's key, from `hindsight tenants create`, where servers require keys "
        "($HINDSIGHT_API_KEY)",
    )
    connection.add_argument(
        "--timeout",
        type=_seconds,
        default=timeout,
        metavar="SECONDS",
        help=timeout_help or f"deadline of each call (default {timeout:g})",
    )
    add_tls_options(parser)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


class Connection:
    """A client of --target (opened inside the event loop that uses it) that remembers whether its
    channel ever connected: a call that fails without it ever having done so did not reach a server.

        async with Connection(args) as client: ...
        ... except grpc.aio.AioRpcError as error: message, code = connection.failure(error)
    """

    def __init__(self, args: argparse.Namespace, timeout_s: float | None = None) -> None:
        self.target: str = args.target
        # A certificate without its key, an unreadable CA file: ValueError or OSError, before any call.
        self._channel = open_channel(args.target, client_tls(args), CHANNEL_OPTIONS)
        self.client = HindsightClient(
            args.target,
            timeout_s=timeout_s or args.timeout or 10.0,
            api_key=args.api_key,
            channel=self._channel,
        )
        self.reached = False
        self._watch: asyncio.Task[None] | None = None

    async def __aenter__(self) -> HindsightClient:
        self._watch = asyncio.create_task(self._until_ready())
        return self.client

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.reached = self.reached or self._channel.get_state() == grpc.ChannelConnectivity.READY
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        await self.client.close()

    async def _until_ready(self) -> None:
        state = self._channel.get_state()
        while state != grpc.ChannelConnectivity.READY:
            await self._channel.wait_for_state_change(state)
            state = self._channel.get_state()
        self.reached = True

    def failure(self, error: grpc.aio.AioRpcError) -> tuple[str, int]:
        """The one line to print for a failed call, and the exit code."""
        return rpc_failure(error, self.target, reached=self.reached)


_NOT_REACHED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# What gRPC's message says went wrong -> how to say it, and what to check.
_CAUSES = (
    (("connection refused",), "connection refused", "is `hindsight up` running? (--target)"),
    (
        ("dns", "name or service not known", "resolving", "lookup"),
        "unknown host",
        "check --target (HOST:PORT)",
    ),
    (
        ("ssl", "tls", "handshake", "certificate"),
        "TLS handshake failed",
        "check --tls-ca-file, --tls-cert-file/--tls-key-file and --tls-server-name",
    ),
    (
        ("socket closed", "connection reset", "broken pipe", "end of tcp stream", "goaway"),
        "the connection was closed",
        "is hindsight listening there, and does it use TLS (--tls)? (--target)",
    ),
)


def rpc_failure(error: grpc.aio.AioRpcError, target: str, *, reached: bool) -> tuple[str, int]:
    """`error: CODE: details` for a call the server answered; for one that never reached a server,
    one line saying so with what to check, and EXIT_UNREACHABLE."""
    code = error.code()
    details = error.details() or ""
    if code in _NOT_REACHED and not reached:
        cause, hint = "no answer in time", "is `hindsight up` running? (--target, --timeout)"
        if code == grpc.StatusCode.UNAVAILABLE:
            cause, hint = "not reachable", "is `hindsight up` running? (--target)"
            lowered = details.lower()
            for needles, said, checks in _CAUSES:
                if any(needle in lowered for needle in needles):
                    cause, hint = said, checks
                    break
        return f"error: cannot reach hindsight at {target} ({code.name}: {cause}): {hint}", EXIT_UNREACHABLE
    message = f"error: {code.name}: {details}"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        message += " (give the tenant's key: --api-key or $HINDSIGHT_API_KEY)"
    return message, EXIT_RPC_ERROR


# ----------------------------------------------------------------------------------------------- JSON


_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def typed_dict(message: Message) -> dict[str, Any]:
    """protobuf's JSON mapping with the proto's field names and every field, except that 64-bit integers
    are JSON numbers (the mapping writes them as strings, for JavaScript): what `--json` prints."""
    value = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _numbers(message.DESCRIPTOR, value)
    return value


def _numbers(descriptor: Any, value: dict[str, Any]) -> None:
    for field in descriptor.fields:
        if field.name not in value:
            continue
        if field.type in _INT64:
            item = value[field.name]
            value[field.name] = [int(i) for i in item] if isinstance(item, list) else int(item)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not _well_known(field.message_type):
            if field.message_type.GetOptions().map_entry:
                entry = field.message_type.fields_by_name["value"]
                mapped: dict[str, Any] = value[field.name]
                for key, item in mapped.items():
                    if entry.type in _INT64:
                        mapped[key] = int(item)
                    elif entry.type == FieldDescriptor.TYPE_MESSAGE and not _well_known(entry.message_type):
                        _numbers(entry.message_type, item)
                continue
            items = value[field.name]
            for item in items if isinstance(items, list) else [items]:
                _numbers(field.message_type, item)


def _well_known(descriptor: Any) -> bool:
    """Timestamp, Struct, ...: JSON of their own (an RFC 3339 string, a plain object), left as it is."""
    return str(descriptor.full_name).startswith("google.protobuf.")


def print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


# ------------------------------------------------------------------------------------------- progress


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress on stderr (default: when stderr is a terminal); stdout keeps only the output",
    )


class Progress:
    """Progress of a long command on stderr: one line redrawn in place on a terminal; elsewhere (asked
    for with --progress) a line a second. Never on stdout, which stays the command's machine-readable
    output."""

    def __init__(self, enabled: bool | None, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._terminal = self._stream.isatty()
        self.enabled = self._terminal if enabled is None else enabled
        self._every_s = 0.1 if self._terminal else 1.0
        self._last = float("-inf")
        self._drawn = False

    def show(self, text: str, *, now: bool = False) -> None:
        """Shows `text`, or skips it when the last one was shown less than a moment ago (`now`: never)."""
        if not self.enabled:
            return
        moment = time.monotonic()
        if not now and moment - self._last < self._every_s:
            return
        self._last = moment
        if self._terminal:
            self._stream.write(f"\r\x1b[K{text}")
            self._drawn = True
        else:
            self._stream.write(f"{text}\n")
        self._stream.flush()

    def done(self) -> None:
        """Clears the line drawn in place, so that what the command prints next starts clean."""
        if self._drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._drawn = False


# -------------------------------------------------------------------------------------------- calls


def enum_name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


def time_text(message: Any, field: str) -> str:
    if not message.HasField(field):
        return ""
    stamp: timestamp_pb2.Timestamp = getattr(message, field)
    return stamp.ToDatetime(tzinfo=UTC).isoformat()


def call_client(args: argparse.Namespace, call: Callable[[HindsightClient], Awaitable[None]]) -> int:
    """Runs `call` with a client of the command's connection options; a failure is one line on
    stderr and its exit code."""
    connection: Connection | None = None

    async def run() -> None:
        nonlocal connection
        connection = Connection(args)
        async with connection as client:
            await call(client)

    try:
        asyncio.run(run())
    except grpc.aio.AioRpcError as error:
        message, code = (
            connection.failure(error)
            if connection is not None
            else rpc_failure(error, args.target, reached=False)
        )
        print(message, file=sys.stderr)
        return code
    # An unknown enum name from the client's helpers, a certificate without its key, an unreadable file.
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def client_command(
    commands: Any, name: str, handler: Callable[[argparse.Namespace], int], help_text: str
) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=help_text)
    add_connection_options(sub)
    sub.add_argument(
        "--json", action="store_true", help="print the answer as JSON (typed: numbers as numbers)"
    )
    sub.set_defaults(handler=handler)
    return sub
