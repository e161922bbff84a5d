"""Triton's GPU metrics: the one module that knows the `nv_gpu_*` families.

Triton exports them through DCGM, one series per GPU it can use, labelled `gpu_uuid`; a
server without a usable GPU (or started with --allow-gpu-metrics=false) exports none, and
every caller reads their absence as "no GPU". Utilisation is 0..1 over Triton's last
metrics interval (2 s by default), power is in watts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .prometheus import MetricSample, parse_prometheus

PREFIX = "nv_gpu_"
UTILIZATION = "nv_gpu_utilization"
MEMORY_USED = "nv_gpu_memory_used_bytes"
MEMORY_TOTAL = "nv_gpu_memory_total_bytes"
POWER = "nv_gpu_power_usage"
# The per-GPU gauges the live charts and the stored history keep, by their field names.
GPU_GAUGES = {
    UTILIZATION: "utilization",
    MEMORY_USED: "memory_used_bytes",
    MEMORY_TOTAL: "memory_total_bytes",
    POWER: "power_usage",  # watts
}
# What a report says when a server exports none of them.
ABSENT = "no nv_gpu_* metrics"


def has_gpus(samples: Sequence[MetricSample]) -> bool:
    return any(s.name.startswith(PREFIX) for s in samples)


def uuids(samples: Sequence[MetricSample]) -> list[str]:
    """The GPUs the metrics name (their `gpu_uuid` labels), in order of appearance."""
    seen: dict[str, None] = {}
    for s in samples:
        if s.name.startswith(PREFIX) and s.labels.get("gpu_uuid"):
            seen.setdefault(s.labels["gpu_uuid"], None)
    return list(seen)


def per_gpu(samples: Sequence[MetricSample]) -> dict[str, dict[str, float]]:
    """GPU_GAUGES per GPU, keyed by gpu_uuid ("?" for a series without one)."""
    gpus: dict[str, dict[str, float]] = {}
    for s in samples:
        if s.name in GPU_GAUGES:
            gpus.setdefault(s.labels.get("gpu_uuid", "?"), {})[GPU_GAUGES[s.name]] = s.value
    return gpus


def memory_used_bytes(samples: Sequence[MetricSample]) -> float | None:
    """Memory used, summed over the GPUs; None where the metrics report none."""
    used = [s.value for s in samples if s.name == MEMORY_USED]
    return sum(used) if used else None


def memory_total_bytes(samples: Sequence[MetricSample], uuid: str) -> float | None:
    total = [
        s.value for s in samples if s.name == MEMORY_TOTAL and s.labels.get("gpu_uuid") == uuid
    ]
    return total[0] if total else None


@dataclass(frozen=True)
class GpuSample:
    """The load engine's GPU figures for one measurement window (or one level)."""

    utilization: float | None  # mean over the GPUs, 0..1
    memory_used_bytes: float | None  # sum over the GPUs


def gpu_sample(samples: Sequence[MetricSample]) -> GpuSample | None:
    """Mean utilisation and summed memory; None when the samples have neither."""
    util = [s.value for s in samples if s.name == UTILIZATION]
    memory = [s.value for s in samples if s.name == MEMORY_USED]
    if not util and not memory:
        return None
    return GpuSample(
        utilization=sum(util) / len(util) if util else None,
        memory_used_bytes=sum(memory) if memory else None,
    )


def gpu_sample_from_text(text: str) -> GpuSample | None:
    """`gpu_sample` of a metrics page."""
    return gpu_sample(parse_prometheus(text))
