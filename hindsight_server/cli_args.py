"""argparse value types and options the command modules share (cli.py, portability_cli.py, status_cli.py)."""

from __future__ import annotations

import argparse
import os
from datetime import datetime

from hindsight.tls import ClientTls


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
