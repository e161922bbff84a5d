"""How long the quick commands and "Try on Triton without saving" take, and where it goes.

.venv/bin/python benchmarks/bench_cli.py [--runs 11] [--trials 3] [--tree PATH ...]

Starts its own tritonserver and redis-server over a temporary copy of the demo repository
and a fresh SQLite database. Then, interleaved, `manage.py triton status`, `manage.py
servers list` and `manage.py validate_config REPO` run in each --tree (a checkout; default
this one; give a copy of the tree before a change and then `.` to compare them in one run):
wall and CPU (user + system) medians of --runs. Then the editor's "Try on Triton without
saving" (text mode, add_batched with max_batch_size 16) in this process, --trials times
with the model loaded and not: the page's total, its Triton calls (counted and timed) and
the time spent sleeping between polls of the repository index.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devstack import services as svc  # noqa: E402

MODEL = "add_batched"
COMMANDS = ("triton status", "servers list", "validate_config {repo}")


def _environment(work: Path, repo: Path, ports: svc.TritonPorts, redis_port: int) -> dict[str, str]:
    return {
        **os.environ,
        "VAR_DIR": str(work),
        "DATABASE_URL": f"sqlite:///{work / 'bench.sqlite3'}",
        "TRITON_URL": f"127.0.0.1:{ports.grpc}",
        "TRITON_HTTP_URL": f"127.0.0.1:{ports.http}",
        "TRITON_METRICS_URL": f"http://127.0.0.1:{ports.metrics}/metrics",
        "MODEL_REPOSITORY": str(repo),
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        "DJANGO_ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
    }


def time_commands(trees: list[Path], env: dict[str, str], repo: Path, runs: int) -> None:
    wall: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    cpu: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for _ in range(runs):
        for tree in trees:
            for command in COMMANDS:
                args = command.format(repo=repo).split()
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "manage.py", *args], cwd=tree, env=env, capture_output=True
                )
                wall[str(tree), command].append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[str(tree), command].append(
                    after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                )
                if done.returncode != 0:
                    sys.exit(f"{tree}: manage.py {command} failed:\n{done.stderr.decode()}")
    print(f"### Quick commands ({runs} runs each, interleaved)\n")
    print("| tree | command | wall median s | wall min s | CPU median s | CPU min s |")
    print("|---|---|---|---|---|---|")
    for (name, command), samples in wall.items():
        used = cpu[name, command]
        print(
            f"| {name} | `{command.format(repo='REPO')}` | {statistics.median(samples):.2f} | "
            f"{min(samples):.2f} | {statistics.median(used):.2f} | {min(used):.2f} |"
        )


def time_trials(env: dict[str, str], trials: int) -> None:
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from registry import servers
    from registry.triton_clients import get_client
    from triton_api import client as triton_client

    calls: list[tuple[str, float]] = []
    sleeps: list[float] = []

    def timed(method: Any, name: str | None = None) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                calls.append((name or str(args[0]), time.perf_counter() - start))

        return call

    klass = triton_client.TritonClient
    klass._call = timed(klass._call)  # type: ignore[method-assign]
    klass.metrics = timed(klass.metrics, "metrics")  # type: ignore[method-assign]
    sleep = time.sleep

    def counted_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        sleep(seconds)

    time.sleep = counted_sleep  # type: ignore[assignment]
    user = get_user_model().objects.create_superuser("bench", "", "bench-password-1")
    page = Client()
    page.force_login(user)
    triton = get_client(servers.default())
    text = (Path(env["MODEL_REPOSITORY"]) / MODEL / "config.pbtxt").read_text()
    text = text.replace("max_batch_size: 64", "max_batch_size: 16")
    page.get(f"/models/{MODEL}/config/")  # the first request of the process: imports, caches
    rows = []
    for _ in range(trials):
        for loaded in (False, True):
            if loaded:
                triton.load(MODEL)
            else:
                triton.unload(MODEL)
            calls.clear()
            sleeps.clear()
            start = time.perf_counter()
            response = page.post(
                f"/models/{MODEL}/config/", {"mode": "text", "action": "try", "text": text}
            )
            total = time.perf_counter() - start
            assert response.status_code == 200 and b"READY" in response.content
            by_method: dict[str, list[float]] = collections.defaultdict(list)
            for name, seconds in calls:
                by_method[name].append(seconds)
            detail = ", ".join(
                f"{name} ×{len(s)} {sum(s):.2f} s"
                for name, s in sorted(by_method.items(), key=lambda item: -sum(item[1]))
            )
            triton_s = sum(seconds for _, seconds in calls)
            rows.append((loaded, total, len(calls), triton_s, sum(sleeps), detail))
    print(f'\n### "Try on Triton without saving" ({MODEL}, max_batch_size 64 → 16)\n')
    print("| loaded before | total s | Triton calls | in calls s | polling sleeps s | calls |")
    print("|---|---|---|---|---|---|")
    for loaded, total, count, triton_s, slept, detail in rows:
        print(
            f"| {'yes' if loaded else 'no'} | {total:.2f} | {count} | {triton_s:.2f} | "
            f"{slept:.2f} | {detail} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--tree", action="append", type=Path, help="a checkout (default: .)")
    args = parser.parse_args()
    trees = [t.resolve() for t in args.tree or [ROOT]]
    work = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    repo = work / "model_repository"
    shutil.copytree(ROOT / "examples" / "model_repository", repo)
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    redis_port = svc.free_port()
    triton = svc.start_tritonserver(repo, work, ports, work / "triton.log")
    redis = svc.start_redis(work, redis_port, work / "redis.log")
    try:
        env = _environment(work, repo, ports, redis_port)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        bytecode = "not written" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "written"
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; .pyc {bytecode}\n")
        time_commands(trees, env, repo, args.runs)
        time_trials(env, args.trials)
    finally:
        svc.stop(redis)
        svc.stop(triton)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
