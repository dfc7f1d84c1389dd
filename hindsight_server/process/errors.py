"""Why a process cannot start. Its own module: the composition root and its telemetry wiring both raise
it, and neither may import the other for it."""

from __future__ import annotations


class StartupError(RuntimeError):
    """The server cannot start; the message says why and what to do."""
