"""The compose project's collector (deploy/compose/otel/collector.yaml) accepts what the processes can
send (OTLP over gRPC and over HTTP/protobuf), offers the metrics to a Prometheus scrape, and the
processes name their environment with the current resource attribute, deployment.environment.name."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import REPO_ROOT

COMPOSE = REPO_ROOT / "deploy" / "compose"


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((COMPOSE / name).read_text())
    return loaded


def test_the_collector_takes_both_protocols_and_serves_a_prometheus_scrape() -> None:
    config = _load("otel/collector.yaml")
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317") and protocols["http"]["endpoint"].endswith(":4318")
    assert config["exporters"]["prometheus"]["endpoint"] == "0.0.0.0:8889"
    pipelines = config["service"]["pipelines"]
    assert "prometheus" in pipelines["metrics"]["exporters"]
    assert all("prometheus" not in pipelines[signal]["exporters"] for signal in ("traces", "logs"))


def test_the_processes_name_their_environment_with_the_current_attribute() -> None:
    compose = _load("compose.yaml")
    environments = [compose["x-server-env"], compose["services"]["mcp-gateway"]["environment"]]
    for environment in environments:
        attributes = dict(pair.split("=", 1) for pair in environment["OTEL_RESOURCE_ATTRIBUTES"].split(","))
        assert attributes == {"deployment.environment.name": "compose"}
