"""Which language a text is in, as far as hindsight needs to know: Chinese (CJK) or not."""

from __future__ import annotations

import re
from collections.abc import Mapping

from hindsight_server.domain.model import VectorSpace

CHINESE = "zh"
ENGLISH = "en"
# The vector space of a memory's own language, beside the multilingual one every memory has.
OWN_SPACE: Mapping[str, VectorSpace] = {ENGLISH: VectorSpace.ENGLISH, CHINESE: VectorSpace.CHINESE}
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
_LETTER = re.compile(r"[^\W\d_]")


def language(text: str) -> str:
    """ "zh" when at least 30% of the letters are CJK characters, else "en"."""
    if text.isascii():  # no CJK character can be in it; recall asks this of every line it packs
        return ENGLISH
    letters = len(_LETTER.findall(text))
    return CHINESE if letters and len(_CJK.findall(text)) / letters >= 0.3 else ENGLISH
