"""GPU utilisation and memory per measurement window, from Triton's metrics endpoint.

What the metrics say is read by `triton_api.gpus`. A CPU-only server exports no
GPU series, and the sampler then stops asking (scraping costs the server a little CPU).
"""

from __future__ import annotations

from triton_api import aio
from triton_api.client import TritonError
from triton_api.gpus import GpuSample, gpu_sample


class GpuSampler:
    def __init__(self, metrics_url: str | None, timeout_s: float = 1.0) -> None:
        self.url = metrics_url
        self.timeout_s = timeout_s

    async def sample(self) -> GpuSample | None:
        if not self.url:
            return None
        try:
            samples = await aio.metrics(self.url, self.timeout_s)
        except (TritonError, ValueError):
            return None  # unreachable this time: try again next window
        found = gpu_sample(samples)
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
