"""The local cluster's gRPC gateway: nginx in front of N memory servers (`hindsight up --servers N`).

`render_config` writes an nginx configuration into the data directory (pid, logs and temp files there
too, so nginx runs without privileges and never touches /etc/nginx or /var/log/nginx); the supervisor runs
the distribution's nginx binary on it in the foreground like its other children.

Retries: nginx passes a call to the next server only after a connection error (`grpc_next_upstream
error`). Every gRPC call is an HTTP/2 POST, which nginx treats as non-idempotent: unless
`non_idempotent` is also listed it never re-sends a call that already reached a server, so a Write is
retried only when it was certainly not received (refused connection: the server is down or restarting)
and a call in flight on a server that dies fails: UNAVAILABLE (HTTP 502) when the server had not
answered yet, which the shared client retries (mutating calls carry idempotency keys), or INTERNAL
(RST_STREAM) when it had already sent its response headers (the request-id header goes out before the
handler runs), which it does not retry: the call may have committed; repeat it with the same key.
`timeout` is not listed: a call that timed out was sent and may still be running.

TLS (`NginxTls`, when the servers listen with TLS): nginx listens with the servers' certificate and calls
them over TLS, checking theirs against the CA and the name it is given; with client certificates
required (mTLS) it asks its own clients for one and presents the servers' certificate as its own.

`python -m hindsight_server.stack.nginx install` installs nginx from the distribution's packages when it
is missing (root only; what `make` runs).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "NginxGateway",
    "NginxNotFound",
    "NginxTls",
    "check_config",
    "find_nginx",
    "install_nginx",
    "render_config",
    "write_config",
]

_DEBIAN_PATH = "/usr/sbin/nginx"  # not on a normal user's PATH


class NginxNotFound(RuntimeError):
    """No nginx binary: the cluster's gateway cannot start."""


def find_nginx(configured: str = "") -> str:
    """The nginx binary: the configured path, else nginx on PATH, else Debian's /usr/sbin/nginx."""
    if configured:
        if not os.access(configured, os.X_OK):
            raise NginxNotFound(f"stack.nginx={configured!r} is not an executable")
        return configured
    found = shutil.which("nginx") or (_DEBIAN_PATH if os.access(_DEBIAN_PATH, os.X_OK) else None)
    if found is None:
        raise NginxNotFound(
            "nginx not found: `make up` and `make test` install it (as root: apt-get install nginx), or set "
            "HINDSIGHT_STACK__NGINX to its path, or run the servers without a gateway (--gateway none)"
        )
    return found


@dataclass(frozen=True, slots=True)
class NginxTls:
    cert_file: str  # the certificate and key nginx listens with (the servers')
    key_file: str
    trusted_ca_file: str  # what the servers' certificates are checked against
    server_name: str  # the name they must carry
    client_ca_file: str = ""  # mTLS: clients must present a certificate it signed; nginx presents cert_file


@dataclass(frozen=True, slots=True)
class NginxGateway:
    """Where the gateway listens, what it balances over, and its knobs."""

    listen: str  # HOST:PORT clients call (server.host:server.port)
    upstreams: tuple[str, ...]  # HOST:PORT of each memory server
    work_dir: Path  # <data_dir>/nginx: the configuration, pid, logs and temp files
    workers: int = 1
    access_log: bool = False
    max_message_bytes: int = 8 * 1024 * 1024
    call_timeout_s: int = 300  # the longest call: a bulk WriteBatch with embeddings (the bench waits 120 s)
    tls: NginxTls | None = None  # None: plaintext on both sides

    @property
    def config_path(self) -> Path:
        return self.work_dir / "nginx.conf"

    @property
    def error_log(self) -> Path:
        return self.work_dir / "error.log"

    @property
    def access_log_path(self) -> Path:
        return self.work_dir / "access.log"

    def argv(self, binary: str) -> list[str]:
        # -e: the error log before the configuration is read (nginx's default is /var/log/nginx, which an
        # unprivileged user cannot open); -p: relative paths resolve under the work directory.
        return [binary, "-p", str(self.work_dir), "-c", str(self.config_path), "-e", str(self.error_log)]


def _listen_address(address: str) -> str:
    host, _, port = address.rpartition(":")
    return f"{host}:{port}" if host not in ("", "0.0.0.0", "::", "[::]") else port


def render_config(gateway: NginxGateway) -> str:
    """The whole configuration, as text."""
    if not gateway.upstreams:
        raise ValueError("the gateway needs at least one memory server")
    work = gateway.work_dir
    temp = {name: work / "temp" / name for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    # As root, nginx drops its workers to `nobody` by default, who cannot write the data directory;
    # keep them as the user that owns it. Unprivileged, the directive would be ignored with a warning.
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
    servers = "\n".join(
        # fail_timeout 2s: a restarted server is tried again soon (the supervisor restarts within ~1 s);
        # until then connection failures send its calls to the others.
        f"        server {address} max_fails=1 fail_timeout=2s;"
        for address in gateway.upstreams
    )
    access_log = (
        f"    access_log {gateway.access_log_path} upstream buffer=32k flush=1s;"
        if gateway.access_log
        else "    access_log off;"
    )
    tls = gateway.tls
    listen_tls, upstream_tls = ("", "") if tls is None else _tls_directives(tls)
    scheme = "grpc" if tls is None else "grpcs"
    return f"""# Rendered by `hindsight up` ({__name__}); rewritten on every start, do not edit.
{user}daemon off;            # the supervisor holds the master process
master_process on;
worker_processes {gateway.workers};
pid {work / "nginx.pid"};
error_log {gateway.error_log} warn;

events {{
    worker_connections 4096;
}}

http {{
    log_format upstream '$time_iso8601 $status $request_time $upstream_addr '
                        '$upstream_status $upstream_trailer_grpc_status $request_uri';
{access_log}
    client_body_temp_path {temp["client_body"]};
    proxy_temp_path {temp["proxy"]};
    fastcgi_temp_path {temp["fastcgi"]};
    uwsgi_temp_path {temp["uwsgi"]};
    scgi_temp_path {temp["scgi"]};

    upstream hindsight_memory {{
        # A recall costs 5-50x a Get: send each call to the server with the fewest in flight (nginx
        # opens one upstream connection per call, so "connections" counts calls). The zone shares
        # that count and the failure marks between workers.
        least_conn;
        zone hindsight_memory 64k;
{servers}
        keepalive 64;                 # idle connections kept per worker: no handshake per call
        keepalive_requests 100000;
        keepalive_timeout 60s;
    }}

    server {{
        listen {_listen_address(gateway.listen)}{"" if tls is None else " ssl"} http2;{listen_tls}
        # Clients keep their channel open for long: no forced reconnects after N calls or idle seconds.
        keepalive_requests 1000000;
        keepalive_timeout 600s;
        http2_max_concurrent_streams 1024;  # one client channel (the MCP gateway's) carries many calls
        client_max_body_size {gateway.max_message_bytes + 64 * 1024};
        client_body_timeout 60s;

        location / {{
            grpc_pass {scheme}://hindsight_memory;{upstream_tls}
            # Only connection errors, never `timeout` or `non_idempotent`: see {__name__}.
            grpc_next_upstream error;
            grpc_next_upstream_tries {len(gateway.upstreams) + 1};
            grpc_next_upstream_timeout 5s;
            grpc_connect_timeout 1s;
            grpc_send_timeout {gateway.call_timeout_s}s;
            grpc_read_timeout {gateway.call_timeout_s}s;
        }}
    }}
}}
"""


def _tls_directives(tls: NginxTls) -> tuple[str, str]:
    """The server block's TLS lines and the location's (towards the servers), each line after a newline."""
    listen = [
        f"ssl_certificate {tls.cert_file};",
        f"ssl_certificate_key {tls.key_file};",
        "ssl_protocols TLSv1.2 TLSv1.3;",
    ]
    upstream = [
        "grpc_ssl_verify on;",
        f"grpc_ssl_trusted_certificate {tls.trusted_ca_file};",
        f"grpc_ssl_name {tls.server_name};",
        "grpc_ssl_server_name on;",
        "grpc_ssl_protocols TLSv1.2 TLSv1.3;",
    ]
    if tls.client_ca_file:
        listen += [f"ssl_client_certificate {tls.client_ca_file};", "ssl_verify_client on;"]
        upstream += [f"grpc_ssl_certificate {tls.cert_file};", f"grpc_ssl_certificate_key {tls.key_file};"]
    return "".join(f"\n        {line}" for line in listen), "".join(
        f"\n            {line}" for line in upstream
    )


def write_config(gateway: NginxGateway) -> Path:
    """Renders the configuration into the work directory (and makes the temp directories)."""
    (gateway.work_dir / "temp").mkdir(parents=True, exist_ok=True)
    gateway.config_path.write_text(render_config(gateway))
    return gateway.config_path


def check_config(gateway: NginxGateway, binary: str) -> None:
    """`nginx -t` on the rendered file; raises with nginx's own message when it is refused."""
    result = subprocess.run(
        [*gateway.argv(binary), "-t", "-q"], capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"nginx refused {gateway.config_path}: {result.stderr.strip()}")


def install_nginx(run: Sequence[str] = ("apt-get",)) -> str:
    """Installs the distribution's nginx (it must not be installed yet); returns the binary's path."""
    if os.geteuid() != 0:
        raise NginxNotFound("nginx is not installed and installing it needs root: apt-get install nginx")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*run, "update", "-qq"], check=True, env=env)
    # Debian 12's `nginx` is the core build, gRPC proxy included (nginx-light only adds a module to it).
    subprocess.run([*run, "install", "-y", "-qq", "--no-install-recommends", "nginx"], check=True, env=env)
    return find_nginx()


def main(argv: Sequence[str]) -> int:
    """`install`: silent when nginx is there; installs it as root; without root only warns (the cluster
    tests skip, `hindsight up --servers N` says what is missing) so `make test` still runs the rest."""
    if list(argv) != ["install"]:
        print("usage: python -m hindsight_server.stack.nginx install", file=sys.stderr)
        return 2
    try:
        find_nginx()
        return 0
    except NginxNotFound:
        pass
    try:
        print(f"nginx installed: {install_nginx()}")
    except NginxNotFound as exc:
        print(f"warning: {exc}", file=sys.stderr)
    except subprocess.CalledProcessError as exc:  # as root: a real failure, not to be hidden
        print(f"nginx: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
