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
    "Pod": 1,  # the `helm test` hook
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
    "Pod": 1,
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
