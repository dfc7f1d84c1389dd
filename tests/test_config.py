"""One typed configuration: defaults from docs/design.md, a TOML file, the environment over the file, and
explicit overrides (command-line flags) over both. What cannot be used is said in a line per problem,
naming the key and where it came from (the real `hindsight` command: exit 2, no traceback); a HINDSIGHT_
variable that is no setting is named with the closest one; a command that needs a database never makes
one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from console.config import unknown_environment as unknown_console_environment
from gateway_mcp.config import unknown_environment as unknown_gateway_environment
from hindsight_server.config import ConfigError, load_settings, unknown_environment
from hindsight_server.domain.model import Kind
from tests.conftest import REPO_ROOT


def _hindsight(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real command, in `cwd`, with no HINDSIGHT_ variable but `env`'s."""
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("HINDSIGHT_")}
    clean["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "hindsight_server", *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_defaults_follow_the_design(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HINDSIGHT_CONFIG", raising=False)
    settings = load_settings()
    assert settings.server.port == 50051
    assert settings.embedding.dimension == 512
    assert settings.ttl.working == timedelta(hours=24)
    assert settings.ttl.episodic == timedelta(days=30)
    assert settings.ttl.by_kind[Kind.EVENT] == timedelta(days=90)
    assert settings.recall.default_token_budget == 2000
    assert settings.recall.recency_half_life == timedelta(days=30)
    assert settings.inference.query_cache_ttl_s == 300
    assert settings.write.pending_below_confidence == 0.7


def test_file_then_environment_then_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "hindsight.toml"
    config.write_text(
        '[server]\nport = 6000\nhost = "0.0.0.0"\n[recall]\nmin_score = 0.3\nrecency_half_life = "P7D"\n'
    )
    monkeypatch.setenv("HINDSIGHT_CONFIG", str(config))
    monkeypatch.setenv("HINDSIGHT_SERVER__PORT", "7000")
    settings = load_settings()
    assert settings.server.port == 7000  # the environment beats the file
    assert settings.server.host == "0.0.0.0"  # the file beats the default
    assert settings.recall.min_score == 0.3
    assert settings.recall.recency_half_life == timedelta(days=7)
    assert load_settings(server__port=8000).server.port == 8000  # a flag beats both


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HINDSIGHT_SERVER__PORT", "99999"),
        ("HINDSIGHT_DATABASE__POOL_MAX", "0"),
        ("HINDSIGHT_WEBHOOKS__MAX_ENDPOINTS_PER_TENANT", "0"),
    ],
)
def test_bad_values_are_refused_by_name(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.delenv("HINDSIGHT_CONFIG", raising=False)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as refused:
        load_settings()
    (problem,) = refused.value.problems
    key = variable.removeprefix("HINDSIGHT_").lower().replace("__", ".")
    assert problem.startswith(f"{key} in {variable}: "), problem
    assert problem.endswith(f"(got {value!r})"), problem


def test_unknown_keys_in_the_file_are_refused_with_the_closest_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[server]\nprot = 1\n[recall]\nmin_scor = 0.3\n[recal]\nx = 1\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(config)
    assert sorted(refused.value.problems) == [
        f"recal in {config}: unknown section (did you mean recall?)",
        f"recall.min_scor in {config}: unknown key (did you mean min_score?)",
        f"server.prot in {config}: unknown key (did you mean port?)",
    ]


def test_each_problem_names_the_file_or_the_variable_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "hindsight.toml"
    config.write_text('[server]\nport = "fifty"\n[security]\ntls_cert_file = "cert.pem"\n')
    monkeypatch.setenv("HINDSIGHT_CONFIG", str(config))
    monkeypatch.setenv("HINDSIGHT_DATABASE__POOL_MAX", "0")
    monkeypatch.setenv("HINDSIGHT_DATABASE__DSN", "postgresql://app:hunter2@db/hindsight")
    monkeypatch.setenv("HINDSIGHT_SERVER__PROT", "1")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert sorted(refused.value.problems) == [
        "database.pool_max in HINDSIGHT_DATABASE__POOL_MAX: Input should be greater than or equal to 1 "
        "(got '0')",
        f"security in {config}: tls_cert_file and tls_key_file go together",
        f"server.port in {config}: Input should be a valid integer, unable to parse string as an integer "
        "(got 'fifty')",
        "server.prot in HINDSIGHT_SERVER__PROT: unknown key (did you mean port?)",
    ]
    assert "hunter2" not in str(refused.value)


def test_an_unreadable_file_is_one_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as refused:
        load_settings(missing)
    assert refused.value.problems == (
        f"cannot read the configuration file {missing}: No such file or directory",
    )
    monkeypatch.setenv("HINDSIGHT_CONFIG", str(missing))
    with pytest.raises(ConfigError, match=r"nope\.toml \(HINDSIGHT_CONFIG\): No such file"):
        load_settings()
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\nport = 1\n")
    with pytest.raises(ConfigError, match=r"broken\.toml: not valid TOML: Expected ']'"):
        load_settings(broken)


def test_explicit_overrides_reach_the_policy_sections_and_are_validated() -> None:
    settings = load_settings(None, recall__exact_search_factor=0.0, recall__min_score=0.4)
    assert (settings.recall.exact_search_factor, settings.recall.min_score) == (0.0, 0.4)
    assert settings.recall.profiles == load_settings(None).recall.profiles  # the rest kept
    with pytest.raises(ConfigError, match=r"^recall\.exact_search_factor from the command line: "):
        load_settings(None, recall__exact_search_factor="lots")


def test_unknown_variables_are_named_with_the_closest_setting() -> None:
    environ = {
        "HINDSIGHT_RECAL__MIN_SCORE": "0.3",  # a misspelt section
        "HINDSIGHT_SERVER_PORT": "1",  # one underscore where two go
        "HINDSIGHT_LOG_LEVL": "DEBUG",
        "HINDSIGHT_API_KY": "k",  # the CLI's own
        "HINDSIGHT_QQQQQQQQ": "1",  # nothing close
        "HINDSIGHT_MCP__PROT": "1",  # the gateway's: said by its check
        # Settings, and variables of other parts: not named.
        "HINDSIGHT_RECALL__MIN_SCORE": "0.3",
        "HINDSIGHT_DATA_DIR": "d",
        "HINDSIGHT_API_KEY": "k",
        "HINDSIGHT_MCP__PORT": "1",
        "HINDSIGHT_CONSOLE__PORT": "1",
        "HINDSIGHT_CONSOLE__TARGTS": "x:1",
        "HINDSIGHT_CONSOLE_PORT": "8766",
        "HINDSIGHT_DB_USER": "hindsight",
        "PATH": "/bin",
    }
    assert unknown_environment(environ) == [
        "HINDSIGHT_API_KY is not a setting, ignored (did you mean HINDSIGHT_API_KEY?)",
        "HINDSIGHT_LOG_LEVL is not a setting, ignored (did you mean HINDSIGHT_LOG_LEVEL?)",
        "HINDSIGHT_QQQQQQQQ is not a setting, ignored",
        "HINDSIGHT_RECAL__MIN_SCORE is not a setting, ignored (did you mean HINDSIGHT_RECALL__MIN_SCORE?)",
        "HINDSIGHT_SERVER_PORT is not a setting, ignored (did you mean HINDSIGHT_SERVER__PORT?)",
    ]
    assert unknown_gateway_environment(environ) == [
        "HINDSIGHT_MCP__PROT is not a setting of the MCP gateway, ignored (did you mean HINDSIGHT_MCP__PORT?)"
    ]
    assert unknown_console_environment(environ) == [
        "HINDSIGHT_CONSOLE__TARGTS is not a setting of the web console, ignored "
        "(did you mean HINDSIGHT_CONSOLE__TARGETS?)"
    ]


def test_a_typo_in_the_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "hindsight.toml").write_text("[recall]\nmin_scor = 0.3\n")
    ran = _hindsight(tmp_path, "--config", "hindsight.toml", "tenants", "list")
    assert ran.stderr.splitlines() == [
        "hindsight: config error: recall.min_scor in hindsight.toml: unknown key (did you mean min_score?)"
    ]
    assert ran.returncode == 2
    assert sorted(os.listdir(tmp_path)) == ["hindsight.toml"]


def test_a_missing_config_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    ran = _hindsight(tmp_path, "--config", "nope.toml", "migrate")
    assert ran.stderr.splitlines() == [
        "hindsight: config error: cannot read the configuration file nope.toml: No such file or directory"
    ]
    assert ran.returncode == 2
    by_variable = _hindsight(tmp_path, "jobs", "list", HINDSIGHT_CONFIG="nope.toml")
    assert by_variable.stderr.splitlines() == [
        "hindsight: config error: cannot read the configuration file nope.toml (HINDSIGHT_CONFIG): "
        "No such file or directory"
    ]
    assert by_variable.returncode == 2
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", [["tenants", "list"], ["jobs", "list"]])
def test_a_command_needing_a_database_says_where_it_looked_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    ran = _hindsight(tmp_path, *command, HINDSIGHT_RECAL__MIN_SCORE="0.3")
    lines = ran.stderr.splitlines()
    assert len(lines) == 2, lines
    # The misspelt variable, with the setting it was likely meant to be.
    assert " WARNING " in lines[0] and lines[0].endswith(
        " hindsight_server.config: HINDSIGHT_RECAL__MIN_SCORE is not a setting, ignored "
        "(did you mean HINDSIGHT_RECALL__MIN_SCORE?)"
    ), lines[0]
    assert lines[1].startswith(
        f"hindsight {command[0]}: no database: {tmp_path / 'data' / 'postgres'} holds no embedded PostgreSQL "
        "(data_dir 'data' from the default, database.dsn not set)."
    ), lines[1]
    assert ran.returncode == 2
    assert os.listdir(tmp_path) == []  # no ./data, no database
    elsewhere = _hindsight(tmp_path, *command, "--data-dir", "other")
    assert "(data_dir 'other' from the command line, database.dsn not set)" in elsewhere.stderr
    assert elsewhere.returncode == 2
    assert os.listdir(tmp_path) == []


def test_the_json_log_format_writes_one_object_per_line(tmp_path: Path) -> None:
    ran = _hindsight(tmp_path, "tenants", "list", HINDSIGHT_LOG_FORMAT="json", HINDSIGHT_LOG_LEVL="DEBUG")
    (logged, refusal) = ran.stderr.splitlines()
    entry = json.loads(logged)
    assert entry.keys() == {"time", "level", "logger", "message", "pid"}
    assert (entry["level"], entry["logger"]) == ("WARNING", "hindsight_server.config")
    assert entry["message"].startswith("HINDSIGHT_LOG_LEVL is not a setting")
    assert entry["time"].endswith("+00:00") and entry["pid"] > 0
    assert refusal.startswith("hindsight tenants: no database: ")  # the command's own answer stays text
    bad = _hindsight(tmp_path, "tenants", "list", HINDSIGHT_LOG_FORMAT="yaml")
    assert bad.stderr.splitlines() == [
        "hindsight: config error: log_format in HINDSIGHT_LOG_FORMAT: expected text or json (got 'yaml')"
    ]


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"webhooks__allowed_networks": ["10.0.0.0/8", "not-a-net"]}, "'not-a-net' is not a network"),
        ({"webhooks__lease_s": 5, "webhooks__attempt_timeout_s": 10}, "at least twice attempt_timeout_s"),
        ({"webhooks__retry_base_s": 10, "webhooks__retry_cap_s": 1}, "retry_cap_s must not be less"),
    ],
)
def test_webhook_settings_that_cannot_work_are_refused(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, object], said: str
) -> None:
    monkeypatch.delenv("HINDSIGHT_CONFIG", raising=False)
    with pytest.raises(ConfigError) as refused:
        load_settings(None, **values)
    (problem,) = refused.value.problems
    assert problem.startswith("webhooks") and said in problem, problem
