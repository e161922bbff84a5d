"""Triton's trace files (``--trace-config triton,file=``, one file a trace with
``log_frequency`` 1) read into requests: each one's parts (queue, compute input, infer,
compute output, response) from Triton's timestamps, an ensemble's or a BLS model's child
requests under their parent (``parent_id``). No Django: the folders it may read are the
caller's (``roots``); each file is small JSON, at most ``MAX_FILES`` of the newest read,
each at most ``MAX_FILE_BYTES``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_FILES = 200
MAX_FILE_BYTES = 1 << 20
# The parts of a request between Triton's timestamps, in order: (name, from, to).
PARTS = (
    ("queue", "QUEUE_START", "COMPUTE_START"),
    ("compute input", "COMPUTE_START", "COMPUTE_INPUT_END"),
    ("infer", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
    ("compute output", "COMPUTE_OUTPUT_START", "COMPUTE_END"),
    ("response", "COMPUTE_END", "REQUEST_END"),
)
_NUMBERED = re.compile(r"\.\d+$")


class TraceUnavailable(Exception):
    """Why the server's traces cannot be read here."""


@dataclass
class Span:
    """One traced request of one model (a root request, or a child step), its parts as
    (name, start ms, length ms) from its own request start."""

    id: int
    model: str
    version: str
    parent: int | None
    start_ns: int
    end_ns: int
    parts: list[tuple[str, float, float]] = field(default_factory=list)
    children: list[Span] = field(default_factory=list)

    def as_json(self, origin_ns: int | None = None) -> dict[str, Any]:
        origin = self.start_ns if origin_ns is None else origin_ns
        return {
            "id": self.id,
            "model": self.model,
            "version": self.version,
            "start_ms": round((self.start_ns - origin) / 1e6, 3),
            "total_ms": round((self.end_ns - self.start_ns) / 1e6, 3),
            "parts": [
                {
                    "name": n,
                    "start_ms": round(s + (self.start_ns - origin) / 1e6, 3),
                    "ms": round(d, 3),
                }
                for n, s, d in self.parts
            ],
            "children": [
                c.as_json(origin) for c in sorted(self.children, key=lambda c: c.start_ns)
            ],
        }


def trace_file(reported: str, roots: list[Path]) -> Path:
    """The trace file a server reports, when it lies in one of ``roots``."""
    if not reported:
        raise TraceUnavailable(
            "this server writes no trace file (start it with --trace-config triton,file=PATH)"
        )
    path = Path(reported).expanduser()
    if not path.is_absolute():
        raise TraceUnavailable(f"the server's trace file {reported!r} is not an absolute path")
    resolved = path.resolve()
    for root in roots:
        if resolved.parent == root or root in resolved.parents:
            return resolved
    allowed = ", ".join(str(r) for r in roots)
    raise TraceUnavailable(
        f"the server writes its traces to {resolved}, outside TRITON_TRACE_ROOTS ({allowed}): "
        "the dashboard reads them only there (same host, or a shared volume)"
    )


def files(base: Path) -> set[Path]:
    """The trace files written so far (``<base>.<n>``)."""
    return {
        f for f in base.parent.glob(base.name + ".*") if _NUMBERED.search(f.name) and f.is_file()
    }


def records(paths: list[Path]) -> list[dict[str, Any]]:
    """The records of these files (at most MAX_FILES of them, the newest)."""
    paths = sorted(paths, key=lambda f: f.stat().st_mtime, reverse=True)
    found: list[dict[str, Any]] = []
    for f in paths[:MAX_FILES]:
        if f.stat().st_size > MAX_FILE_BYTES:
            continue
        try:
            rows = json.loads(f.read_text())
        except (ValueError, OSError):
            continue  # being written, or not Triton's
        if isinstance(rows, list):
            found += [r for r in rows if isinstance(r, dict)]
    return found


def spans(rows: list[dict[str, Any]]) -> list[Span]:
    """Triton's trace records as requests, children nested under their parent; the root
    requests, newest first."""
    by_id: dict[int, dict[str, Any]] = {}
    for row in rows:
        try:
            entry = by_id.setdefault(int(row["id"]), {"stamps": {}})
        except (KeyError, TypeError, ValueError):
            continue
        if "model_name" in row:
            entry["model"] = str(row["model_name"])
            entry["version"] = str(row.get("model_version", ""))
            entry["parent"] = int(row["parent_id"]) if "parent_id" in row else None
        for stamp in row.get("timestamps", []) or []:
            if isinstance(stamp, dict) and "name" in stamp and "ns" in stamp:
                entry["stamps"].setdefault(str(stamp["name"]), int(stamp["ns"]))
    made: dict[int, Span] = {}
    for trace_id, entry in by_id.items():
        stamps = entry["stamps"]
        if "model" not in entry or "REQUEST_START" not in stamps or "REQUEST_END" not in stamps:
            continue
        start = stamps["REQUEST_START"]
        parts = [
            (name, (stamps[a] - start) / 1e6, (stamps[b] - stamps[a]) / 1e6)
            for name, a, b in PARTS
            if a in stamps and b in stamps and stamps[b] >= stamps[a]
        ]
        made[trace_id] = Span(trace_id, entry["model"], entry["version"], entry["parent"],
                              start, stamps["REQUEST_END"], parts)  # fmt: skip
    roots = []
    for span in made.values():
        parent = made.get(span.parent) if span.parent is not None else None
        if parent is not None:
            parent.children.append(span)
        elif span.parent is None:
            roots.append(span)
    return sorted(roots, key=lambda s: s.start_ns, reverse=True)
