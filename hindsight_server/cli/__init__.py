"""The `hindsight` command line, one module per command group; `main` is the console script's entry."""

from hindsight_server.cli.parser import main

__all__ = ["main"]
