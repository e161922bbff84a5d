"""Side-by-side line diffs (difflib) for the conflict and history pages."""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class DiffRow:
    """One row of a side-by-side diff; a side is None where that file has no line."""

    kind: str  # "equal", "replace", "delete" (left only) or "insert" (right only)
    left_no: int | None
    left: str | None
    right_no: int | None
    right: str | None


@dataclass(frozen=True)
class SideBySide:
    rows: list[DiffRow]
    added: int
    removed: int

    @property
    def identical(self) -> bool:
        return self.added == 0 and self.removed == 0


def side_by_side(left: str, right: str) -> SideBySide:
    """Pair the lines of ``left`` and ``right``; changed blocks are aligned row by row."""
    a = left.splitlines()
    b = right.splitlines()
    rows: list[DiffRow] = []
    added = removed = 0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend(
                DiffRow("equal", i + 1, a[i], j + 1, b[j])
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            )
            continue
        removed += i2 - i1
        added += j2 - j1
        for k in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + k, j1 + k
            has_left, has_right = i < i2, j < j2
            kind = "replace" if has_left and has_right else ("delete" if has_left else "insert")
            rows.append(
                DiffRow(
                    kind,
                    i + 1 if has_left else None,
                    a[i] if has_left else None,
                    j + 1 if has_right else None,
                    b[j] if has_right else None,
                )
            )
    return SideBySide(rows, added, removed)
