"""Exceptions the CLI turns into one-line messages and exit codes.

User mistakes are `SpecError` (exit 2); an infeasible problem is `InfeasibleError` (exit 1).
`assert` is kept for programmer errors only.
"""
from __future__ import annotations

SHOWN_CHARS = 80  # a value or key echoed in a message: longer ones are cut, with their length
MAX_MESSAGE_CHARS = 1000  # a message or an `expected` of one error, whatever it quotes
MAX_FILE_CHARS = 240  # a file name in a message: its end is kept (the name, not the folders)
MAX_ERRORS = 20  # errors reported per file; the rest are counted


def printable(text: str) -> str:
    """`text` on one line: control and other non-printable characters (newline, U+2028, ESC) as
    escapes (\\n, \\u2028), so a file name or value cannot start a line of its own."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def clip(text: object, limit: int = SHOWN_CHARS) -> str:
    """`text` itself when short; else its first `limit` characters, '…' and its length."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def clip_file(file: str, limit: int = MAX_FILE_CHARS) -> str:
    """A file name for a message, on one line: its last `limit` characters when longer."""
    return printable(file if len(file) <= limit else f"…{file[-limit:]} ({len(file)} characters)")


def shown(value: object) -> str:
    """A key or value quoted in a message: repr of a clipped string (one line, bounded)."""
    return repr(clip(value))


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
        where = clip_file(self.file) if self.file else "<input>"
        if self.line is not None:
            where += f":{self.line}"
        return where

    def __str__(self) -> str:
        # Command-line mistakes have no file: then the flag (the path) leads the message.
        parts = [self.location()] if (self.file or self.line is not None) else []
        if self.path:
            parts.append(printable(clip(self.path, 2 * SHOWN_CHARS)))
        text = ": ".join(parts + [printable(clip(self.message, MAX_MESSAGE_CHARS))])
        if self.expected:
            text += f" (expected {printable(clip(self.expected, MAX_MESSAGE_CHARS))})"
        return text


class SpecErrors(PlannerError):
    """Several problems found in one pass (used by `plan check` to report them all)."""

    exit_code = 2

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = capped(errors)
        super().__init__("\n".join(str(e) for e in errors))


def capped(errors: list[SpecError]) -> list[SpecError]:
    """The first MAX_ERRORS errors, then one that counts the others."""
    if len(errors) <= MAX_ERRORS + 1:
        return errors
    last = errors[MAX_ERRORS]
    more = SpecError(f"and {len(errors) - MAX_ERRORS} more problems (the first {MAX_ERRORS} are shown)",
                     file=last.file, line=last.line)
    return errors[:MAX_ERRORS] + [more]


class InfeasibleError(PlannerError):
    """No layout satisfies the constraints; carries the explanation."""

    exit_code = 1
