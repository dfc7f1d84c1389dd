"""argparse value types the command modules share (cli.py, portability_cli.py)."""

from __future__ import annotations

import argparse
from datetime import datetime


def timestamp(text: str) -> datetime:
    """An ISO 8601 time with its UTC offset: never a guess at the zone."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from exc
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"add a UTC offset, e.g. {text}+00:00")
    return value
