"""`make run`: find or start every component, then serve the dashboard until Ctrl-C.

Redis and Triton are used when they answer at REDIS_URL / TRITON_HTTP_URL; otherwise a
private redis-server and a local tritonserver (from the nvidia-pytriton wheel) are
started with their data and logs under var/. Every process started here is stopped on
Ctrl-C; nothing is left running. `make run TRITONS=N` (or DEMO_TRITONS=N) starts N - 1
more local tritonservers, registered as the servers local-2 ... local-N (devstack.fleet).
"""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

from triton_api.address import split_host_port

from . import fleet
from . import services as svc
from .console import fail, say
from .supervisor import TritonSupervisor

BASE_DIR = Path(__file__).resolve().parent.parent
DEMO_REPOSITORY = BASE_DIR / "examples" / "model_repository"
# Every tritonserver make run starts: alive when a model fails to load, and with the latency
# summaries the server page's p50/p99 chart reads.
TRITON_ARGS = ("--exit-on-error=false", svc.SUMMARY_LATENCIES)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devstack", description="make run")
    parser.add_argument(
        "--tritons",
        metavar="N",
        default=os.environ.get(fleet.ENV),
        help="local Tritons to start, the default one included: N > 1 adds the servers "
        f"local-2 ... local-N (default ${fleet.ENV}, else 1)",
    )
    args = parser.parse_args(argv)
    try:
        args.tritons = fleet.count_from(args.tritons)
    except ValueError as exc:
        fail(str(exc))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from common.redact import redact

    var_dir = Path(settings.VAR_DIR)
    var_dir.mkdir(parents=True, exist_ok=True)
    logs = var_dir / "log"
    started: list[tuple[str, subprocess.Popen]] = []

    def shutdown(*_: object) -> None:
        for name, proc in reversed(started):
            if proc.poll() is None:
                say(f"stopping {name}")
                svc.stop(proc)
        started.clear()

    supervisors: dict[str, TritonSupervisor] = {}  # by the name in `started`
    signal.signal(signal.SIGTERM, _interrupt)
    # Also SIGINT: a shell without job control starts `make run &` with SIGINT ignored, and
    # Python keeps an ignored SIGINT ignored, so Ctrl-C (or `kill -INT`) would do nothing.
    signal.signal(signal.SIGINT, _interrupt)
    try:
        web_host = os.environ.get("WEB_HOST", "127.0.0.1")
        web_port = int(os.environ.get("WEB_PORT", "8080"))
        if svc.port_is_open(web_host, web_port):
            fail(f"port {web_port} is taken (web server); free it or run `make run WEB_PORT=8090`")

        # --- Redis
        redis_url = urlparse(settings.REDIS_URL)
        redis_port = redis_url.port or 6379
        if svc.port_is_open(redis_url.hostname or "127.0.0.1", redis_port):
            say(f"Redis: found at {redact(settings.REDIS_URL)}")
        elif redis_url.hostname in ("127.0.0.1", "localhost"):
            say(
                f"Redis: nothing answers at {redact(settings.REDIS_URL)}; starting a private redis-server"
            )
            started.append(
                (
                    "redis-server",
                    svc.start_redis(
                        var_dir,
                        redis_port,
                        logs / "redis.log",
                        password=unquote(redis_url.password or ""),
                    ),
                )
            )
            say(f"Redis: started on 127.0.0.1:{redis_port} (data in {var_dir / 'redis'})")
        else:
            fail(f"Redis unreachable at {redact(settings.REDIS_URL)} (REDIS_URL)")

        # --- Triton: the default server (the TRITON_* settings); the dashboard's other
        # servers run elsewhere and are only watched.
        from registry import servers

        triton = servers.default()
        http_host, http_port = split_host_port(triton.http_url)
        if svc.port_is_open(http_host, http_port):
            say(f"Triton: found at {triton.http_url} (HTTP) / {triton.grpc_url} (gRPC)")
        elif http_host in ("127.0.0.1", "localhost"):
            repo = Path(triton.repository)
            if not repo.exists():
                shutil.copytree(DEMO_REPOSITORY, repo)
                say(f"Triton: seeded {repo} from examples/model_repository")
            metrics_port = urlparse(triton.metrics_url).port or 8002
            ports = svc.TritonPorts(
                http=http_port,
                grpc=split_host_port(triton.grpc_url)[1],
                metrics=metrics_port,
            )
            say(f"Triton: starting tritonserver (explicit model control) on {repo}")
            load, skipped = models_to_load(repo)
            for name, reason in skipped:
                say(f"Triton: not loading folder {name!r}: {reason}; rename it on disk")

            start = functools.partial(start_triton, repo, var_dir, ports, logs / "tritonserver.log")
            proc = start()
            supervisors["tritonserver"] = TritonSupervisor(start, var_dir)
            started.append(("tritonserver", proc))
            say(
                f"Triton: started on ports {ports.http}/{ports.grpc}/{ports.metrics} (log {logs / 'tritonserver.log'})"
            )
        else:
            fail(f"Triton unreachable at {triton.http_url} (TRITON_HTTP_URL)")

        # --- Plotly's basic bundle (var/vendor/); offline, the pages load the wheel's full one.
        installer = BASE_DIR / "scripts" / "install_plotly_basic.py"
        install = [sys.executable, str(installer), "--offline-ok"]
        subprocess.run(install, stdout=subprocess.DEVNULL, check=False)  # stderr says why not
        from common.staticfinders import describe

        say(f"Charts: {describe()}")

        # --- perf_analyzer (var/tools/), the second sweep engine, as `make test` installs it
        say(f"perf_analyzer: {install_perf_analyzer()}")

        # --- database and first user
        say(
            f"Database: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]} {settings.DATABASES['default']['NAME']}"
        )
        call_command("migrate", interactive=False, verbosity=0)
        if not settings.DEBUG:
            # With DEBUG off, pages name the content-hashed copies that collectstatic lists
            # in its manifest (with DEBUG on, the finders serve the plain names).
            say(f"Static files: collecting into {settings.STATIC_ROOT} (DJANGO_DEBUG is false)")
            call_command("collectstatic", interactive=False, verbosity=0)
        # Before the web process starts: uploads left half-published by a crash are cleaned.
        call_command("reconcile_uploads", startup=True)
        login = ensure_admin(var_dir)

        # --- more local Tritons (TRITONS=N): local-2 ... local-N, each a registered server
        start_more_tritons(args.tritons, var_dir, started, supervisors)

        # --- web and worker
        python = sys.executable
        web = subprocess.Popen(
            [
                python,
                "-m",
                "dashboard.serve",
                "-b",
                web_host,
                "-p",
                str(web_port),
                "dashboard.asgi:application",
            ],
            cwd=BASE_DIR,
            start_new_session=True,
        )
        started.append(("web (daphne)", web))
        worker = subprocess.Popen(
            [
                python,
                "-m",
                "celery",
                "-A",
                "dashboard",
                "worker",
                "--loglevel=INFO",
                "--concurrency=2",
                "--hostname=dashboard@%h",
            ],
            cwd=BASE_DIR,
            start_new_session=True,
        )
        started.append(("worker (celery)", worker))
        svc.wait_until(lambda: svc.port_is_open(web_host, web_port), 30, "web server", web)
        say("")
        say(f"Dashboard: http://{web_host}:{web_port}/   ({login})")
        say("Press Ctrl-C to stop everything started here.")
        while True:
            for index, (name, proc) in enumerate(started):
                if proc.poll() is None:
                    continue
                if name in supervisors:
                    # A Triton crash is Triton's, not the dashboard's: restart it, with
                    # backoff; the web and worker keep running and show Triton down.
                    started[index] = (name, supervisors[name].restart(proc.returncode))
                    continue
                fail(f"{name} exited with code {proc.returncode}; stopping the rest")
            time.sleep(1)
    except KeyboardInterrupt:
        say("Ctrl-C: stopping")
    except svc.ServiceError as exc:
        print(f"[make run] ERROR: {exc}", file=sys.stderr)
        shutdown()
        raise SystemExit(1) from None
    finally:
        shutdown()


def install_perf_analyzer() -> str:
    """perf_analyzer from the tritonclient wheel (scripts/install_perf_analyzer.py) unless
    one is found; a line saying where it is, or why the Benchmark form offers only the
    built-in engine. Offline, pip gives up within a minute or so (its timeout and retries
    shortened here) and make run goes on."""
    from profiler_app.engine.perf_analyzer_command import PerfAnalyzerNotFound, locate_perf_analyzer

    try:
        return f"found at {locate_perf_analyzer()}"
    except PerfAnalyzerNotFound:
        pass
    installer = BASE_DIR / "scripts" / "install_perf_analyzer.py"
    quick = {"PIP_TIMEOUT": "10", "PIP_RETRIES": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    try:
        done = subprocess.run(
            [sys.executable, str(installer)],
            capture_output=True,
            text=True,
            env={**os.environ, **quick},
            timeout=300,
            check=False,
        )
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        # pip's own "ERROR: ..." says why better than the installer's traceback after it.
        errors = [line for line in lines if line.startswith("ERROR")] or lines
        why = errors[-1] if done.returncode and errors else ""
    except subprocess.TimeoutExpired:
        why = "the installer took over 300 s"
    try:
        found = locate_perf_analyzer()
    except PerfAnalyzerNotFound:
        return (
            f"not installed ({why or 'see scripts/install_perf_analyzer.py'}); the Benchmark "
            f"form offers the built-in engine only (retry: .venv/bin/python {installer.relative_to(BASE_DIR)})"
        )
    return f"installed at {found}" + (f" (but: {why})" if why else "")


def start_triton(repo: Path, var_dir: Path, ports: svc.TritonPorts, log: Path) -> subprocess.Popen:
    """A tritonserver as make run starts each one: explicit model control, every safe
    model folder loaded at start, TRITON_ARGS."""
    return svc.start_tritonserver(
        repo, var_dir, ports, log, load=models_to_load(repo)[0], extra_args=TRITON_ARGS,
        trace_file=var_dir / "traces" / f"triton-{ports.grpc}" / "trace.json",
    )  # fmt: skip


def start_more_tritons(
    count: int,
    var_dir: Path,
    started: list[tuple[str, subprocess.Popen]],
    supervisors: dict[str, TritonSupervisor],
) -> None:
    """local-2 ... local-`count` (devstack.fleet): each started, supervised and registered
    (added, or its addresses brought up to date) as the admin."""
    for local in fleet.prepare(count, var_dir, DEMO_REPOSITORY):
        who = f"Triton {local.name}"
        if local.seeded:
            say(f"{who}: seeded {local.repository} from examples/model_repository")
        say(f"{who}: starting tritonserver (explicit model control) on {local.repository}")
        start = functools.partial(start_triton, local.repository, var_dir, local.ports, local.log)
        started.append((f"tritonserver {local.name}", start()))
        supervisors[f"tritonserver {local.name}"] = TritonSupervisor(
            start, var_dir, name=local.name
        )
        ports = f"{local.ports.http}/{local.ports.grpc}/{local.ports.metrics}"
        say(f"{who}: started on ports {ports} (log {local.log})")
        say(f"{who}: {fleet.register(acting_admin(), local)}")
    for name in fleet.leftovers(count, var_dir):
        say(
            f"Triton {name}: registered by an earlier TRITONS, not started now (shown down); "
            f"`manage.py servers remove {name}` removes it"
        )


def acting_admin() -> object:
    """The user make run registers servers as (`ensure_admin`'s), checked as `manage.py
    servers` checks its --as-user."""
    from django.core.management.base import CommandError

    from fleet.server_admin import MANAGE
    from team.cli import acting_user

    try:
        return acting_user("admin", MANAGE)
    except CommandError as exc:
        raise svc.ServiceError(f"TRITONS: {exc}") from None


def models_to_load(repo: Path) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """(folders to load at start, [(folder, why not)]): every model folder whose name is in
    the safe set. Not `--load-model=*`: a planted folder named `inj$(...)` would run its
    shell command at every start."""
    from repository_app.naming import unsafe_name_reason

    load, skipped = [], []
    for entry in sorted(os.scandir(repo), key=lambda e: e.name):
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        reason = unsafe_name_reason(entry.name)
        if reason:
            skipped.append((entry.name, reason))
        else:
            load.append(entry.name)
    return tuple(load), skipped


def _interrupt(*_: object) -> None:
    # `kill` (SIGTERM) and SIGINT stop everything the same way Ctrl-C does. Once: a second
    # signal (make passes SIGTERM on to us, a kill of the process group reaches us too, a
    # second Ctrl-C) would cut the shutdown short and leave Daphne and tritonserver running.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def ensure_admin(var_dir: Path) -> str:
    from django.contrib.auth import get_user_model

    User = get_user_model()
    password_file = var_dir / "admin-password.txt"
    if not User.objects.filter(username="admin").exists():
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "", password)
        password_file.write_text(password + "\n")
        password_file.chmod(0o600)
        return f"login: admin / {password} (saved in {password_file})"
    if password_file.exists():
        return f"login: admin / {password_file.read_text().strip()}"
    return "login: admin (password as set earlier)"


if __name__ == "__main__":
    main()
