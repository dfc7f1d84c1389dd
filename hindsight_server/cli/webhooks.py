"""`hindsight webhooks add | list | remove | rotate | replay`: the change feed POSTed to HTTP endpoints,
through the shared client (admin key); output and exit codes as the other client commands'."""

from __future__ import annotations

import argparse
from typing import Any

from hindsight.client import HindsightClient
from hindsight.v1 import webhooks_pb2 as hooks_pb
from hindsight_server.cli.args import (
    call_client,
    client_command,
    enum_name,
    print_json,
    time_text,
    typed_dict,
)


def _endpoint_line(endpoint: hooks_pb.WebhookEndpoint) -> str:
    state = enum_name(hooks_pb.WebhookState, endpoint.state, "WEBHOOK_STATE_")
    filters = ",".join(endpoint.event_types) or "all types"
    if endpoint.subjects:
        filters += f"; subjects {','.join(endpoint.subjects)}"
    line = f"{endpoint.id}  {state:<6}  {endpoint.url}  ({filters})  delivered {endpoint.delivered}"
    if endpoint.attempts:
        line += f", {endpoint.attempts} failed attempt(s), next {time_text(endpoint, 'next_attempt_at')}"
    if endpoint.last_error:
        line += f": {endpoint.last_error}"
    return line


def _print_secret(endpoint: hooks_pb.WebhookEndpoint, secret: str) -> None:
    print(_endpoint_line(endpoint))
    print(f"secret: {secret}")
    print("(shown only now: give it to the receiver, which verifies each webhook-signature with it)")


def cmd_webhooks_add(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        added = await client.add_webhook(
            args.tenant, args.url, event_types=args.event_types or (), subjects=args.subjects or ()
        )
        if args.json:
            print_json(typed_dict(added))
        else:
            _print_secret(added.endpoint, added.secret)

    return call_client(args, call)


def cmd_webhooks_list(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        endpoints = await client.list_webhooks(args.tenant)
        if args.json:
            print_json([typed_dict(endpoint) for endpoint in endpoints])
            return
        for endpoint in endpoints:
            print(_endpoint_line(endpoint))
        if not endpoints:
            print("(no webhook endpoint)")

    return call_client(args, call)


def cmd_webhooks_remove(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        await client.remove_webhook(args.tenant, args.id)
        if args.json:
            print_json({"removed": args.id})
        else:
            print(f"removed {args.id}")

    return call_client(args, call)


def cmd_webhooks_rotate(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        rotated = await client.rotate_webhook_secret(args.tenant, args.id)
        if args.json:
            print_json(typed_dict(rotated))
            return
        _print_secret(rotated.endpoint, rotated.secret)
        until = time_text(rotated.endpoint, "previous_secret_expires_at")
        print(f"the previous secret keeps signing beside it until {until}")

    return call_client(args, call)


def cmd_webhooks_replay(args: argparse.Namespace) -> int:
    async def call(client: HindsightClient) -> None:
        endpoint = await client.replay_webhook(args.tenant, args.id, args.cursor)
        if args.json:
            print_json(typed_dict(endpoint))
        else:
            print(_endpoint_line(endpoint))

    return call_client(args, call)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def add_webhook_commands(commands: Any) -> None:
    """Adds webhooks and its actions to the command parser."""
    webhooks = commands.add_parser(
        "webhooks",
        help="the change feed POSTed to HTTP endpoints, signed (Standard Webhooks): needs an admin key",
    )
    actions = webhooks.add_subparsers(dest="webhooks_command", required=True, metavar="ACTION")

    add = client_command(
        actions, "add", cmd_webhooks_add, "register an endpoint; prints its id and its secret (shown once)"
    )
    add.add_argument("url", help="http(s)://host[:port]/path, resolving to a public address")
    add.add_argument(
        "--event-types",
        type=_names,
        action="extend",
        metavar="TYPE[,TYPE...]",
        help="only these event types (created, merged, superseded, updated, deleted, confirmed, rejected, "
        "expired, purged, erased); repeat or comma-separate (default: all)",
    )
    add.add_argument(
        "--subjects",
        type=_names,
        action="extend",
        metavar="SUBJECT[,SUBJECT...]",
        help="only these subjects' events; repeat or comma-separate (default: every subject)",
    )
    client_command(
        actions, "list", cmd_webhooks_list, "the endpoints: id, state, URL, filters, delivery state"
    )
    for action, handler, help_text in (
        ("remove", cmd_webhooks_remove, "stop delivering to an endpoint and forget it"),
        ("rotate", cmd_webhooks_rotate, "a new secret; the previous one keeps signing for a while"),
    ):
        sub = client_command(actions, action, handler, help_text)
        sub.add_argument("id", help="the endpoint's id (see `hindsight webhooks list`)")
    replay = client_command(
        actions, "replay", cmd_webhooks_replay, "deliver again from a cursor; revives a dead endpoint"
    )
    replay.add_argument("id", help="the endpoint's id (see `hindsight webhooks list`)")
    replay.add_argument(
        "--from",
        dest="cursor",
        required=True,
        metavar="CURSOR",
        help="a cursor of the feed (a delivery's `cursor`, `hindsight webhooks list`), or 'oldest'",
    )
