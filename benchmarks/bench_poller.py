"""What the dashboard's polling costs each Triton server of a fleet (target: < 1 % of its
throughput, per server).

    .venv/bin/python benchmarks/bench_poller.py [--rounds 6] [--concurrency 4] [--window-ms 2000]

Starts two tritonservers on copies of the demo repository with busy_compute loaded, the
first as the `default` server (TRITON_*), the second registered as a TritonServer row
("second") in a throwaway SQLite database; uses the Redis at REDIS_URL (default
redis://127.0.0.1:6379/7, a database number it may flush). Each round measures each
server's busy_compute throughput under a steady load (the built-in engine, one server at a
time) without and with the dashboard's pollers running: a `PollerManager` in a process of
its own, as in a Celery worker, one poller thread per server with its Redis lock, at the
production cadence (index every second, statistics and metrics every second tick, history
recorded). The order alternates between rounds (with/without first, and which server
first): the machine drifts.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/7")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import ROOT, setup_django  # noqa: E402

SECOND = "second"


def _poll_until(stop, env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    """The pollers of every registered server, in a process of their own (as in a worker)."""
    os.environ.update(env)
    import django

    django.setup()
    from fleet.poller import PollerManager

    manager = PollerManager(interval_s=1.0)
    halt = threading.Event()
    thread = threading.Thread(target=manager.run, args=(halt,), daemon=True)
    thread.start()
    stop.wait()
    halt.set()
    thread.join(10)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _throughput(params, grpc_url: str) -> float:  # type: ignore[no-untyped-def]
    from profiler_app.engine.loadgen import run_sweep_sync

    return run_sweep_sync(params, grpc_url).levels[0].throughput


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--window-ms", type=int, default=2000)
    args = parser.parse_args()
    work = setup_django()
    import redis
    from django.conf import settings

    from devstack import services as svc
    from fleet import poller
    from profiler_app.params import SweepParams
    from registry.models import TritonServer

    redis_client = redis.Redis.from_url(settings.REDIS_URL)
    redis_client.flushdb()
    started = []
    try:
        urls = {}
        for name in ("default", SECOND):
            repo = work / f"repo-{name}"
            shutil.copytree(ROOT / "examples" / "model_repository", repo)
            ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
            started.append(
                svc.start_tritonserver(
                    repo, work, ports, work / f"triton-{name}.log", load=("busy_compute",)
                )
            )
            urls[name] = (
                f"127.0.0.1:{ports.grpc}",
                f"127.0.0.1:{ports.http}",
                f"http://127.0.0.1:{ports.metrics}/metrics",
                repo,
            )
        grpc, http, metrics, repo = urls["default"]
        env = {
            "DATABASE_URL": os.environ["DATABASE_URL"],
            "VAR_DIR": str(work),
            "REDIS_URL": settings.REDIS_URL,
            "TRITON_URL": grpc,
            "TRITON_HTTP_URL": http,
            "TRITON_METRICS_URL": metrics,
            "MODEL_REPOSITORY": str(repo),
        }
        settings.TRITON_URL, settings.TRITON_HTTP_URL = grpc, http
        settings.TRITON_METRICS_URL, settings.MODEL_REPOSITORY = metrics, repo
        grpc2, http2, metrics2, repo2 = urls[SECOND]
        TritonServer.objects.create(
            name=SECOND, grpc_url=grpc2, http_url=http2, metrics_url=metrics2,
            repository=str(repo2), labels={"bench": "poller"},
        )  # fmt: skip

        params = SweepParams(
            model="busy_compute", start=args.concurrency, end=args.concurrency,
            measurement_window_ms=args.window_ms, stability_percentage=10, max_windows=6,
        )  # fmt: skip
        names = ["default", SECOND]
        for name in names:  # warm-up, not counted: Triton's first batches are slower
            _throughput(params, urls[name][0])
        spawn = multiprocessing.get_context("spawn")
        measured: dict[str, dict[bool, list[float]]] = {n: {False: [], True: []} for n in names}
        costs: dict[str, list[float]] = {n: [] for n in names}
        locks_held: list[bool] = []
        poller_cpu: list[float] = []  # the pollers' process, % of one core while measured
        for n in range(args.rounds):
            for polled in (False, True) if n % 2 == 0 else (True, False):
                stop = spawn.Event()
                process = None
                if polled:
                    process = spawn.Process(target=_poll_until, args=(stop, env))
                    process.start()
                # Past the pollers' start-up (Django, the first full index of each); the
                # same pause without them, so both phases start alike.
                time.sleep(5)
                if process is not None:
                    locks_held.append(
                        all(redis_client.exists(poller.lock_key(name)) for name in names)
                    )
                cpu_before, wall_before = (
                    (_cpu_s(process.pid), time.monotonic()) if process else (0.0, 0.0)
                )
                for name in names if n % 2 == 0 else reversed(names):
                    measured[name][polled].append(_throughput(params, urls[name][0]))
                if process is not None:
                    poller_cpu.append(
                        100 * (_cpu_s(process.pid) - cpu_before) / (time.monotonic() - wall_before)
                    )
                    stop.set()
                    process.join(15)
                    # The next round starts with no lock left: each is released on exit.
                    for name in names:
                        redis_client.delete(poller.lock_key(name))
            for name in names:
                without, with_ = measured[name][False][-1], measured[name][True][-1]
                costs[name].append(100 * (without - with_) / without)
            print(
                f"round {n + 1}: " + ", ".join(f"{name} {costs[name][-1]:+.1f}%" for name in names),
                file=sys.stderr,
                flush=True,
            )
    finally:
        for process in started:
            svc.stop(process)
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"### The pollers' cost per server (two tritonservers, busy_compute, concurrency "
        f"{args.concurrency}, {args.window_ms} ms windows, {args.rounds} rounds, order "
        "alternating)\n"
    )
    print(
        f"Pollers held both servers' locks in {sum(locks_held)}/{len(locks_held)} polled phases "
        "(one PollerManager process: index every 1 s, statistics + metrics every 2 s, history "
        f"recorded); that process used {statistics.median(poller_cpu):.1f}% of one core "
        f"(median; {os.cpu_count()} cores here) while the load ran.\n"
    )
    print("| server | without the pollers | with them | cost per round | median cost |")
    print("|---|---|---|---|---|")
    for name in names:
        a = statistics.median(measured[name][False])
        b = statistics.median(measured[name][True])
        per_round = ", ".join(f"{c:+.1f}%" for c in costs[name])
        print(
            f"| {name} | {a:.0f} infer/s | {b:.0f} infer/s | {per_round} "
            f"| {statistics.median(costs[name]):+.2f}% (target < 1%) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
