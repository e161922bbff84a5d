"""What the editor page shows besides the forms: the template banner, the fields the form
does not show, the ensemble's graph and the suggestions (datalists) of the tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as pb

from ..modelconfig import parse_config
from ..modelconfig.templates import fill_template, template_placeholders
from . import coverage, ensemble_view, section_forms

TEMPLATE_FIELD = "tpl-"  # the fill form's inputs: tpl-<placeholder name>


@dataclass(frozen=True)
class PlaceholderRow:
    name: str
    where: str  # "line 3:18, line 9:22"
    count: int

    @property
    def field(self) -> str:
        return TEMPLATE_FIELD + self.name


def placeholders(text: str) -> list[PlaceholderRow]:
    """Each ``${name}`` of a template once, with where it is used (empty: not a template)."""
    found: dict[str, list[str]] = {}
    for p in template_placeholders(text):
        found.setdefault(p.name, []).append(f"{p.line}:{p.col}")
    return [
        PlaceholderRow(name, ", ".join(spots[:4]) + (" …" if len(spots) > 4 else ""), len(spots))
        for name, spots in found.items()
    ]


def fill_from_post(text: str, data: Any) -> tuple[str, list[str], list[str]]:
    """``text`` with the placeholders the user gave a value for filled (fill_template);
    returns (filled text, names filled, names left)."""
    values: dict[str, str] = {}
    for row in placeholders(text):
        value = data.get(row.field, "")
        if isinstance(value, str) and value != "":
            values[row.name] = value
    filled = fill_template(text, values)
    left = [row.name for row in placeholders(filled)]
    return filled, sorted(values), left


def _io_names(config: pb.ModelConfig) -> tuple[list[str], list[str]]:
    return [t.name for t in config.input if t.name], [t.name for t in config.output if t.name]


def form_context(text: str, config: pb.ModelConfig | None, repository: Path) -> dict[str, Any]:
    """Context for form mode: ``config`` is what the form shows (the posted changes
    applied), ``text`` the file's text it was opened from, ``repository`` where the model
    is (an ensemble's steps are its other models)."""
    if config is None:
        config = parse_config(text).config or pb.ModelConfig()
    inputs, outputs = _io_names(config)
    context: dict[str, Any] = {
        "unshown": coverage.unshown_fields(text),
        "model_inputs": inputs,
        "model_outputs": outputs,
        "accelerator_names": section_forms.ACCELERATOR_NAMES,
        "accelerator_keys": section_forms.ACCELERATOR_KEYS,
        "metric_families": section_forms.METRIC_FAMILIES,
        "ensemble": None,
        # The sections the file uses open; the others stay folded.
        "open": {
            "sequence": config.HasField("sequence_batching"),
            "ensemble": config.platform == "ensemble" or config.HasField("ensemble_scheduling"),
            "warmup": bool(config.model_warmup),
            "optimization": config.HasField("optimization"),
            "policies": config.HasField("model_transaction_policy")
            or config.HasField("response_cache"),
            "metrics": config.HasField("model_metrics"),
            "maps": bool(config.cc_model_filenames) or bool(config.metric_tags),
            "rate_limiter": any(g.HasField("rate_limiter") for g in config.instance_group),
        },
    }
    if config.platform == "ensemble" or config.HasField("ensemble_scheduling"):
        io = ensemble_view.models_io(Path(repository))
        steps = {s.model_name for s in config.ensemble_scheduling.step}
        context["ensemble"] = {
            "graph": ensemble_view.graph(config),
            "tensors": ensemble_view.tensor_names(config),
            "models": sorted(io),
            "io": io,
            "unknown_steps": sorted(s for s in steps if s and s not in io),
        }
    return context


def ensemble_graph(config: pb.ModelConfig | None) -> dict[str, Any] | None:
    """The graph for the live check (None for a model that is not an ensemble)."""
    if config is None or not (
        config.platform == "ensemble" or config.HasField("ensemble_scheduling")
    ):
        return None
    return ensemble_view.graph(config)
