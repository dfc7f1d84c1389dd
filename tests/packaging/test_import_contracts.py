"""The import-linter contracts ([tool.importlinter] in pyproject.toml) fail when the layering is broken:
lint-imports runs over a scratch copy of hindsight_server with one forbidden import (or module) added, with
the repository's own configuration, and must name the contract that forbids it; the unmodified copy passes.
The copy is found first on PYTHONPATH (the editable install's finder comes after sys.path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _append(module: str, line: str) -> Callable[[Path], None]:
    def change(package_root: Path) -> None:
        path = package_root / (module.replace(".", "/") + ".py")
        path.write_text(path.read_text() + f"\n{line}\n")

    return change


def _new_package(name: str) -> Callable[[Path], None]:
    def change(package_root: Path) -> None:
        (package_root / name.replace(".", "/")).mkdir()
        (package_root / name.replace(".", "/") / "__init__.py").write_text("")

    return change


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    shutil.copytree(
        REPO_ROOT / "hindsight_server",
        tmp_path / "hindsight_server",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_unmodified_copy_keeps_every_contract(scratch: Path) -> None:
    result = _lint_imports(scratch)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("change", "contract"),
    [
        pytest.param(
            _append("hindsight_server.rpc.servicer", "import hindsight_server.store.memories"),
            "The transport never imports the store",
            id="rpc-imports-store",
        ),
        pytest.param(
            _append("hindsight_server.pipelines.write", "import asyncpg"),
            "SQL (asyncpg, pgvector) only in store/",
            id="asyncpg-in-a-pipeline",
        ),
        pytest.param(
            _append("hindsight_server.inference.tier", "import tritonclient.grpc"),
            "Triton's client (tritonclient) only in embedder/client.py",
            id="tritonclient-outside-the-embedder-client",
        ),
        pytest.param(
            _append("hindsight_server.store.memories", "import hindsight_server.pipelines.write"),
            "Server layers point one way",
            id="store-imports-a-pipeline",
        ),
        pytest.param(
            _append("hindsight_server.process.builders", "import hindsight_server.process.server"),
            "No circles",
            id="a-circle-inside-a-layer",
        ),
        pytest.param(
            _new_package("hindsight_server.extras"),
            "Server layers point one way",
            id="a-package-outside-the-layers",
        ),
    ],
)
def test_a_forbidden_import_fails_lint_imports(
    scratch: Path, change: Callable[[Path], None], contract: str
) -> None:
    change(scratch)
    result = _lint_imports(scratch)
    assert result.returncode != 0, result.stdout
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout + result.stderr
