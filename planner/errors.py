"""Exceptions the CLI turns into one-line messages and exit codes.

User mistakes are `SpecError` (exit 2); an infeasible problem is `InfeasibleError` (exit 1).
`assert` is kept for programmer errors only.
"""
from __future__ import annotations


class PlannerError(Exception):
    """Base of every error meant for a user, not a developer."""

    exit_code = 2


class SpecError(PlannerError):
    """Bad input: names the file, the line where known, the field path and what was expected."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        path: str | None = None,
        expected: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.path = path
        self.expected = expected
        super().__init__(str(self))

    def location(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        return where

    def __str__(self) -> str:
        # Command-line mistakes have no file: then the flag (the path) leads the message.
        parts = [self.location()] if (self.file or self.line is not None) else []
        if self.path:
            parts.append(self.path)
        text = ": ".join(parts + [self.message])
        if self.expected:
            text += f" (expected {self.expected})"
        return text


class SpecErrors(PlannerError):
    """Several problems found in one pass (used by `plan check` to report them all)."""

    exit_code = 2

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


class InfeasibleError(PlannerError):
    """No layout satisfies the constraints; carries the explanation."""

    exit_code = 1
