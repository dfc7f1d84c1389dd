"""Figures the reliability tests report (BENCHMARKS.md, "Reliability"): each test records its lines here
and prints them; the folder's conftest repeats them in pytest's terminal summary, so they show without -s."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

_LINES: defaultdict[str, list[str]] = defaultdict(list)


def report(section: str, line: str, *, echo: bool = True) -> None:
    """Records a line for the summary; `echo`: print it now too (seen with -s, or in a failure's output)."""
    _LINES[section].append(line)
    if echo:
        print(f"[{section}] {line}")


def by_code(codes: Counter[str]) -> str:
    """`OK 812, UNAVAILABLE 3`, most frequent first."""
    return ", ".join(f"{code} {count}" for code, count in codes.most_common()) or "none"


def print_section(reporter: pytest.TerminalReporter, section: str) -> None:
    lines = _LINES.get(section)
    if not lines:
        return
    reporter.write_sep("-", section)
    for line in lines:
        reporter.write_line(line)
