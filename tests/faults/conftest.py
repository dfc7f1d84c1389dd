"""Fault tests: each starts what it breaks (its own PostgreSQL, its own server), breaks it on loopback,
and reports its figures (writes acknowledged and found, answers by status code) in the run's summary."""

from __future__ import annotations

import pytest

from tests.support.figures import print_section

SECTION = "faults"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    print_section(terminalreporter, SECTION)
