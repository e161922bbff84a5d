"""What kind of model a sweep is about, read from its config: the kind decides how it must
be driven, so a flag that does not fit it is refused before any request is sent.

- **sequence**: `sequence_batching` is set. Every request must carry a sequence id and the
  START/END flags (Triton refuses one without them), so it is driven sequence by sequence.
  The strategy is `direct` (Triton's default when none is named) or `oldest`; `state`
  entries mean implicit state (Triton keeps it between requests of a sequence).
- **decoupled**: `model_transaction_policy { decoupled: true }`. A request may get any
  number of responses, then a final flag: only gRPC streaming carries them.
- **ensemble**: `platform: "ensemble"` (or `ensemble_scheduling`): a pipeline of the
  models its steps name. Whether it streams depends on its steps, which its own config does
  not say.
- **stateless**: everything else, as a plain request/response benchmark drives it.

A BLS model (a Python model that calls others from `execute`) is stateless or decoupled at
its interface, and nothing in a config says that it calls models: `calls` is read only
from the `calls_models` parameter (comma-separated names), a convention of this project's
demo models (`bls_caller`), documented in the README. Without it, `calls` is empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

STATELESS, SEQUENCE, DECOUPLED, ENSEMBLE = "stateless", "sequence", "decoupled", "ensemble"
CALLS_PARAMETER = "calls_models"


@dataclass(frozen=True)
class ModelKind:
    name: str
    kind: str  # STATELESS | SEQUENCE | DECOUPLED | ENSEMBLE
    decoupled: bool = False  # also set on a sequence model that is decoupled
    strategy: str = ""  # sequence: "direct" | "oldest"
    implicit_state: bool = False  # sequence: `state` entries
    steps: tuple[str, ...] = ()  # ensemble: the models of its steps, in order
    calls: tuple[str, ...] = ()  # BLS: the models it declares it calls (`calls_models`)

    @property
    def sequence(self) -> bool:
        return self.kind == SEQUENCE

    @property
    def label(self) -> str:
        """The kind in a few words, e.g. "sequence (direct, implicit state)"."""
        details: list[str] = []
        if self.sequence:
            details.append(self.strategy)
            if self.implicit_state:
                details.append("implicit state")
            if self.decoupled:
                details.append("decoupled")
        if self.steps:
            details.append("steps: " + " → ".join(self.steps))
        if self.calls:
            details.append("calls " + ", ".join(self.calls) + " (BLS)")
        return self.kind + (f" ({', '.join(details)})" if details else "")


def kind_of(config: model_config_pb2.ModelConfig) -> ModelKind:
    """The kind of the model `config` describes (config.pbtxt parsed, or Triton's served
    config through `kind_of_served`)."""
    decoupled = config.model_transaction_policy.decoupled
    calls = tuple(_calls(config))
    if config.platform == "ensemble" or config.HasField("ensemble_scheduling"):
        steps = tuple(step.model_name for step in config.ensemble_scheduling.step)
        return ModelKind(config.name, ENSEMBLE, decoupled, steps=steps, calls=calls)
    if config.HasField("sequence_batching"):
        batching = config.sequence_batching
        strategy = batching.WhichOneof("strategy_choice") or "direct"
        return ModelKind(
            config.name,
            SEQUENCE,
            decoupled,
            strategy=strategy,
            implicit_state=bool(batching.state),
            calls=calls,
        )
    return ModelKind(config.name, DECOUPLED if decoupled else STATELESS, decoupled, calls=calls)


def kind_of_served(config: dict[str, Any]) -> ModelKind:
    """The kind from Triton's model-config answer (JSON, as `TritonClient.model_config`
    returns it); fields this protobuf does not know are skipped."""
    message = model_config_pb2.ModelConfig()
    json_format.ParseDict(config, message, ignore_unknown_fields=True)
    return kind_of(message)


def _calls(config: model_config_pb2.ModelConfig) -> list[str]:
    if CALLS_PARAMETER not in config.parameters:
        return []
    text = config.parameters[CALLS_PARAMETER].string_value
    return [name.strip() for name in text.split(",") if name.strip()]
