"""Repository page with 500 models: server time of /models/, its parts, the model page
and the config editor.

    .venv/bin/python benchmarks/bench_repository.py [--models 500] [--runs 15]

Starts its own tritonserver (explicit mode, nothing loaded) over a repository of N
copies of the demo `add_batched` folder, then times, in this process, the scan of the
folders, Triton's repository index, and whole requests through Django's test client.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import ROOT, logged_in_client, setup_django  # noqa: E402


def timed(fn, runs: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), max(samples)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, default=500)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    work = setup_django()
    from django.conf import settings

    from devstack import services as svc
    from repository_app import repository
    from triton_api.client import TritonClient

    repo = work / "repo"
    source = ROOT / "examples" / "model_repository" / "add_batched"
    for i in range(args.models):
        target = repo / f"model_{i:03d}"
        shutil.copytree(source, target)
        config = target / "config.pbtxt"
        config.write_text(config.read_text().replace('"add_batched"', f'"model_{i:03d}"'))
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    proc = svc.start_tritonserver(repo, work, ports, work / "triton.log")
    try:
        settings.MODEL_REPOSITORY = repo
        settings.TRITON_URL = f"127.0.0.1:{ports.grpc}"
        settings.TRITON_METRICS_URL = f"http://127.0.0.1:{ports.metrics}/metrics"
        client = logged_in_client()
        triton = TritonClient(settings.TRITON_URL, settings.TRITON_METRICS_URL)

        start = time.perf_counter()
        response = client.get("/models/")
        cold = (time.perf_counter() - start) * 1000
        assert response.status_code == 200 and response.content.count(b"data-model=") >= args.models
        rows = [
            (
                "scan of the folders (configs cached)",
                timed(lambda: repository.scan(repo), args.runs),
            ),
            ("Triton repository index (gRPC)", timed(triton.repository_index, args.runs)),
            ("GET /models/ (whole page)", timed(lambda: client.get("/models/"), args.runs)),
            (
                "GET /models/?q=model_042 (filtered)",
                timed(lambda: client.get("/models/", {"q": "model_042"}), args.runs),
            ),
            (
                "GET /models/?sort=state&dir=desc",
                timed(lambda: client.get("/models/", {"sort": "state", "dir": "desc"}), args.runs),
            ),
            (
                "GET /models/model_042/ (model page)",
                timed(lambda: client.get("/models/model_042/"), args.runs),
            ),
            (
                "GET /models/model_042/config/ (config editor, form mode)",
                timed(lambda: client.get("/models/model_042/config/"), args.runs),
            ),
            (
                "GET /models/model_042/config/?mode=text (config editor, text mode)",
                timed(lambda: client.get("/models/model_042/config/", {"mode": "text"}), args.runs),
            ),
        ]
        print(f"### Repository page with {args.models} models\n")
        print(f"First GET /models/ (parses every config.pbtxt): {cold:.0f} ms\n")
        print(f"| what ({args.runs} runs) | median ms | max ms |")
        print("|---|---|---|")
        for label, (median, worst) in rows:
            print(f"| {label} | {median:.1f} | {worst:.1f} |")
    finally:
        svc.stop(proc)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
