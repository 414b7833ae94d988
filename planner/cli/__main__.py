"""`python -m planner.cli.main`, as the `plan` command."""
from planner.cli.main import app

app()
