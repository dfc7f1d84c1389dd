"""The gateway's configuration, its gRPC target list, the one error map, and the README's prompt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from gateway_mcp.config import GatewayConfigError, channel_target, is_loopback, load_gateway_settings
from gateway_mcp.errors import UNAVAILABLE_MESSAGE, from_rpc
from gateway_mcp.prompt import SYSTEM_PROMPT_EN, SYSTEM_PROMPT_ZH
from hindsight_server.domain.errors import ResourceExhausted, RetryLater, Unavailable
from hindsight_server.rpc.errors import rich_status, status_for
from tests.conftest import REPO_ROOT


def test_target_lists_become_one_round_robin_target() -> None:
    assert channel_target(["memory.internal:50051"]) == "memory.internal:50051"
    assert channel_target(["127.0.0.1:50051", "127.0.0.1:50052"]) == "ipv4:127.0.0.1:50051,127.0.0.1:50052"
    assert channel_target(["[::1]:50051", "::1:50052"]) == "ipv6:[::1]:50051,[::1]:50052"
    with pytest.raises(ValueError, match="one family"):
        channel_target(["127.0.0.1:1", "[::1]:2"])
    with pytest.raises(ValueError, match="must be IP:PORT literals"):
        channel_target(["a.example:1", "b.example:1"])


def test_flags_beat_the_environment_which_beats_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('tenant = "from-file"\nport = 9000\ntargets = ["127.0.0.1:1"]\ndebug_tool = true\n')
    monkeypatch.setenv("HINDSIGHT_MCP_CONFIG", str(config))
    monkeypatch.setenv("HINDSIGHT_MCP__PORT", "9001")
    monkeypatch.setenv("HINDSIGHT_MCP__TARGETS", "127.0.0.1:2, 127.0.0.1:3")
    settings = load_gateway_settings(port=9002)
    assert settings.tenant == "from-file" and settings.debug_tool is True  # the file
    assert settings.targets == ("127.0.0.1:2", "127.0.0.1:3")  # the environment over the file
    assert settings.port == 9002  # the flag over both
    assert settings.url == "http://127.0.0.1:9002/mcp"
    with pytest.raises(ValueError, match="one family"):
        load_gateway_settings(targets="127.0.0.1:1,[::1]:2")


def test_each_problem_is_a_line_naming_the_key_and_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "gateway.toml"
    token = f"[tokens.{'a' * 64}]\ntenant = 't'\nsubjct = 's'\n"
    config.write_text(f'prot = 9000\ndeadline_s = "soon"\n{token}')
    monkeypatch.setenv("HINDSIGHT_MCP_CONFIG", str(config))
    monkeypatch.setenv("HINDSIGHT_MCP__MAX_BODY_BYTES", "1")
    with pytest.raises(GatewayConfigError) as refused:
        load_gateway_settings(port=70000)
    assert sorted(refused.value.problems) == [
        f"deadline_s in {config}: Input should be a valid number, unable to parse string as a number",
        "max_body_bytes in HINDSIGHT_MCP__MAX_BODY_BYTES: Input should be greater than or equal to 65536",
        "port from the command line: Input should be less than or equal to 65535",
        f"prot in {config}: unknown key (did you mean port?)",
        f"tokens.{'a' * 64}.subjct in {config}: unknown key (did you mean subject?)",
    ]
    missing = tmp_path / "nope.toml"
    with pytest.raises(GatewayConfigError) as unreadable:
        load_gateway_settings(missing)
    assert unreadable.value.problems == (
        f"cannot read the gateway configuration {missing}: No such file or directory",
    )


def _gateway(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m gateway_mcp --stdio`, stdin closed (it ends at once), no HINDSIGHT_ variable but env's."""
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("HINDSIGHT_")}
    return subprocess.run(
        [sys.executable, "-m", "gateway_mcp", "--stdio", *args],
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(REPO_ROOT), **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_gateway_command_says_a_typo_in_one_line_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "gateway.toml").write_text("tenat = 'acme'\n")
    ran = _gateway(tmp_path, "--gateway-config", "gateway.toml")
    assert ran.stderr.splitlines() == [
        "hindsight mcp: config error: tenat in gateway.toml: unknown key (did you mean tenant?)"
    ]
    assert ran.returncode == 2


def test_the_gateway_logs_a_misspelt_variable_in_its_json_log(tmp_path: Path) -> None:
    ran = _gateway(tmp_path, HINDSIGHT_MCP__LOG_FORMAT="json", HINDSIGHT_MCP__PROT="8766")
    assert ran.returncode == 0, ran.stderr
    (line,) = ran.stderr.splitlines()
    entry = json.loads(line)
    assert (entry["level"], entry["logger"]) == ("WARNING", "gateway_mcp.config")
    assert entry["message"] == (
        "HINDSIGHT_MCP__PROT is not a setting of the MCP gateway, ignored (did you mean HINDSIGHT_MCP__PORT?)"
    )


def test_only_literal_loopback_counts() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("gateway.local")


def _rpc_error(code: grpc.StatusCode, details: str, field: str | None = None) -> grpc.aio.AioRpcError:
    trailing = grpc.aio.Metadata()
    if field is not None:
        status = status_pb2.Status(code=getattr(code_pb2, code.name), message=details)
        detail = any_pb2.Any()
        violation = error_details_pb2.BadRequest.FieldViolation(field=field, description="must not be empty")
        detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
        status.details.append(detail)
        trailing.add("grpc-status-details-bin", status.SerializeToString())
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details=details)


def test_rpc_errors_become_messages_a_model_can_act_on() -> None:
    bad = _rpc_error(
        grpc.StatusCode.INVALID_ARGUMENT, "memory.entities.n: must not be empty", "memory.entities.n"
    )
    assert from_rpc(bad, "memory_write") == "invalid argument: entities.n: must not be empty"
    # Without the BadRequest detail, the message's leading field is renamed the same way.
    plain = _rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "tiers[0]: must not be UNSPECIFIED")
    assert from_rpc(plain, "memory_recall") == "invalid argument: memory_types[0]: must not be UNSPECIFIED"
    # Erase's ids are memory_forget's memory_ids.
    ids = _rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "memories.ids[2]: not a memory id")
    assert from_rpc(ids, "memory_forget") == "invalid argument: memory_ids[2]: not a memory id"
    # A request's `id` is the pending decisions' and History's memory_id; renamed for those tools only.
    memory_id = _rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "id: not a memory id")
    assert from_rpc(memory_id, "memory_history") == "invalid argument: memory_id: not a memory id"
    assert from_rpc(memory_id, "memory_reject_pending") == "invalid argument: memory_id: not a memory id"
    reason = _rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "reason: too long")
    assert from_rpc(reason, "memory_end_session") == "invalid argument: reason: too long"
    assert from_rpc(reason, "memory_forget") == "invalid argument: query: too long"
    down = _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    assert from_rpc(down, "memory_recall") == f"{UNAVAILABLE_MESSAGE} (DEADLINE_EXCEEDED)"
    missing = _rpc_error(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    assert from_rpc(missing, "memory_summarize").endswith("(UNIMPLEMENTED)")
    assert from_rpc(_rpc_error(grpc.StatusCode.NOT_FOUND, "no memory x"), "t") == "not found: no memory x"


@pytest.mark.parametrize("readme", ["README.md", "gateway_mcp/README.md"])
def test_the_readme_shows_the_system_prompt_the_gateway_sends(readme: str) -> None:
    text = (REPO_ROOT / readme).read_text()
    assert SYSTEM_PROMPT_ZH in text
    assert SYSTEM_PROMPT_EN in text


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (ResourceExhausted("tenant 't' is over its request rate", retry_after_s=2.5), "try again in 2.5 s"),
        (
            Unavailable("the database is unavailable; retry later"),
            f"{UNAVAILABLE_MESSAGE} in 1.0 s (UNAVAILABLE)",
        ),
    ],
)
def test_the_servers_retry_info_reaches_the_model(error: RetryLater, said: str) -> None:
    """The details as the memory server encodes them (rpc/errors.py), read by the gateway."""
    code = status_for(error)
    trailing = grpc.aio.Metadata()
    trailing.add("grpc-status-details-bin", rich_status(error, code).SerializeToString())
    assert said in from_rpc(
        grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details=str(error)), "t"
    )
