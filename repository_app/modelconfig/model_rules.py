"""Triton's rules on the model as a whole (``model_config_utils.cc``): its name, platform and
backend, which scheduler it uses, its transaction policy, metrics and version policy, and the
parameters that make Triton load code.

Messages start with Triton's wording (so they match server logs) and end with the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from .backends import KNOWN_BACKENDS, KNOWN_PLATFORMS, TYPED_BACKENDS, backend_for_platform
from .code_loading import code_parameters
from .context import RuleContext
from .findings import ERROR, WARNING, Finding

CUSTOMIZABLE_METRIC_FAMILIES = frozenset({"nv_inference_first_response_histogram_ms"})


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
