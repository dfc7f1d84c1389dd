"""The gateway's own typed configuration, separate from the memory server's.

Sources, strongest first: explicit overrides (command-line flags), environment variables
(`HINDSIGHT_MCP__` prefix, e.g. `HINDSIGHT_MCP__PORT=8766`,
`HINDSIGHT_MCP__TARGETS=127.0.0.1:50051,127.0.0.1:50052`, `HINDSIGHT_MCP__TOKENS='{"<sha256 hex>": "acme"}'`),
an optional TOML file (`--gateway-config FILE` or `HINDSIGHT_MCP_CONFIG`, top-level keys as below), then
the defaults.

It is a file of its own because the server's configuration refuses unknown sections: one file cannot
hold both without the server rejecting it.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from hindsight.tls import ClientTls

__all__ = [
    "CONFIG_ENV",
    "HEALTH_PATH",
    "GatewayConfigError",
    "GatewaySettings",
    "TokenBinding",
    "channel_target",
    "is_loopback",
    "load_gateway_settings",
    "unknown_environment",
]

CONFIG_ENV = "HINDSIGHT_MCP_CONFIG"
ENV_PREFIX = "HINDSIGHT_MCP__"
HEALTH_PATH = "/healthz"  # the HTTP gateway's liveness probe (no token needed)
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class GatewayConfigError(ValueError):
    """A configuration the gateway refuses to run with; the message says what to change, a line per
    problem (`problems`), each naming the key and the file or variable it came from."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class TokenBinding(BaseModel):
    """What one bearer token acts as: its tenant, the agent recorded as the writer of what it stores
    (empty: `token-<the hash's first 16 characters>`, its own), and optionally the one subject it may
    read, write and forget (unset: any subject the model names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: str = Field(min_length=1, max_length=256)
    agent_id: str = Field("", max_length=256)
    # Not empty: "" is the default subject, and a recall naming it searches every subject.
    subject: str | None = Field(None, min_length=1, max_length=256)


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HINDSIGHT_MCP__", frozen=True, extra="forbid")

    # Memory servers (HOST:PORT each) spread with gRPC round robin, or one gateway/DNS address.
    targets: Annotated[tuple[str, ...], NoDecode] = ("127.0.0.1:50051",)
    # TLS to the memory servers (or the nginx in front of them), for servers that listen with
    # security.tls_cert_file: `targets_tls` with the system's CAs, or the CA (PEM) that signed their
    # certificate; a client certificate and key (mTLS) for servers with security.tls_client_ca_file; the
    # name their certificate carries when the targets are IP addresses or another name. Any file or the
    # name implies TLS. Off: plaintext, for loopback and trusted networks only.
    targets_tls: bool = False
    targets_ca_file: str = ""
    targets_cert_file: str = ""
    targets_key_file: str = ""
    targets_server_name: str = ""
    # Deadline of every gRPC call the gateway makes, retries included.
    deadline_s: float = Field(5.0, gt=0, le=120)
    # The tenant over stdio, and over HTTP on a loopback address when no token is configured.
    tenant: str = Field("default", min_length=1, max_length=256)
    # Recorded as the writer (`agent_id`) of every memory stored over stdio, or over loopback HTTP
    # without tokens; a bearer token acts as its own agent (TokenBinding, agent_claim).
    agent_id: str = Field("mcp-gateway", max_length=256)
    # SHA-256 (hex) of each bearer token (`hindsight mcp --hash-token`) -> the tenant it acts for, or a
    # table {tenant, agent_id, subject} (TokenBinding) that also names its agent and confines it to one
    # subject.
    tokens: dict[str, str | TokenBinding] = Field(default_factory=dict)
    # Tenant -> its API key on the memory servers (`hindsight tenants create`), sent with every call made
    # for that tenant; a tenant without one calls without a key (the embedded single-user mode).
    api_keys: dict[str, str] = Field(default_factory=dict, repr=False)
    # OAuth, as the MCP authorization specification asks of a protected resource: with authorization
    # servers configured, the gateway publishes RFC 9728 metadata (/.well-known/oauth-protected-resource
    # + path) naming them, points to it from every 401, and accepts their access tokens besides the
    # hashed ones: verified by RFC 7662 introspection, issued for `resource_url` (RFC 8707 audience),
    # acting for the tenant in their `tenant_claim`.
    resource_url: str = ""  # the gateway's public URL, as clients reach it: https://mcp.example.com/mcp
    authorization_servers: Annotated[tuple[str, ...], NoDecode] = ()
    introspection_url: str = ""
    introspection_client_id: str = ""
    introspection_client_secret: str = Field("", repr=False)
    # Introspections a second of tokens this gateway has not verified before (a spray of random tokens
    # costs the authorization server no more; past it: 503 with Retry-After). 0: unbounded.
    new_token_introspections_per_s: float = Field(20.0, ge=0)
    new_token_introspection_burst: float = Field(50.0, ge=1)
    tenant_claim: str = Field("tenant", min_length=1)
    # The claim naming the token's agent (empty, or absent from a token: its client_id claim), and the
    # claim naming the one subject it is confined to (empty: no confinement; set, a token without that
    # claim is refused).
    agent_claim: str = ""
    subject_claim: str = ""
    # memory_debug exposes every channel's raw candidates: for developers, off unless asked for.
    debug_tool: bool = False
    # Streamable HTTP.
    # Browser origins allowed to call the HTTP transport (gateway_mcp/origins.py): exact origins such as
    # "https://app.example.com", or "https://host:*" for any port. A request without an Origin header (an
    # SDK client, an agent) is always served; one with another Origin gets 403. Loopback origins are
    # allowed when the gateway listens on loopback.
    allowed_origins: Annotated[tuple[str, ...], NoDecode] = ()
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)  # 0: any free port (tests)
    path: str = Field("/mcp", pattern=r"^/[A-Za-z0-9._~/-]*$")
    # A request body over this is refused with 413 before it is read (gateway_mcp/body_limit.py). The
    # largest tool call (a 16 KB memory with 8 KB of entities, JSON-escaped) takes well under 1 MiB.
    max_body_bytes: int = Field(1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024)
    # HTTPS: both files set, the HTTP transport serves TLS only (a certificate chain and its key, PEM).
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # OpenTelemetry, service hindsight-mcp: a span per tool call (the MCP SDK's) and per gRPC call, whose
    # context the memory servers continue. otlp | console (stderr) | none; empty: OTEL_TRACES_EXPORTER,
    # else otlp when OTEL_EXPORTER_OTLP_ENDPOINT is set, else none.
    telemetry_exporter: Literal["", "none", "console", "otlp"] = ""
    otlp_endpoint: str = ""  # empty: OTEL_EXPORTER_OTLP_ENDPOINT, else the SDK's default
    # The log on stderr: text lines, or one JSON object per line (time, level, logger, message, trace).
    log_format: Literal["text", "json"] = "text"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Init values (see load_gateway_settings) win over the environment.
        return init_settings, env_settings

    @field_validator("allowed_origins", "targets", "authorization_servers", mode="before")
    @classmethod
    def _split_lists(cls, value: Any) -> Any:
        # "a,b" from the environment or a flag; a list from the TOML file.
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        if isinstance(value, list | tuple):
            value = tuple(part for part in value if part)
        return value

    @field_validator("targets")
    @classmethod
    def _one_channel(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        channel_target(value)
        return value

    @field_validator("allowed_origins")
    @classmethod
    def _bare_origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for origin in value:
            if not re.fullmatch(r"https?://[^/\s]+", origin):
                raise ValueError(
                    f"allowed origin {origin!r}: expected scheme://host[:port] or scheme://host:*, no path"
                )
        return value

    @field_validator("tokens")
    @classmethod
    def _hashed_tokens(cls, value: dict[str, str | TokenBinding]) -> dict[str, str | TokenBinding]:
        for digest, tenant in value.items():
            if not _SHA256_HEX.fullmatch(digest):
                raise ValueError(
                    "keys are SHA-256 hashes of the tokens (64 lowercase hex characters, "
                    "`hindsight mcp --hash-token`), never the tokens themselves"
                )
            if tenant == "":
                raise ValueError(f"token {digest[:12]}...: the tenant must not be empty")
        return value

    def require_safe_http(self) -> None:
        """HTTP without tokens serves one fixed tenant to whoever connects: only on a loopback address."""
        if not self.uses_bearer_tokens and not is_loopback(self.host):
            raise GatewayConfigError(
                f"refusing to serve MCP over HTTP on {self.host} without bearer tokens: anyone who can reach "
                "it would read and write the memories. Configure tokens (HINDSIGHT_MCP__TOKENS or `tokens` "
                "in the gateway's file; hash them with `hindsight mcp --hash-token`) or bind 127.0.0.1."
            )

    @property
    def uses_bearer_tokens(self) -> bool:
        """Every HTTP request must carry a bearer token: hashed ones, or an authorization server's."""
        return bool(self.tokens or self.authorization_servers)

    @model_validator(mode="after")
    def _oauth_is_complete(self) -> GatewaySettings:
        if self.authorization_servers and not (self.resource_url and self.introspection_url):
            raise ValueError(
                "authorization_servers needs resource_url (the gateway's public URL, the tokens' audience) "
                "and introspection_url (RFC 7662: how the gateway verifies the tokens they issue)"
            )
        return self

    @property
    def targets_client_tls(self) -> ClientTls | None:
        """How the gateway's channel to the memory servers speaks TLS; None: plaintext."""
        tls = ClientTls(
            self.targets_ca_file, self.targets_cert_file, self.targets_key_file, self.targets_server_name
        )
        return tls if self.targets_tls or tls != ClientTls() else None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self.tls_cert_file else "http"
        return f"{scheme}://{host}:{self.port}{self.path}"

    @model_validator(mode="after")
    def _tls_pair(self) -> GatewaySettings:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if bool(self.targets_cert_file) != bool(self.targets_key_file):
            raise ValueError("targets_cert_file and targets_key_file (the client certificate) go together")
        return self


def _host_and_port(address: str) -> tuple[str, str]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), port


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None


def channel_target(targets: Sequence[str]) -> str:
    """The channel's target: one address as given (a name gets gRPC's DNS resolver, whose addresses
    round robin spreads over), or a list of IP literals as one `ipv4:`/`ipv6:` target."""
    if not targets:
        raise ValueError("name at least one memory server (HOST:PORT)")
    if len(targets) == 1:
        return targets[0]
    versions = set()
    for address in targets:
        host, port = _host_and_port(address)
        version = _ip_version(host)
        if version is None or not port.isdigit():
            raise ValueError(
                f"{address!r}: a list of memory servers must be IP:PORT literals of one family "
                "(for names, give one DNS name whose addresses are the servers, or a gateway address)"
            )
        versions.add(version)
    if len(versions) > 1:
        raise ValueError("mix of IPv4 and IPv6 addresses: gRPC takes one family per target list")
    if versions == {4}:
        return "ipv4:" + ",".join(targets)
    return "ipv6:" + ",".join(f"[{_host_and_port(a)[0]}]:{_host_and_port(a)[1]}" for a in targets)


def is_loopback(host: str) -> bool:
    """Only literal loopback addresses and `localhost`: a name that merely resolves there could change."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _closest(name: str, known: Sequence[str]) -> str | None:
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _problems(
    error: ValidationError, source_of: Mapping[str, str], skip: frozenset[str] = frozenset()
) -> list[str]:
    """A line per problem: the key, where it came from (`source_of` a top-level key), what is wrong;
    none for the top-level keys in `skip`. A token's value is a tenant or a table (TokenBinding): when
    the table has problems, the "not a string" of the other reading is left out."""
    items = [
        item for item in error.errors(include_url=False) if not item["loc"] or item["loc"][0] not in skip
    ]
    tables = {tuple(item["loc"][:2]) for item in items if item["loc"][2:3] == ("TokenBinding",)}
    lines = []
    for item in items:
        if item["loc"][2:3] == ("str",) and tuple(item["loc"][:2]) in tables:
            continue
        loc = [str(part) for part in item["loc"] if part not in ("TokenBinding", "str")]
        key = ".".join(loc) or "configuration"
        source = source_of.get(loc[0], "the defaults") if loc else "the configuration"
        where = f"from {source}" if source == "the command line" else f"in {source}"
        if item["type"] == "extra_forbidden":
            model = TokenBinding if loc[0] == "tokens" else GatewaySettings
            suggestion = _closest(loc[-1], list(model.model_fields))
            hint = f" (did you mean {suggestion}?)" if suggestion else ""
            lines.append(f"{key} {where}: unknown key{hint}")
        else:
            lines.append(f"{key} {where}: {str(item['msg']).removeprefix('Value error, ')}")
    return lines


def _environment_names(environ: Mapping[str, str]) -> dict[str, str]:
    """The fields the environment sets -> the variable that sets each (matched without case, as
    pydantic-settings matches them)."""
    names = {}
    for variable in environ:
        field = variable.upper().removeprefix(ENV_PREFIX).lower()
        if variable.upper().startswith(ENV_PREFIX) and field in GatewaySettings.model_fields:
            names[field] = variable
    return names


def unknown_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """A line for each HINDSIGHT_MCP__ variable that names no gateway setting, with the closest one."""
    environ = os.environ if environ is None else environ
    lines = []
    for variable in sorted(environ):
        if not variable.upper().startswith(ENV_PREFIX):
            continue
        field = variable.upper().removeprefix(ENV_PREFIX).lower()
        if field in GatewaySettings.model_fields:
            continue
        suggestion = _closest(field, list(GatewaySettings.model_fields))
        hint = f" (did you mean {ENV_PREFIX}{suggestion.upper()}?)" if suggestion else ""
        lines.append(f"{variable} is not a setting of the MCP gateway, ignored{hint}")
    return lines


def load_gateway_settings(config_file: Path | None = None, **overrides: Any) -> GatewaySettings:
    """Reads the TOML file (if any), applies the environment on top, then explicit overrides (flags)."""
    path = config_file or (Path(os.environ[CONFIG_ENV]) if os.environ.get(CONFIG_ENV) else None)
    values: dict[str, Any] = {}
    if path is not None:
        try:
            with path.open("rb") as handle:
                values = tomllib.load(handle)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise GatewayConfigError(f"cannot read the gateway configuration {path}: {reason}") from None
        except tomllib.TOMLDecodeError as exc:
            raise GatewayConfigError(f"the gateway configuration {path}: not valid TOML: {exc}") from None
    source_of = dict.fromkeys(values, str(path))
    variables = _environment_names(os.environ)
    # The fields the environment set (defaults are not in model_fields_set) beat the file; flags beat both.
    problems: list[str] = []
    said = frozenset[str]()
    try:
        from_env = GatewaySettings()
    except ValidationError as exc:  # said; the file and the flags are still checked
        problems += _problems(exc, variables)
        said = frozenset(variables)
    else:
        values.update({name: getattr(from_env, name) for name in from_env.model_fields_set})
        source_of.update({name: variables.get(name, "the environment") for name in from_env.model_fields_set})
    flags = {name: value for name, value in overrides.items() if value is not None}
    values.update(flags)
    source_of.update(dict.fromkeys(flags, "the command line"))
    try:
        settings = GatewaySettings(**values)
    except ValidationError as exc:  # the environment is read again: what it alone set is said already
        problems += _problems(exc, source_of, said - values.keys())
    if problems:
        raise GatewayConfigError(*problems)
    return settings
