"""Triton's instance-group rules (``ValidateInstanceGroup``), judged against the server's
GPUs when they are known, plus counts that load more copies of the model than anyone means.

Messages start with Triton's wording (so they match server logs) and end with the fix.
"""

from __future__ import annotations

from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2 as pb

from .backends import TENSORRT_PLAN
from .context import RuleContext
from .findings import ERROR, WARNING, Finding

MAX_SENSIBLE_INSTANCES = 64


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
