"""TLS for a gRPC client: which CA proves the servers, and (mTLS) which certificate proves the client.

One value shared by every client of the memory servers (the typed client, the MCP gateway, the CLI's
commands, `hindsight status`) and by the servers' own client of Triton, so each speaks TLS the same way:

    tls = ClientTls(ca_file="ca.pem", cert_file="client.pem", key_file="client.key")
    channel = open_channel("memory.internal:50051", tls, options)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

__all__ = ["ClientTls", "open_channel"]

ChannelOptions = Sequence[tuple[str, Any]]


@dataclass(frozen=True, slots=True)
class ClientTls:
    """PEM files; `ca_file` empty: the system's trusted roots. `cert_file` and `key_file` (together):
    the client's certificate, for servers that require one (mTLS). `server_name`: the name the server's
    certificate must carry, when it is not the target's host (an IP address, a load balancer's name)."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError(
                "a client certificate needs its key: give both cert_file and key_file, or neither"
            )

    def credentials(self) -> grpc.ChannelCredentials:
        """Reads the files now: a missing or unreadable one is an error at start, not at the first call."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file),
            private_key=_read(self.key_file),
            certificate_chain=_read(self.cert_file),
        )

    def options(self) -> tuple[tuple[str, str], ...]:
        """The channel options TLS adds: the name the server's certificate is checked against."""
        return (("grpc.ssl_target_name_override", self.server_name),) if self.server_name else ()


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


def open_channel(
    target: str,
    tls: ClientTls | None,
    options: ChannelOptions = (),
    interceptors: Sequence[grpc.aio.ClientInterceptor] | None = None,
) -> grpc.aio.Channel:
    """A channel to `target`: TLS with `tls`, plaintext without (loopback, or a network that is trusted)."""
    if tls is None:
        return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(
        target, tls.credentials(), options=(*options, *tls.options()), interceptors=interceptors
    )
