"""Triton's rules on a model's tensors (``ValidateModelInput``/``Output``, ``ValidateIOShape``,
``ValidateBatchIO``): names, data types, dims and reshape, formats, batch inputs and outputs,
plus inputs Triton accepts but that will not behave as the author expects.

Messages start with Triton's wording (so they match server logs) and end with the fix.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from typing import Any

from tritonclient.grpc import model_config_pb2 as pb

from .backends import TENSORRT_PLAN, fastertransformer_fills_data_type, io_completion
from .context import RuleContext
from .findings import ERROR, WARNING, Finding, Severity

WILDCARD = -1


def _io_missing_severity(ctx: RuleContext, io: Any, what: str) -> tuple[Severity | None, str]:
    """Missing data_type/dims: an error only where nothing fills it before Triton checks.

    Triton validates inputs and outputs after the backend initialised, and a backend may
    complete them (auto-complete on, Triton's default). Only backends known not to may get
    an error in default mode; the others a warning that names the backend. None: no finding
    (model.py's auto_complete_config fills it).
    """
    backend = ctx.backend
    params = ctx.config.parameters
    if backend == "fastertransformer" and what == "data_type":
        model_type = params["model_type"].string_value if "model_type" in params else ""
        if fastertransformer_fills_data_type(model_type, io.name):
            # Its ModelInitialize sets these even with auto-complete disabled.
            return WARNING, f" (the fastertransformer backend sets it for model_type {model_type})"
    if ctx.strict or ctx.is_ensemble:
        return ERROR, ""
    completes = io_completion(backend, ctx.python_auto_complete)
    if completes is False:
        if backend == "python":
            return ERROR, " (model.py has no auto_complete_config, so nothing fills it)"
        return ERROR, f" (the {backend} backend does not fill it)"
    if completes is True:
        if backend == "python":
            return None, ""
        source = "the serialized pipeline" if backend == "dali" else "the model file"
        return WARNING, (
            f" (the {backend} backend fills it from {source}, but only while auto-complete is on)"
        )
    if backend == "python":
        return (
            WARNING,
            " (only model.py's auto_complete_config can fill it; without one Triton refuses the model)",
        )
    if backend:
        return WARNING, (
            f" (the {backend} backend may fill it while auto-complete is on; if it does not, "
            "Triton refuses the model)"
        )
    return WARNING, " (Triton can fill it from the model file only while auto-complete is on)"


def _element_count(dims: Any) -> int:
    count = 1
    for d in dims:
        if d == WILDCARD:
            return WILDCARD
        count *= d
    return count


def _chunks(dims: Any) -> list[int]:
    """Element counts of the runs between variable-size dimensions."""
    out, cur = [], 1
    for d in dims:
        if d == WILDCARD:
            out.append(cur)
            cur = 1
        else:
            cur *= d
    out.append(cur)
    return out


def _check_io_shape(
    ctx: RuleContext, io: Any, path: str, kind: str, seen: dict[str, str]
) -> Iterator[Finding]:
    """ValidateIOShape for one input/output."""
    prefix = f"model {kind} "
    if not io.name:
        yield ctx.finding(
            ERROR, f"{kind}.name-missing", f"{prefix}must specify 'name': add name: \"...\"", path
        )
        return
    label = f"{prefix}'{io.name}' "
    if io.name in seen:
        yield _duplicate(ctx, io, seen[io.name], path, kind)
    seen.setdefault(io.name, path)
    for what, missing, example in (
        ("data_type", io.data_type == pb.TYPE_INVALID, "data_type: TYPE_FP32"),
        (
            "dims",
            len(io.dims) == 0,
            "dims: [ -1 ] (without the batch dimension when max_batch_size > 0)",
        ),
    ):
        if not missing:
            continue
        severity, why = _io_missing_severity(ctx, io, what)
        if severity is None:
            continue
        verb = "must specify" if severity == ERROR else "does not specify"
        yield ctx.finding(
            severity,
            f"{kind}.{what.replace('_', '-')}-missing",
            f"{label}{verb} '{what}'{why}: add e.g. {example}",
            path,
        )
    max_bs = ctx.config.max_batch_size
    has_reshape = io.HasField("reshape")
    if has_reshape and len(io.reshape.shape) == 0 and max_bs == 0:
        yield ctx.finding(
            ERROR,
            f"{kind}.reshape-empty",
            f"{label}cannot have empty reshape for non-batching model as scalar tensors are "
            f"not supported for {ctx.name}: give reshape a shape or set max_batch_size > 0",
            f"{path}.reshape",
        )
    for i, d in enumerate(io.dims):
        if d < 1 and d != WILDCARD:
            yield ctx.finding(
                ERROR,
                f"{kind}.dims-invalid",
                f"{label}dimension must be integer >= 1, or -1 to indicate a variable-size "
                f"dimension for {ctx.name}: dims[{i}] is {d}; use a positive size or -1",
                f"{path}.dims[{i}]",
            )
    if not has_reshape:
        return
    bad_reshape = False
    for i, d in enumerate(io.reshape.shape):
        if d < 1 and d != WILDCARD:
            bad_reshape = True
            yield ctx.finding(
                ERROR,
                f"{kind}.reshape-invalid",
                f"{label}reshape dimensions must be integer >= 1, or -1 to indicate a "
                f"variable-size dimension for {ctx.name}: reshape shape[{i}] is {d}; use a "
                "positive size or -1",
                f"{path}.reshape.shape[{i}]",
            )
    if bad_reshape or any(d < 1 and d != WILDCARD for d in io.dims):
        return
    dims_size = _element_count(io.dims)
    reshape_size = _element_count(io.reshape.shape)
    if len(io.reshape.shape) == 0:
        reshape_size = 0
    size_msg = (
        f"{label}has different size for dims and reshape for {ctx.name}: dims "
        f"{list(io.dims)} and reshape {list(io.reshape.shape)} must hold the same number of "
        "elements; fix one of them"
    )
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        yield ctx.finding(ERROR, f"{kind}.reshape-size", size_msg, f"{path}.reshape")
        return
    if dims_size == WILDCARD:
        a, b = _chunks(io.dims), _chunks(io.reshape.shape)
        if len(a) != len(b):
            yield ctx.finding(
                ERROR,
                f"{kind}.reshape-variable",
                f"{label}has different number of variable-size dimensions for dims and reshape "
                f"for {ctx.name}: use as many -1 entries in reshape as in dims",
                f"{path}.reshape",
            )
        elif a != b:
            yield ctx.finding(ERROR, f"{kind}.reshape-size", size_msg, f"{path}.reshape")


def _duplicate(ctx: RuleContext, io: Any, first: str, path: str, kind: str) -> Finding:
    """A name declared twice. Triton keeps its tensors in a map (model.cc: the first entry
    wins), so a repeated output is ignored, while each required input is also counted."""
    lines = [ctx.locator.locate(p)[0] for p in (first, path)]
    where = f"lines {lines[0]} and {lines[1]}" if None not in lines else f"{first} and {path}"
    label = f"model {kind} '{io.name}' is declared twice ({where})"
    if kind == "output":
        return ctx.finding(
            WARNING,
            "output.duplicate-name",
            f"{label}: Triton keeps one output per name (the first) and ignores the other; "
            "remove the repeat",
            f"{path}.name",
        )
    first_io = ctx.config.input[int(first[first.index("[") + 1 : -1])]
    if first_io.optional or io.optional:
        return ctx.finding(
            WARNING,
            "input.duplicate-name",
            f"{label}: Triton keeps the first declaration and ignores the other; remove the repeat",
            f"{path}.name",
        )
    return ctx.finding(
        ERROR,
        "input.duplicate-name",
        f"{label}: Triton counts both as required inputs, so every request lacks one and is "
        f"rejected; give each {kind} a unique name",
        f"{path}.name",
    )


def _check_io_kind_rules(ctx: RuleContext, io: Any, path: str, kind: str) -> Iterator[Finding]:
    platform_known = bool(ctx.platform or ctx.backend)
    not_trt = platform_known and ctx.platform != TENSORRT_PLAN
    image_format = kind == "input" and io.format in (
        pb.ModelInput.FORMAT_NHWC,
        pb.ModelInput.FORMAT_NCHW,
    )
    if image_format and len(io.dims) != 3:
        yield ctx.finding(
            ERROR,
            "input.format-dims",
            f"model input NHWC/NCHW require 3 dims for {ctx.name}: input '{io.name}' has "
            f"{len(io.dims)}; list exactly 3 dims (without the batch dimension) or use "
            "FORMAT_NONE",
            f"{path}.format",
        )
    if io.is_shape_tensor and not_trt:
        yield ctx.finding(
            ERROR,
            f"{kind}.shape-tensor-platform",
            f"shape tensors are only supported for TensorRT platform ({kind} '{io.name}' of "
            f"{ctx.name}): remove is_shape_tensor",
            f"{path}.is_shape_tensor",
        )
    if io.is_non_linear_format_io:
        if not_trt:
            yield ctx.finding(
                ERROR,
                f"{kind}.non-linear-platform",
                "Non-linear IO format is only supported for the TensorRT platform "
                f"({kind} '{io.name}'): remove is_non_linear_format_io",
                f"{path}.is_non_linear_format_io",
            )
        elif len(io.dims) != 3:
            yield ctx.finding(
                ERROR,
                f"{kind}.non-linear-dims",
                f"Non-linear IO format {kind} requires 3 dims ({kind} '{io.name}' has "
                f"{len(io.dims)}): list exactly 3 dims",
                f"{path}.dims",
            )


def check_io(ctx: RuleContext) -> Iterator[Finding]:
    """ValidateModelInput / ValidateModelOutput for every tensor."""
    for kind, ios in (("input", ctx.config.input), ("output", ctx.config.output)):
        seen: dict[str, str] = {}
        for i, io in enumerate(ios):
            path = f"{kind}[{i}]"
            yield from _check_io_shape(ctx, io, path, kind, seen)
            yield from _check_io_kind_rules(ctx, io, path, kind)


_BATCH_INPUT_KINDS = {
    pb.BatchInput.BATCH_ELEMENT_COUNT,
    pb.BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT,
    pb.BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO,
    pb.BatchInput.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE,
    pb.BatchInput.BATCH_ITEM_SHAPE,
    pb.BatchInput.BATCH_ITEM_SHAPE_FLATTEN,
}


def _unknown_sources(
    ctx: RuleContext, rule: str, sources: Iterable[str], inputs: Collection[str], path: str
) -> Iterator[Finding]:
    """A batch input's or output's source_input entries that name no model input."""
    for j, src in enumerate(sources):
        if src not in inputs:
            yield ctx.finding(
                ERROR,
                f"{rule}.unknown-source",
                f"unknown source input name '{src}' for {ctx.name}: use one of the model "
                f"inputs ({', '.join(sorted(inputs)) or 'none declared'})",
                f"{path}.source_input[{j}]",
            )


def check_batch_io(ctx: RuleContext) -> Iterator[Finding]:
    """ValidateBatchIO: kinds, one source each, known source/target names."""
    c = ctx.config
    inputs = {io.name for io in c.input}
    outputs = {io.name for io in c.output}
    for i, bi in enumerate(c.batch_input):
        path = f"batch_input[{i}]"
        kind = pb.BatchInput.Kind.Name(bi.kind)
        if bi.kind in _BATCH_INPUT_KINDS and len(bi.source_input) != 1:
            yield ctx.finding(
                ERROR,
                "batch-input.source-count",
                f"batch input kind '{kind}' expects 1 source input, got {len(bi.source_input)} "
                f"for {ctx.name}: list exactly one source_input",
                f"{path}.source_input" if bi.source_input else path,
            )
        if bi.data_type not in (pb.TYPE_INT32, pb.TYPE_FP32):
            yield ctx.finding(
                ERROR,
                "batch-input.data-type",
                f"batch input data type must be TYPE_INT32 or TYPE_FP32 for {ctx.name}: "
                f"batch input '{bi.target_name}' has {pb.DataType.Name(bi.data_type)}",
                f"{path}.data_type",
            )
        yield from _unknown_sources(ctx, "batch-input", bi.source_input, inputs, path)
    for i, bo in enumerate(c.batch_output):
        path = f"batch_output[{i}]"
        kind = pb.BatchOutput.Kind.Name(bo.kind)
        if len(bo.source_input) != 1:
            yield ctx.finding(
                ERROR,
                "batch-output.source-count",
                f"batch output kind '{kind}' expects 1 source input, got {len(bo.source_input)} "
                f"for {ctx.name}: list exactly one source_input",
                f"{path}.source_input" if bo.source_input else path,
            )
        yield from _unknown_sources(ctx, "batch-output", bo.source_input, inputs, path)
        targets: set[str] = set()
        for j, target in enumerate(bo.target_name):
            if target not in outputs:
                yield ctx.finding(
                    ERROR,
                    "batch-output.unknown-target",
                    f"unknown target output name '{target}' for {ctx.name}: use one of the "
                    f"model outputs ({', '.join(sorted(outputs)) or 'none declared'})",
                    f"{path}.target_name[{j}]",
                )
            elif target in targets:
                yield ctx.finding(
                    ERROR,
                    "batch-output.duplicate-target",
                    f"target output name '{target}' can only be specified once for "
                    f"{ctx.name}: remove the repeated entry",
                    f"{path}.target_name[{j}]",
                )
            targets.add(target)


def check_usability(ctx: RuleContext) -> Iterator[Finding]:
    """Configs Triton accepts but that will not behave as the author expects."""
    c = ctx.config
    if c.max_batch_size > 0 and len(c.input) > 0 and not ctx.is_ensemble:
        leading = [io for io in c.input if len(io.dims) >= 2 and io.dims[0] == WILDCARD]
        if len(leading) == len(c.input):
            # Only a question: [-1, -1, 3] (any image size) or [-1, 384] (any sequence
            # length) are real variable sizes. The ONNX cross-check says so where it is sure.
            yield ctx.finding(
                WARNING,
                "io.batch-dim-in-dims",
                f"every input of {ctx.name} starts with -1 and max_batch_size is "
                f"{c.max_batch_size}: is that -1 the batch dimension? Triton adds the batch "
                "dimension itself, so if it is, drop it from dims (or set max_batch_size: 0); "
                "if it is a variable size such as an image side or a sequence length, keep it",
                "input[0].dims[0]",
            )
    if ctx.backend == "python" and len(c.input) == 0:
        auto_complete = ctx.python_auto_complete
        if ctx.strict or auto_complete is False:
            why = (
                " and auto-complete is off, so auto_complete_config cannot add any"
                if ctx.strict and auto_complete
                else " and model.py has no auto_complete_config to add them"
                if auto_complete is False
                else ""
            )
            yield ctx.finding(
                WARNING,
                "python.no-inputs",
                f"python model {ctx.name} declares no inputs{why}: Triton loads it but rejects "
                "every request that sends tensors; declare the inputs model.py reads",
                "input",
            )
        elif auto_complete is None:
            yield ctx.finding(
                WARNING,
                "python.no-inputs",
                f"python model {ctx.name} declares no inputs: unless model.py defines "
                "auto_complete_config to add them, Triton rejects every request that sends "
                "tensors; declare the inputs model.py reads",
                "input",
            )
