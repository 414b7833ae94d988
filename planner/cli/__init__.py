"""The `plan` command line: parses arguments, calls the library, prints."""
from planner.cli.main import app

__all__ = ["app"]
