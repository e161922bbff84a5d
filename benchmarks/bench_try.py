"""Try a model's overhead, and tracing's cost, side by side on the real tritonserver.

    .venv/bin/python benchmarks/bench_try.py [--requests 200] [--rounds 3] [--seconds 5]

1. The Try round trip (POST /api/v1/models/add_sub/try through Django in this process: the
   model's metadata and config, its statistics before and after, the request on a channel
   with the Try limits, the outputs kept for the downloads) against a bare `tritonclient`
   gRPC call of the same request, alternating rounds; p50 and p95 of each, and the
   overhead (target: p50 overhead <= 10 ms).
2. Tracing's cost: closed-loop throughput of one client on add_sub with the model's
   tracing off, then on (TIMESTAMPS, every request, one file a trace, as the Trace page
   sets it), alternating rounds of `--seconds` each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from statistics import median, quantiles

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT))
from devstack import services as svc  # noqa: E402


def _p(values: list[float], q: int) -> float:
    return quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()

    import tempfile

    work = Path(tempfile.mkdtemp(prefix="bench-try-"))
    repository = work / "model_repository"
    shutil.copytree(ROOT / "examples" / "model_repository", repository)
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    traces = work / "traces"
    process = svc.start_tritonserver(
        repository,
        work,
        ports,
        work / "triton.log",
        load=("add_sub",),
        trace_file=traces / "trace.json",
    )
    os.environ.update({
        "TRITON_URL": f"127.0.0.1:{ports.grpc}", "TRITON_HTTP_URL": f"127.0.0.1:{ports.http}",
        "TRITON_METRICS_URL": f"http://127.0.0.1:{ports.metrics}/metrics",
        "MODEL_REPOSITORY": str(repository), "TRITON_TRACE_ROOTS": str(traces),
    })  # fmt: skip
    try:
        from _django import logged_in_client, setup_django

        setup_django()
        import numpy as np
        import tritonclient.grpc as grpcclient

        api = logged_in_client()
        bare = grpcclient.InferenceServerClient(f"127.0.0.1:{ports.grpc}")
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        body = json.dumps({"batch": 1, "inputs": {
            "INPUT0": {"mode": "values", "values": " ".join(map(str, a[0].tolist()))},
            "INPUT1": {"mode": "zeros"},
        }})  # fmt: skip

        def bare_call() -> None:
            x = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
            x.set_data_from_numpy(a)
            y = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
            y.set_data_from_numpy(np.zeros((1, 16), np.float32))
            bare.infer("add_sub", [x, y])

        def try_call() -> None:
            answer = api.post("/api/v1/models/add_sub/try", body, content_type="application/json")
            assert answer.status_code == 200, answer.content

        def timed(call, n: int) -> list[float]:  # type: ignore[no-untyped-def]
            out = []
            for _ in range(n):
                began = time.perf_counter()
                call()
                out.append((time.perf_counter() - began) * 1000)
            return out

        for call in (bare_call, try_call):
            timed(call, 20)  # warm-up
        bare_ms: list[float] = []
        try_ms: list[float] = []
        rows = []
        for round_no in range(1, args.rounds + 1):
            b = timed(bare_call, args.requests)
            t = timed(try_call, args.requests)
            bare_ms += b
            try_ms += t
            rows.append((round_no, median(b), median(t)))
        print("### Try round trip against a bare tritonclient call (add_sub, 16 FP32 × 2)")
        print()
        print("| round | bare p50 ms | Try p50 ms | overhead p50 ms |")
        print("|---|---|---|---|")
        for round_no, b, t in rows:
            print(f"| {round_no} | {b:.2f} | {t:.2f} | {t - b:.2f} |")
        overhead = median(try_ms) - median(bare_ms)
        print(f"| all ({len(bare_ms)} each) | {median(bare_ms):.2f} (p95 {_p(bare_ms, 95):.2f}) "
              f"| {median(try_ms):.2f} (p95 {_p(try_ms, 95):.2f}) | **{overhead:.2f}** |")  # fmt: skip
        print()
        print(f"Target: p50 overhead <= 10 ms: {'met' if overhead <= 10 else 'NOT met'}.")
        print()

        def throughput(seconds: float) -> float:
            count, end = 0, time.perf_counter() + seconds
            while time.perf_counter() < end:
                bare_call()
                count += 1
            return count / seconds

        control = grpcclient.InferenceServerClient(f"127.0.0.1:{ports.grpc}")
        on = {
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": "1",
            "trace_count": "-1",
            "log_frequency": "1",
        }
        off_rates, on_rates = [], []
        print("### Tracing's cost on throughput (one closed-loop client, add_sub)")
        print()
        print("| round | tracing off infer/s | tracing on infer/s | on / off |")
        print("|---|---|---|---|")
        for round_no in range(1, args.rounds + 1):
            control.update_trace_settings(model_name="add_sub", settings={"trace_level": ["OFF"]})
            off = throughput(args.seconds)
            control.update_trace_settings(model_name="add_sub", settings=on)
            with_trace = throughput(args.seconds)
            off_rates.append(off)
            on_rates.append(with_trace)
            print(f"| {round_no} | {off:.0f} | {with_trace:.0f} | {with_trace / off:.2f} |")
        control.update_trace_settings(model_name="add_sub", settings={"trace_level": ["OFF"]})
        files = len(list(traces.glob("trace.json.*")))
        print(f"| median | {median(off_rates):.0f} | {median(on_rates):.0f} | "
              f"**{median(on_rates) / median(off_rates):.2f}** |")  # fmt: skip
        print()
        print(f"({files} trace files written while tracing was on.)")
    finally:
        svc.stop(process)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
