"""Build a small cross-encoder with RANDOM weights: the I/O contract of the `rerank` model, offline.

No trained cross-encoder ships in a package that loads offline, so tests and the benchmark use this
one. It has exactly the interface of an HF cross-encoder exported to ONNX (e.g.
`optimum-cli export onnx --model BAAI/bge-reranker-v2-m3 DIR`):

- `tokenizer.json`: a `tokenizers` WordPiece tokenizer; a pair encodes as `[CLS] query [SEP] passage [SEP]`
  with token types 0/1 (Chinese is split per character, as BERT does).
- `model.onnx`: inputs int64 `input_ids`, `attention_mask`, `token_type_ids` [batch, seq];
  output FP32 `logits` [batch, 1].

The graph is one self-attention layer over token + token-type embeddings, masked mean pooling and a
linear head. Padding is masked out everywhere, so a pair scores the same whatever it is batched with.
The scores carry no meaning.
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
_WORDS = (
    "the a an is are was of to in on for and or not user prefers likes export csv format meeting "
    "friday monday week last next memory remember budget report file data deploy service cat dog"
).split()
_CHINESE = "的是在了不我你他她们用户偏好格式导出会议上周五记住预算报告文件数据部署服务猫狗天气今明"
_OPSET = 17


def build_tokenizer() -> Tokenizer:
    pieces = [*string.ascii_lowercase, *string.digits, *string.punctuation]
    vocab_list = [*SPECIAL_TOKENS, *pieces, *(f"##{p}" for p in pieces), *_WORDS, *_CHINESE]
    vocab = {token: index for index, token in enumerate(dict.fromkeys(vocab_list))}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True, handle_chinese_chars=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return tokenizer


def build_graph(vocab_size: int, hidden: int, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name
        )

    initializers = [
        weight("word_embeddings", vocab_size, hidden),
        weight("type_embeddings", 2, hidden),
        weight("w_query", hidden, hidden),
        weight("w_key", hidden, hidden),
        weight("w_value", hidden, hidden),
        weight("w_head", hidden, 1),
        numpy_helper.from_array(np.array(1.0 / np.sqrt(hidden), np.float32), "scale"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(-1e4, np.float32), "neg_inf"),
        numpy_helper.from_array(np.array([1], np.int64), "axis_1"),
        numpy_helper.from_array(np.array([2], np.int64), "axis_2"),
    ]
    node = helper.make_node
    nodes = [
        node("Gather", ["word_embeddings", "input_ids"], ["tokens"]),
        node("Gather", ["type_embeddings", "token_type_ids"], ["types"]),
        node("Add", ["tokens", "types"], ["x"]),  # [B, S, H]
        node("MatMul", ["x", "w_query"], ["q"]),
        node("MatMul", ["x", "w_key"], ["k"]),
        node("MatMul", ["x", "w_value"], ["v"]),
        node("Transpose", ["k"], ["k_t"], perm=[0, 2, 1]),
        node("MatMul", ["q", "k_t"], ["raw_scores"]),  # [B, S, S]
        node("Mul", ["raw_scores", "scale"], ["scaled"]),
        node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),  # [B, S]
        node("Sub", ["one", "mask"], ["inverted"]),
        node("Mul", ["inverted", "neg_inf"], ["bias_2d"]),
        node("Unsqueeze", ["bias_2d", "axis_1"], ["bias"]),  # [B, 1, S]: padded keys get -1e4
        node("Add", ["scaled", "bias"], ["masked_scores"]),
        node("Softmax", ["masked_scores"], ["attention"], axis=-1),
        node("MatMul", ["attention", "v"], ["context"]),
        node("Add", ["context", "x"], ["residual"]),
        node("Tanh", ["residual"], ["hidden_states"]),
        node("Unsqueeze", ["mask", "axis_2"], ["mask_3d"]),  # [B, S, 1]
        node("Mul", ["hidden_states", "mask_3d"], ["kept"]),
        node("ReduceSum", ["kept", "axis_1"], ["summed"], keepdims=0),  # [B, H]
        node("ReduceSum", ["mask_3d", "axis_1"], ["counts"], keepdims=0),  # [B, 1]
        node("Div", ["summed", "counts"], ["pooled"]),
        node("MatMul", ["pooled", "w_head"], ["logits"]),  # [B, 1]
    ]
    ids = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])
    graph = helper.make_graph(nodes, "random_cross_encoder", ids, [logits], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build_random_cross_encoder(directory: Path, *, hidden: int = 32, seed: int = 0) -> Path:
    """Write `model.onnx` + `tokenizer.json` into `directory` (created) and return it."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save(str(directory / "tokenizer.json"))
    onnx.save(build_graph(tokenizer.get_vocab_size(), hidden, seed), str(directory / "model.onnx"))
    return directory
