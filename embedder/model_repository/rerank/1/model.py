"""Triton python backend: any ONNX cross-encoder -> one relevance score per (query, passage).

`model_dir` holds `model.onnx` and `tokenizer.json` (HF `tokenizers` format), as
`optimum-cli export onnx --model BAAI/bge-reranker-v2-m3 DIR` writes them. The graph takes int64
`input_ids` and `attention_mask` [batch, seq] (and `token_type_ids` when it declares it) and
returns logits [batch, 1] (or [batch, classes]: the last class is "relevant"). Scores are raw
logits. Pairs are truncated to `max_length` tokens and scored `pair_batch_size` at a time, each
batch padded to its longest pair only.
"""

# ruff: noqa: E402
import os
import sys

# The stub runs Python isolated (PYTHONPATH ignored): embedder.triton names the venv's
# site-packages in this variable; unset in a Triton container whose Python has the packages.
sys.path[:0] = [p for p in os.environ.get("EMBEDDER_STUB_PYTHONPATH", "").split(os.pathsep) if p]

import json

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

_PAD_TOKENS = ("[PAD]", "<pad>")


def _tokenizer(path, max_length):
    tokenizer = Tokenizer.from_file(path)
    tokenizer.enable_truncation(max_length=max_length)
    pad_token = next((t for t in _PAD_TOKENS if tokenizer.token_to_id(t) is not None), None)
    pad_id = 0 if pad_token is None else tokenizer.token_to_id(pad_token)
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token or "[PAD]")
    return tokenizer


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config["parameters"].items()}
        model_dir = params["model_dir"]
        self.pair_batch_size = int(params["pair_batch_size"])
        self.tokenizer = _tokenizer(os.path.join(model_dir, "tokenizer.json"), int(params["max_length"]))
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params["intra_op_threads"])
        # Idle pool threads spin waiting for work: on CPU beside the database that doubled the CPU a query
        # cost (bge-small: 5.8 ms for 2.9 ms, BENCHMARKS.md) and slowed whatever shared the core.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = ["CPUExecutionProvider"]
        if args["model_instance_kind"] == "GPU":
            providers.insert(
                0, ("CUDAExecutionProvider", {"device_id": int(args["model_instance_device_id"])})
            )
        self.session = ort.InferenceSession(
            os.path.join(model_dir, "model.onnx"), options, providers=providers
        )
        self.input_names = {i.name for i in self.session.get_inputs()}

    def _score(self, query, passages):
        encodings = self.tokenizer.encode_batch([(query, passage) for passage in passages])
        feeds = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        logits = self.session.run(None, {k: v for k, v in feeds.items() if k in self.input_names})[0]
        return logits.reshape(len(passages), -1)[:, -1]

    def execute(self, requests):
        responses = []
        for request in requests:
            query = pb_utils.get_input_tensor_by_name(request, "query").as_numpy().reshape(-1)[0]
            raw = pb_utils.get_input_tensor_by_name(request, "passages").as_numpy().reshape(-1)
            query = query.decode("utf-8", "replace")
            passages = [p.decode("utf-8", "replace") for p in raw]
            scores = [
                self._score(query, passages[i : i + self.pair_batch_size])
                for i in range(0, len(passages), self.pair_batch_size)
            ]
            merged = np.concatenate(scores).astype(np.float32) if scores else np.zeros(0, np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("scores", merged)]))
        return responses
