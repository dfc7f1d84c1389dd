"""deploy/helm: `helm lint --strict` and `helm template` (Helm v4 as a library, offline) with the default,
the production-like and the CloudNativePG values, every rendered manifest validated strictly against the
Kubernetes schemas of the oldest supported and the newest known version (the CloudNativePG Cluster
against the fields of its API type that the chart uses), the values schema rejecting bad values, and the
rendered configuration, database DSNs included, accepted by hindsight's own settings classes."""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from console.config import ConsoleSettings, load_console_settings
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
EXTERNAL_DB: dict[str, dict[str, Any]] = {
    "postgresql": {"enabled": False},
    "secrets": {"databaseDsn": "postgresql://hindsight:secret@db.example.com:5432/hindsight"},
}
CLOUDNATIVEPG = {"postgresql": {"enabled": False}, "cloudnativepg": {"enabled": True}}
CLUSTER = f"{RELEASE}-hindsight-db"  # the CloudNativePG Cluster's default name


def production_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(PRODUCTION.read_text())
    return values


def named_values(name: str | None) -> dict[str, Any] | None:
    """The values files the chart is checked with, by name (None: the chart's defaults)."""
    return {None: None, "production": production_values(), "cloudnativepg": CLOUDNATIVEPG}[name]


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


def pod_spec(document: dict[str, Any]) -> dict[str, Any] | None:
    """The pod a workload runs (a Pod's own spec, else its template's), None for other objects."""
    if document["kind"] == "Pod":
        spec: dict[str, Any] = document["spec"]
        return spec
    template = document.get("spec", {}).get("template")
    return None if template is None else template["spec"]


def container(documents: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    spec = one(documents, "Deployment", f"{RELEASE}-hindsight-{deployment}")["spec"]["template"]["spec"]
    containers: list[dict[str, Any]] = spec["containers"]
    assert len(containers) == 1
    return containers[0]


@pytest.mark.parametrize(
    "values", [None, "production", "cloudnativepg"], ids=["default", "production", "cnpg"]
)
def test_lint_strict(values: str | None) -> None:
    report = lint(named_values(values))
    assert report["errors"] == []
    # Strict: warnings count as errors; only informational notes (e.g. "icon is recommended") pass.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


DEFAULT_KINDS = {
    "Deployment": 4,  # memory server, Triton, MCP gateway, web console
    "StatefulSet": 1,  # the bundled PostgreSQL
    "Service": 6,  # server ClusterIP + headless, Triton, MCP, console, PostgreSQL
    "HorizontalPodAutoscaler": 1,
    "PodDisruptionBudget": 2,
    "Job": 1,
    "ConfigMap": 3,  # the servers' environment and configuration, the database's init script
    "Secret": 1,
    "ServiceAccount": 1,
    "Pod": 1,  # the `helm test` hook
    "NetworkPolicy": 3,  # servers, Triton, PostgreSQL
}
PRODUCTION_KINDS = {
    "Deployment": 4,
    "Service": 5,  # no bundled PostgreSQL
    "HorizontalPodAutoscaler": 2,  # servers and Triton
    "PodDisruptionBudget": 2,
    "Job": 1,
    "ConfigMap": 2,
    "Ingress": 1,
    "ServiceAccount": 1,
    "Pod": 1,
    "NetworkPolicy": 2,  # servers, Triton: no bundled PostgreSQL
    # no Secret: secrets.existingSecret
}
CLOUDNATIVEPG_KINDS = {
    **{
        kind: count for kind, count in DEFAULT_KINDS.items() if kind != "StatefulSet"
    },  # no bundled PostgreSQL
    "Service": 5,  # the operator makes the Cluster's own (-rw, -ro, -r)
    "ConfigMap": 2,  # no bundled database's init script
    "NetworkPolicy": 2,  # the operator's pods are its own to police
    "Cluster": 1,
}


@pytest.mark.usefixtures("kubernetes_schemas")
@pytest.mark.parametrize(
    ("values", "expected"),
    [(None, DEFAULT_KINDS), ("production", PRODUCTION_KINDS), ("cloudnativepg", CLOUDNATIVEPG_KINDS)],
    ids=["default", "production", "cnpg"],
)
def test_rendered_manifests_are_valid_kubernetes(values: str | None, expected: dict[str, int]) -> None:
    import kubernetes_validate

    documents = render(named_values(values))
    assert kinds(documents) == Counter(expected)
    for document in documents:
        if document["apiVersion"] == CNPG_API_VERSION:
            validate_cluster(document)  # a custom resource: Kubernetes' own schemas do not know it
            continue
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
        ({"secrets": {"databaseReplicaDsns": ["mysql://x"]}}, "/secrets/databaseReplicaDsns/0"),
        ({"secrets": {"databaseReplicaDsns": "postgresql://x"}}, "/secrets/databaseReplicaDsns"),
        ({**CLOUDNATIVEPG, "cloudnativepg": {"enabled": True, "instances": 0}}, "/cloudnativepg/instances"),
        ({**CLOUDNATIVEPG, "cloudnativepg": {"enabled": True, "instances": "2"}}, "/cloudnativepg/instances"),
        ({**CLOUDNATIVEPG, "cloudnativepg": {"enabled": True, "instances": 1.5}}, "/cloudnativepg/instances"),
        ({"cloudnativepg": {"enabled": True}}, "/postgresql/enabled"),  # both databases at once
        ({"cloudnativepg": {"clusterName": "Hindsight_DB"}}, "/cloudnativepg/clusterName"),
        ({"cloudnativepg": {"clusterName": "a" * 51}}, "/cloudnativepg/clusterName"),
        ({"cloudnativepg": {"database": "hind sight"}}, "/cloudnativepg/database"),
        ({"cloudnativepg": {"storage": {"sise": "10Gi"}}}, "sise"),
        ({"cloudnativepg": {"storage": {"size": "ten gigs"}}}, "/cloudnativepg/storage/size"),
        (
            {"cloudnativepg": {"affinity": {"podAntiAffinity": {}}}},
            "podAntiAffinity",
        ),  # a Kubernetes Affinity
        ({"cloudnativepg": {"readFromReplicas": "yes"}}, "/cloudnativepg/readFromReplicas"),
        ({"cloudnativepg": {"instance": 3}}, "instance"),
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
        "replica-dsn",
        "replica-dsns-not-a-list",
        "cnpg-zero-instances",
        "cnpg-instances-string",
        "cnpg-instances-fraction",
        "cnpg-and-bundled",
        "cnpg-name-not-a-label",
        "cnpg-name-too-long",
        "cnpg-database-identifier",
        "cnpg-storage-misspelt",
        "cnpg-storage-size",
        "cnpg-kubernetes-affinity",
        "cnpg-read-bool",
        "cnpg-misspelt",
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], complaint: str) -> None:
    assert_rejected(values, complaint)


def assert_rejected(values: dict[str, Any], complaint: str) -> None:
    """`helm lint` and `helm template` both refuse the values, naming `complaint`."""
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

    # CloudNativePG: after install too (the Cluster is one of the release's objects), on the primary's
    # -rw Service with the operator's credentials; the Job never reads from the standbys.
    cnpg = render(CLOUDNATIVEPG)
    job = one(cnpg, "Job", job_name)
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"
    assert [d for d in cnpg if d["kind"] == "Secret" and d["metadata"]["name"] == job_name] == []
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    for variable, key in [("DATABASE_USERNAME", "username"), ("DATABASE_PASSWORD", "password")]:
        assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": f"{CLUSTER}-app", "key": key}
    assert env["HINDSIGHT_DATABASE__DSN"]["value"] == (
        f"postgresql://$(DATABASE_USERNAME):$(DATABASE_PASSWORD)@{CLUSTER}-rw:5432/hindsight"
    )
    assert "HINDSIGHT_DATABASE__REPLICA_DSNS" not in env


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
        pod = pod_spec(document)
        if pod is None:
            continue
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
    plain = set(Settings.model_fields) - _settings_sections()  # log_level, log_format, data_dir
    assert plain <= set(config["properties"]), plain - set(config["properties"])


def server_settings(
    documents: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """The ConfigMaps, mounted and loaded as a server pod would."""
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
    return load_settings()


def mcp_settings(documents: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> GatewaySettings:
    """The gateway's settings from its container's environment, the Secret's values included."""
    secret = one(documents, "Secret", f"{RELEASE}-hindsight")["stringData"]
    for key in [k for k in os.environ if k.startswith("HINDSIGHT_MCP")]:
        monkeypatch.delenv(key)
    for item in container(documents, "mcp")["env"]:
        if "value" in item:
            monkeypatch.setenv(item["name"], item["value"])
        elif (
            item["name"].startswith("HINDSIGHT_MCP__") and item["valueFrom"]["secretKeyRef"]["key"] in secret
        ):
            monkeypatch.setenv(item["name"], secret[item["valueFrom"]["secretKeyRef"]["key"]])
    return GatewaySettings()


@pytest.mark.parametrize(
    ("values", "server", "gateway"),
    [
        (None, "text", "text"),
        ({"config": {"log_format": "json"}}, "json", "json"),  # one setting for both
        ({"config": {"log_format": "json"}, "mcp": {"logFormat": "text"}}, "json", "text"),
        ({"mcp": {"logFormat": "json"}}, "text", "json"),
    ],
    ids=["default", "config-json", "gateway-text", "gateway-json"],
)
def test_log_format_reaches_the_servers_and_the_gateway(
    values: dict[str, Any] | None, server: str, gateway: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not lint(values)["errors"]
    documents = render(values)
    assert server_settings(documents, tmp_path, monkeypatch).log_format == server
    assert mcp_settings(documents, monkeypatch).log_format == gateway


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"config": {"log_format": "yaml"}}, "/config/log_format"),
        ({"config": {"log_format": "JSON"}}, "/config/log_format"),
        ({"mcp": {"logFormat": "xml"}}, "/mcp/logFormat"),
    ],
    ids=["server-yaml", "server-upper-case", "gateway-xml"],
)
def test_schema_rejects_bad_log_formats(values: dict[str, Any], complaint: str) -> None:
    assert_rejected(values, complaint)


@pytest.mark.parametrize("values", [None, "production"], ids=["default", "production"])
def test_server_configuration_is_accepted_by_hindsight(
    values: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMaps, mounted and loaded as a server pod would: hindsight's settings accept them."""
    overrides = production_values() if values else None
    settings = server_settings(render(overrides), tmp_path, monkeypatch)
    assert settings.server.host == "0.0.0.0"
    assert settings.server.port == 50051
    if overrides:
        assert settings.database.pool_max == overrides["config"]["database"]["pool_max"]
        assert settings.jobs.quota == overrides["config"]["jobs"]["quota"]
    assert settings.inference.url == f"{RELEASE}-hindsight-triton:8001"


def console_settings(documents: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> ConsoleSettings:
    """The console's settings from its container's environment."""
    for key in [k for k in os.environ if k.startswith("HINDSIGHT_CONSOLE")]:
        monkeypatch.delenv(key)
    for item in container(documents, "console")["env"]:
        monkeypatch.setenv(item["name"], item["value"])
    return load_console_settings()


def test_console_configuration_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The console's environment: valid settings, every address bound, Secure cookies behind the
    Ingress's TLS, the servers through the headless Service; its Service keeps a browser on its pod."""
    documents = render(None)
    console = console_settings(documents, monkeypatch)
    assert (console.host, console.port, console.cookie_secure) == ("0.0.0.0", 8766, True)
    assert console.targets == (f"dns:///{RELEASE}-hindsight-headless.{NAMESPACE}.svc.cluster.local:50051",)
    service = one(documents, "Service", f"{FULLNAME}-console")
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert service["spec"]["ports"][0]["port"] == 8766
    shown = console_settings(
        render({"console": {"metricsUrl": "http://collector:8889/metrics"}}), monkeypatch
    )
    assert shown.metrics_url == "http://collector:8889/metrics"
    assert f"{FULLNAME}-console" not in {
        d["metadata"]["name"] for d in render({"console": {"enabled": False}})
    }
    assert_rejected({"console": {"metricsUrl": "collector:8889"}}, "/console/metricsUrl")
    assert_rejected({"console": {"replicaCount": 0}}, "/console/replicaCount")


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


# ---------------------------------------------------------------------------------------- helm test hook

FULLNAME = f"{RELEASE}-hindsight"  # the release's base name: its Secret and the servers' Service


def helm_test_hooks(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in documents if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]


def env_of(container_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container_spec["env"]}


@pytest.mark.usefixtures("kubernetes_schemas")
@pytest.mark.parametrize(
    ("values", "fullname", "port", "tenant", "key_from"),
    [
        (None, FULLNAME, 50051, "default", ("TEST_API_KEYS", FULLNAME, "mcp-api-keys")),
        (
            {"mcp": {"defaultTenant": "acme"}},
            FULLNAME,
            50051,
            "acme",
            ("TEST_API_KEYS", FULLNAME, "mcp-api-keys"),
        ),
        (
            {"tests": {"tenant": "probe", "apiKeySecret": {"name": "probe-key", "key": "api-key"}}},
            FULLNAME,
            50051,
            "probe",
            ("HINDSIGHT_API_KEY", "probe-key", "api-key"),
        ),
        (
            {"fullnameOverride": "memory", "server": {"port": 6000}},
            "memory",
            6000,
            "default",
            ("TEST_API_KEYS", "memory", "mcp-api-keys"),
        ),
        (
            production_values(),
            FULLNAME,
            50051,
            "default",
            ("TEST_API_KEYS", "hindsight-credentials", "mcp-api-keys"),
        ),
    ],
    ids=["default", "gateway-tenant", "own-tenant-and-key", "renamed-and-port", "existing-secret"],
)
def test_helm_test_calls_health_write_and_recall_through_the_service(
    values: dict[str, Any] | None,
    fullname: str,
    port: int,
    tenant: str,
    key_from: tuple[str, str, str],
) -> None:
    """`helm test`: a Pod hook (replaced on each run, kept when it failed) running the server image, that
    checks gRPC health, then writes a memory and recalls it through the memory servers' ClusterIP
    Service, with the tenant's API key from the chart's Secret (or the one named in values)."""
    import kubernetes_validate

    documents = render(values)
    hooks = helm_test_hooks(documents)
    assert [(d["kind"], d["metadata"]["name"]) for d in hooks] == [("Pod", f"{fullname}-test")]
    pod = hooks[0]
    annotations = pod["metadata"]["annotations"]
    policies = annotations["helm.sh/hook-delete-policy"].split(",")
    assert "before-hook-creation" in policies and "hook-failed" not in policies
    for version in SCHEMA_VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)

    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert len(spec["containers"]) == 1
    test = spec["containers"][0]
    server = one(documents, "Deployment", f"{fullname}-server")["spec"]["template"]["spec"]["containers"][0]
    assert test["image"] == server["image"], "the server image (it has the hindsight CLI)"

    # The target is the memory servers' Service, by its name and port.
    service = one(documents, "Service", fullname)
    assert service["spec"].get("clusterIP") != "None"
    assert [p["port"] for p in service["spec"]["ports"]] == [port]
    env = env_of(test)
    assert env["TEST_TARGET"]["value"] == f"{fullname}.{NAMESPACE}.svc.cluster.local:{port}"
    assert env["TEST_TENANT"]["value"] == tenant

    # The key: the tenant's entry of the chart's mcp-api-keys (optional), or a Secret key of its own.
    variable, secret, key = key_from
    reference = env[variable]["valueFrom"]["secretKeyRef"]
    assert (reference["name"], reference["key"]) == (secret, key)
    assert ("TEST_API_KEYS" in env) == (variable == "TEST_API_KEYS")
    if variable == "TEST_API_KEYS":
        assert reference["optional"] is True

    # What it runs: health, Write, Recall (in that order) against $TEST_TARGET, failing on any error.
    assert test["command"][:2] == ["sh", "-c"]
    script = test["command"][2]
    assert script.startswith("set -eu\n")
    assert "--target $TEST_TARGET --tenant $TEST_TENANT" in script
    steps = [
        'hindsight-healthcheck grpc "$TEST_TARGET" hindsight.v1.MemoryService || fail',
        "id=$(hindsight write $common",
        "recalled=$(hindsight recall $common",
        '[ -n "$found" ] || fail',
    ]
    positions = [script.index(step) for step in steps]
    assert positions == sorted(positions), script
    assert 'case "$recalled" in *"$id"*)' in script  # Recall must return the memory written
    assert "exit 1" in script and "trap cleanup EXIT" in script


STUB_ID = "01a2324d-5317-7403-9f97-90271fced72e"
# Stand-ins for the image's commands: each call is logged (with the API key it saw); the outcome of
# each step is set by the environment.
STUB_HIT = json.dumps({"hits": [{"memory": {"id": STUB_ID}}]})
STUB_HINDSIGHT = f"""#!/bin/sh
echo "$1 key=${{HINDSIGHT_API_KEY:-}} $*" >> "$CALLS"
case "$1" in
  write) [ "$WRITE_OK" = yes ] || exit 1; echo {STUB_ID} ;;
  recall)
    [ "$RECALL_OK" = yes ] || exit 1
    if [ "$RECALL_FINDS" = yes ]; then echo '{STUB_HIT}'; else echo '{{}}'; fi ;;
esac
"""
STUB_HEALTHCHECK = """#!/bin/sh
echo "health $*" >> "$CALLS"
[ "$HEALTH_OK" = yes ]
"""


@pytest.mark.parametrize(
    ("outcomes", "passes", "calls"),
    [
        ({}, True, ["health", "write", "recall", "delete"]),
        ({"HEALTH_OK": "no"}, False, ["health"]),
        ({"WRITE_OK": "no"}, False, ["health", "write"]),
        ({"RECALL_OK": "no"}, False, ["health", "write", "recall", "delete"]),
        ({"RECALL_FINDS": "no"}, False, ["health", "write", *["recall"] * 5, "delete"]),
    ],
    ids=["all-pass", "health-fails", "write-fails", "recall-fails", "recall-misses-the-memory"],
)
def test_helm_test_script_fails_when_a_call_fails(
    outcomes: dict[str, str], passes: bool, calls: list[str], tmp_path: Path
) -> None:
    """The Pod's script itself, run by sh with stand-ins for `hindsight` and `hindsight-healthcheck`:
    exit 0 only when health, Write and a Recall that returns the written memory all succeed; the
    memory is deleted once written; the tenant's key is taken from the chart's mcp-api-keys."""
    import subprocess
    import sys

    test = helm_test_hooks(render(None))[0]["spec"]["containers"][0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [
        ("hindsight", STUB_HINDSIGHT),
        ("hindsight-healthcheck", STUB_HEALTHCHECK),
        ("sleep", ""),
    ]:
        (bin_dir / name).write_text(text or "#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    env = {item["name"]: item["value"] for item in test["env"] if "value" in item}
    env |= {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls"),
        "TEST_API_KEYS": json.dumps({"other": "hs_other", "default": "hs_default_key"}),
        "HEALTH_OK": "yes",
        "WRITE_OK": "yes",
        "RECALL_OK": "yes",
        "RECALL_FINDS": "yes",
    }
    env |= outcomes
    done = subprocess.run(test["command"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode == 0) == passes, done.stdout + done.stderr
    if not passes:
        assert "helm test FAILED" in done.stderr
    logged = (tmp_path / "calls").read_text().splitlines()
    assert [line.split()[0] for line in logged] == calls
    target = env["TEST_TARGET"]
    assert logged[0] == f"health grpc {target} hindsight.v1.MemoryService"
    for line in logged[1:]:
        assert line.startswith(f"{line.split()[0]} key=hs_default_key ")
        assert f"--target {target} --tenant default " in line
    if "delete" in calls:
        assert logged[-1].endswith(f" {STUB_ID}")


@pytest.mark.parametrize(
    "values",
    [{"tests": {"enabled": False}}, {**production_values(), "tests": {"enabled": False}}],
    ids=["default", "production"],
)
def test_helm_test_can_be_switched_off(values: dict[str, Any]) -> None:
    documents = render(values)
    assert "Pod" not in kinds(documents)
    assert helm_test_hooks(documents) == []
    assert lint(values)["errors"] == []


def test_helm_test_key_secret_needs_its_key() -> None:
    from helm_python import HelmRenderError

    with pytest.raises(HelmRenderError, match=r"tests\.apiKeySecret\.key is required"):
        render({"tests": {"apiKeySecret": {"name": "probe-key"}}})


# ---------------------------------------------------------------------------------------- securityContext

# values section -> (kind, name suffix) of the workload it configures.
WORKLOADS = {
    "server": ("Deployment", "server"),
    "migrations": ("Job", "migrations"),
    "triton": ("Deployment", "triton"),
    "mcp": ("Deployment", "mcp"),
    "console": ("Deployment", "console"),
    "postgresql": ("StatefulSet", "postgresql"),
    "tests": ("Pod", "test"),
}


def workload_pod(documents: list[dict[str, Any]], section: str) -> dict[str, Any]:
    kind, suffix = WORKLOADS[section]
    spec = pod_spec(one(documents, kind, f"{RELEASE}-hindsight-{suffix}"))
    assert spec is not None
    return spec


@pytest.mark.parametrize(
    ("section", "user"),
    [
        ("server", 10001),
        ("migrations", 10001),
        ("triton", 10001),
        ("mcp", 10001),
        ("console", 10001),
        ("postgresql", 999),
        ("tests", 10001),
    ],
)
def test_security_context_defaults(section: str, user: int) -> None:
    """The defaults in values.yaml are the hardening the chart always had (see the hardening test)."""
    pod = workload_pod(render(None), section)
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": user,
        "runAsGroup": user,
        "fsGroup": user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for each in pod["containers"]:
        assert each["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }


@pytest.mark.usefixtures("kubernetes_schemas")
@pytest.mark.parametrize("section", list(WORKLOADS))
def test_security_context_overrides_reach_each_workload(section: str) -> None:
    """A workload's podSecurityContext and containerSecurityContext from values: set keys win, the
    defaults' other keys stay, a key set to null is removed, and no other workload changes."""
    import kubernetes_validate

    overrides = {
        section: {
            "podSecurityContext": {
                "runAsUser": 4242,
                "fsGroupChangePolicy": "OnRootMismatch",
                "fsGroup": None,
            },
            "containerSecurityContext": {"runAsUser": 4242, "capabilities": {"add": ["NET_BIND_SERVICE"]}},
        }
    }
    documents = render(overrides)
    pod = workload_pod(documents, section)
    assert pod["securityContext"]["runAsUser"] == 4242
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert "fsGroup" not in pod["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True  # a default kept
    for each in pod["containers"]:
        context = each["securityContext"]
        assert context["runAsUser"] == 4242
        assert context["capabilities"] == {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}
        assert context["readOnlyRootFilesystem"] is True
    kind, suffix = WORKLOADS[section]
    for version in SCHEMA_VERSIONS:
        kubernetes_validate.validate(
            one(documents, kind, f"{RELEASE}-hindsight-{suffix}"), version, strict=True
        )
    for other in WORKLOADS:
        if other != section:
            assert workload_pod(documents, other)["securityContext"]["runAsUser"] != 4242, other


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"server": {"podSecurityContext": {"runAsUser": "root"}}}, "/server/podSecurityContext/runAsUser"),
        ({"migrations": {"podSecurityContext": {"runAsNonRoot": "yes"}}}, "/migrations/podSecurityContext"),
        (
            {"triton": {"containerSecurityContext": {"capabilities": {"drop": "ALL"}}}},
            "/triton/containerSecurityContext",
        ),
        ({"mcp": {"containerSecurityContext": "restricted"}}, "/mcp/containerSecurityContext"),
        (
            {"server": {"podSecurityContext": {"seccompProfile": {"type": "Default"}}}},
            "/server/podSecurityContext/seccompProfile/type",
        ),
        ({"postgresql": {"podSecurityContext": {"runAsNonroot": True}}}, "runAsNonroot"),
        (
            {"tests": {"containerSecurityContext": {"privileged": 1}}},
            "/tests/containerSecurityContext/privileged",
        ),
        ({"tests": {"enabled": "no"}}, "/tests/enabled"),
        ({"tests": {"tenant": 7}}, "/tests/tenant"),
        ({"tests": {"apiKeySecret": "probe-key"}}, "/tests/apiKeySecret"),
        ({"tests": {"timeoutSeconds": "10s"}}, "/tests/timeoutSeconds"),
        ({"tests": {"enable": True}}, "enable"),
    ],
    ids=[
        "pod-user",
        "pod-bool",
        "capabilities",
        "container-string",
        "seccomp-enum",
        "misspelt-field",
        "test-privileged",
        "tests-enabled",
        "tests-tenant",
        "tests-key-secret",
        "tests-timeout",
        "tests-misspelt",
    ],
)
def test_schema_rejects_wrong_types_of_new_values(values: dict[str, Any], complaint: str) -> None:
    assert_rejected(values, complaint)


def test_chart_names_home_and_sources() -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart["home"] == "https://github.com/hindsight-memory/hindsight"
    assert chart["sources"] == [chart["home"]]
    assert all(source.startswith("https://") for source in chart["sources"])


# ---------------------------------------------------------------------------------------- database replicas

CNPG_API_VERSION = "postgresql.cnpg.io/v1"
DNS_1035_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
QUANTITY = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"}
STRING = {"type": "string"}
STRING_MAP = {"type": "object", "additionalProperties": STRING}


def _fields(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


# The fields of CloudNativePG's Cluster (postgresql.cnpg.io/v1: ClusterSpec, BootstrapInitDB,
# PostgresConfiguration, StorageConfiguration, EphemeralVolumesSizeLimitConfiguration,
# AffinityConfiguration in its api/v1/cluster_types.go) that the chart renders, with their types. Anything
# else is refused, as a misspelt field would be by the API server (the CRD's structural schema) -- the
# offline stand-in for validating against the CRD, which kubernetes-validate does not ship.
CLUSTER_SCHEMA = _fields(
    {
        "apiVersion": {"const": CNPG_API_VERSION},
        "kind": {"const": "Cluster"},
        # The operator's own limits on the name: a DNS-1035 label of at most 50 characters.
        "metadata": _fields(
            {"name": {"type": "string", "maxLength": 50, "pattern": DNS_1035_LABEL}, "labels": STRING_MAP},
            "name",
        ),
        "spec": _fields(
            {
                "description": STRING,
                "instances": {"type": "integer", "minimum": 1},
                "imageName": {"type": "string", "minLength": 1},
                "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                "imagePullSecrets": {"type": "array", "items": _fields({"name": STRING}, "name")},
                "inheritedMetadata": _fields({"labels": STRING_MAP, "annotations": STRING_MAP}),
                "bootstrap": _fields(
                    {
                        "initdb": _fields(
                            {
                                "database": STRING,
                                "owner": STRING,
                                "postInitApplicationSQL": {"type": "array", "items": STRING},
                            }
                        )
                    }
                ),
                "postgresql": _fields({"parameters": STRING_MAP}),  # map[string]string: strings only
                "storage": _fields({"size": QUANTITY, "storageClass": STRING}, "size"),
                "ephemeralVolumesSizeLimit": _fields({"shm": QUANTITY, "temporaryData": QUANTITY}),
                "resources": _fields({"requests": {"type": "object"}, "limits": {"type": "object"}}),
                "enablePDB": {"type": "boolean"},
                "affinity": _fields(
                    {
                        "enablePodAntiAffinity": {"type": "boolean"},
                        "topologyKey": STRING,
                        "nodeSelector": STRING_MAP,
                        "nodeAffinity": {"type": "object"},
                        "tolerations": {"type": "array", "items": {"type": "object"}},
                        "podAntiAffinityType": {"enum": ["preferred", "required"]},
                        "additionalPodAntiAffinity": {"type": "object"},
                        "additionalPodAffinity": {"type": "object"},
                    }
                ),
            },
            "instances",
        ),
    },
    "apiVersion",
    "kind",
    "metadata",
    "spec",
)


def validate_cluster(document: dict[str, Any]) -> None:
    import jsonschema  # kubernetes-validate's own dependency

    errors = sorted(jsonschema.Draft7Validator(CLUSTER_SCHEMA).iter_errors(document), key=str)
    if errors:
        pytest.fail(
            f"Cluster/{document['metadata']['name']}: "
            + "; ".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
        )


@pytest.mark.usefixtures("kubernetes_schemas")
@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "bootstrap", "initdb", "postInitApplicationSql"), ["SELECT 1"]),
        (("spec", "instances"), "2"),
        (("spec", "postgresql", "parameters", "max_connections"), 200),
        (("spec", "storage", "storageClassName"), "fast"),
    ],
    ids=["misspelt-field", "instances-string", "parameter-not-a-string", "kubernetes-field-name"],
)
def test_the_cluster_validator_can_fail(path: tuple[str, ...], value: Any) -> None:
    cluster = one(render(CLOUDNATIVEPG), "Cluster", CLUSTER)
    validate_cluster(cluster)
    target = cluster
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(pytest.fail.Exception):
        validate_cluster(cluster)


def test_cloudnativepg_cluster_has_pgvector_and_standbys() -> None:
    documents = render(CLOUDNATIVEPG)
    assert "StatefulSet" not in kinds(documents), "the bundled PostgreSQL is left out"
    cluster = one(documents, "Cluster", CLUSTER)
    assert cluster["apiVersion"] == CNPG_API_VERSION
    spec = cluster["spec"]
    assert spec["instances"] == 2  # a primary and one standby behind -ro
    # CloudNativePG's standard images carry pgvector; the major matches the compose and bundled image's.
    assert re.fullmatch(r"ghcr\.io/cloudnative-pg/postgresql:17(\.\d+)?-standard-\w+", spec["imageName"])
    initdb = spec["bootstrap"]["initdb"]
    assert (initdb["database"], initdb["owner"]) == ("hindsight", "hindsight")
    assert "CREATE EXTENSION IF NOT EXISTS vector" in initdb["postInitApplicationSQL"]
    # Migration 0011 needs btree_gin; the owner the servers connect as is no superuser.
    assert "CREATE EXTENSION IF NOT EXISTS btree_gin" in initdb["postInitApplicationSQL"]
    parameters = spec["postgresql"]["parameters"]
    assert parameters["hot_standby_feedback"] == "on"
    assert parameters["max_connections"] == "200"
    assert spec["storage"] == {"size": "20Gi"}
    assert spec["ephemeralVolumesSizeLimit"] == {"shm": "1Gi"}
    assert spec["enablePDB"] is True
    assert "affinity" not in spec  # the operator's default anti-affinity

    tuned = one(
        render(
            {
                **CLOUDNATIVEPG,
                "cloudnativepg": {
                    "enabled": True,
                    "clusterName": "memdb",
                    "instances": 3,
                    "storage": {"size": "200Gi", "storageClass": "fast"},
                    "parameters": {"max_connections": 400, "jit": False},
                    "affinity": {
                        "podAntiAffinityType": "required",
                        "topologyKey": "topology.kubernetes.io/zone",
                    },
                },
            }
        ),
        "Cluster",
        "memdb",
    )
    validate_cluster(tuned)
    assert tuned["spec"]["instances"] == 3
    assert tuned["spec"]["storage"] == {"size": "200Gi", "storageClass": "fast"}
    assert tuned["spec"]["postgresql"]["parameters"]["max_connections"] == "400"  # strings for the CRD
    assert tuned["spec"]["postgresql"]["parameters"]["jit"] == "false"
    assert tuned["spec"]["postgresql"]["parameters"]["hot_standby_feedback"] == "on"  # defaults kept
    assert tuned["spec"]["affinity"]["podAntiAffinityType"] == "required"


# What the operator puts in <cluster>-app (username, password, ...): its generated password is 64
# alphanumerics.
APP_PASSWORD = "Q7wz" * 16
VAR_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def container_environment(
    documents: list[dict[str, Any]], spec: dict[str, Any], secrets: dict[str, dict[str, str]]
) -> dict[str, str]:
    """A container's environment as the kubelet makes it: its envFrom ConfigMaps, then `env` in order,
    each from a Secret key (`secrets` stands in for the cluster's; an optional key that is absent is
    left out, a required one fails) or a literal in which $(NAME) of a variable defined before it is
    replaced (Kubernetes' dependent environment variables)."""
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        env |= one(documents, "ConfigMap", source["configMapRef"]["name"])["data"]
    for item in spec.get("env", []):
        if "valueFrom" in item:
            reference = item["valueFrom"]["secretKeyRef"]
            value = secrets.get(reference["name"], {}).get(reference["key"])
            if value is None:
                assert reference.get("optional"), (
                    f"{item['name']}: no key {reference['key']} in {reference['name']}"
                )
                continue
            env[item["name"]] = value
        else:
            env[item["name"]] = VAR_REFERENCE.sub(lambda match: env.get(match[1], match[0]), item["value"])
    return env


def load_container_settings(
    documents: list[dict[str, Any]],
    spec: dict[str, Any],
    secrets: dict[str, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Settings:
    """hindsight's settings as the container loads them: its environment, and the settings file where
    the pod mounts it."""
    env = container_environment(documents, spec, secrets)
    for key in [k for k in os.environ if k.startswith("HINDSIGHT_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if "HINDSIGHT_CONFIG" in env:
        config = tmp_path / "hindsight.toml"
        config.write_text(
            one(documents, "ConfigMap", f"{RELEASE}-hindsight-config")["data"]["hindsight.toml"]
        )
        monkeypatch.setenv("HINDSIGHT_CONFIG", str(config))
    return load_settings()


def rendered_secrets(documents: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {d["metadata"]["name"]: d.get("stringData", {}) for d in documents if d["kind"] == "Secret"}


def cnpg_values(**settings: Any) -> dict[str, Any]:
    return {"postgresql": {"enabled": False}, "cloudnativepg": {"enabled": True, **settings}}


REPLICA_1 = "postgresql://hindsight:secret@db-replica-1.example.com:5432/hindsight"
REPLICA_2 = "postgresql://hindsight:secret@db-replica-2.example.com:5432/hindsight"


@pytest.mark.parametrize(
    ("values", "cluster_secrets", "dsn", "replicas"),
    [
        (None, {}, None, ()),
        (
            CLOUDNATIVEPG,
            {f"{CLUSTER}-app": {"username": "hindsight", "password": APP_PASSWORD}},
            f"postgresql://hindsight:{APP_PASSWORD}@{CLUSTER}-rw:5432/hindsight",
            (f"postgresql://hindsight:{APP_PASSWORD}@{CLUSTER}-ro:5432/hindsight",),
        ),
        (
            cnpg_values(clusterName="memdb", database="memories", owner="agent", instances=3),
            {"memdb-app": {"username": "agent", "password": APP_PASSWORD}},
            f"postgresql://agent:{APP_PASSWORD}@memdb-rw:5432/memories",
            (f"postgresql://agent:{APP_PASSWORD}@memdb-ro:5432/memories",),
        ),
        (
            cnpg_values(instances=1),
            {f"{CLUSTER}-app": {"username": "hindsight", "password": APP_PASSWORD}},
            f"postgresql://hindsight:{APP_PASSWORD}@{CLUSTER}-rw:5432/hindsight",
            (),  # no standby: -ro would have no endpoints
        ),
        (
            cnpg_values(readFromReplicas=False),
            {f"{CLUSTER}-app": {"username": "hindsight", "password": APP_PASSWORD}},
            f"postgresql://hindsight:{APP_PASSWORD}@{CLUSTER}-rw:5432/hindsight",
            (),
        ),
        (EXTERNAL_DB, {}, EXTERNAL_DB["secrets"]["databaseDsn"], ()),
        (
            {
                **EXTERNAL_DB,
                "secrets": {**EXTERNAL_DB["secrets"], "databaseReplicaDsns": [REPLICA_1, REPLICA_2]},
            },
            {},
            EXTERNAL_DB["secrets"]["databaseDsn"],
            (REPLICA_1, REPLICA_2),
        ),
        (
            {"postgresql": {"enabled": False}, "secrets": {"existingSecret": "creds"}},
            {
                "creds": {
                    "database-dsn": EXTERNAL_DB["secrets"]["databaseDsn"],
                    "database-replica-dsns": f'["{REPLICA_1}"]',
                }
            },
            EXTERNAL_DB["secrets"]["databaseDsn"],
            (REPLICA_1,),
        ),
        (
            {"postgresql": {"enabled": False}, "secrets": {"existingSecret": "creds"}},
            {"creds": {"database-dsn": EXTERNAL_DB["secrets"]["databaseDsn"]}},  # the key is optional
            EXTERNAL_DB["secrets"]["databaseDsn"],
            (),
        ),
    ],
    ids=[
        "bundled",
        "cnpg",
        "cnpg-renamed-three-instances",
        "cnpg-one-instance",
        "cnpg-primary-reads",
        "external",
        "external-replicas",
        "existing-secret-replicas",
        "existing-secret-without-replicas",
    ],
)
def test_server_database_settings_are_accepted_by_hindsight(
    values: dict[str, Any] | None,
    cluster_secrets: dict[str, dict[str, str]],
    dsn: str | None,
    replicas: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The memory servers' environment resolved as the kubelet does (Secret keys, $(VAR) expansion) and
    loaded by hindsight's settings: writes on the primary, reads on the replicas the mode provides."""
    documents = render(values)
    secrets = rendered_secrets(documents) | cluster_secrets
    settings = load_container_settings(
        documents, container(documents, "server"), secrets, tmp_path, monkeypatch
    )
    expected_dsn = dsn if dsn is not None else secrets[f"{RELEASE}-hindsight"]["database-dsn"]
    assert settings.database.dsn == expected_dsn
    assert settings.database.replica_dsns == replicas
    assert settings.server.port == 50051  # the rest of the configuration still applies

    # The migrations Job writes only: the primary, never a replica.
    job = one(documents, "Job", f"{RELEASE}-hindsight-migrations")["spec"]["template"]["spec"]["containers"][
        0
    ]
    job_settings = load_container_settings(documents, job, secrets, tmp_path, monkeypatch)
    assert job_settings.database.dsn == expected_dsn
    assert job_settings.database.replica_dsns == ()


def test_external_replica_dsns_are_kept_in_the_secret() -> None:
    documents = render(
        {**EXTERNAL_DB, "secrets": {**EXTERNAL_DB["secrets"], "databaseReplicaDsns": [REPLICA_1]}}
    )
    secret = one(documents, "Secret", f"{RELEASE}-hindsight")["stringData"]
    assert json.loads(secret["database-replica-dsns"]) == [REPLICA_1]
    env = env_of(container(documents, "server"))
    assert "value" not in env["HINDSIGHT_DATABASE__REPLICA_DSNS"], "credentials stay in the Secret"
    # The CloudNativePG mode keeps no database credentials in the chart's Secret: the operator's has them.
    cnpg_secret = one(render(CLOUDNATIVEPG), "Secret", f"{RELEASE}-hindsight")["stringData"]
    assert not {"database-dsn", "database-replica-dsns", "postgres-password"} & set(cnpg_secret)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (
            {"secrets": {"databaseReplicaDsns": [REPLICA_1]}},
            "secrets.databaseReplicaDsns is for an external database",
        ),
        (
            {**CLOUDNATIVEPG, "secrets": {"databaseReplicaDsns": [REPLICA_1]}},
            "secrets.databaseReplicaDsns is for an external database",
        ),
        ({**CLOUDNATIVEPG, "fullnameOverride": "1mem"}, "must start with a letter"),
    ],
    ids=["replicas-with-bundled", "replicas-with-cnpg", "cluster-name-from-a-digit"],
)
def test_database_values_that_cannot_work_are_refused(values: dict[str, Any], complaint: str) -> None:
    from helm_python import HelmRenderError

    # `helm lint` lets a template's `fail` pass (lint mode); install and template stop on it.
    with pytest.raises(HelmRenderError, match=complaint):
        render(values)


def test_cluster_name_is_checked_only_for_a_cluster() -> None:
    """A release name may start with a digit: only a CloudNativePG Cluster named after it is refused."""
    assert one(render({"fullnameOverride": "1mem"}), "StatefulSet", "1mem-postgresql")
    assert one(
        render(
            {
                **CLOUDNATIVEPG,
                "fullnameOverride": "1mem",
                "cloudnativepg": {"enabled": True, "clusterName": "mem-db"},
            }
        ),
        "Cluster",
        "mem-db",
    )


# ------------------------------------------------------------------------- least privilege in the cluster


def _allowed_components(policy: dict[str, Any]) -> list[str]:
    (rule,) = policy["spec"]["ingress"]
    return [peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for peer in rule["from"]]


def test_network_policies_let_only_the_callers_in() -> None:
    documents = render(None)
    server = one(documents, "NetworkPolicy", f"{FULLNAME}-server")
    assert server["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "server"
    assert _allowed_components(server) == ["mcp", "console", "test"]
    assert server["spec"]["ingress"][0]["ports"] == [{"port": 50051, "protocol": "TCP"}]
    assert _allowed_components(one(documents, "NetworkPolicy", f"{FULLNAME}-triton")) == ["server"]
    database = one(documents, "NetworkPolicy", f"{FULLNAME}-postgresql")
    assert _allowed_components(database) == ["server", "migrations"]
    # The policies select the pods the chart labels so, or they would police nothing.
    for deployment, component in (
        (f"{FULLNAME}-server", "server"),
        (f"{FULLNAME}-mcp", "mcp"),
        (f"{FULLNAME}-console", "console"),
    ):
        labels = one(documents, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == component
    clients = [{"namespaceSelector": {"matchLabels": {"team": "agents"}}}]
    widened = one(
        render({"networkPolicy": {"serverClients": clients}}), "NetworkPolicy", f"{FULLNAME}-server"
    )
    assert widened["spec"]["ingress"][0]["from"][3:] == clients
    assert "NetworkPolicy" not in kinds(render({"networkPolicy": {"enabled": False}}))
    assert_rejected({"networkPolicy": {"serverClients": [{"everyone": True}]}}, "everyone")


def test_the_bundled_database_serves_a_role_that_is_no_superuser() -> None:
    documents = render(None)
    init = one(documents, "ConfigMap", f"{FULLNAME}-postgresql-init")["data"]["05-app-role.sh"]
    # The script compose mounts too (and tests/deploy/test_database_role.py runs for real).
    assert init.strip() == (CHART_DIR / "files" / "init-app-role.sh").read_text().strip()
    statefulset = one(documents, "StatefulSet", f"{FULLNAME}-postgresql")
    database = statefulset["spec"]["template"]["spec"]["containers"][0]
    env = env_of(database)
    assert env["POSTGRES_USER"]["value"] == "postgres"
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "postgres-superuser-password"
    assert env["HINDSIGHT_DB_USER"]["value"] == "hindsight"
    assert env["HINDSIGHT_DB_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "postgres-password"
    assert {"name": "init", "mountPath": "/docker-entrypoint-initdb.d", "readOnly": True} in database[
        "volumeMounts"
    ]
    secret = one(documents, "Secret", FULLNAME)["stringData"]
    assert secret["database-dsn"].startswith("postgresql://hindsight:")
    assert secret["postgres-superuser-password"] not in secret["database-dsn"]


# ------------------------------------------------------------------------------ the Triton ServiceMonitor

SERVICE_MONITOR_API = "monitoring.coreos.com/v1"
DURATION = {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"}
# The fields of the Prometheus Operator's ServiceMonitor (monitoring.coreos.com/v1) that the chart uses,
# as its CRD types them; anything else is refused, as a typo in the template would be by the API server.
SERVICE_MONITOR_SCHEMA = _fields(
    {
        "apiVersion": {"const": SERVICE_MONITOR_API},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _fields(
            {
                "name": {"type": "string", "pattern": DNS_1035_LABEL, "maxLength": 63},
                "labels": STRING_MAP,
            },
            "name",
        ),
        "spec": _fields(
            {
                "selector": _fields({"matchLabels": STRING_MAP}, "matchLabels"),
                "namespaceSelector": _fields(
                    {"matchNames": {"type": "array", "items": STRING, "minItems": 1}}, "matchNames"
                ),
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": _fields(
                        {
                            "port": STRING,
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": DURATION,
                            "scrapeTimeout": DURATION,
                        },
                        "port",
                    ),
                },
            },
            "selector",
            "endpoints",
        ),
    },
    "apiVersion",
    "kind",
    "metadata",
    "spec",
)
MONITORED = {
    "triton": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
}


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h)", duration))


@pytest.mark.parametrize(
    "values", [None, "production", "cloudnativepg"], ids=["default", "production", "cnpg"]
)
def test_no_service_monitor_unless_asked(values: str | None) -> None:
    """Off by default: a cluster without the Prometheus Operator has no such kind to install."""
    assert "ServiceMonitor" not in kinds(render(named_values(values)))


def test_the_service_monitor_scrapes_tritons_metrics_port() -> None:
    import jsonschema

    documents = render(MONITORED)
    assert kinds(documents)["ServiceMonitor"] == 1
    monitor = one(documents, "ServiceMonitor", f"{RELEASE}-hindsight-triton")
    errors = [e.message for e in jsonschema.Draft7Validator(SERVICE_MONITOR_SCHEMA).iter_errors(monitor)]
    assert errors == []
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert spec["namespaceSelector"]["matchNames"] == [NAMESPACE]
    # It selects exactly the Triton Service, by labels that Service carries, and names one of its ports.
    selector = spec["selector"]["matchLabels"]
    services = [d for d in documents if d["kind"] == "Service"]
    selected = [s for s in services if selector.items() <= s["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in selected] == [f"{RELEASE}-hindsight-triton"]
    (endpoint,) = spec["endpoints"]
    port = next(p for p in selected[0]["spec"]["ports"] if p["name"] == endpoint["port"])
    assert port["port"] == 8002  # triton.service.metricsPort, where tritonserver --metrics-port listens
    triton = container(documents, "triton")
    assert "--metrics-port=8002" in triton["command"]
    assert {"name": "metrics", "containerPort": 8002, "protocol": "TCP"} in triton["ports"]
    assert endpoint["path"] == "/metrics"
    # Prometheus refuses a scrape timeout longer than the interval.
    assert _seconds(endpoint["scrapeTimeout"]) <= _seconds(endpoint["interval"])


def test_lint_strict_with_the_service_monitor() -> None:
    report = lint(MONITORED)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_no_service_monitor_without_triton() -> None:
    values = {"triton": {"enabled": False, "serviceMonitor": {"enabled": True}}}
    assert "ServiceMonitor" not in kinds(render(values))


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"triton": {"serviceMonitor": {"enabled": True, "interval": "soon"}}}, "interval"),
        ({"triton": {"serviceMonitor": {"enabled": True, "intervall": "30s"}}}, "intervall"),
        ({"triton": {"serviceMonitor": {"enabled": "yes"}}}, "/triton/serviceMonitor/enabled"),
        ({"triton": {"serviceMonitor": {"labels": {"release": 1}}}}, "/triton/serviceMonitor/labels/release"),
        ({"networkPolicy": {"metricsClients": [{"namespaceSelectr": {}}]}}, "namespaceSelectr"),
    ],
    ids=["interval", "misspelt", "enabled-not-bool", "label-not-string", "peer-misspelt"],
)
def test_schema_rejects_bad_service_monitor_values(values: dict[str, Any], complaint: str) -> None:
    assert_rejected(values, complaint)


def test_metrics_clients_reach_the_metrics_port_only() -> None:
    """Prometheus may scrape Triton; it may not call inference (the gRPC port is unauthenticated)."""
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    documents = render({**MONITORED, "networkPolicy": {"enabled": True, "metricsClients": [prometheus]}})
    rules = one(documents, "NetworkPolicy", f"{RELEASE}-hindsight-triton")["spec"]["ingress"]
    scrapers = [rule for rule in rules if prometheus in rule["from"]]
    assert [[p["port"] for p in rule["ports"]] for rule in scrapers] == [[8002]]
    # Without metricsClients the policy is as before: the servers (and tritonClients) only.
    default = one(render(None), "NetworkPolicy", f"{RELEASE}-hindsight-triton")["spec"]["ingress"]
    assert len(default) == 1


TLS_VALUES: dict[str, Any] = {
    "tls": {
        "enabled": True,
        "clientAuth": True,
        "certManager": {"enabled": True, "issuerRef": {"name": "internal-ca", "kind": "ClusterIssuer"}},
    },
    "secrets": {"mcpApiKeys": {"default": "hs_example_key"}},
}
TLS_DIR = "/etc/hindsight-tls"


def _env(item: dict[str, Any]) -> dict[str, str]:
    return {each["name"]: each["value"] for each in item["env"] if "value" in each}


@pytest.mark.usefixtures("kubernetes_schemas")
def test_tls_from_cert_manager_reaches_the_servers_their_clients_and_the_probes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kubernetes_validate

    documents = render(TLS_VALUES)
    certificate = one(documents, "Certificate", f"{FULLNAME}-tls")
    spec = certificate["spec"]
    assert spec["secretName"] == f"{FULLNAME}-tls"
    headless = f"{FULLNAME}-headless.{NAMESPACE}.svc.cluster.local"  # what the gateway and console resolve
    assert {headless, f"{FULLNAME}.{NAMESPACE}.svc.cluster.local", "localhost"} <= set(spec["dnsNames"])
    assert spec["usages"] == ["server auth", "client auth"]
    assert spec["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}

    server = container(documents, "server")
    env = _env(server)
    assert env["HINDSIGHT_SECURITY__TLS_CERT_FILE"] == f"{TLS_DIR}/tls.crt"
    assert env["HINDSIGHT_SECURITY__TLS_CLIENT_CA_FILE"] == f"{TLS_DIR}/ca.crt"
    assert env["HINDSIGHT_HEALTHCHECK_CERT_FILE"] == f"{TLS_DIR}/tls.crt"  # mTLS: the probe needs one
    for probe in ("startupProbe", "readinessProbe"):  # Kubernetes' own gRPC probe speaks no TLS
        assert server[probe]["exec"]["command"] == [
            "hindsight-healthcheck", "grpcs", "localhost:50051", "hindsight.v1.MemoryService"
        ]  # fmt: skip
        assert "grpc" not in server[probe]
    for name in ("server", "mcp", "console"):
        deployment = one(documents, "Deployment", f"{FULLNAME}-{name}")
        pod = deployment["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "tls")
        assert volume["secret"]["secretName"] == f"{FULLNAME}-tls"
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tls")
        assert (mount["mountPath"], mount["readOnly"]) == (TLS_DIR, True)
        for version in SCHEMA_VERSIONS:
            kubernetes_validate.validate(deployment, version, strict=True)

    for key in [k for k in os.environ if k.startswith("HINDSIGHT_MCP")]:
        monkeypatch.delenv(key)
    for name, value in _env(container(documents, "mcp")).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HINDSIGHT_MCP__TOKENS", json.dumps({hash_token("t"): "default"}))
    gateway_tls = GatewaySettings().targets_client_tls
    assert gateway_tls is not None
    assert (gateway_tls.ca_file, gateway_tls.cert_file) == (f"{TLS_DIR}/ca.crt", f"{TLS_DIR}/tls.crt")
    console_tls = console_settings(documents, monkeypatch).targets_client_tls
    assert console_tls is not None and console_tls.key_file == f"{TLS_DIR}/tls.key"


def test_tls_with_a_secret_of_its_own_and_off_by_default() -> None:
    own = render({"tls": {"enabled": True, "secretName": "servers-tls"}})
    assert "Certificate" not in kinds(own)
    server = container(own, "server")
    assert "HINDSIGHT_SECURITY__TLS_CLIENT_CA_FILE" not in _env(server)  # no mTLS unless asked
    pod = one(own, "Deployment", f"{FULLNAME}-server")["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]["secretName"] == "servers-tls"
    plain = render(None)
    assert "Certificate" not in kinds(plain)
    assert not [k for k in _env(container(plain, "mcp")) if "TARGETS_TLS" in k]
    assert "HINDSIGHT_SECURITY__TLS_CERT_FILE" not in _env(container(plain, "server"))


def test_lint_strict_with_tls() -> None:
    report = lint(TLS_VALUES)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_cert_manager_needs_an_issuer() -> None:
    assert_rejected({"tls": {"enabled": True, "certManager": {"enabled": True}}}, "/tls/certManager")
