"""Fleet overview: its server time with 5 real tritonservers × 100 models, and how soon a
state change reaches the matrix over its websocket.

    .venv/bin/python benchmarks/bench_fleet.py [--servers 5] [--models 100] [--runs 50]
        [--changes 10]

Starts its own tritonservers (explicit mode, 3 models loaded on each) over repositories
of N generated Python-backend models (copies of the demo `add_batched`): the first two
servers share one repository (a shared volume), the others have one each. The first is
`default` (the TRITON_* settings), the others are TritonServer rows. Then, with a
throwaway SQLite database and the Redis at REDIS_URL (default redis://127.0.0.1:6379/8, a
database number it flushes):

1. GET /fleet/ through Django's test client while no poller runs: every server is asked
   directly, all at once (the page's path when no Celery worker watches the servers);
2. the same with a real Celery worker whose pollers watch every server (the usual case:
   the page reads their snapshots and cards from Redis);
3. with Daphne serving /ws/fleet/ to a websocket client, a model is loaded or unloaded on
   one server directly through Triton (outside the dashboard: only its poller can notice)
   and the time from Triton's answer to the matrix event showing the new state is taken.
   A load or unload made through the dashboard publishes at once, before its request
   returns; this is the slower path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/8")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import ROOT, logged_in_client, setup_django  # noqa: E402
from bench_load import pct  # noqa: E402

PAGE_TARGET_MS = 200.0
LIVE_TARGET_MS = 2000.0
LOADED = 3  # models loaded on each server at start


def make_repository(root: Path, models: int) -> None:
    source = ROOT / "examples" / "model_repository" / "add_batched"
    for i in range(models):
        target = root / f"model_{i:03d}"
        shutil.copytree(source, target)
        config = target / "config.pbtxt"
        config.write_text(config.read_text().replace('"add_batched"', f'"model_{i:03d}"'))


def page_times(client, runs: int) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    """Wall time of each request, and the CPU time of the thread that served it (what the
    page itself costs, whatever else the machine's cores were doing meanwhile)."""
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.thread_time()
        response = client.get("/fleet/")
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.thread_time() - start_cpu) * 1000)
        assert response.status_code == 200, response.status_code
    return wall, cpu


async def live_delays(base: str, cookie: str, grpc_url: str, server: str, model: str,
                      changes: int) -> list[float]:  # fmt: skip
    """Load and unload `model` on `server` through Triton; each time, from Triton's answer
    to the matrix event that shows the new state."""
    import aiohttp

    from triton_api.client import TritonClient

    triton = TritonClient(grpc_url, "")
    delays: list[float] = []
    host = base.split("//")[1]
    async with aiohttp.ClientSession(cookies={"sessionid": cookie}) as session:
        ws = await session.ws_connect(f"ws://{host}/ws/fleet/", headers={"Origin": base})

        async def state_seen(wanted: str, deadline: float) -> float:
            while True:
                msg = await asyncio.wait_for(ws.receive(), timeout=deadline - time.monotonic())
                data = json.loads(msg.data)
                if (
                    data.get("type") != "models.states"
                    or data.get("group") != f"repository.{server}"
                ):
                    continue
                info = (data.get("models") or {}).get(model)
                if info and info.get("state") == wanted:
                    return time.monotonic()

        for i in range(changes):
            load = i % 2 == 0
            await asyncio.to_thread(triton.load if load else triton.unload, model)
            answered = time.monotonic()
            seen = await state_seen("READY" if load else "UNAVAILABLE", answered + 30)
            delays.append((seen - answered) * 1000)
        await ws.close()
    return delays


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, default=5)
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--changes", type=int, default=10)
    args = parser.parse_args()
    work = setup_django()
    import redis
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from devstack import services as svc
    from fleet import poller
    from registry import servers
    from registry.models import TritonServer
    from repository_app import events

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    repositories = []
    for i in range(args.servers):
        if i == 1:
            repositories.append(repositories[0])  # the first two share one repository
            continue
        root = work / f"repo{i}"
        make_repository(root, args.models)
        repositories.append(root)
    loaded = tuple(f"model_{i:03d}" for i in range(LOADED))
    tritons, ports = [], []
    web = worker = None
    try:
        for i, root in enumerate(repositories):
            port = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
            ports.append(port)
            tritons.append(
                svc.start_tritonserver(root, work, port, work / f"triton{i}.log", load=loaded)
            )
        settings.TRITON_URL = f"127.0.0.1:{ports[0].grpc}"
        settings.TRITON_HTTP_URL = f"127.0.0.1:{ports[0].http}"
        settings.TRITON_METRICS_URL = f"http://127.0.0.1:{ports[0].metrics}/metrics"
        settings.MODEL_REPOSITORY = repositories[0]
        for i in range(1, args.servers):
            row = TritonServer(
                name=f"gpu-{i}", grpc_url=f"127.0.0.1:{ports[i].grpc}",
                http_url=f"127.0.0.1:{ports[i].http}",
                metrics_url=f"http://127.0.0.1:{ports[i].metrics}/metrics",
                repository=str(repositories[i]), labels={"env": "prod" if i % 2 else "staging"},
            )  # fmt: skip
            row.full_clean()
            row.save()
        names = servers.names()
        client = logged_in_client()
        first = client.get("/fleet/")
        assert first.status_code == 200
        assert first.content.count(b"<tr data-model=") == args.models, "every model is a row"
        asked = page_times(client, args.runs)

        env = {
            **os.environ,
            "VAR_DIR": str(work),
            "TRITON_URL": settings.TRITON_URL,
            "TRITON_HTTP_URL": settings.TRITON_HTTP_URL,
            "TRITON_METRICS_URL": settings.TRITON_METRICS_URL,
            "MODEL_REPOSITORY": str(repositories[0]),
            "HISTORY_ENABLED": "false",
        }
        worker_log = work / "worker.log"
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "--concurrency=1",
             "--pool=prefork", "--hostname=fleet-bench@localhost", "--without-gossip",
             "--without-mingle", "--loglevel=INFO"],
            cwd=ROOT, env=env, stdout=worker_log.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        port = svc.free_port()
        web = subprocess.Popen(
            [sys.executable, "-m", "dashboard.serve", "-b", "127.0.0.1", "-p", str(port),
             "dashboard.asgi:application"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        svc.wait_until(lambda: svc.port_is_open("127.0.0.1", port), 60, "daphne", web)
        store = redis.Redis.from_url(settings.REDIS_URL)

        def all_watched() -> bool:
            return all(
                store.exists(poller.lock_key(n)) and events.load_snapshot(n)
                and store.exists(poller.card_key(n))
                for n in names
            )  # fmt: skip

        svc.wait_until(all_watched, 120, "the pollers of every server", worker, worker_log)
        watched = page_times(client, args.runs)
        assert b"no poller watches" not in client.get("/fleet/").content

        user = get_user_model().objects.get(username="bench")
        session = SessionStore()
        session["_auth_user_id"] = str(user.pk)
        session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
        session["_auth_user_hash"] = user.get_session_auth_hash()
        session.save()
        target = names[-1]
        delays = asyncio.run(
            live_delays(f"http://127.0.0.1:{port}", session.session_key,
                        f"127.0.0.1:{ports[-1].grpc}", target, f"model_{LOADED:03d}",
                        args.changes)
        )  # fmt: skip
    finally:
        for proc in (worker, web, *tritons):
            if proc is not None:
                svc.stop(proc)
        shutil.rmtree(work, ignore_errors=True)

    cells = args.servers * args.models
    print(f"### Fleet overview: {args.servers} tritonservers × {args.models} models\n")
    print(
        f"`python benchmarks/bench_fleet.py --servers {args.servers} --models {args.models} "
        f"--runs {args.runs} --changes {args.changes}` · {os.cpu_count()} CPUs; explicit "
        f"mode, {LOADED} models loaded per server, two servers on one shared repository; "
        f"{cells} matrix cells. Targets: page < {PAGE_TARGET_MS:.0f} ms, matrix live "
        f"< {LIVE_TARGET_MS / 1000:.0f} s.\n"
    )
    print(
        f"| GET /fleet/ ({args.runs} requests, Django test client) | p50 ms | p95 ms | max ms "
        "| CPU of the request's thread, p50 / p95 ms |"
    )
    print("|---|---|---|---|---|")
    for label, (wall, cpu) in (
        ("no poller runs: every server asked at once", asked),
        ("a Celery worker's pollers watch every server", watched),
    ):
        print(
            f"| {label} | {pct(wall, 50):.1f} | {pct(wall, 95):.1f} | {max(wall):.1f} "
            f"| {pct(cpu, 50):.1f} / {pct(cpu, 95):.1f} |"
        )
    print(
        "\nThe wall times include waiting for a core: this machine also runs the "
        f"{args.servers} tritonservers, their Python-backend stubs, the worker and Daphne.\n"
    )
    print(
        f"Live matrix: model_{LOADED:03d} loaded and unloaded {args.changes} times on "
        f"{target} directly through Triton; from Triton's answer to the /ws/fleet/ event "
        f"showing the new state (the poller polls every {settings.TRITON_POLL_INTERVAL_S:g} s): "
        f"p50 {pct(delays, 50):.0f} ms, p95 {pct(delays, 95):.0f} ms, max {max(delays):.0f} ms; "
        f"{sum(1 for d in delays if d <= LIVE_TARGET_MS)}/{len(delays)} within "
        f"{LIVE_TARGET_MS / 1000:.0f} s.\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
