"""`planner.check`'s result, apart from the search results (planner/api/results.py) so that a check
loads no search engine: `plan check FILE` starts in the time the spec checks take."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.check import Finding


@dataclass(frozen=True)
class CheckReport:
    """`planner.check`: the files checked and what was found; `exit_code` is `plan check`'s (0 clean,
    1 a check failed, 2 a file unreadable or invalid)."""

    files: tuple[str, ...]
    findings: tuple[Finding, ...]
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    def to_dict(self) -> dict[str, Any]:
        """`plan check --format json`."""
        return {"files": list(self.files), "findings": [f.to_dict() for f in self.findings],
                "summary": check_summary(self.files, self.findings), "exit_code": self.exit_code}


def check_summary(files, findings) -> dict[str, int]:
    """`plan check`'s counts: files checked, errors and warnings found."""
    count = {s: sum(f.severity == s for f in findings) for s in ("error", "warning")}
    return {"files": len(files), "errors": count["error"], "warnings": count["warning"]}
