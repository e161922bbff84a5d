"""Triton's own model-config rules (``model_config_utils.cc``), one check per function.

Messages start with Triton's wording (so they match server logs) and end with the
fix. Unlike Triton, which stops at the first error, every check reports all it finds.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

from tritonclient.grpc import model_config_pb2 as pb

from .backends import (
    KNOWN_BACKENDS,
    KNOWN_PLATFORMS,
    TENSORRT_PLAN,
    TYPED_BACKENDS,
    backend_for_platform,
    fastertransformer_fills_data_type,
    io_completion,
)
from .code_loading import code_parameters
from .context import RuleContext
from .findings import ERROR, WARNING, Finding, Severity

Rule = Callable[[RuleContext], Iterator[Finding]]

WILDCARD = -1
CUSTOMIZABLE_METRIC_FAMILIES = frozenset({"nv_inference_first_response_histogram_ms"})
MAX_SENSIBLE_INSTANCES = 64


def check_name(ctx: RuleContext) -> Iterator[Finding]:
    """name present (else the folder name is used) and equal to the folder."""
    c = ctx.config
    if not c.name:
        fallback = f'the folder name "{ctx.folder_name}"' if ctx.folder_name else "the folder name"
        yield ctx.finding(
            WARNING,
            "model.name-missing",
            f"model configuration does not specify 'name', so Triton uses {fallback}: "
            'add name: "<folder name>" to make it explicit',
        )
    elif ctx.folder_name is not None and c.name != ctx.folder_name:
        yield ctx.finding(
            ERROR,
            "model.name-mismatch",
            f"unexpected directory name '{ctx.folder_name}' for model '{c.name}', directory "
            f"name must equal model name: rename the folder to '{c.name}' or set name: \"{ctx.folder_name}\"",
            "name",
        )


def check_platform_backend(ctx: RuleContext) -> Iterator[Finding]:
    """platform/backend set, known and consistent (ValidateModelConfig)."""
    c, platform, backend = ctx.config, ctx.platform, ctx.backend
    where = "platform" if c.platform else "backend"
    if not backend and platform != "ensemble":
        if platform:
            close = difflib.get_close_matches(platform, sorted(KNOWN_PLATFORMS), n=1)
            hint = f"did you mean '{close[0]}'?" if close else "use a known platform"
            yield ctx.finding(
                ERROR,
                "model.platform-unknown",
                f"unexpected platform type '{platform}' for {ctx.name}: {hint} Known platforms: "
                f"{', '.join(sorted(KNOWN_PLATFORMS))}; or set 'backend' instead "
                '(e.g. backend: "onnxruntime")',
                "platform",
            )
        elif ctx.fields is not None and ctx.fields.error:
            # The folder was inspected: nothing in it names a backend (Triton's own error).
            yield ctx.finding(
                ERROR,
                "model.backend-undetermined",
                f"{ctx.fields.error} Set backend (or platform) in config.pbtxt, or put a model "
                "file Triton recognises (model.onnx, model.plan, model.pt, model.py, ...) in a "
                "version folder",
            )
        else:
            severity = ERROR if ctx.strict else WARNING
            suffix = (
                "with auto-complete disabled Triton cannot infer it"
                if ctx.strict
                else "Triton will try to infer it from the model file name in the version folder"
            )
            problem = (
                f"must specify 'platform' or 'backend' for '{ctx.name}'"
                if ctx.strict
                else f"neither 'platform' nor 'backend' is set for '{ctx.name}'"
            )
            yield ctx.finding(
                severity,
                "model.backend-missing",
                f"{problem} ({suffix}): set "
                'backend (e.g. backend: "onnxruntime") or platform (e.g. platform: "tensorrt_plan")',
            )
        return
    if backend and platform == "ensemble":
        yield ctx.finding(
            ERROR,
            "ensemble.has-backend",
            f"Ensemble model '{ctx.name}' must have platform type 'ensemble' and empty backend "
            "type: remove the 'backend' line",
            "backend",
        )
        return
    if backend in TYPED_BACKENDS and backend != backend_for_platform(platform):
        expected = [p for p in sorted(KNOWN_PLATFORMS) if backend_for_platform(p) == backend]
        yield ctx.finding(
            ERROR,
            "model.platform-backend-mismatch",
            f"unexpected 'platform' and 'backend' pair, got:{platform}, {backend}: backend "
            f"'{backend}' needs platform {' or '.join(repr(p) for p in expected)}; fix or "
            "remove the 'platform' line",
            "platform" if c.platform else "backend",
        )
    if backend and backend not in KNOWN_BACKENDS and not c.runtime:
        yield ctx.finding(
            WARNING,
            "model.backend-unknown",
            f"backend '{backend}' is not one of the backends shipped with Triton "
            f"({', '.join(sorted(KNOWN_BACKENDS))}): check the spelling, or install it under "
            f"<backend-directory>/{backend}/",
            where,
        )
    runtime = c.runtime
    if runtime and (runtime.startswith("/") or ".." in runtime.replace("\\", "/").split("/")):
        yield ctx.finding(
            ERROR,
            "model.runtime-escapes",
            f"backend library name '{runtime}' escapes backend directory: name a library "
            'inside the backend\'s folder (e.g. runtime: "model.py" or a plain file name)',
            "runtime",
        )


def check_max_batch_size(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.config.max_batch_size < 0:
        yield ctx.finding(
            ERROR,
            "model.max-batch-size-negative",
            f"'max_batch_size' must be non-negative value for {ctx.name}: use 0 for a model "
            "without a batch dimension or the largest batch the model accepts",
            "max_batch_size",
        )


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


def check_dynamic_batching(ctx: RuleContext) -> Iterator[Finding]:
    c = ctx.config
    if not c.HasField("dynamic_batching"):
        return
    db = c.dynamic_batching
    max_bs = c.max_batch_size
    if max_bs == 0 and not db.preferred_batch_size:
        yield ctx.finding(
            WARNING,
            "dynamic-batching.no-batching",
            f"dynamic_batching has no effect on {ctx.name} because max_batch_size is 0: set "
            "max_batch_size > 0 (and drop the batch dimension from dims) or remove "
            "dynamic_batching",
            "dynamic_batching",
        )
    seen: set[int] = set()
    for i, size in enumerate(db.preferred_batch_size):
        path = f"dynamic_batching.preferred_batch_size[{i}]"
        if size <= 0:
            yield ctx.finding(
                ERROR,
                "dynamic-batching.preferred-not-positive",
                f"dynamic batching preferred size must be positive for {ctx.name}: "
                f"preferred_batch_size {size} must be at least 1",
                path,
            )
        elif size > max_bs:
            yield ctx.finding(
                ERROR,
                "dynamic-batching.preferred-above-max",
                f"dynamic batching preferred size must be <= max batch size for {ctx.name}: "
                + (
                    "dynamic batching with preferred batch sizes needs max_batch_size >= 1, "
                    f"and it is 0: set max_batch_size to at least {max(db.preferred_batch_size)} "
                    "(and leave the batch dimension out of dims) or remove preferred_batch_size"
                    if max_bs == 0
                    else f"preferred_batch_size {size} exceeds max_batch_size {max_bs}; lower it "
                    f"to at most {max_bs} or raise max_batch_size"
                ),
                path,
            )
        elif size in seen:
            yield ctx.finding(
                WARNING,
                "dynamic-batching.preferred-duplicate",
                f"preferred_batch_size {size} is listed twice for {ctx.name}: remove the repeat",
                path,
            )
        seen.add(size)
    levels = db.priority_levels
    if levels:
        if db.default_priority_level == 0 or db.default_priority_level > levels:
            yield ctx.finding(
                ERROR,
                "dynamic-batching.default-priority-range",
                f"default priority level must be in range [1, {levels}] for {ctx.name}: set "
                f"default_priority_level between 1 and {levels}",
                "dynamic_batching.default_priority_level"
                if ctx.locator.has("dynamic_batching.default_priority_level")
                else "dynamic_batching.priority_levels",
            )
        for key in sorted(db.priority_queue_policy):
            if key == 0 or key > levels:
                yield ctx.finding(
                    ERROR,
                    "dynamic-batching.priority-policy-range",
                    f"priority queue policy must have priority level in range [1, {levels}] for "
                    f"{ctx.name}: priority_queue_policy key {key} is outside it",
                    "dynamic_batching.priority_queue_policy",
                )
    if db.preserve_ordering:
        if levels > 1:
            yield ctx.finding(
                ERROR,
                "dynamic-batching.preserve-ordering-priorities",
                f"Only one priority level is allowed when 'preserve_ordering' is true for "
                f"{ctx.name}: set priority_levels to 0 or 1, or drop preserve_ordering",
                "dynamic_batching.priority_levels",
            )
        policies = [("dynamic_batching.default_queue_policy", db.default_queue_policy)]
        policies += [
            ("dynamic_batching.priority_queue_policy", p)
            for _, p in sorted(db.priority_queue_policy.items())
        ]
        for path, policy in policies:
            if (
                policy.default_timeout_microseconds != 0
                and policy.timeout_action == pb.ModelQueuePolicy.DELAY
            ):
                yield ctx.finding(
                    ERROR,
                    "dynamic-batching.preserve-ordering-delay",
                    "Queue policy can not have DELAY as timeout action when 'preserve_ordering' "
                    f"is true for {ctx.name}: use timeout_action: REJECT or drop preserve_ordering",
                    path,
                )


_CONTROL = pb.ModelSequenceBatching.Control


def _check_controls(ctx: RuleContext, kind: int, typed: bool) -> Iterator[Finding]:
    """Get{Boolean,Typed}SequenceControlProperties for one control kind."""
    sb = ctx.config.sequence_batching
    kind_name = _CONTROL.Kind.Name(kind)
    seen_control = False
    for i, ci in enumerate(sb.control_input):
        for j, ctrl in enumerate(ci.control):
            if ctrl.kind != kind:
                continue
            path = f"sequence_batching.control_input[{i}].control[{j}]"
            if seen_control:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.control-kind-repeated",
                    f"sequence batching specifies multiple {kind_name} tensors for {ctx.name}: "
                    f"keep a single control_input with kind {kind_name}",
                    path,
                )
                continue
            seen_control = True
            counts = {
                "int32_false_true": len(ctrl.int32_false_true),
                "fp32_false_true": len(ctrl.fp32_false_true),
                "bool_false_true": len(ctrl.bool_false_true),
            }
            given = [k for k, n in counts.items() if n]
            if typed:
                if given:
                    yield ctx.finding(
                        ERROR,
                        "sequence-batching.control-values-not-allowed",
                        "sequence batching must not specify either 'int32_false_true', "
                        f"'fp32_false_true' or 'bool_false_true' for {kind_name} for {ctx.name}: "
                        "give data_type instead",
                        path,
                    )
                elif kind == _CONTROL.CONTROL_SEQUENCE_CORRID and ctrl.data_type not in (
                    pb.TYPE_UINT64,
                    pb.TYPE_INT64,
                    pb.TYPE_UINT32,
                    pb.TYPE_INT32,
                    pb.TYPE_STRING,
                ):
                    yield ctx.finding(
                        ERROR,
                        "sequence-batching.corrid-data-type",
                        f"unexpected data type for control {kind_name} for {ctx.name}. Allowed "
                        "data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and "
                        "TYPE_STRING: set one of them as data_type",
                        f"{path}.data_type",
                    )
                continue
            if not given:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.control-values-missing",
                    "sequence batching must specify either 'int32_false_true', 'fp32_false_true' "
                    f"or 'bool_false_true' for {kind_name} for {ctx.name}: add e.g. "
                    "int32_false_true: [ 0, 1 ]",
                    path,
                )
            elif len(given) > 1:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.control-values-conflict",
                    "sequence batching specifies more than one from 'int32_false_true', "
                    f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {ctx.name}: "
                    "keep one",
                    path,
                )
            elif counts[given[0]] != 2:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.control-values-count",
                    f"sequence batching control '{given[0]}' must have exactly 2 entries for "
                    f"{kind_name} for {ctx.name}: give [ false_value, true_value ]",
                    f"{path}.{given[0]}",
                )


def check_sequence_batching(ctx: RuleContext) -> Iterator[Finding]:
    c = ctx.config
    if not c.HasField("sequence_batching"):
        return
    sb = c.sequence_batching
    if c.response_cache.enable:
        yield ctx.finding(
            ERROR,
            "sequence-batching.response-cache",
            f"Response Cache does not currently support model {ctx.name} with sequence "
            "batching scheduler. Please disable the response cache: set response_cache { enable: false }",
            "response_cache",
        )
    seen: set[str] = set()
    for i, ci in enumerate(sb.control_input):
        path = f"sequence_batching.control_input[{i}]"
        if not ci.name:
            yield ctx.finding(
                ERROR,
                "sequence-batching.control-name-missing",
                f'sequence batching control tensor must have a name for {ctx.name}: add name: "..."',
                path,
            )
        elif ci.name in seen:
            yield ctx.finding(
                ERROR,
                "sequence-batching.control-tensor-repeated",
                f"sequence batching control tensor '{ci.name}' is specified for multiple control "
                f"kinds for {ctx.name}: give each control_input its own tensor name",
                f"{path}.name",
            )
        seen.add(ci.name)
    for kind in (
        _CONTROL.CONTROL_SEQUENCE_START,
        _CONTROL.CONTROL_SEQUENCE_END,
        _CONTROL.CONTROL_SEQUENCE_READY,
    ):
        yield from _check_controls(ctx, kind, typed=False)
    yield from _check_controls(ctx, _CONTROL.CONTROL_SEQUENCE_CORRID, typed=True)
    if sb.HasField("oldest"):
        for i, size in enumerate(sb.oldest.preferred_batch_size):
            path = f"sequence_batching.oldest.preferred_batch_size[{i}]"
            if size <= 0:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.preferred-not-positive",
                    f"sequence batching preferred batch size must be positive for {ctx.name}: "
                    f"{size} must be at least 1",
                    path,
                )
            elif size > c.max_batch_size:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.preferred-above-max",
                    f"sequence batching preferred batch size must be <= max batch size for "
                    f"{ctx.name}: {size} exceeds max_batch_size {c.max_batch_size}; lower it or "
                    "raise max_batch_size",
                    path,
                )
    if sb.HasField("direct"):
        util = sb.direct.minimum_slot_utilization
        if util < 0.0 or util > 1.0:
            yield ctx.finding(
                ERROR,
                "sequence-batching.slot-utilization",
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for "
                f"{ctx.name}: {util} is outside it",
                "sequence_batching.direct.minimum_slot_utilization",
            )


def check_scheduling_choice(ctx: RuleContext) -> Iterator[Finding]:
    """ensemble_scheduling only (and always) with platform ensemble."""
    c = ctx.config
    if c.HasField("ensemble_scheduling"):
        if ctx.platform != "ensemble":
            yield ctx.finding(
                ERROR,
                "ensemble.scheduling-on-non-ensemble",
                f"ensemble scheduling cannot be set for model '{ctx.name}' whose platform is not "
                'ensemble: set platform: "ensemble" (and no backend) or remove ensemble_scheduling',
                "ensemble_scheduling",
            )
    elif ctx.platform == "ensemble":
        yield ctx.finding(
            ERROR,
            "ensemble.scheduling-missing",
            f"ensemble scheduling must be set for ensemble {ctx.name} whose platform is "
            "ensemble: add ensemble_scheduling { step [ ... ] }",
            "platform",
        )


def check_transaction_policy(ctx: RuleContext) -> Iterator[Finding]:
    c = ctx.config
    if c.model_transaction_policy.decoupled and c.response_cache.enable:
        yield ctx.finding(
            ERROR,
            "model.decoupled-response-cache",
            f"Response Cache does not currently support model {ctx.name} with 'decoupled' "
            "transaction policy. Please disable the response cache: set response_cache { enable: false }",
            "response_cache",
        )


def check_model_metrics(ctx: RuleContext) -> Iterator[Finding]:
    """ValidateModelMetrics."""
    for i, mc in enumerate(ctx.config.model_metrics.metric_control):
        path = f"model_metrics.metric_control[{i}]"
        if not mc.HasField("metric_identifier"):
            yield ctx.finding(
                ERROR,
                "metrics.identifier-missing",
                "metric control must specify 'metric_identifier': add metric_identifier "
                '{ family: "nv_inference_first_response_histogram_ms" }',
                path,
            )
        elif not mc.metric_identifier.family:
            yield ctx.finding(
                ERROR,
                "metrics.family-empty",
                "metric identifier must specify non-empty 'family': name the metric family "
                "to customise",
                f"{path}.metric_identifier",
            )
        elif mc.metric_identifier.family not in CUSTOMIZABLE_METRIC_FAMILIES:
            yield ctx.finding(
                WARNING,
                "metrics.family-unknown",
                f"Metric family '{mc.metric_identifier.family}' in 'metric_identifier' is not a "
                "customizable metric in Triton core. Triton ignores it: use one of "
                f"{', '.join(sorted(CUSTOMIZABLE_METRIC_FAMILIES))}",
                f"{path}.metric_identifier.family",
            )
        if not mc.HasField("histogram_options"):
            yield ctx.finding(
                ERROR,
                "metrics.histogram-missing",
                "metric control must specify 'histogram_options': add histogram_options "
                "{ buckets: [ ... ] }",
                path,
            )
        elif not mc.histogram_options.buckets:
            yield ctx.finding(
                ERROR,
                "metrics.buckets-empty",
                "histogram options must specify non-empty 'buckets': list the bucket bounds",
                f"{path}.histogram_options",
            )


_KIND = pb.ModelInstanceGroup


def check_instance_groups(ctx: RuleContext) -> Iterator[Finding]:
    """ValidateInstanceGroup plus server facts and sanity warnings."""
    c = ctx.config
    if c.HasField("ensemble_scheduling") or ctx.is_ensemble:
        return  # reported by the ensemble rules
    server = ctx.gpu_facts
    for i, group in enumerate(c.instance_group):
        path = f"instance_group[{i}]"
        gname = group.name or f"{ctx.name}_{i}"
        label = f"instance group {gname} of model {ctx.name}"
        kind = _KIND.Kind.Name(group.kind)
        if group.kind in (_KIND.KIND_CPU, _KIND.KIND_MODEL) and group.gpus:
            yield ctx.finding(
                ERROR,
                "instance-group.gpus-on-non-gpu",
                f"{label} has kind {kind} but specifies one or more GPUs: remove 'gpus' or use "
                "kind: KIND_GPU",
                f"{path}.gpus",
            )
        if group.kind in (_KIND.KIND_GPU, _KIND.KIND_AUTO):
            for j, gid in enumerate(group.gpus):
                if gid < 0:
                    yield ctx.finding(
                        ERROR,
                        "instance-group.gpu-invalid",
                        f"{label} specifies invalid or unsupported gpu id {gid}. GPUs with at "
                        "least the minimum required CUDA compute compatibility are numbered "
                        "from 0: use a non-negative GPU id",
                        f"{path}.gpus[{j}]",
                    )
                elif server is not None and gid not in server.gpu_ids:
                    available = ", ".join(str(g) for g in sorted(server.gpu_ids)) or "none"
                    severity = ERROR if group.kind == _KIND.KIND_GPU else WARNING
                    fallback = "" if severity == ERROR else " (KIND_AUTO then falls back to CPU)"
                    yield ctx.finding(
                        severity,
                        "instance-group.gpu-unavailable",
                        f"{label} specifies invalid or unsupported gpu id {gid}. GPUs with at "
                        f"least the minimum required CUDA compute compatibility are: "
                        f"{available}{fallback}: use one of those ids",
                        f"{path}.gpus[{j}]",
                    )
            if group.kind == _KIND.KIND_GPU and server is not None and not server.gpu_ids:
                yield ctx.finding(
                    ERROR,
                    "instance-group.no-gpus",
                    f"{label} has kind KIND_GPU but no GPUs are available (the server reports "
                    "no usable GPU): use kind: KIND_CPU or run Triton with GPUs",
                    f"{path}.kind" if ctx.locator.has(f"{path}.kind") else path,
                )
        if ctx.locator.has(f"{path}.count") and group.count <= 0:
            yield ctx.finding(
                WARNING,
                "instance-group.count-not-positive",
                f"{label} has count {group.count}; Triton treats it as the default (1, or 2 "
                "for CPU instances of some backends): set count to 1 or more",
                f"{path}.count",
            )
        elif group.count > MAX_SENSIBLE_INSTANCES:
            yield ctx.finding(
                WARNING,
                "instance-group.count-huge",
                f"{label} asks for {group.count} instances (per device); each loads its own "
                f"copy of the model: use {MAX_SENSIBLE_INSTANCES} or fewer unless you are sure",
                f"{path}.count",
            )
        known_platform = bool(ctx.platform or ctx.backend)
        for j, profile in enumerate(group.profile):
            ppath = f"{path}.profile[{j}]"
            if known_platform and ctx.platform != TENSORRT_PLAN:
                yield ctx.finding(
                    ERROR,
                    "instance-group.profile-non-tensorrt",
                    f"{label} and platform {ctx.platform} specifies profile field which is only "
                    "supported for TensorRT models: remove 'profile'",
                    ppath,
                )
                break
            # Triton reads it with std::stoi: ASCII digits within an int ('²' is a digit to
            # str.isdigit, not to int()).
            if (
                not (profile.isascii() and profile.isdigit() and len(profile) <= 10)
                or int(profile) > 2**31 - 1
            ):
                yield ctx.finding(
                    ERROR,
                    "instance-group.profile-invalid",
                    f"{label} specifies invalid profile {profile}. The field should contain the "
                    "string representation of a non-negative integer: use a TensorRT optimization "
                    'profile index such as profile: "0"',
                    ppath,
                )


def check_version_policy(ctx: RuleContext) -> Iterator[Finding]:
    vp = ctx.config.version_policy
    which = vp.WhichOneof("policy_choice")
    if (
        which == "latest"
        and ctx.locator.has("version_policy.latest.num_versions")
        and vp.latest.num_versions == 0
    ):
        yield ctx.finding(
            ERROR,
            "version-policy.latest-zero",
            f"version_policy latest num_versions is 0 for {ctx.name}, so no version would be "
            "served: set num_versions to 1 or more",
            "version_policy.latest.num_versions",
        )
    if which == "specific":
        if not vp.specific.versions:
            yield ctx.finding(
                ERROR,
                "version-policy.specific-empty",
                f"version_policy specific lists no versions for {ctx.name}: list the version "
                "folders to serve, e.g. versions: [ 1 ]",
                "version_policy.specific",
            )
        for j, v in enumerate(vp.specific.versions):
            if v <= 0:
                yield ctx.finding(
                    ERROR,
                    "version-policy.specific-invalid",
                    f"version_policy specific version {v} for {ctx.name} is not a positive "
                    "integer, so no folder can match it: use the number of a version folder",
                    f"version_policy.specific.versions[{j}]",
                )


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


def check_code_loading(ctx: RuleContext) -> Iterator[Finding]:
    """Parameters that point Triton at code to run or a place to load it from."""
    for where, key, value in code_parameters(ctx.config):
        if where == "parameters":
            path, what = f'parameters["{key}"]', f"parameter {key}"
        else:
            path, what = "optimization.execution_accelerators", f"{where} parameter {key}"
        env = (
            " (the Python backend sources its bin/activate)" if key == "EXECUTION_ENV_PATH" else ""
        )
        yield ctx.finding(
            WARNING,
            "security.code-loading-parameter",
            f"{what} = {value!r} can make Triton load or run code from that place{env}: only "
            "Admins can set or change it; keep it inside this model's "
            "folder and make sure nobody else can write there",
            path,
        )


RULES: list[Rule] = [
    check_name,
    check_platform_backend,
    check_max_batch_size,
    check_io,
    check_batch_io,
    check_dynamic_batching,
    check_sequence_batching,
    check_scheduling_choice,
    check_transaction_policy,
    check_model_metrics,
    check_instance_groups,
    check_version_policy,
    check_usability,
    check_code_loading,
]
