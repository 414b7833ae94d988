"""`plan sweep` command (registered on the main app)."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the commands of this module to `app`."""
