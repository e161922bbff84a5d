"""Which flags fit which kind of model (`model_kind`): run by `sweeps.preflight`, where
Triton's served config is known, after `params.from_flags` checked each flag alone. Each
refusal is on its flag, in words that say why and what to do.

A decoupled model answers a request with any number of responses: only a gRPC stream
carries them, and a plain request to it fails, so it is refused without `streaming`
rather than measured wrong. A sequence model needs every request in a sequence (id,
START, END). The built-in engine streams (at a concurrency or a request rate) but sends
no sequences yet; perf_analyzer does both.
"""

from __future__ import annotations

from .model_kind import ModelKind
from .params import DEFAULTS, SEQUENCE_FLAGS, SweepParams, sequence_ids

BUILTIN, PERF_ANALYZER = "builtin", "perf_analyzer"


def _option(flag: str) -> str:
    return "--" + flag.replace("_", "-")


def refusals(params: SweepParams, kind: ModelKind, engine: str) -> dict[str, str]:
    """flag -> why it does not fit `kind` (or what `engine` cannot measure yet); empty when
    the sweep fits."""
    errors: dict[str, str] = {}
    name = params.model
    if kind.decoupled:
        if params.protocol != "grpc":
            errors["protocol"] = (
                f"{name} is decoupled: it answers only over gRPC streaming; choose gRPC."
            )
        elif not params.streaming:
            errors["streaming"] = (
                f"{name} is decoupled: its responses arrive only over a gRPC stream; "
                "turn on --streaming (a plain request to it fails)."
            )
    elif params.streaming:
        errors["streaming"] = (
            f"--streaming applies to decoupled models; {name} is {kind.kind} "
            "(one response per request, no model_transaction_policy decoupled): turn it off."
        )
    if kind.sequence:
        ids = sequence_ids(params.sequence_id_range)
        if ids is not None and params.mode == "concurrency" and ids < params.end:
            errors["sequence_id_range"] = (
                f"--sequence-id-range {params.sequence_id_range} holds {ids} ids (its end "
                f"excluded), fewer than the {params.end:g} sequences in flight at "
                f"concurrency {params.end:g}: widen it."
            )
    else:
        for flag in SEQUENCE_FLAGS:
            if getattr(params, flag) != DEFAULTS[flag]:
                errors[flag] = (
                    f"{_option(flag)} applies to sequence models; {name} has no sequence_batching."
                )
    if engine == BUILTIN and "engine" not in errors and kind.sequence:
        errors["engine"] = (
            "Sequence sweeps are not measured yet by the built-in engine (its requests "
            "carry no sequence id, START or END, which Triton requires): "
            "choose perf_analyzer."
        )
    return errors
