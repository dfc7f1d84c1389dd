"""The inference tier's clients, from the settings."""

from __future__ import annotations

import logging

from embedder.client import TritonEmbedder, TritonReranker
from hindsight_server.config import Settings, SpaceModel
from hindsight_server.inference.tier import DimensionMismatch, InferenceTier
from hindsight_server.inference.tracing import record_call
from hindsight_server.process.errors import StartupError

log = logging.getLogger(__name__)


async def connect_inference(settings: Settings) -> InferenceTier | None:
    """The tier when one is configured. Unreachable is fine (writes defer, recall degrades); a model of
    another dimension than the table's stops start-up."""
    config = settings.inference
    if not config.url:
        return None
    models = config.space_models()

    def embedder(model: str, space: SpaceModel) -> TritonEmbedder:
        return TritonEmbedder(
            config.url,
            model=model,
            query_prefix=space.query_prefix,
            document_prefix=space.document_prefix,
            cache_size=config.query_cache_size,
            cache_ttl_s=config.query_cache_ttl_s,
            cache_max_share=config.query_cache_max_share,
            on_call=record_call,
            tls=config.client_tls,
        )

    embedders = {space: embedder(model.model, model) for space, model in models.items()}
    query_embedders = (
        {space: embedder(model.model + config.query_model_suffix, model) for space, model in models.items()}
        if config.query_model_suffix
        else {}
    )
    tier = InferenceTier(
        embedders,
        settings.embedding.by_space(),
        reranker=(
            TritonReranker(config.url, model=config.rerank_model, on_call=record_call, tls=config.client_tls)
            if config.rerank_model
            else None
        ),
        query_embedders=query_embedders,
        twin_max_chars=config.query_twin_max_chars,
    )
    try:
        await tier.refresh()
    except DimensionMismatch as exc:
        await tier.close()
        raise StartupError(str(exc)) from exc
    if not tier.available:
        log.warning(
            "starting without the inference tier (%s); it is probed every %.1fs",
            tier.problem,
            config.health_interval_s,
        )
    return tier
