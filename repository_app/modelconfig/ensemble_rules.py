"""Ensemble checks that need only the ensemble's own config (ValidateEnsembleSchedulingConfig).

The data-flow part builds the same tensor graph as Triton: each step's outputs depend
on all of its inputs; ensemble inputs are ready; readiness propagates; every ensemble
output must become ready and every intermediate tensor must be consumed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .context import RuleContext
from .findings import ERROR, Finding


@dataclass
class _Tensor:
    name: str
    is_output: bool = False  # some step writes it
    ready: bool = False
    prev: list[_Tensor] = field(default_factory=list)
    next: list[_Tensor] = field(default_factory=list)


def check_ensemble(ctx: RuleContext) -> Iterator[Finding]:
    """All ensemble-only checks; silent for non-ensemble configs."""
    c = ctx.config
    if not c.HasField("ensemble_scheduling") or ctx.platform != "ensemble":
        return
    name = ctx.name
    if c.instance_group:
        yield ctx.finding(
            ERROR,
            "ensemble.instance-group",
            f"instance group should not be specified for ensemble '{name}': remove "
            "instance_group (each step model has its own)",
            "instance_group",
        )
    if c.HasField("optimization"):
        yield ctx.finding(
            ERROR,
            "ensemble.optimization",
            f"optimization should not be specified for ensemble '{name}': remove optimization "
            "(set it on the step models)",
            "optimization",
        )
    if c.model_warmup:
        yield ctx.finding(
            ERROR,
            "ensemble.model-warmup",
            f"model_warmup can not be specified for ensemble '{name}': remove model_warmup "
            "(warm up the step models instead)",
            "model_warmup",
        )
    steps = c.ensemble_scheduling.step
    if not steps:
        yield ctx.finding(
            ERROR,
            "ensemble.no-steps",
            f"must specify 'step' for ensemble '{name}': add at least one step with "
            "model_name, input_map and output_map",
            "ensemble_scheduling",
        )
        return
    yield from _check_graph(ctx)


def _check_graph(ctx: RuleContext) -> Iterator[Finding]:
    c = ctx.config
    name = ctx.name
    tensors: dict[str, _Tensor] = {}
    broken = False
    for idx, step in enumerate(c.ensemble_scheduling.step):
        path = f"ensemble_scheduling.step[{idx}]"
        for fld, what in (
            ("model_name", "the model to run"),
            ("input_map", None),
            ("output_map", None),
        ):
            value = getattr(step, fld)
            if not value:
                fix = (
                    f"name {what}"
                    if what
                    else f"map the step's tensors with {fld} {{ key: ... value: ... }}"
                )
                yield ctx.finding(
                    ERROR,
                    f"ensemble.step-{fld.replace('_', '-')}-missing",
                    f"must specify '{fld}' in step {idx} of ensemble '{name}': {fix}",
                    path,
                )
                broken = True
        produced: list[_Tensor] = []
        for key, tname in step.output_map.items():
            tensor = tensors.get(tname)
            if tensor is not None and tensor.is_output:
                yield ctx.finding(
                    ERROR,
                    "ensemble.tensor-written-twice",
                    f"ensemble tensor '{tname}' can appear in an output map only once for "
                    f"ensemble '{name}' step {idx}: give output '{key}' of "
                    f"'{step.model_name}' its own tensor name",
                    f'{path}.output_map["{key}"]',
                )
                broken = True
                continue
            if tensor is None:
                tensor = tensors[tname] = _Tensor(tname)
            tensor.is_output = True
            produced.append(tensor)
        for tname in step.input_map.values():
            tensor = tensors.setdefault(tname, _Tensor(tname))
            for out in produced:
                out.prev.append(tensor)
                tensor.next.append(out)
    if broken:
        return  # Triton stops building the graph here; flow results would mislead

    yield from _unused(ctx, "input", c.input, tensors, "map it in a step's input_map")
    queue: deque[_Tensor] = deque()
    for io in c.input:
        if (tensor := tensors.get(io.name)) is not None:
            tensor.ready = True
            queue.append(tensor)
    while queue:
        node = queue.popleft()
        for nxt in node.next:
            if not nxt.ready and all(p.ready for p in nxt.prev):
                nxt.ready = True
                queue.append(nxt)

    yield from _unused(ctx, "output", c.output, tensors, "write it from a step's output_map")
    outputs: set[str] = set()
    for i, io in enumerate(c.output):
        tensor = tensors.get(io.name)
        if tensor is None:
            continue
        if not tensor.ready:
            source = _first_unready_source(tensor)
            detail = (
                f": at least one of its depending tensors, '{source}', is not connected"
                if source != tensor.name
                else ""
            )
            yield ctx.finding(
                ERROR,
                "ensemble.output-not-written",
                f"output '{io.name}' for ensemble '{name}' is not written{detail}: make sure "
                "every tensor it depends on comes from an ensemble input or a step output",
                f"output[{i}]",
            )
            continue
        outputs.add(io.name)
    for tname, tensor in tensors.items():
        if tname in outputs:
            continue
        if not tensor.ready or not tensor.next:
            yield ctx.finding(
                ERROR,
                "ensemble.tensor-unused",
                f"ensemble tensor '{tname}' is unused in ensemble '{name}': feed it to a step, "
                "declare it as an ensemble output, or remove the mapping",
                _tensor_path(ctx, tname),
            )


def _unused(
    ctx: RuleContext, side: str, ios: Iterable[Any], tensors: dict[str, _Tensor], fix: str
) -> Iterator[Finding]:
    """The ensemble's inputs or outputs (``side``) that no step maps."""
    for i, io in enumerate(ios):
        if io.name not in tensors:
            yield ctx.finding(
                ERROR,
                f"ensemble.{side}-unused",
                f"ensemble {side} '{io.name}' for ensemble {ctx.name}' is not used: {fix} or "
                f"remove the {side}",
                f"{side}[{i}]",
            )


def _first_unready_source(tensor: _Tensor) -> str:
    """Follow not-ready producers upstream, as Triton does for its error detail."""
    last = tensor
    prev = tensor.prev
    seen: set[str] = set()
    while prev:
        nodes, prev = prev, []
        for node in nodes:
            if not node.ready and node.name not in seen:
                seen.add(node.name)
                last = node
                prev = node.prev
                break
    return last.name


def _tensor_path(ctx: RuleContext, tensor: str) -> str:
    for idx, step in enumerate(ctx.config.ensemble_scheduling.step):
        for mapping in ("output_map", "input_map"):
            for key, value in getattr(step, mapping).items():
                if value == tensor:
                    return f'ensemble_scheduling.step[{idx}].{mapping}["{key}"]'
    return "ensemble_scheduling"
