"""What a Try form asks for, from what Triton serves: the model's metadata (inputs and
outputs, their datatypes and shapes) and its config (the batch dimension, optional
inputs, decoupled, sequence, ensemble steps)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .tensors import InputSpec


@dataclass(frozen=True)
class OutputSpec:
    name: str
    datatype: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class ModelIO:
    name: str
    version: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    max_batch_size: int = 0
    decoupled: bool = False
    sequence: bool = False
    ensemble_steps: tuple[str, ...] = field(default=())

    @property
    def batches(self) -> bool:
        return self.max_batch_size > 0

    def input(self, name: str) -> InputSpec | None:
        return next((i for i in self.inputs if i.name == name), None)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "max_batch_size": self.max_batch_size,
            "decoupled": self.decoupled,
            "sequence": self.sequence,
            "ensemble_steps": list(self.ensemble_steps),
            "inputs": [
                {
                    "name": i.name,
                    "datatype": i.datatype,
                    "dims": list(i.dims),
                    "optional": i.optional,
                }
                for i in self.inputs
            ],  # fmt: skip
            "outputs": [
                {"name": o.name, "datatype": o.datatype, "dims": list(o.dims)} for o in self.outputs
            ],
        }


def _dims(shape: list[Any], batches: bool) -> tuple[int, ...]:
    dims = tuple(int(d) for d in shape)
    return dims[1:] if batches and dims else dims


def describe(metadata: dict[str, Any], config: dict[str, Any]) -> ModelIO:
    """The model's inputs and outputs as a request sends and gets them (metadata's shapes
    hold the batch dimension first when the config batches: it is asked for apart)."""
    max_batch = int(config.get("max_batch_size") or 0)
    batches = max_batch > 0
    optional = {i.get("name"): bool(i.get("optional")) for i in config.get("input", [])}
    steps = (config.get("ensemble_scheduling") or {}).get("step", [])
    return ModelIO(
        name=str(metadata.get("name", config.get("name", ""))),
        version=str((metadata.get("versions") or [""])[-1]),
        inputs=tuple(
            InputSpec(
                name=str(i["name"]),
                datatype=str(i["datatype"]),
                dims=_dims(i.get("shape", []), batches),
                optional=optional.get(i["name"], False),
            )
            for i in metadata.get("inputs", [])
        ),
        outputs=tuple(
            OutputSpec(str(o["name"]), str(o["datatype"]), _dims(o.get("shape", []), batches))
            for o in metadata.get("outputs", [])
        ),
        max_batch_size=max_batch,
        decoupled=bool((config.get("model_transaction_policy") or {}).get("decoupled")),
        sequence="sequence_batching" in config,
        ensemble_steps=tuple(str(s.get("model_name", "")) for s in steps if s.get("model_name")),
    )
