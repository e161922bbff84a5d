"""GPU figures per window from Triton's metrics: parsing, merging, and a real sweep against
the real (CPU) Triton with a metrics endpoint that reports GPUs."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from profiler_app.engine import gpu
from profiler_app.engine.loadgen import run_sweep
from profiler_app.params import SweepParams
from triton_api.client import TritonClient
from triton_api.gpus import GpuSample, gpu_sample_from_text

TWO_GPUS = """\
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-a"} 0.25
nv_gpu_utilization{gpu_uuid="GPU-b"} 0.75
nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} 1000000000
nv_gpu_memory_used_bytes{gpu_uuid="GPU-b"} 500000000
nv_inference_count{model="add_batched",version="1"} 12
"""
CPU_ONLY = 'nv_inference_count{model="add_batched",version="1"} 12\nnv_cpu_utilization 0.5\n'


def test_gpu_figures_are_read_from_the_metrics_text_and_merged_per_level():
    sample = gpu_sample_from_text(TWO_GPUS)
    assert sample == GpuSample(utilization=0.5, memory_used_bytes=1.5e9)
    assert gpu_sample_from_text(CPU_ONLY) is None
    assert gpu_sample_from_text("garbage {{{\n") is None
    merged = gpu.merge([GpuSample(0.2, 1e9), None, GpuSample(0.4, 3e9)])
    assert merged is not None
    assert merged.utilization == pytest.approx(0.3) and merged.memory_used_bytes == 3e9
    assert gpu.merge([None, None]) is None


class FakeMetrics:
    def __init__(self, text: str) -> None:
        self.text = text
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.requests += 1
                body = outer.text.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.mark.integration
async def test_each_window_records_gpu_use_and_a_cpu_server_is_asked_once(triton):
    TritonClient(triton.grpc_url, triton.metrics_url).load("add_batched")
    params = SweepParams(
        model="add_batched", start=1, end=2, measurement_window_ms=300,
        stability_percentage=100, max_windows=3,
    )  # fmt: skip
    with_gpus = FakeMetrics(TWO_GPUS)
    try:
        result = await run_sweep(params, triton.grpc_url, metrics_url=with_gpus.url)
    finally:
        with_gpus.close()
    windows = [w for level in result.levels for w in level.windows]
    assert len(windows) >= 6
    assert all(w.gpu == GpuSample(0.5, 1.5e9) for w in windows)
    assert all(level.gpu == GpuSample(0.5, 1.5e9) for level in result.levels)
    assert with_gpus.requests == len(windows)

    cpu_only = FakeMetrics(CPU_ONLY)
    try:
        result = await run_sweep(params, triton.grpc_url, metrics_url=cpu_only.url)
    finally:
        cpu_only.close()
    assert all(w.gpu is None for level in result.levels for w in level.windows)
    assert cpu_only.requests == 1  # no GPUs: the sampler stopped asking
