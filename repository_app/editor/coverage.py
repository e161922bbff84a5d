"""Which fields written in a config.pbtxt the editor's form does not show.

A form save never touches them (``text_edit.edit_in_place`` changes only what the form
changed), but a user looking at the form should know they are there: the page lists each
with its line and says to edit it in text mode. ``FORM_FIELDS`` names what the form shows,
as field paths without indices; a path listed covers everything below it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..modelconfig import parse_config

FORM_FIELDS = frozenset(
    {
        "name", "platform", "backend", "runtime", "default_model_filename", "max_batch_size",
        "version_policy",
        "input.name", "input.data_type", "input.dims", "input.reshape", "input.format",
        "input.optional",
        "output.name", "output.data_type", "output.dims", "output.reshape",
        "dynamic_batching.preferred_batch_size", "dynamic_batching.max_queue_delay_microseconds",
        "dynamic_batching.preserve_ordering", "dynamic_batching.priority_levels",
        "dynamic_batching.default_priority_level", "dynamic_batching.default_queue_policy",
        "sequence_batching.direct", "sequence_batching.oldest",
        "sequence_batching.max_sequence_idle_microseconds", "sequence_batching.iterative_sequence",
        "sequence_batching.control_input.name", "sequence_batching.control_input.control",
        "sequence_batching.state.input_name", "sequence_batching.state.output_name",
        "sequence_batching.state.data_type", "sequence_batching.state.dims",
        "sequence_batching.state.use_same_buffer_for_input_output",
        "sequence_batching.state.use_growable_memory",
        "sequence_batching.state.initial_state.zero_data",
        "sequence_batching.state.initial_state.data_file",
        "ensemble_scheduling.step.model_name", "ensemble_scheduling.step.model_version",
        "ensemble_scheduling.step.input_map", "ensemble_scheduling.step.output_map",
        "ensemble_scheduling.max_inflight_requests",
        "instance_group.count", "instance_group.kind", "instance_group.gpus",
        "instance_group.rate_limiter",
        "optimization.graph", "optimization.priority", "optimization.cuda.graphs",
        "optimization.cuda.busy_wait_events", "optimization.cuda.output_copy_stream",
        "optimization.cuda.graph_spec.batch_size", "optimization.cuda.graph_spec.input",
        "optimization.execution_accelerators", "optimization.input_pinned_memory",
        "optimization.output_pinned_memory", "optimization.gather_kernel_buffer_threshold",
        "optimization.eager_batching",
        "model_warmup", "model_transaction_policy", "response_cache", "model_metrics",
        "parameters", "cc_model_filenames", "metric_tags",
    }
)  # fmt: skip
# Top-level fields with no form at all: text mode only (batch inputs and outputs are rare
# and backend-specific; the other two load code and are for admins).
TEXT_MODE_ONLY = frozenset(
    {"batch_input", "batch_output", "model_operations", "model_repository_agents"}
)
# The form shows only the first control of a control input and the first initial state
# of a state (Triton uses one); later ones are text-mode only.
_ONLY_FIRST = re.compile(r"\.(control|initial_state)\[[1-9]\d*\]")
_INDEX = re.compile(r"\[[^\]]*\]")


@dataclass(frozen=True)
class Unshown:
    """Fields of one element the form does not show: ``where`` is the element's path
    ("" for top-level fields), ``names`` the fields, ``line`` where the first is written."""

    where: str
    names: tuple[str, ...]
    line: int | None

    @property
    def label(self) -> str:
        return f"{self.where}: {', '.join(self.names)}" if self.where else ", ".join(self.names)


def _shown(path: str) -> bool | None:
    """True: the form shows it; False: it does not; None: a container (look below)."""
    if _ONLY_FIRST.search(path):
        return False
    general = _INDEX.sub("", path)
    probe = general
    while probe:
        if probe in FORM_FIELDS:
            return True
        probe = probe.rsplit(".", 1)[0] if "." in probe else ""
    if any(f.startswith(general + ".") for f in FORM_FIELDS):
        return None
    return False


def _split(path: str) -> tuple[str, str]:
    """("input[0]", "allow_ragged_batch") for "input[0].allow_ragged_batch"; top-level
    fields and list elements of a field are ("", field)."""
    if path.endswith("]"):
        path = path[: path.rfind("[")]
    where, _, name = path.rpartition(".")
    return where, name


def unshown_fields(text: str) -> list[Unshown]:
    """The fields written in ``text`` that the form does not show, grouped by element,
    in the order they appear."""
    parsed = parse_config(text)
    if parsed.config is None:
        return []
    positions = parsed.locator.positions
    reported: list[str] = []
    groups: dict[str, tuple[list[str], int | None]] = {}
    for path in sorted(positions, key=lambda p: positions[p]):
        if path.endswith('"]'):  # a map entry by key: the same entry as by index
            continue
        if any(path.startswith((r + ".", r + "[")) for r in reported):
            continue
        if _shown(path) is not False:
            continue
        reported.append(path)
        where, name = _split(path)
        # Top-level fields each on their own; an element's fields together.
        names, line = groups.setdefault(where or f"\0{name}", ([], positions[path][0]))
        if name not in names:
            names.append(name)
    return [
        Unshown("" if key.startswith("\0") else key, tuple(names), line)
        for key, (names, line) in groups.items()
    ]
