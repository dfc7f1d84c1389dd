"""The embedded inference tier: a real tritonserver (from the PyTriton wheel) serving the embedder's
model repository, assembled under the data directory."""

from __future__ import annotations

from pathlib import Path

from embedder.repository import (
    EmbedModelOptions,
    EncoderModelOptions,
    RepositoryOptions,
    RerankModelOptions,
    build_repository,
)
from embedder.triton import TritonOptions, TritonPorts, TritonServer
from hindsight_server.config import StackSettings


def embedded_triton(
    settings: StackSettings, data_dir: Path, dimension: int, encoders: tuple[EncoderModelOptions, ...]
) -> TritonServer:
    """A TritonServer ready to start(); the repository is rebuilt from the templates on every start."""
    work_dir = data_dir / "triton"
    rerank = (
        RerankModelOptions(
            model_dir=Path(settings.rerank_model_dir) if settings.rerank_model_dir else None,
            max_length=settings.rerank_max_length,
        )
        if settings.rerank
        else None
    )
    embed = EmbedModelOptions(
        onnx_path=Path(settings.embed_onnx) if settings.embed_onnx else None,
        dimension=dimension,
        batch_invariant=settings.embed_batch_invariant,
    )
    models = build_repository(
        work_dir / "models", RepositoryOptions(embed=embed, rerank=rerank, encoders=encoders)
    )
    ports = TritonPorts(
        http=settings.triton_http_port, grpc=settings.triton_grpc_port, metrics=settings.triton_metrics_port
    )
    return TritonServer(
        TritonOptions(
            model_repository=work_dir / "models",
            models=tuple(models),
            ports=ports,
            work_dir=work_dir,
            ready_timeout_s=settings.start_timeout_s,
        )
    )
