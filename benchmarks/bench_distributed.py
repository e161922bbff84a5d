"""Load from two hosts against one: the same total concurrency, alternating rounds.

    .venv/bin/python benchmarks/bench_distributed.py [--rounds 3] [--concurrency 16]
        [--window-ms 1000]

Starts its own tritonserver (demo repository, add_batched loaded) and two real Celery
workers on one queue, with a throwaway SQLite database and the Redis at REDIS_URL (default
redis://127.0.0.1:6379/10, a database number it flushes; the broker too). Each round
measures one level of add_batched at `--concurrency` twice, as a sweep job: with one load
host (the worker that runs the job) and with two (that worker and a load agent, the other
worker, each with half the concurrency), in alternating order (AB, BA, ...) so that a
drift of the machine lands on both. Every sweep settles by perf_analyzer's rule (10%,
up to 10 windows); its level row (the last 3 windows pooled) gives throughput and p95.

Per round it prints the two-host figures as ratios of the one-host ones; then what the
merge costs per two-host window (the window's `load_*_ms`): the local workers' records,
the agent's (its swap sent until its records are decoded, meanwhile), how much longer the
agent's took than the local ones (what closing the window waits for the other host), and
the pooling of every host's records into the window (`merging.build_window`), p50 and p95.

Both hosts are on this machine, so their clocks agree and the two-host rounds show only
what splitting and merging cost; at 16 each host plans 2 processes of 4 threads for its 8,
the same processes and threads as one host's 4 of 4.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/10")
os.environ["CELERY_BROKER_URL"] = os.environ["REDIS_URL"]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import ROOT, setup_django  # noqa: E402
from bench_load import pct  # noqa: E402

QUEUE = "celery"
SWEEP_BOUND_S = 600  # a bound, not a target


def start_worker(env: dict[str, str], name: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "--concurrency=1",
         "--pool=prefork", f"--hostname={name}", "--without-gossip", "--without-mingle",
         "--loglevel=INFO", "-Q", QUEUE],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def run_sweep(params, user):  # type: ignore[no-untyped-def]
    """One sweep as a job through the workers; its level row and its windows."""
    from profiler_app import jobs, sweeps
    from profiler_app.models import Sweep, SweepPoint
    from registry import servers

    sweep = sweeps.create_sweep(servers.default(), params, user=user, enqueue=False)
    jobs.dispatch(sweep.pk)
    deadline = time.monotonic() + SWEEP_BOUND_S
    while True:
        sweep.refresh_from_db()
        if sweep.state not in (Sweep.State.QUEUED, Sweep.State.RUNNING):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"sweep #{sweep.pk} still {sweep.state} after {SWEEP_BOUND_S} s")
        time.sleep(0.5)
    if sweep.state != Sweep.State.SUCCEEDED:
        raise SystemExit(f"sweep #{sweep.pk} {sweep.state}: {sweep.error}")
    level = SweepPoint.objects.get(sweep=sweep, window=-1)
    windows = list(SweepPoint.objects.filter(sweep=sweep, window__gte=0))
    return level, windows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--window-ms", type=int, default=1000)
    args = parser.parse_args()
    work = setup_django()
    import redis
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from devstack import services as svc
    from profiler_app.params import SweepParams
    from triton_api.client import TritonClient

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    repo = work / "repo"
    shutil.copytree(ROOT / "examples" / "model_repository", repo)
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    triton = svc.start_tritonserver(repo, work, ports, work / "triton.log", load=("add_batched",))
    settings.TRITON_URL = grpc_url = f"127.0.0.1:{ports.grpc}"
    settings.TRITON_HTTP_URL = f"127.0.0.1:{ports.http}"
    settings.TRITON_METRICS_URL = f"http://127.0.0.1:{ports.metrics}/metrics"
    settings.MODEL_REPOSITORY = repo
    user = get_user_model().objects.create_superuser("dist", "", "dist-password-1")
    env = {
        **os.environ,
        "VAR_DIR": str(work),
        "TRITON_URL": grpc_url,
        "TRITON_HTTP_URL": settings.TRITON_HTTP_URL,
        "TRITON_METRICS_URL": settings.TRITON_METRICS_URL,
        "MODEL_REPOSITORY": str(repo),
        "HISTORY_ENABLED": "false",
    }
    logs = [work / f"worker{i}.log" for i in (1, 2)]
    workers = [
        start_worker(env, f"dist{i}@localhost", log) for i, log in zip((1, 2), logs, strict=True)
    ]
    base = SweepParams(
        model="add_batched", start=args.concurrency, end=args.concurrency,
        measurement_window_ms=args.window_ms, stability_percentage=10, max_windows=10,
    )  # fmt: skip
    rows, ratios, p95s, local, collect, beyond, merge = [], [], [], [], [], [], []
    try:
        for proc, log in zip(workers, logs, strict=True):
            svc.wait_until(lambda log=log: b"ready" in log.read_bytes(), 120, "celery worker", proc)
        TritonClient(grpc_url, settings.TRITON_METRICS_URL).repository_index()
        run_sweep(replace(base, max_windows=3, stability_percentage=100), user)  # warm-up
        for r in range(1, args.rounds + 1):
            order = (1, 2) if r % 2 else (2, 1)
            got = {hosts: run_sweep(replace(base, load_hosts=hosts), user) for hosts in order}
            (one, _), (two, windows) = got[1], got[2]
            for w in windows:
                local.append(w.extra["load_local_ms"])
                collect.append(w.extra["load_collect_ms"])
                beyond.append(max(0.0, w.extra["load_collect_ms"] - w.extra["load_local_ms"]))
                merge.append(w.extra["load_merge_ms"])
            ratios.append(two.throughput / one.throughput)
            p95s.append(two.p95_us / one.p95_us)
            shares = " / ".join(str(h["requests"]) for h in two.extra["load_hosts"])
            rows.append(
                f"| {r} | {'AB' if order == (1, 2) else 'BA'} | {one.throughput:.0f} "
                f"| {two.throughput:.0f} | {two.throughput / one.throughput:.3f} "
                f"| {one.p95_us / 1000:.2f} | {two.p95_us / 1000:.2f} "
                f"| {two.p95_us / one.p95_us:.3f} | {shares} "
                f"| {'yes' if one.stable else 'no'} / {'yes' if two.stable else 'no'} |"
            )
    finally:
        for proc in workers:
            svc.stop(proc)
        svc.stop(triton)
        redis.Redis.from_url(settings.REDIS_URL).flushdb()
        shutil.rmtree(work, ignore_errors=True)
    print("### Load from two hosts vs one, the same total concurrency\n")
    print(
        f"`python benchmarks/bench_distributed.py --rounds {args.rounds} --concurrency "
        f"{args.concurrency} --window-ms {args.window_ms}` · {os.cpu_count()} CPUs; "
        f"add_batched at concurrency {args.concurrency}: one host (A) vs two hosts of "
        f"{args.concurrency // 2} each (B), both workers on this machine; level rows (last 3 "
        "windows pooled)\n"
    )
    print(
        "| round | order | A infer/s | B infer/s | B/A | A p95 ms | B p95 ms | B/A "
        "| B's requests per host | stable A / B |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    print(
        f"\nthroughput B/A: median {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f}–{max(ratios):.3f}); p95 B/A: median "
        f"{statistics.median(p95s):.3f} (range {min(p95s):.3f}–{max(p95s):.3f})\n"
    )
    print(f"Merge cost per two-host window ({len(merge)} windows), from the window's cut:\n")
    print("| | p50 ms | p95 ms | max ms |")
    print("|---|---|---|---|")
    for label, values in (
        ("the local workers' records (as with one host)", local),
        ("the agent's records (swap sent → decoded), meanwhile", collect),
        ("the agent's beyond the local ones: what the window waits more", beyond),
        ("pooling every host's records (`_window`)", merge),
    ):
        print(f"| {label} | {pct(values, 50):.2f} | {pct(values, 95):.2f} | {max(values):.2f} |")
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
