"""The result type of every config check: one problem, where it is, and how to fix it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

Severity = Literal["error", "warning"]

ERROR: Severity = "error"
WARNING: Severity = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem found in a model configuration or a model repository.

    ``message`` names the problem and the fix; ``rule`` is a short stable id
    (e.g. ``dynamic-batching.preferred-above-max``) that tests and the UI can key on.
    ``field`` is the config field path (``input[0].dims``) or "" for file-level
    findings; ``file`` is the file or folder the finding belongs to, when known.
    """

    severity: Severity
    rule: str
    message: str
    field: str = ""
    line: int | None = None
    col: int | None = None
    file: str | None = None

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    def with_file(self, file: str) -> Finding:
        """Return a copy attributed to ``file`` (keeps an existing attribution)."""
        return self if self.file else replace(self, file=file)

    def format(self, path: str | None = None) -> str:
        """Render as ``PATH:LINE:COL: severity: message [rule]`` (compiler style)."""
        where = path or self.file or "<config>"
        if self.line is not None:
            where += f":{self.line}"
            if self.col is not None:
                where += f":{self.col}"
        return f"{where}: {self.severity}: {self.message} [{self.rule}]"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict with every attribute."""
        return asdict(self)


def has_errors(findings: list[Finding]) -> bool:
    """True when at least one finding is an error."""
    return any(f.is_error for f in findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Order by file, then position (findings without a line last), then rule."""
    return sorted(
        findings,
        key=lambda f: (
            f.file or "",
            f.line if f.line is not None else 1 << 30,
            f.col or 0,
            f.rule,
            f.message,
        ),
    )
