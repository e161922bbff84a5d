"""GPU utilisation and memory per measurement window, from Triton's metrics endpoint.

Triton exports `nv_gpu_utilization` (0..1 over its last metrics interval, 2 s by default)
and `nv_gpu_memory_used_bytes` per GPU when it sees GPUs; a CPU-only server exports
neither, and the sampler then stops asking (scraping costs the server a little CPU).
"""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import dataclass

from repository_app.triton.prometheus import parse_prometheus


@dataclass(frozen=True)
class GpuSample:
    utilization: float | None  # mean over the GPUs, 0..1
    memory_used_bytes: float | None  # sum over the GPUs


def gpu_sample_from_text(text: str) -> GpuSample | None:
    """The GPU figures in a metrics page; None when it has no `nv_gpu_*` samples."""
    samples = parse_prometheus(text)
    util = [s.value for s in samples if s.name == "nv_gpu_utilization"]
    memory = [s.value for s in samples if s.name == "nv_gpu_memory_used_bytes"]
    if not util and not memory:
        return None
    return GpuSample(
        utilization=sum(util) / len(util) if util else None,
        memory_used_bytes=sum(memory) if memory else None,
    )


class GpuSampler:
    def __init__(self, metrics_url: str | None, timeout_s: float = 1.0) -> None:
        self.url = metrics_url
        self.timeout_s = timeout_s

    def _fetch(self) -> str | None:
        assert self.url
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
                return response.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return None

    async def sample(self) -> GpuSample | None:
        if not self.url:
            return None
        text = await asyncio.to_thread(self._fetch)
        if text is None:
            return None  # unreachable this time: try again next window
        found = gpu_sample_from_text(text)
        if found is None:
            self.url = None  # a server without GPUs: stop scraping
        return found


def merge(samples: list[GpuSample | None]) -> GpuSample | None:
    """A level's figures: mean utilisation and peak memory over its windows."""
    present = [s for s in samples if s is not None]
    if not present:
        return None
    util = [s.utilization for s in present if s.utilization is not None]
    memory = [s.memory_used_bytes for s in present if s.memory_used_bytes is not None]
    return GpuSample(
        utilization=sum(util) / len(util) if util else None,
        memory_used_bytes=max(memory) if memory else None,
    )
