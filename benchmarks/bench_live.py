"""Live sweep charts: from a window closing in the worker to the message in each viewer.

    .venv/bin/python benchmarks/bench_live.py [--viewers 1,10,50] [--window-ms 250]
        [--model add_batched] [--streaming]

Starts its own tritonserver (demo repository), Daphne and a Celery worker, with a
throwaway SQLite database and the Redis at REDIS_URL (default redis://127.0.0.1:6379/8, a
database number it flushes). For each viewer count, a real sweep of add_batched
(concurrency 1:8:1, up to 4 windows per level; `--model stream_tok --streaming`: the
decoupled demo model over gRPC streams, whose windows carry more: first-response and
inter-response figures and a histogram) runs in the worker while that many
websocket clients watch /ws/sweeps/<id>/. Each "sweep.window" event carries the wall-clock
time its window closed (`closed_at`, taken by the engine when it cuts the window); a viewer
records the time from then to receiving it. That span holds the engine's own window
bookkeeping (collecting the workers' records, diffing Triton's statistics), the database
upsert, Redis and Daphne. Everything runs on this machine, so the clocks agree.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/8")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import ROOT, setup_django  # noqa: E402
from bench_load import pct  # noqa: E402

TARGET_MS = 100.0


async def watch(base: str, cookie: str, sweep_id: int, viewers: int, start) -> list[list[float]]:  # type: ignore[no-untyped-def]
    """Connect the viewers, start the sweep, collect each viewer's delays until it ends."""
    import aiohttp

    delays: list[list[float]] = [[] for _ in range(viewers)]
    host = base.split("//")[1]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=60, sock_read=None)
    async with aiohttp.ClientSession(
        cookies={"sessionid": cookie}, timeout=timeout, connector=connector
    ) as session:
        sockets = []
        for first in range(0, viewers, 25):
            sockets += await asyncio.gather(
                *(
                    session.ws_connect(f"ws://{host}/ws/sweeps/{sweep_id}/", headers={"Origin": base})
                    for _ in range(first, min(viewers, first + 25))
                )
            )  # fmt: skip
        for ws in sockets:  # every viewer has its snapshot before the sweep starts
            snapshot = json.loads((await ws.receive()).data)
            assert snapshot.get("snapshot"), snapshot

        async def listen(i: int, ws) -> None:  # type: ignore[no-untyped-def]
            async for msg in ws:
                received = time.time()
                data = json.loads(msg.data)
                if data.get("type") == "sweep.window" and data.get("closed_at"):
                    delays[i].append((received - data["closed_at"]) * 1000)
                elif data.get("type") == "sweep.state" and data.get("state") in (
                    "succeeded", "failed", "cancelled", "interrupted",
                ):  # fmt: skip
                    return

        listeners = [asyncio.create_task(listen(i, ws)) for i, ws in enumerate(sockets)]
        await asyncio.to_thread(start)
        await asyncio.wait(listeners, timeout=300)
        for ws in sockets:
            await ws.close()
    return delays


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--viewers", default="1,10,50")
    parser.add_argument("--window-ms", type=int, default=250)
    parser.add_argument("--model", default="add_batched")
    parser.add_argument("--streaming", action="store_true", help="a decoupled model")
    args = parser.parse_args()
    counts = [int(v) for v in args.viewers.split(",")]
    work = setup_django()
    import redis
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from devstack import services as svc
    from profiler_app import jobs, sweeps
    from profiler_app.models import Sweep
    from profiler_app.params import SweepParams
    from registry import servers
    from triton_api.client import TritonClient

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    repo = work / "repo"
    shutil.copytree(ROOT / "examples" / "model_repository", repo)
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    triton = svc.start_tritonserver(repo, work, ports, work / "triton.log", load=(args.model,))
    settings.TRITON_URL = grpc_url = f"127.0.0.1:{ports.grpc}"
    settings.TRITON_HTTP_URL = f"127.0.0.1:{ports.http}"
    settings.TRITON_METRICS_URL = f"http://127.0.0.1:{ports.metrics}/metrics"
    settings.MODEL_REPOSITORY = repo
    user = get_user_model().objects.create_superuser("live", "", "live-password-1")
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    env = {
        **os.environ,
        "VAR_DIR": str(work),
        "TRITON_URL": grpc_url,
        "TRITON_HTTP_URL": settings.TRITON_HTTP_URL,
        "TRITON_METRICS_URL": settings.TRITON_METRICS_URL,
        "MODEL_REPOSITORY": str(repo),
    }
    port = svc.free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "dashboard.serve", "-b", "127.0.0.1", "-p", str(port),
         "dashboard.asgi:application"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    worker_log = work / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "--concurrency=1",
         "--pool=prefork", "--hostname=live-bench@localhost", "--without-gossip",
         "--without-mingle", "--loglevel=INFO"],
        cwd=ROOT, env=env, stdout=worker_log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    rows = []
    try:
        svc.wait_until(lambda: svc.port_is_open("127.0.0.1", port), 30, "daphne", web)
        svc.wait_until(lambda: b"ready" in worker_log.read_bytes(), 60, "celery worker", worker)
        TritonClient(grpc_url, settings.TRITON_METRICS_URL).repository_index()
        for viewers in counts:
            params = SweepParams(
                model=args.model, start=1, end=8, step=1, streaming=args.streaming,
                measurement_window_ms=args.window_ms, stability_percentage=0.01, max_windows=4,
            )  # fmt: skip
            sweep = sweeps.create_sweep(servers.default(), params, user=user, enqueue=False)
            start = functools.partial(jobs.dispatch, sweep.pk)
            delays = asyncio.run(watch(base, session.session_key, sweep.pk, viewers, start))
            sweep.refresh_from_db()
            windows = sweep.points.exclude(window=-1).count()
            flat = [d for per in delays for d in per]
            complete = sum(1 for per in delays if len(per) == windows)
            within = sum(1 for d in flat if d <= TARGET_MS)
            rows.append(
                f"| {viewers} | {sweep.state}, {windows} windows | {complete}/{viewers} "
                f"| {pct(flat, 50):.1f} | {pct(flat, 95):.1f} | {max(flat):.1f} "
                f"| {100 * within / len(flat):.1f} % |"
            )
            assert sweep.state == Sweep.State.SUCCEEDED, (sweep.state, sweep.error)
    finally:
        svc.stop(worker)
        svc.stop(web)
        svc.stop(triton)
        shutil.rmtree(work, ignore_errors=True)
    print("### Live sweep events: window closed → message received by each viewer\n")
    flags = f" --model {args.model}" if args.model != "add_batched" else ""
    flags += " --streaming" if args.streaming else ""
    print(f"`python benchmarks/bench_live.py --viewers {args.viewers} --window-ms "
          f"{args.window_ms}{flags}` · {os.cpu_count()} CPUs; {args.model}"
          f"{' over gRPC streams' if args.streaming else ''}, concurrency 1:8:1, "
          f"up to 4 windows per level; target: every window within {TARGET_MS:.0f} ms\n")  # fmt: skip
    print("| viewers | sweep | viewers that got every window | p50 ms | p95 ms | max ms "
          f"| within {TARGET_MS:.0f} ms |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
