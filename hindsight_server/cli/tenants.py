"""`hindsight tenants create | list | revoke`: the API keys per tenant, against the database."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hindsight_server.cli.args import EXIT_USAGE, print_json
from hindsight_server.cli.local import add_database_options, on_database
from hindsight_server.config import Settings


def cmd_tenants(args: argparse.Namespace) -> int:
    from hindsight_server.domain.errors import InvalidArgument
    from hindsight_server.domain.principal import parse_scopes
    from hindsight_server.process.offline import open_api_keys

    try:  # before the database starts: a typo costs nothing
        creating = args.tenants_command == "create"
        scopes = parse_scopes(args.scopes.split(","), "--scopes") if creating else None
    except InvalidArgument as exc:
        print(f"hindsight tenants: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def work(settings: Settings) -> int:
        async with open_api_keys(settings) as keys:
            if scopes is not None:
                created = await keys.create(args.tenant, args.label, scopes=scopes, agent_id=args.agent)
                if args.json:
                    print_json(
                        {
                            "tenant_id": created.tenant_id,
                            "key_id": created.key_id,
                            "api_key": created.api_key,
                            "scopes": sorted(created.scopes),
                            "agent_id": created.agent_id,
                        }
                    )
                else:
                    bound = f", acting as agent {created.agent_id}" if created.agent_id else ""
                    print(
                        f"tenant {created.tenant_id}: API key with scopes {','.join(sorted(created.scopes))}"
                        f"{bound} (shown once, store it now):\n{created.api_key}"
                    )
            elif args.tenants_command == "revoke":
                await keys.revoke(args.key_id)
                print(f"revoked {args.key_id}")
            else:
                records = await keys.list(args.tenant or "")
                rows = [
                    {
                        "tenant_id": r.tenant_id,
                        "key_id": r.key_id,
                        "label": r.label,
                        "created_at": r.created_at.isoformat(),
                        "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None,
                        "scopes": sorted(r.scopes),
                        "agent_id": r.agent_id,
                    }
                    for r in records
                ]
                if args.json:
                    print_json(rows)
                elif not records:
                    whose = f"tenant {args.tenant!r} has" if args.tenant else "no tenant has"
                    print(
                        f"{whose} no API keys yet (make one: hindsight tenants create TENANT)",
                        file=sys.stderr,
                    )
                for record in [] if args.json else records:
                    state = f"revoked {record.revoked_at.isoformat()}" if record.revoked_at else "active"
                    access = ",".join(sorted(record.scopes))
                    access += f" as {record.agent_id}" if record.agent_id else ""
                    print(f"{record.tenant_id}  {record.key_id}  {state}  {access}  {record.label}")
        return 0

    return on_database(args, "tenants", work)


def add_tenants_commands(commands: Any) -> None:
    """Adds tenants create, list and revoke to the command parser."""
    tenants = commands.add_parser("tenants", help="API keys per tenant: create (shown once), list, revoke")
    tenant_commands = tenants.add_subparsers(dest="tenants_command", required=True, metavar="ACTION")
    for action, help_text in (
        ("create", "a new API key for a tenant; prints it once (only its hash is stored)"),
        ("list", "the keys (ids, labels, state; never the secrets)"),
        ("revoke", "stop a key from working (within security.api_key_cache_s on every server)"),
    ):
        tenant_command = tenant_commands.add_parser(action, help=help_text)
        add_database_options(tenant_command)
        tenant_command.add_argument("--json", action="store_true", help="machine-readable output")
        tenant_command.set_defaults(handler=cmd_tenants)
        if action == "create":
            tenant_command.add_argument("tenant", help="tenant id")
            tenant_command.add_argument("--label", default="", help="what the key is for")
            tenant_command.add_argument(
                "--scopes",
                default="read,write",
                help="what the key may do, comma-separated: read, write, export, erase, admin "
                "(default read,write; admin: Import and Ops/Status)",
            )
            tenant_command.add_argument(
                "--agent",
                default="",
                help="bind the key to this agent id: it acts as that agent only, so other agents' PRIVATE "
                "memories stay hidden from it (default: none, the whole tenant)",
            )
        elif action == "revoke":
            tenant_command.add_argument("key_id", help="the key's id (see `hindsight tenants list`)")
        else:
            tenant_command.add_argument("--tenant", help="only this tenant's keys")
