"""One typed configuration: defaults from docs/design.md, a TOML file, the environment over the file, and
explicit overrides (command-line flags) over both."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from hindsight_server.config import load_settings
from hindsight_server.domain.model import Kind


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
    [("HINDSIGHT_SERVER__PORT", "99999"), ("HINDSIGHT_DATABASE__POOL_MAX", "0")],
)
def test_bad_values_are_refused_by_name(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.delenv("HINDSIGHT_CONFIG", raising=False)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match=variable.removeprefix("HINDSIGHT_").split("__")[-1].lower()):
        load_settings()


def test_unknown_keys_in_the_file_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[server]\nprot = 1\n")
    with pytest.raises(ValidationError, match="prot"):
        load_settings(config)


def test_explicit_overrides_reach_the_policy_sections_and_are_validated() -> None:
    settings = load_settings(None, recall__exact_search_factor=0.0, recall__min_score=0.4)
    assert (settings.recall.exact_search_factor, settings.recall.min_score) == (0.0, 0.4)
    assert settings.recall.profiles == load_settings(None).recall.profiles  # the rest kept
    with pytest.raises(ValidationError, match="exact_search_factor"):
        load_settings(None, recall__exact_search_factor="lots")
