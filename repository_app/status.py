"""Merge the model folders on disk with Triton's repository index into one row per model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from triton_api.client import ModelState

from .naming import unsafe_name_reason
from .repository import ModelFolder

NOT_LOADED = "not loaded"
UNLOADED = "unloaded"  # Triton's UNAVAILABLE after a deliberate unload: no alarm
UNKNOWN = "unknown"  # Triton does not answer
# Order used to sort and to pick a model's overall state from its versions' states.
STATE_ORDER = ("READY", "LOADING", "UNLOADING", "UNAVAILABLE", NOT_LOADED)
STATE_CHOICES = STATE_ORDER


@dataclass
class ModelRow:
    name: str
    folder: ModelFolder | None
    versions_state: list[ModelState] = field(default_factory=list)

    @property
    def on_disk(self) -> bool:
        return self.folder is not None

    @property
    def unsafe_name(self) -> str:
        """Why the dashboard will not act on this model ("" for a safe name)."""
        return self.folder.unsafe_name if self.folder else unsafe_name_reason(self.name)

    @property
    def in_triton(self) -> bool:
        return bool(self.versions_state)

    @property
    def state(self) -> str:
        return overall_state(self.versions_state)

    @property
    def reason(self) -> str:
        return next((s.reason for s in self.versions_state if s.reason), "")

    @property
    def label(self) -> str:
        return display(self.state, self.versions_state)[0]

    @property
    def tone(self) -> str:
        return display(self.state, self.versions_state)[1]

    def as_json(self) -> dict[str, Any]:
        return state_json(self.versions_state)


def overall_state(states: list[ModelState]) -> str:
    """READY if any version serves; otherwise the most telling state, or "not loaded"."""
    present = {s.state for s in states if s.state}
    for state in STATE_ORDER[:-1]:
        if state in present:
            return state
    return NOT_LOADED


def display(state: str, states: list[ModelState]) -> tuple[str, str]:
    """(label, tone) a person reads: a deliberate unload is "unloaded" and neutral, not a
    red UNAVAILABLE; tones are ok, busy, error and neutral."""
    if state == "UNAVAILABLE" and all(s.reason == UNLOADED for s in states if s.state):
        return UNLOADED, "neutral"
    tone = {"READY": "ok", "LOADING": "busy", "UNLOADING": "busy", "UNAVAILABLE": "error"}
    return state, tone.get(state, "neutral")


def unknown_json(reason: str) -> dict[str, Any]:
    """A model's state while Triton does not answer (the reason says since when and why)."""
    return {"state": UNKNOWN, "label": UNKNOWN, "tone": "neutral", "versions": [],
            "reason": reason}  # fmt: skip


def state_json(states: list[ModelState]) -> dict[str, Any]:
    state = overall_state(states)
    label, tone = display(state, states)
    return {
        "state": state,
        "label": label,
        "tone": tone,
        "versions": [
            {"version": s.version, "state": s.state or NOT_LOADED, "reason": s.reason}
            for s in states
            if s.version
        ],
        "reason": next((s.reason for s in states if s.reason), ""),
    }


def group_index(index: list[ModelState]) -> dict[str, list[ModelState]]:
    """Index entries by model; never-loaded models appear with an empty version and state."""
    grouped: dict[str, list[ModelState]] = {}
    for entry in index:
        states = grouped.setdefault(entry.name, [])
        if entry.version or entry.state:
            states.append(entry)
    return grouped


def merge(folders: list[ModelFolder], index: list[ModelState] | None) -> list[ModelRow]:
    """One row per model known on disk or to Triton (both are shown)."""
    grouped = group_index(index or [])
    rows = {f.name: ModelRow(f.name, f, grouped.get(f.name, [])) for f in folders}
    for name, states in grouped.items():
        if name not in rows:
            rows[name] = ModelRow(name, None, states)
    return list(rows.values())


SORT_KEYS = {
    "name": lambda r: r.name.lower(),
    "backend": lambda r: (r.folder.backend if r.folder else "").lower(),
    "versions": lambda r: len(r.folder.versions) if r.folder else -1,
    "state": lambda r: STATE_ORDER.index(r.state),
    "max_batch_size": lambda r: (r.folder.max_batch_size or 0) if r.folder else -1,
    "dynamic_batching": lambda r: bool(r.folder and r.folder.dynamic_batching),
    "instances": lambda r: r.folder.instances if r.folder else "",
}


def filter_and_sort(
    rows: list[ModelRow], query: str = "", state: str = "", sort: str = "name", desc: bool = False
) -> list[ModelRow]:
    query = query.strip().lower()
    if query:
        rows = [r for r in rows if query in r.name.lower()]
    if state:
        rows = [r for r in rows if r.state == state]
    key = SORT_KEYS.get(sort, SORT_KEYS["name"])
    # Secondary order by name keeps ties stable and readable.
    return sorted(sorted(rows, key=SORT_KEYS["name"]), key=key, reverse=desc)
