"""GPU check: the built-in engine and perf_analyzer side by side on a GPU model.

    python benchmarks/bench_gpu.py --url HOST:GRPC_PORT --metrics-url http://HOST:PORT/metrics
        [--levels 1,8,32,64] [--window-ms 2000] [--kind GPU] [--configs plain,batched]

Run on the lent GPU machine by scripts/gpu_check.sh, which starts tritonserver on
benchmarks/gpu/model_repository; this script needs no Django (the device machine has only
its own Python with torch and numpy, plus the wheels the bundle carries). For each config
it loads `mlp` with a config override, then measures every level with both engines,
alternating which goes first (bench_engine.measure), and prints one markdown table per
config, with GPU utilisation from Triton's metrics during the engine's run.

Configs: "plain" (no dynamic batching, one instance), "batched" (dynamic batching with a
200 µs queue delay, one instance), "batched3" (the same with 3 instances).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import bench_engine  # noqa: E402

MODEL = "mlp"
CONFIG = ROOT / "benchmarks" / "gpu" / "model_repository" / MODEL / "config.pbtxt"
CONFIGS: dict[str, dict[str, Any]] = {
    "plain": {"count": 1, "dynamic_batching": None},
    "batched": {"count": 1, "dynamic_batching": {"max_queue_delay_microseconds": 200}},
    "batched3": {"count": 3, "dynamic_batching": {"max_queue_delay_microseconds": 200}},
}


def override(name: str, kind: str) -> dict[str, Any]:
    """config.pbtxt with the config's instance group and batching, in Triton's JSON form."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = text_format.Parse(CONFIG.read_text(), pb.ModelConfig())
    wanted = CONFIGS[name]
    del config.instance_group[:]
    config.instance_group.add(count=wanted["count"], kind=pb.ModelInstanceGroup.Kind.Value(f"KIND_{kind}"))  # fmt: skip
    config.ClearField("dynamic_batching")
    if wanted["dynamic_batching"]:
        config.dynamic_batching.max_queue_delay_microseconds = wanted["dynamic_batching"][
            "max_queue_delay_microseconds"
        ]
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def load(url: str, name: str, kind: str) -> float:
    """Load `mlp` as config `name`; returns the seconds the load took."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    started = time.monotonic()
    client.load_model(MODEL, config=json.dumps(override(name, kind)))
    if not client.is_model_ready(MODEL):
        raise SystemExit(f"{MODEL} ({name}) did not become ready")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="Triton gRPC host:port")
    parser.add_argument("--metrics-url", help="Triton's /metrics (GPU utilisation)")
    parser.add_argument("--kind", default="GPU", choices=["GPU", "CPU"])
    parser.add_argument("--configs", default="plain,batched")
    # ../shared/gpu/README.md's settings: 2 s windows, stability 20%, at most 5 windows.
    bench_engine.add_measurement_args(
        parser, levels="1,8,32,64", window_ms=2000, stability=20.0, max_windows=5, rounds=1
    )
    args = parser.parse_args()
    args.model = MODEL
    bench_engine.locate_perf_analyzer()
    print(
        f"`{' '.join(sys.argv)}` · {platform.node()}, Python {platform.python_version()}; "
        f"{args.window_ms} ms windows, stability {args.stability:g}%, at most "
        f"{args.max_windows} windows, {args.rounds} round(s) per engine per level\n"
    )
    for name in args.configs.split(","):
        seconds = load(args.url, name, args.kind)
        rows = asyncio.run(bench_engine.measure(args.url, args, args.levels))
        wanted = CONFIGS[name]
        batching = (
            f"dynamic batching {wanted['dynamic_batching']['max_queue_delay_microseconds']} µs"
            if wanted["dynamic_batching"]
            else "no dynamic batching"
        )
        print(
            f"### {MODEL}, {batching}, {wanted['count']} {args.kind} instance(s)"
            f" (loaded in {seconds:.1f} s)\n"
        )
        print(bench_engine.table(rows) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
