"""The build of the client distribution (hindsight-memory-client): its metadata lives in pyproject.toml;
this file only adds the code generation.

The `hindsight.v1` and `hindsight.ops.v1` stubs are build output, never committed (the .gitignore leaves
them out), so every build generates them from hindsight/v1/*.proto and hindsight/ops/v1/*.proto with the
grpcio-tools and mypy-protobuf that [build-system] pins: a wheel into its build directory, an editable
install into this tree (the same files `make proto` writes). `pip install ./proto` from a clean checkout
therefore gives importable, typed stubs.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# hindsight/v1 (the memory contract) and hindsight/ops/v1 (the operators' Ops service).
PROTOS = sorted((HERE / "hindsight").glob("**/v1/*.proto"))


def _plugin(name: str, entry_point: str, scratch: Path) -> str:
    """The protoc plugin's executable: on PATH (pip puts the build environment's scripts there) or beside
    the interpreter; otherwise a shell wrapper that runs the entry point with this interpreter."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    if os.name != "posix":
        raise RuntimeError(f"{name} not found: install mypy-protobuf into the build environment")
    wrapper = scratch / name
    wrapper.write_text(
        "#!/bin/sh\n"
        f'exec "{sys.executable}" -c "import sys; from mypy_protobuf.main import {entry_point}; '
        f'sys.exit({entry_point}())" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def generate_stubs(out: Path) -> None:
    """hindsight/v1/*_pb2.py, hindsight/ops/v1/*_pb2.py, their *_pb2_grpc.py and .pyi, under `out` (a
    package root)."""
    from grpc_tools import protoc  # a build requirement

    if not PROTOS:
        raise RuntimeError(f"no .proto file under {HERE / 'hindsight'}")
    include = resources.files("grpc_tools") / "_proto"  # google/protobuf/*.proto
    with tempfile.TemporaryDirectory() as scratch:
        args = [
            "grpc_tools.protoc",
            f"-I{HERE}",
            f"-I{include}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy', 'main', Path(scratch))}",
            f"--mypy_out={out}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc', 'grpc', Path(scratch))}",
            f"--mypy_grpc_out={out}",
            *(str(proto) for proto in PROTOS),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed: {' '.join(args)}")


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        if self.editable_mode:
            # An editable install imports the package from this tree: the stubs go beside the .proto.
            generate_stubs(HERE)
        super().run()
        if not self.editable_mode:
            # Generated after the copy, so stubs lying in the source tree (stale or not) are overwritten.
            generate_stubs(Path(self.build_lib))


setup(cmdclass={"build_py": BuildPyWithStubs})
