"""LLM-style streaming models on the Benchmark page: input presets for the TensorRT-LLM and
vLLM backends, and the checks of the flags that count tokens and goodput.

The presets are perf_analyzer `--input-data` documents with those backends' usual input
names (their model.py / config.pbtxt): the form's JSON text field starts from one and the
user edits it. They go through the same checks as any input data: the preflight builds
the requests from them (`engine.inputs.build_payloads`), so a model whose inputs have
other names is refused on the field, naming the inputs missing and those it does not
have, before anything is queued.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .params import SweepParams

PROMPTS = (
    "Explain what an inference server does in two sentences.",
    "Write a haiku about GPUs.",
    "List three uses of a message queue.",
)
# TensorRT-LLM's ensemble / tensorrt_llm_bls: text_input, max_tokens and stream (bad_words,
# stop_words, temperature... are optional inputs, left out here).
TRTLLM = {
    "data": [{"text_input": [p], "max_tokens": [128], "stream": [True]} for p in PROMPTS],
}
# vLLM's backend: text_input, stream, sampling_parameters (a JSON string) and
# exclude_input_in_output.
VLLM = {
    "data": [
        {
            "text_input": [p],
            "stream": [True],
            "sampling_parameters": [json.dumps({"max_tokens": 128, "temperature": 0})],
            "exclude_input_in_output": [True],
        }
        for p in PROMPTS
    ],
}
INPUT_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "trtllm": ("TensorRT-LLM", TRTLLM),
    "vllm": ("vLLM", VLLM),
}


def preset_text(name: str) -> str | None:
    """A preset's document as the form's JSON text shows it, a sample per line; None for
    an unknown name."""
    preset = INPUT_PRESETS.get(name)
    if preset is None:
        return None
    samples = ",\n".join("  " + json.dumps(sample) for sample in preset[1]["data"])
    return '{"data": [\n' + samples + "\n]}"


def refusals(params: SweepParams, metadata: Mapping[str, Any], engine: str) -> dict[str, str]:
    """flag -> why the token and goodput flags do not fit this model or engine (run by
    `sweeps.preflight`, where the model's outputs are known)."""
    errors: dict[str, str] = {}
    if engine == "perf_analyzer":
        for flag, what in (("goodput", "goodput"), ("token_output", "tokens")):
            if getattr(params, flag):
                errors[flag] = (
                    f"perf_analyzer 2.48 reports no {what}: choose the built-in engine, "
                    "or leave this empty."
                )
        return errors
    outputs = [str(o.get("name")) for o in metadata.get("outputs", [])]
    if params.token_output and params.token_output not in outputs:
        errors["token_output"] = (
            f"{params.model} has no output {params.token_output!r}; its outputs: "
            f"{', '.join(outputs) or 'none'}."
        )
    return errors
