"""Load figures: websocket fan-out, concurrent browsing, and what the dashboard's own
polling costs Triton.

    .venv/bin/python benchmarks/bench_load.py [--viewers 200] [--users 50] [--browse-s 60] [--rounds 6]
        [--only fanout|browse|think|poller] [--workers 1,2] [--think-s 1] [--lockstep]

Starts its own tritonserver and the web server (`python -m dashboard.serve --workers N`,
once per value of --workers, in turn, against the same Triton: side by side in one run)
with a throwaway SQLite database; uses the Redis at REDIS_URL (default
redis://127.0.0.1:6379/7, a database number it may flush). Each web server's RSS (all its
processes) is printed after a warm-up and at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/7")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import ROOT, setup_django  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return (
        ordered[min(len(ordered) - 1, int(p / 100 * (len(ordered) - 1) + 0.5))] if ordered else 0.0
    )


def tree_rss_mb(pid: int) -> float:
    """The RSS of a process and its children (the web front and its Daphnes)."""
    pids = {pid}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:  # a thread may end meanwhile
            pids |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            continue
    return sum(rss_mb(p)[0] for p in pids if Path(f"/proc/{p}").exists())


def rss_mb(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def websocket_fanout(base: str, cookie: str, viewers: int, events_n: int, pid: int) -> str:
    import aiohttp
    from asgiref.sync import sync_to_async

    from repository_app import events

    received: list[list[float]] = [[] for _ in range(viewers)]
    host = base.split("//")[1]
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=60, sock_read=None)
    # limit=0: aiohttp otherwise holds at most 100 connections per session, and every
    # websocket keeps one.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        cookies={"sessionid": cookie}, timeout=timeout, connector=connector
    ) as session:
        sockets = []
        for start in range(0, viewers, 20):  # connect in batches, as a team opening tabs
            sockets += await asyncio.gather(
                *(
                    session.ws_connect(f"ws://{host}/ws/activity/", headers={"Origin": base})
                    for _ in range(start, min(viewers, start + 20))
                )
            )

        async def listen(i: int, ws) -> None:  # type: ignore[no-untyped-def]
            async for msg in ws:
                data = json.loads(msg.data)
                if data.get("type") == "activity" and "sent" in data:
                    received[i].append((time.time() - data["sent"]) * 1000)
                    if len(received[i]) == events_n:
                        return

        listeners = [asyncio.create_task(listen(i, ws)) for i, ws in enumerate(sockets)]
        await asyncio.sleep(1)
        before = rss_mb(pid)[0]
        for n in range(events_n):
            await sync_to_async(events.publish)(
                events.ACTIVITY_GROUP,
                "activity",
                # An activity event's declared fields (events.EVENT_FIELDS), then the probe's.
                {**dict.fromkeys(events.EVENT_FIELDS["activity"], ""), "n": n, "sent": time.time()},
            )
            await asyncio.sleep(0.1)
        await asyncio.wait(listeners, timeout=30)
        after, peak = rss_mb(pid)
        for ws in sockets:
            await ws.close()
    latencies = [v for r in received for v in r]
    complete = sum(1 for r in received if len(r) == events_n)
    return (
        f"| {viewers} viewers × {events_n} events (10/s) | {complete}/{viewers} viewers got every event "
        f"| p50 {pct(latencies, 50):.1f} ms, p95 {pct(latencies, 95):.1f} ms, max {max(latencies):.1f} ms "
        f"| Daphne RSS {before:.0f} → {after:.0f} MB (peak {peak:.0f} MB) |"
    )


async def browsing(
    base: str,
    cookie: str,
    users: int,
    seconds: float,
    models: list[str],
    think_s: float = 0.0,
    lockstep: bool = False,
) -> str:
    """``users`` closed-loop users over /models/ and model pages, each pausing about
    ``think_s`` between pages (0: as fast as answers come).

    People do not click in step: each user starts at a random moment within one think time
    and pauses a uniform 0.5-1.5 x ``think_s`` (as Locust's ``between``). ``lockstep`` keeps
    every user on exactly ``think_s`` from the same start, so all 50 ask at once each second:
    a burst test, kept to show what synchronised arrivals cost.
    """
    import random

    import aiohttp

    latencies: list[float] = []
    errors = 0
    paths = ["/models/", *[f"/models/{m}/" for m in models]]
    deadline = time.monotonic() + seconds

    async def user(i: int) -> None:
        nonlocal errors
        pick = random.Random(i)
        if think_s and not lockstep:
            await asyncio.sleep(pick.uniform(0, think_s))
        async with aiohttp.ClientSession(cookies={"sessionid": cookie}) as session:
            n = i
            while time.monotonic() < deadline:
                path = paths[n % len(paths)]
                n += 1
                start = time.perf_counter()
                try:
                    async with session.get(base + path) as response:
                        await response.read()
                        if response.status != 200:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1
                latencies.append((time.perf_counter() - start) * 1000)
                if think_s:
                    await asyncio.sleep(think_s if lockstep else pick.uniform(0.5, 1.5) * think_s)

    await asyncio.gather(*(user(i) for i in range(users)))
    think = " (closed loop)"
    if think_s:
        think = f", {think_s:g} s think time" + (
            " in lockstep" if lockstep else " (0.5-1.5x, staggered)"
        )
    return (
        f"| {users} users browsing /models/ and model pages for {seconds:.0f} s{think} | "
        f"{len(latencies) / seconds:.1f} requests/s | p50 {pct(latencies, 50):.0f} ms, "
        f"p95 {pct(latencies, 95):.0f} ms | {errors} errors |"
    )


def _poll_until(stop, env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    """In a process of its own, as in production (the poller runs in the Celery worker)."""
    os.environ.update(env)
    import django

    django.setup()
    from fleet.poller import Poller
    from registry import servers

    # The production cadence: index every second, statistics and metrics every second tick.
    poller = Poller(servers.default(), interval_s=1.0, slow_every=2)
    while not stop.is_set():
        poller.tick()
        stop.wait(1.0)


def poller_overhead(grpc_url: str, metrics_url: str, rounds: int) -> str:
    import multiprocessing

    from profiler_app.engine.loadgen import run_sweep_sync
    from profiler_app.params import SweepParams

    params = SweepParams(
        model="busy_compute", start=4, end=4, measurement_window_ms=2000,
        stability_percentage=10, max_windows=6,
    )  # fmt: skip
    env = {"TRITON_URL": grpc_url, "TRITON_METRICS_URL": metrics_url}
    spawn = multiprocessing.get_context("spawn")
    costs: list[float] = []
    with_poller: list[float] = []
    without: list[float] = []
    run_sweep_sync(params, grpc_url)  # warm-up, not counted: Triton's first batches are slower
    for n in range(rounds):
        measured = {}
        # Alternate which goes first: the machine drifts (page cache, other tenants).
        for polled in (False, True) if n % 2 == 0 else (True, False):
            stop = spawn.Event()
            poller = None
            if polled:
                poller = spawn.Process(target=_poll_until, args=(stop, env))
                poller.start()
                time.sleep(3)  # past its start-up (Django, first full index)
            result = run_sweep_sync(params, grpc_url)
            if poller is not None:
                stop.set()
                poller.join(10)
            measured[polled] = result.levels[0].throughput
        without.append(measured[False])
        with_poller.append(measured[True])
        costs.append(100 * (measured[False] - measured[True]) / measured[False])
    a, b = statistics.median(without), statistics.median(with_poller)
    return (
        f"| busy_compute, concurrency 4, {rounds} rounds (order alternating) | without the poller "
        f"{a:.0f} infer/s, with it (own process; index every 1 s, statistics + metrics every "
        f"2 s) {b:.0f} infer/s | cost per round: {', '.join(f'{c:+.1f}%' for c in costs)} "
        f"| median cost {statistics.median(costs):+.2f}% (target < 1%) |"
    )


def _serve_command(server: str, workers: str, port: int) -> list[str]:
    app = "dashboard.asgi:application"
    if server == "uvicorn":
        return [sys.executable, "-m", "uvicorn", "--workers", workers, "--host", "127.0.0.1",
                "--port", str(port), "--log-level", "warning", "--no-access-log", app]  # fmt: skip
    if server == "granian":
        granian = str(Path(sys.executable).parent / "granian")
        return [granian, "--interface", "asgi", "--workers", workers, "--host", "127.0.0.1",
                "--port", str(port), "--log-level", "warning", app]  # fmt: skip
    if server == "before":  # a tree from before --workers: one Daphne, its own flags
        return [sys.executable, "-m", "dashboard.serve", "-b", "127.0.0.1", "-p", str(port), app]
    assert server == "daphne", server
    return [sys.executable, "-m", "dashboard.serve", "--workers", workers, "-b", "127.0.0.1",
            "-p", str(port), app]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--viewers", type=int, default=200)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--browse-s", type=float, default=60)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--only", choices=["fanout", "browse", "think", "poller"], help="one scenario"
    )
    parser.add_argument("--workers", default="1,2,3", help="web processes, one run per value")
    parser.add_argument(
        "--servers",
        default="daphne",
        help="ASGI servers, one run each per --workers value: daphne (ours, dashboard.serve), "
        "uvicorn, granian (install them into the venv first: not project dependencies)",
    )
    parser.add_argument(
        "--baseline-tree",
        help="another checkout (e.g. `git worktree add /tmp/before <commit>`): its web "
        "server (one Daphne, its own flags) is measured first, beside this tree's",
    )
    parser.add_argument("--think-s", type=float, default=1.0, help="the think-time scenario's")
    parser.add_argument(
        "--lockstep", action="store_true", help="think-time users all ask at once (a burst)"
    )
    args = parser.parse_args()
    work = setup_django()
    import redis
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from devstack import services as svc
    from triton_api.client import TritonClient

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    repo = work / "repo"
    import shutil

    shutil.copytree(ROOT / "examples" / "model_repository", repo)
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    triton = svc.start_tritonserver(repo, work, ports, work / "triton.log", load=("*",))
    settings.TRITON_URL = grpc_url = f"127.0.0.1:{ports.grpc}"
    settings.TRITON_METRICS_URL = f"http://127.0.0.1:{ports.metrics}/metrics"
    settings.MODEL_REPOSITORY = repo
    user = get_user_model().objects.create_superuser("load", "", "load-password-1")
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    env = {
        **os.environ,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "VAR_DIR": str(work),
        "TRITON_URL": grpc_url,
        "TRITON_METRICS_URL": settings.TRITON_METRICS_URL,
        "MODEL_REPOSITORY": str(repo),
    }
    models = ["add_sub", "add_batched", "busy_compute"]
    rows = []
    try:
        TritonClient(grpc_url, settings.TRITON_METRICS_URL).repository_index()
        variants: list[tuple[str, Path, list[str]]] = []
        if args.baseline_tree:
            variants.append(("before (1 Daphne)", Path(args.baseline_tree), ["before", "1"]))
        for workers in [int(w) for w in args.workers.split(",")]:
            for server in args.servers.split(","):
                plural = "es" if workers > 1 else ""
                variants.append(
                    (f"{workers} {server} process{plural}", ROOT, [server, str(workers)])
                )
        for label, tree, flags in variants:
            port = svc.free_port()
            web = subprocess.Popen(
                _serve_command(flags[0], flags[1], port),
                cwd=tree, env={**env, "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            base = f"http://127.0.0.1:{port}"
            try:
                svc.wait_until(partial(svc.port_is_open, "127.0.0.1", port), 60, "web", web)
                key = session.session_key
                asyncio.run(browsing(base, key, 8, 5, models))  # warm-up
                warm = tree_rss_mb(web.pid)
                if args.only in (None, "fanout"):
                    row = asyncio.run(
                        websocket_fanout(base, key, args.viewers, args.events, web.pid)
                    )
                    rows.append(f"| {label} {row[1:]}")
                if args.only in (None, "browse"):
                    row = asyncio.run(browsing(base, key, args.users, args.browse_s, models))
                    rows.append(f"| {label} {row[1:]}")
                if args.only in (None, "think"):
                    row = asyncio.run(
                        browsing(
                            base,
                            key,
                            args.users,
                            args.browse_s,
                            models,
                            args.think_s,
                            args.lockstep,
                        )
                    )
                    rows.append(f"| {label} {row[1:]}")
                end = tree_rss_mb(web.pid)
                rows.append(
                    f"| {label}: web RSS (all processes) | {warm:.0f} MiB after warm-up | "
                    f"{end:.0f} MiB at the end | {end - warm:+.0f} MiB |"
                )
            finally:
                svc.stop(web)
        if args.only in (None, "poller"):
            rows.append(poller_overhead(grpc_url, settings.TRITON_METRICS_URL, args.rounds))
    finally:
        svc.stop(triton)
        shutil.rmtree(work, ignore_errors=True)
    print("### Load figures (web processes side by side, one tritonserver, this machine)\n")
    print("| web: scenario | result | latency | other |")
    print("|---|---|---|---|")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
