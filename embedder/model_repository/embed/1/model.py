"""Triton python backend: texts -> L2-normalised sentence embeddings from an ONNX graph.

The graph takes a 1-D string tensor and tokenizes in-graph (e.g. USE-multilingual v3, whose
SentencePiece tokenizer is an onnxruntime-extensions custom op). Requests that Triton's dynamic
batcher hands over together run as ONE session call, or one call per text when `batch_invariant`
is "true": a dynamically quantized graph scales activations per batch, so a text's vector would
otherwise depend on the texts it happens to be batched with. Texts longer than `max_chars` are cut
(on a word boundary when one is near, else on a character boundary) and flagged, never rejected.
This file runs inside the python-backend stub: it imports only numpy, onnxruntime and Triton's utils.
"""

# ruff: noqa: E402
import os
import sys

# The stub runs Python isolated (PYTHONPATH ignored): embedder.triton names the venv's
# site-packages in this variable; unset in a Triton container whose Python has the packages.
sys.path[:0] = [p for p in os.environ.get("EMBEDDER_STUB_PYTHONPATH", "").split(os.pathsep) if p]

import json
import re

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

_LAST_WORD = re.compile(r"\s+\S*$")
_WORD_BACKOFF_CHARS = 32


def truncate(text, max_chars):
    """(text cut to at most max_chars characters, whether it was cut)."""
    if len(text) <= max_chars:
        return text, False
    cut = text[:max_chars]
    if not text[max_chars].isspace():
        tail = _LAST_WORD.search(cut, max(0, max_chars - _WORD_BACKOFF_CHARS))
        if tail is not None and tail.start() > 0:
            cut = cut[: tail.start()]
    return cut, True


def _session(path, threads, kind, device_id):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    # Idle pool threads spin waiting for work: on CPU beside the database that doubled the CPU a query
    # cost (bge-small: 5.8 ms for 2.9 ms, BENCHMARKS.md) and slowed whatever shared the core.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        import onnxruntime_extensions
    except ImportError:  # graphs without custom ops do not need it
        pass
    else:
        options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    providers = ["CPUExecutionProvider"]
    if kind == "GPU":
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": int(device_id)}))
    return ort.InferenceSession(path, options, providers=providers)


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
        self.max_chars = int(params["max_chars"])
        self.batch_invariant = params["batch_invariant"] == "true"
        self.session = _session(
            params["onnx_path"],
            int(params["intra_op_threads"]),
            args["model_instance_kind"],
            args["model_instance_device_id"],
        )
        self.input_name = self.session.get_inputs()[0].name
        self.dimension = pb_utils.get_output_config_by_name(config, "embedding")["dims"][-1]
        graph_dim = self.session.get_outputs()[0].shape[-1]
        if isinstance(graph_dim, int) and graph_dim != self.dimension:
            raise pb_utils.TritonModelException(
                f"embed: config says dimension {self.dimension}, the ONNX graph outputs {graph_dim}"
            )

    def execute(self, requests):
        texts, flags, sizes = [], [], []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "text").as_numpy().reshape(-1)
            for item in raw:
                text = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
                text, cut = truncate(text, self.max_chars)
                texts.append(text)
                flags.append(cut)
            sizes.append(len(raw))
        groups = [[text] for text in texts] if self.batch_invariant else [texts]
        vectors = np.concatenate(
            [self.session.run(None, {self.input_name: np.array(g, dtype=object)})[0] for g in groups]
        ).astype(np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors /= np.maximum(norms, 1e-12)
        truncated = np.array(flags, dtype=np.bool_).reshape(-1, 1)
        responses, start = [], 0
        for size in sizes:
            end = start + size
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("embedding", vectors[start:end]),
                        pb_utils.Tensor("truncated", truncated[start:end]),
                    ]
                )
            )
            start = end
        return responses
