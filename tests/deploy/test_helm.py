"""deploy/helm: `helm lint --strict` and `helm template` (Helm v4 as a library, offline) with the default
and the production-like values, every rendered manifest validated strictly against the Kubernetes
schemas of the oldest supported and the newest known version, the values schema rejecting bad values,
and the rendered configuration accepted by hindsight's own settings classes."""

from __future__ import annotations

import json
import os
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway_mcp.auth import hash_token
from gateway_mcp.config import GatewaySettings
from hindsight_server.config import Settings, load_settings
from tests.deploy.conftest import CHART_DIR, HELM_DIR

pytestmark = pytest.mark.usefixtures("helm_available")

PRODUCTION = HELM_DIR / "values-production.yaml"
KUBE_VERSION = "v1.30.0"  # what `helm lint` assumes for Capabilities
# The chart's kubeVersion floor (native gRPC probes) and the newest schemas kubernetes-validate ships.
SCHEMA_VERSIONS = ("1.27.0", "1.30.0", "1.37.0")
RELEASE, NAMESPACE = "mem", "agents"
EXTERNAL_DB = {
    "postgresql": {"enabled": False},
    "secrets": {"databaseDsn": "postgresql://hindsight:secret@db.example.com:5432/hindsight"},
}


def production_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(PRODUCTION.read_text())
    return values


def lint(values: dict[str, Any] | None) -> dict[str, Any]:
    import helm_python

    report: dict[str, Any] = helm_python.lint(CHART_DIR, values, strict=True, kube_version=KUBE_VERSION)
    return report


def render(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    """`helm template`: every manifest, parsed (NOTES.txt left out)."""
    from helm_python import Chart

    with Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return [
        document
        for path, text in sorted(rendered.items())
        if path.endswith(".yaml")
        for document in yaml.safe_load_all(text)
        if document
    ]


def kinds(documents: list[dict[str, Any]]) -> Counter[str]:
    return Counter(document["kind"] for document in documents)


def one(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def container(documents: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    spec = one(documents, "Deployment", f"{RELEASE}-hindsight-{deployment}")["spec"]["template"]["spec"]
    containers: list[dict[str, Any]] = spec["containers"]
    assert len(containers) == 1
    return containers[0]


@pytest.mark.parametrize("values", [None, "production"], ids=["default", "production"])
def test_lint_strict(values: str | None) -> None:
    report = lint(production_values() if values else None)
    assert report["errors"] == []
    # Strict: warnings count as errors; only informational notes (e.g. "icon is recommended") pass.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


DEFAULT_KINDS = {
    "Deployment": 3,  # memory server, Triton, MCP gateway
    "StatefulSet": 1,  # the bundled PostgreSQL
    "Service": 5,  # server ClusterIP + headless, Triton, MCP, PostgreSQL
    "HorizontalPodAutoscaler": 1,
    "PodDisruptionBudget": 2,
    "Job": 1,
    "ConfigMap": 2,
    "Secret": 1,
    "ServiceAccount": 1,
}
PRODUCTION_KINDS = {
    "Deployment": 3,
    "Service": 4,  # no bundled PostgreSQL
    "HorizontalPodAutoscaler": 2,  # servers and Triton
    "PodDisruptionBudget": 2,
    "Job": 1,
    "ConfigMap": 2,
    "Ingress": 1,
    "ServiceAccount": 1,
    # no Secret: secrets.existingSecret
}


@pytest.mark.usefixtures("kubernetes_schemas")
@pytest.mark.parametrize(
    ("values", "expected"),
    [(None, DEFAULT_KINDS), ("production", PRODUCTION_KINDS)],
    ids=["default", "production"],
)
def test_rendered_manifests_are_valid_kubernetes(values: str | None, expected: dict[str, int]) -> None:
    import kubernetes_validate

    documents = render(production_values() if values else None)
    assert kinds(documents) == Counter(expected)
    for document in documents:
        for version in SCHEMA_VERSIONS:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                name = f"{document['kind']}/{document['metadata']['name']}"
                pytest.fail(f"{name} is invalid for Kubernetes {version}: {error.message} at {error.path}")


@pytest.mark.usefixtures("kubernetes_schemas")
def test_the_validator_can_fail() -> None:
    """Strict validation catches a field Kubernetes does not know (what a typo in a template makes)."""
    import kubernetes_validate

    deployment = one(render(None), "Deployment", f"{RELEASE}-hindsight-server")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {"tcpSocket": {"port": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.30.0", strict=True)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"server": {"replicaCount": -1}}, "/server/replicaCount"),
        ({"server": {"replicsCount": 2}}, "replicsCount"),
        ({"server": {"autoscaling": {"maxReplicas": 0}}}, "maxReplicas"),
        ({"triton": {"gpu": {"count": 0}}}, "/triton/gpu/count"),
        ({"mcp": {"tokens": {"my-secret-token": "acme"}}}, "my-secret-token"),
        ({"config": {"recal": {"min_score": 0.4}}}, "recal"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"secrets": {"databaseDsn": "mysql://x"}}, "databaseDsn"),
    ],
    ids=[
        "negative-replicas",
        "misspelt-key",
        "zero-max",
        "zero-gpus",
        "clear-token",
        "section",
        "enum",
        "dsn",
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], complaint: str) -> None:
    from helm_python import HelmValuesError

    report = lint(values)
    assert report["errors"], f"helm lint accepted {values}"
    assert any(complaint in error for error in report["errors"]), report["errors"]
    with pytest.raises(HelmValuesError, match=complaint):
        render(values)


def test_external_database_needs_a_dsn() -> None:
    from helm_python import HelmRenderError

    with pytest.raises(HelmRenderError, match=r"secrets\.databaseDsn is required"):
        render({"postgresql": {"enabled": False}})


def test_migrations_hooks_follow_the_database() -> None:
    """External database: the Job runs before anything is installed, with a hook Secret of its own.
    Bundled database: after install (the database must exist), with the release's Secret."""
    job_name = f"{RELEASE}-hindsight-migrations"
    external = render(EXTERNAL_DB)
    job = one(external, "Job", job_name)
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    hook_secret = one(external, "Secret", job_name)
    assert hook_secret["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(hook_secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    assert hook_secret["stringData"]["database-dsn"] == EXTERNAL_DB["secrets"]["databaseDsn"]
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HINDSIGHT_DATABASE__DSN"]["valueFrom"]["secretKeyRef"]["name"] == job_name
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["hindsight", "migrate"]

    bundled = one(render(None), "Job", job_name)
    assert bundled["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"


def test_server_probes_scaling_and_hardening() -> None:
    documents = render(None)
    server = container(documents, "server")
    assert server["readinessProbe"]["grpc"] == {"port": 50051, "service": "hindsight.v1.MemoryService"}
    assert server["startupProbe"]["grpc"]["service"] == "hindsight.v1.MemoryService"
    # Liveness must not follow the database (see values.yaml): tcp by default, gRPC when asked.
    assert "tcpSocket" in server["livenessProbe"]
    grpc_liveness = container(render({"server": {"livenessProbe": {"type": "grpc"}}}), "server")
    assert grpc_liveness["livenessProbe"]["grpc"] == {"port": 50051, "service": ""}
    assert server["resources"]["requests"]["cpu"] == "500m"

    # The HPA owns the replica count; without it the value applies.
    deployment = one(documents, "Deployment", f"{RELEASE}-hindsight-server")
    assert "replicas" not in deployment["spec"]
    hpa = one(documents, "HorizontalPodAutoscaler", f"{RELEASE}-hindsight-server")
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    fixed = render({"server": {"autoscaling": {"enabled": False}, "replicaCount": 4}})
    assert one(fixed, "Deployment", f"{RELEASE}-hindsight-server")["spec"]["replicas"] == 4
    assert "HorizontalPodAutoscaler" not in kinds(fixed)

    headless = one(documents, "Service", f"{RELEASE}-hindsight-headless")
    assert headless["spec"]["clusterIP"] == "None"

    for document in documents:
        template = document.get("spec", {}).get("template")
        if template is None:
            continue
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, document["metadata"]["name"]
        assert pod["automountServiceAccountToken"] is False
        for each in pod["containers"]:
            assert each["securityContext"]["readOnlyRootFilesystem"] is True, each["name"]
            assert each["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert each["resources"]["limits"]["memory"], each["name"]


def test_production_triton_on_gpu() -> None:
    documents = render(production_values())
    triton = container(documents, "triton")
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "--instance-kind=KIND_GPU" in triton["command"]
    assert triton["image"].endswith(":0.1.0-gpu")
    pod = one(documents, "Deployment", f"{RELEASE}-hindsight-triton")["spec"]["template"]["spec"]
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    cpu_triton = container(render(None), "triton")
    assert "nvidia.com/gpu" not in cpu_triton["resources"]["limits"]
    assert "--instance-kind=KIND_CPU" in cpu_triton["command"]


def _settings_sections() -> set[str]:
    """The settings' sections: every field that is not a plain value (models and policy dataclasses)."""
    return {
        name
        for name, field in Settings.model_fields.items()
        if field.annotation not in (str, int, float, bool, Path)
    }


def test_schema_knows_every_settings_section() -> None:
    """values `config` is hindsight's settings file: the schema lists exactly the sections of
    hindsight_server/config.py (a new section must be added to values.schema.json)."""
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    config = schema["properties"]["config"]
    assert config["additionalProperties"] is False
    sections = {name for name, spec in config["properties"].items() if spec.get("type") == "object"}
    assert sections == _settings_sections()


@pytest.mark.parametrize("values", [None, "production"], ids=["default", "production"])
def test_server_configuration_is_accepted_by_hindsight(
    values: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMaps, mounted and loaded as a server pod would: hindsight's settings accept them."""
    overrides = production_values() if values else None
    documents = render(overrides)
    config_map = one(documents, "ConfigMap", f"{RELEASE}-hindsight-config")
    env = one(documents, "ConfigMap", f"{RELEASE}-hindsight-env")["data"]
    toml_file = tmp_path / "hindsight.toml"
    toml_file.write_text(config_map["data"]["hindsight.toml"])
    tomllib.loads(toml_file.read_text())  # valid TOML
    for key in [k for k in os.environ if k.startswith("HINDSIGHT_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HINDSIGHT_CONFIG", str(toml_file))  # where the pod mounts it
    monkeypatch.setenv("HINDSIGHT_DATABASE__DSN", "postgresql://u:p@db:5432/hindsight")  # from the Secret
    settings = load_settings()
    assert settings.server.host == "0.0.0.0"
    assert settings.server.port == 50051
    if overrides:
        assert settings.database.pool_max == overrides["config"]["database"]["pool_max"]
        assert settings.jobs.quota == overrides["config"]["jobs"]["quota"]
    assert settings.inference.url == f"{RELEASE}-hindsight-triton:8001"


def test_mcp_gateway_configuration_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway's environment with the generated token: valid, safe to bind every address, the
    token's hash in the Secret matches the token, and the servers are reached through the headless
    Service (client-side round robin)."""
    documents = render({"secrets": {"mcpApiKeys": {"default": "hs_example_key"}}})
    secret = one(documents, "Secret", f"{RELEASE}-hindsight")["stringData"]
    token = secret["mcp-token"]
    assert json.loads(secret["mcp-tokens"]) == {hash_token(token): "default"}
    for key in [k for k in os.environ if k.startswith("HINDSIGHT_MCP")]:
        monkeypatch.delenv(key)
    for item in container(documents, "mcp")["env"]:
        if "value" in item:
            monkeypatch.setenv(item["name"], item["value"])
        elif item["name"].startswith("HINDSIGHT_MCP__"):
            key = item["valueFrom"]["secretKeyRef"]["key"]
            monkeypatch.setenv(item["name"], secret[key])
    gateway = GatewaySettings()
    gateway.require_safe_http()
    assert gateway.host == "0.0.0.0"
    assert gateway.api_keys == {"default": "hs_example_key"}
    assert gateway.targets == (f"dns:///{RELEASE}-hindsight-headless.{NAMESPACE}.svc.cluster.local:50051",)


def test_bundled_database_dsn_matches_its_password() -> None:
    documents = render({"postgresql": {"password": "p@ss/word"}})
    secret = one(documents, "Secret", f"{RELEASE}-hindsight")["stringData"]
    assert secret["postgres-password"] == "p@ss/word"
    # Percent-encoded inside the URI.
    assert secret["database-dsn"] == (
        f"postgresql://hindsight:p%40ss%2Fword@{RELEASE}-hindsight-postgresql:5432/hindsight"
    )
