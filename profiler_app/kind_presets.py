"""What the Benchmark page offers a model: its kind (`model_kind`, from the config Triton
serves, else from config.pbtxt on disk when the model is not loaded) and presets that fit
that kind. The form's fields follow the kind too (`forms.SweepForm`)."""

from __future__ import annotations

from typing import Any

from registry.servers import Server
from registry.triton_clients import get_client
from repository_app.naming import RepositoryError, is_safe_model_name, unsafe_name_message
from repository_app.repository import CONFIG_FILE, model_folder, read_config
from triton_api.client import TritonError

from . import sweeps
from .model_kind import DECOUPLED, SEQUENCE, ModelKind, kind_of, kind_of_served

# Flags every preset of a kind sets: what that kind needs to be measured at all. A
# decoupled model streams with the built-in engine, which reports first-response and
# inter-response times (perf_analyzer 2.48 only the time to the final response); a sequence
# model's sequences too, which it also reports by position in the sequence. A decoupled
# sequence model is perf_analyzer's (`kind_rules`).
KIND_FLAGS: dict[str, dict[str, Any]] = {
    DECOUPLED: {"streaming": True, "protocol": "grpc", "engine": "builtin"},
    SEQUENCE: {"engine": "builtin", "sequence_length": 20, "sequence_length_variation": 20},
}
# Presets only a kind has, beside the common ones.
KIND_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    SEQUENCE: {
        "long-sequences": {
            "range": "1:8:1",
            "measurement_interval": 5000,
            "max_trials": 10,
            "sequence_length": 100,
        },
    },
}


def model_kind(server: Server, name: str) -> tuple[ModelKind | None, str]:
    """(kind, where it was read: "served" by ``server`` or "disk", its repository), or
    (None, why not known)."""
    if not is_safe_model_name(name):  # never sent to Triton (the model name rule)
        return None, unsafe_name_message(name)
    try:
        return kind_of_served(get_client(server).model_config(name)), "served"
    except TritonError:
        pass  # not loaded, or Triton is down: the file says what it will be
    try:
        config, error = read_config(model_folder(name, server.repository) / CONFIG_FILE)
    except RepositoryError as exc:
        return None, str(exc)
    if config is None:
        return None, f"{CONFIG_FILE}: {error}"
    return kind_of(config), "disk"


def presets_for(kind: ModelKind | None) -> dict[str, dict[str, Any]]:
    """Preset name -> the flags it sets, the kind's flags included."""
    key = kind.kind if kind is not None else ""
    flags = dict(KIND_FLAGS.get(key, {}))
    if kind is not None and kind.decoupled:  # a decoupled ensemble or sequence model too
        flags.update(KIND_FLAGS[DECOUPLED])
        if kind.sequence:
            flags["engine"] = "perf_analyzer"
    common = {**sweeps.PRESETS, **KIND_PRESETS.get(key, {})}
    return {name: {**values, **flags} for name, values in common.items()}
