"""Whole numbers written in Chinese or English: "十" and "两百零五", "twenty-five", "10" (full-width too).

Pure and small: the conversation rules (people counts, hours, floors) read numbers through here, so
"十个人", "10个人" and "ten people" mean the same thing.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["EN_NUMBER", "MAX_NUMBER_DIGITS", "ZH_NUMBER", "parse_number"]

# Pattern fragments (no groups) for a number inside a larger regular expression. Each starts only where a
# run of its characters starts: unanchored, `[0-9]+` would be tried from every position inside a long run of
# digits, each try scanning to the run's end (quadratic: 16,000 digits took seconds in one call).
ZH_NUMBER = "(?<![0-9])[0-9]+|(?<![零〇一二两三四五六七八九十百千])[零〇一二两三四五六七八九十百千]+"
_EN_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_EN_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
EN_NUMBER = (
    rf"[0-9]+|(?:{'|'.join(_EN_TENS)})(?:[-\s](?:{'|'.join(_EN_ONES[1:10])}))?"
    rf"|{'|'.join(sorted(_EN_ONES, key=len, reverse=True))}|a\s+dozen|dozen"
)

_ZH_DIGITS = {char: value for value, char in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_EN_VALUES = {word: value for value, word in enumerate(_EN_ONES)} | {
    word: 20 + 10 * index for index, word in enumerate(_EN_TENS)
}
_EN_SPLIT = re.compile(r"[-\s]+")
# Longer runs of digits are identifiers (an order or a phone number), never a count, an hour or a floor;
# reading them as numbers costs quadratic time and past 4,300 digits Python refuses to (ValueError).
MAX_NUMBER_DIGITS = 18


def _chinese(text: str) -> int | None:
    """Up to 九千九百九十九: 十 10, 十二 12, 二十 20, 一百零五 105, 两百 200; 二〇二五 digit by digit."""
    if all(char in _ZH_DIGITS for char in text):
        if len(text) == 1 or len(text) == 4:  # a digit, or a year written digit by digit
            return int("".join(str(_ZH_DIGITS[char]) for char in text))
        return None  # "三五" is "three or five", not 35
    total, digit, last_unit = 0, None, 10_000
    for char in text:
        if char in _ZH_DIGITS:
            if digit is not None and _ZH_DIGITS[char] != 0:
                return None  # two digits in a row: "二三十"
            digit = None if _ZH_DIGITS[char] == 0 else _ZH_DIGITS[char]
            continue
        unit = _ZH_UNITS.get(char)
        if unit is None or unit >= last_unit:
            return None  # "十百", "十十": not a number
        total += (1 if digit is None else digit) * unit
        digit, last_unit = None, unit
    return total + (digit or 0)


def _english(text: str) -> int | None:
    words = [word for word in _EN_SPLIT.split(text.casefold()) if word and word != "a"]
    if words == ["dozen"]:
        return 12
    if len(words) == 1:
        return _EN_VALUES.get(words[0])
    if len(words) == 2 and words[0] in _EN_TENS and words[1] in _EN_ONES[1:10]:
        return _EN_VALUES[words[0]] + _EN_VALUES[words[1]]
    return None


def parse_number(text: str) -> int | None:
    """The whole number `text` spells, or None: up to MAX_NUMBER_DIGITS digits (full-width too), Chinese
    up to 9999, English words up to ninety-nine and "a dozen"."""
    key = unicodedata.normalize("NFKC", text).strip()
    if not key:
        return None
    if key.isascii() and key.isdigit():
        return int(key) if len(key) <= MAX_NUMBER_DIGITS else None
    if all(char in _ZH_DIGITS or char in _ZH_UNITS for char in key):
        return _chinese(key)
    return _english(key)
