"""Triton python backend: texts -> L2-normalised sentence embeddings from a BERT-style ONNX encoder.

`model_dir` holds `model.onnx` and `tokenizer.json` (HF `tokenizers` format), as `optimum-cli export
onnx` writes them for e.g. BAAI/bge-small-en-v1.5. The graph takes int64 `input_ids` and
`attention_mask` [batch, seq] (and `token_type_ids` when it declares it) and returns the last hidden
state [batch, seq, dim]; `pooling` is "cls" (the first token, as bge) or "mean" (over the attention
mask, as MiniLM/e5). The batch is sorted by length and run in slices padded to their own longest text,
so a few long texts do not make every short one pay for their padding. Texts longer than `max_length`
tokens keep their beginning (and the closing special token) and are flagged. Instructions such as bge's
query prefix are the client's business: the model embeds exactly the text it is given.
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

_SLICE = 16  # texts per session call after sorting by length


def _lower_cpu_priority(nice):
    """Every thread of this stub (one process per model instance) at CPU niceness `nice` (0: as it is):
    document batches then yield the cores to query embeddings, the database and the memory servers
    wherever they share them. Threads started later inherit it."""
    if nice <= 0:
        return
    for thread in os.listdir("/proc/self/task"):
        os.setpriority(os.PRIO_PROCESS, int(thread), nice)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config["parameters"].items()}
        _lower_cpu_priority(int(params.get("cpu_nice", "0")))
        model_dir = params["model_dir"]
        self.pooling = params["pooling"]
        if self.pooling not in ("cls", "mean"):
            raise pb_utils.TritonModelException(f"encoder: pooling must be cls or mean, not {self.pooling!r}")
        self.max_length = int(params["max_length"])
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self.tokenizer.no_padding()
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
        self.dimension = pb_utils.get_output_config_by_name(config, "embedding")["dims"][-1]
        graph_dim = self.session.get_outputs()[0].shape[-1]
        if isinstance(graph_dim, int) and graph_dim != self.dimension:
            raise pb_utils.TritonModelException(
                f"encoder: config says dimension {self.dimension}, the ONNX graph outputs {graph_dim}"
            )

    def _encode(self, encodings):
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, {k: v for k, v in feeds.items() if k in self.input_names})[0]
        if self.pooling == "cls":
            return hidden[:, 0]
        weights = mask[:, :, None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)

    def execute(self, requests):
        texts, sizes = [], []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "text").as_numpy().reshape(-1)
            texts.extend(
                item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item) for item in raw
            )
            sizes.append(len(raw))
        # Truncation keeps the closing special token ([SEP]); what was cut lands in `overflowing`.
        encoded = self.tokenizer.encode_batch(texts)
        flags = np.array([bool(e.overflowing) for e in encoded], dtype=np.bool_).reshape(-1, 1)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        vectors = np.zeros((len(encoded), self.dimension), dtype=np.float32)
        for start in range(0, len(order), _SLICE):
            rows = order[start : start + _SLICE]
            vectors[rows] = self._encode([encoded[i] for i in rows])
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        responses, start = [], 0
        for size in sizes:
            end = start + size
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("embedding", vectors[start:end]),
                        pb_utils.Tensor("truncated", flags[start:end]),
                    ]
                )
            )
            start = end
        return responses
