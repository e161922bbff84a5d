"""Which flags fit which kind of model (`model_kind`): run by `sweeps.preflight`, where
Triton's served config is known, after `params.from_flags` checked each flag alone. Each
refusal is on its flag, in words that say why and what to do.

A decoupled model answers a request with any number of responses: only a gRPC stream
carries them, and a plain request to it fails, so it is refused without `streaming`
rather than measured wrong. A sequence model needs every request in a sequence (id,
START, END), one request at a time in a batch (Triton's sequence batcher). The built-in
engine streams (at a concurrency or a request rate) and sends sequences
(`engine.sequences`), though not sequences over streams: perf_analyzer measures a decoupled
sequence model.

`notes` says what a sweep that fits takes without being told (perf_analyzer's defaults).
"""

from __future__ import annotations

from .model_kind import ModelKind
from .param_bounds import DEFAULT_NUM_OF_SEQUENCES
from .param_flags import sequence_ids
from .params import DEFAULTS, SEQUENCE_FLAGS, SweepParams

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
        elif ids is not None and params.mode == "request_rate" and ids < params.num_of_sequences:
            errors["sequence_id_range"] = (
                f"--sequence-id-range {params.sequence_id_range} holds {ids} ids (its end "
                f"excluded), fewer than the {params.num_of_sequences} sequences live at once "
                "(--num-of-sequences): widen it."
            )
        if params.batch_size > 1:
            errors["batch_size"] = (
                f"{name} is a sequence model: Triton's sequence batcher takes one request "
                "of batch size 1 at a time (it batches sequences itself); choose -b 1."
            )
    else:
        for flag in SEQUENCE_FLAGS:
            if getattr(params, flag) != DEFAULTS[flag]:
                errors[flag] = (
                    f"{_option(flag)} applies to sequence models; {name} has no sequence_batching."
                )
    if params.load_hosts > 1 and engine == PERF_ANALYZER:
        errors["load_hosts"] = (
            f"Load hosts ({params.load_hosts}) apply to the built-in engine: perf_analyzer "
            "generates its load from one host; choose the built-in engine, or 1 load host."
        )
    elif (
        params.load_hosts > 1
        and kind.sequence
        and params.mode == "request_rate"
        and params.num_of_sequences < params.load_hosts
    ):
        errors["load_hosts"] = (
            f"Load hosts ({params.load_hosts}) must be at most --num-of-sequences "
            f"({params.num_of_sequences}): the live sequences are shared among the hosts, "
            "each needs one."
        )
    if engine == BUILTIN and "engine" not in errors and kind.sequence and kind.decoupled:
        errors["engine"] = (
            f"{name} is a decoupled sequence model: the built-in engine does not send "
            "sequences over gRPC streams; perf_analyzer measures it: choose perf_analyzer."
        )
    return errors


def notes(params: SweepParams, kind: ModelKind | str | None) -> list[str]:
    """What a sweep that fits takes without being told, in sentences to show with it: a
    sequence model without any sequence flag gets perf_analyzer's defaults. `kind` is the
    model's kind, or its label as a sweep stores it ("sequence (direct)")."""
    label = kind.label if isinstance(kind, ModelKind) else (kind or "")
    if not label.startswith("sequence"):
        return []
    given = [flag for flag in SEQUENCE_FLAGS if getattr(params, flag) != DEFAULTS[flag]]
    if given:
        return []
    rate = (
        f", --num-of-sequences {DEFAULT_NUM_OF_SEQUENCES}" if params.mode == "request_rate" else ""
    )
    length, variation = DEFAULTS["sequence_length"], DEFAULTS["sequence_length_variation"]
    return [
        f"{params.model} is a sequence model and no sequence flag was given: perf_analyzer's "
        f"defaults apply (--sequence-length {length}, --sequence-length-variation "
        f"{variation:g}%, ids from 1{rate})"
    ]
