"""The console's settings: HINDSIGHT_CONSOLE__<KEY> variables, then flags. Only pydantic here: the stack
(`hindsight up`) reads them to know where the console listens, without the console's own dependencies."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from hindsight.tls import ClientTls

__all__ = [
    "ENV_PREFIX",
    "HEALTH_PATH",
    "ConsoleConfigError",
    "ConsoleSettings",
    "load_console_settings",
    "unknown_environment",
]

ENV_PREFIX = "HINDSIGHT_CONSOLE__"
HEALTH_PATH = "/healthz"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


class ConsoleConfigError(ValueError):
    """Settings the console refuses to start with; one line per problem, each naming its key."""


class ConsoleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    # Where the console listens (HTTP, or HTTPS with tls_cert_file).
    host: str = "127.0.0.1"
    port: int = Field(8766, ge=0, le=65535)
    # The memory servers (HOST:PORT each, round robin), or the nginx gateway in front of them.
    targets: Annotated[tuple[str, ...], NoDecode] = ("127.0.0.1:50051",)
    # TLS to the memory servers, as the other clients (`--tls`, `--tls-ca-file`, ...).
    targets_tls: bool = False
    targets_ca_file: str = ""
    targets_cert_file: str = ""
    targets_key_file: str = ""
    targets_server_name: str = ""
    # Deadline of each gRPC call the console makes (an erasure gets the client's long deadline).
    deadline_s: float = Field(10.0, gt=0, le=120)
    # HTTPS for the console itself: its certificate and key (PEM). Cookies are Secure over HTTPS, and
    # also with cookie_secure (a TLS-terminating proxy in front).
    tls_cert_file: str = ""
    tls_key_file: str = ""
    cookie_secure: bool = False
    # Logged-in sessions kept in memory (the oldest goes first when full) and how long an unused one lives.
    max_sessions: int = Field(1000, ge=1, le=100_000)
    session_idle_s: float = Field(1800.0, gt=0, le=7 * 86400)
    # Failed logins allowed per client address per minute (a key is not guessed through the form).
    login_attempts_per_minute: int = Field(10, ge=1, le=1000)
    # Prometheus text endpoint with the servers' metrics (the OpenTelemetry collector's exporter, e.g.
    # http://otel-collector:8889/metrics); empty: the Operations page shows Ops/Status figures only.
    metrics_url: str = ""
    # Memories scanned for one page when a filter (text, time) is applied in the console rather than by
    # the server, and for the subjects overview.
    scan_limit: int = Field(5000, ge=100, le=100_000)
    log_format: Literal["text", "json"] = "text"

    @field_validator("targets", mode="before")
    @classmethod
    def _split_targets(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ConsoleSettings:
        if not self.targets:
            raise ValueError("targets: name at least one memory server HOST:PORT")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file: give both (HTTPS) or neither")
        return self

    @property
    def serves_tls(self) -> bool:
        return bool(self.tls_cert_file)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{'https' if self.serves_tls else 'http'}://{host}:{self.port}/"

    @property
    def on_loopback(self) -> bool:
        return self.host in _LOOPBACK or self.host.startswith("127.")

    @property
    def targets_client_tls(self) -> ClientTls | None:
        tls = ClientTls(
            self.targets_ca_file, self.targets_cert_file, self.targets_key_file, self.targets_server_name
        )
        return tls if self.targets_tls or tls != ClientTls() else None


def unknown_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """A line for each HINDSIGHT_CONSOLE__ variable that names no console setting, with the closest one."""
    environ = os.environ if environ is None else environ
    known = list(ConsoleSettings.model_fields)
    lines = []
    for variable in sorted(environ):
        if not variable.upper().startswith(ENV_PREFIX):
            continue
        field = variable.upper().removeprefix(ENV_PREFIX).lower()
        if field in known:
            continue
        suggestion = difflib.get_close_matches(field, known, n=1)
        hint = f" (did you mean {ENV_PREFIX}{suggestion[0].upper()}?)" if suggestion else ""
        lines.append(f"{variable} is not a setting of the web console, ignored{hint}")
    return lines


def load_console_settings(**overrides: Any) -> ConsoleSettings:
    """The environment's settings with the flags (those not None) on top; ConsoleConfigError naming each
    bad key."""
    try:
        from_env = ConsoleSettings()
        values = {name: getattr(from_env, name) for name in from_env.model_fields_set}
        values.update({name: value for name, value in overrides.items() if value is not None})
        return ConsoleSettings(**values)
    except ValidationError as error:
        problems = [
            f"{ENV_PREFIX}{'.'.join(str(p) for p in item['loc']).upper() or 'SETTINGS'}: {item['msg']}"
            for item in error.errors(include_url=False, include_input=False)
        ]
        raise ConsoleConfigError("\n".join(problems)) from None
