"""The security probe's stack: its environment (in one place) and the processes it runs.

The probe runs against `make run` in production mode on ports of its own (Triton
18000-18002, web 18080, Redis database 12), so it never meets a developer's `make run` on
the default ports. Everything it writes lives in one work folder: ``PROBE_WORK``, or
``var/probe/`` of the checkout (ignored by git).

Used by run.sh through its command line and imported by probe.py:

    python stack.py env [WORK]          shell lines (unset/export) for `make run`
    python stack.py ports-free          exit 1, naming them, if a probe port is taken
    python stack.py flush-redis         empty Redis database 12 when a Redis answers
    python stack.py wait-healthy PID S  wait up to S seconds for /healthz to report Triton up
                                        (exit 1 early if process PID, `make run`, is gone)
    python stack.py devstack-pid [WORK] the pid of the stack's `python -m devstack`
    python stack.py leftovers [WORK]    list the stack's processes and taken probe ports;
                                        exit 1 if there are any
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout this script is run from
HOST = "127.0.0.1"
TRITON_HTTP_PORT, TRITON_GRPC_PORT, TRITON_METRICS_PORT = 18000, 18001, 18002
WEB_PORT = 18080
PORTS = (TRITON_HTTP_PORT, TRITON_GRPC_PORT, TRITON_METRICS_PORT, WEB_PORT)
REDIS_URL = "redis://127.0.0.1:6379/12"
BASE_URL = f"http://{HOST}:{WEB_PORT}"

# Settings the caller's shell (or CI) may have set that would change what the probe meets:
# removed, so the project's defaults apply (the expectations assume them).
UNSET = (
    "DATABASE_URL",
    "MODEL_REPOSITORY",
    "DJANGO_ALLOWED_HOSTS",
    "DJANGO_BEHIND_PROXY",
    "DJANGO_CSRF_TRUSTED_ORIGINS",
    "DJANGO_HSTS_PRELOAD",
    "DJANGO_HSTS_SECONDS",
    "DJANGO_SETTINGS_MODULE",
    "LOGIN_ADDRESS_PACE_S",
    "LOGIN_LOCKOUT_S",
    "LOGIN_MAX_FAILURES",
    "REQUEST_MAX_BODY_BYTES",
    "TRITON_API_KEY",
    "TRITON_API_KEY_HEADER",
    "UPLOAD_CHUNK_BYTES",
    "UPLOAD_MAX_ARCHIVE_MEMBERS",
    "UPLOAD_MAX_CHUNK_BYTES",
    "UPLOAD_MAX_FILE_BYTES",
    "UPLOAD_MAX_TOTAL_BYTES",
    "UPLOAD_STAGING_DIR",
    "WEB_HOST",
)


def work_dir(arg: str | None = None) -> Path:
    """The work folder: the argument, else PROBE_WORK, else var/probe/ of the checkout."""
    return Path(arg or os.environ.get("PROBE_WORK") or ROOT / "var" / "probe").absolute()


def secret_key(work: Path) -> str:
    """A generated DJANGO_SECRET_KEY, kept in the work folder (run.sh removes it before each
    run, so every run gets a new one)."""
    path = work / "secret_key"
    if not path.exists():
        work.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(50) + "\n")
    return path.read_text().strip()


def stack_env(work: Path) -> dict[str, str]:
    """The variables `make run` gets for the probe, and that the probe's manage.py calls get."""
    return {
        "PROBE_WORK": str(work),
        "DJANGO_DEBUG": "false",
        "DJANGO_SSL_REDIRECT": "false",
        "DJANGO_SECRET_KEY": secret_key(work),
        "VAR_DIR": str(work / "var"),
        "REDIS_URL": REDIS_URL,
        "CELERY_BROKER_URL": REDIS_URL,
        "TRITON_URL": f"{HOST}:{TRITON_GRPC_PORT}",
        "TRITON_HTTP_URL": f"{HOST}:{TRITON_HTTP_PORT}",
        "TRITON_METRICS_URL": f"http://{HOST}:{TRITON_METRICS_PORT}/metrics",
        "WEB_PORT": str(WEB_PORT),
    }


def process_env(work: Path) -> dict[str, str]:
    """This process's environment, less UNSET, plus the stack's."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env.update(stack_env(work))
    return env


def port_taken(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def stack_processes(work: Path) -> list[tuple[int, str]]:
    """(pid, command line) of every process of the stack: those whose environment has the
    stack's VAR_DIR (every process `make run` starts inherits it) or whose command line
    names that VAR_DIR (tritonserver's model repository). This process and its ancestors
    are left out."""
    var_dir = f"VAR_DIR={work / 'var'}".encode()
    mine = _ancestors()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if not cmdline:  # a zombie or a kernel thread
            continue
        if var_dir in environ.split(b"\0") or str(work / "var").encode() in cmdline:
            found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace")))
    return sorted(found)


def web_pid(work: Path) -> int:
    for pid, cmdline in stack_processes(work):
        if "dashboard.serve" in cmdline and f"-p {WEB_PORT}" in cmdline:
            return pid
    raise SystemExit(f"web process (dashboard.serve -p {WEB_PORT}) of {work} not found")


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def web_pids(work: Path) -> list[int]:
    """The web front (``web_pid``) and the Daphnes it started (``--workers``): those answer
    the requests, so their memory is what a request can grow."""
    front = web_pid(work)
    workers = [
        pid
        for pid, cmdline in stack_processes(work)
        if "dashboard.serve" in cmdline and _parent(pid) == front
    ]
    return [front, *workers]


def healthz() -> dict:
    with urllib.request.urlopen(f"{BASE_URL}/healthz", timeout=5) as reply:
        return json.loads(reply.read())


def _healthz_any() -> dict:
    try:
        return healthz()
    except urllib.error.HTTPError as exc:  # 503 while a component is down: still JSON
        try:
            return json.loads(exc.read())
        except ValueError:
            return {}
    except (OSError, ValueError):
        return {}


def wait_healthy(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    last: dict = {}
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or "Z" in _state(pid):
            print(f"`make run` (pid {pid}) exited before the stack came up", file=sys.stderr)
            return 1
        last = _healthz_any()
        if last.get("components", {}).get("triton", {}).get("up") is True:
            print(f"stack up: /healthz {json.dumps(last)}", file=sys.stderr)
            return 0
        time.sleep(5)
    print(f"the stack did not come up within {timeout:.0f} s: /healthz {last}", file=sys.stderr)
    return 1


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    if command == "env":
        work = work_dir(args[0] if args else None)
        print("unset " + " ".join(UNSET))
        for key, value in stack_env(work).items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    if command == "ports-free":
        taken = [port for port in PORTS if port_taken(port)]
        if taken:
            print(f"probe ports taken: {taken} (ss -ltnp shows by whom)", file=sys.stderr)
            return 1
        return 0
    if command == "flush-redis":
        import redis

        try:
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).flushdb()
            print(f"flushed {REDIS_URL}", file=sys.stderr)
        except redis.RedisError as exc:
            print(f"no Redis to flush at {REDIS_URL} ({exc}): make run starts one", file=sys.stderr)
        return 0
    if command == "wait-healthy":
        return wait_healthy(int(args[0]), float(args[1]))
    if command == "devstack-pid":
        work = work_dir(args[0] if args else None)
        pids = [p for p, cmd in stack_processes(work) if "-m devstack" in cmd]
        print(" ".join(map(str, pids)))
        return 0 if pids else 1
    if command == "leftovers":
        work = work_dir(args[0] if args else None)
        left = stack_processes(work)
        for pid, cmdline in left:
            print(f"{pid} {cmdline[:200]}")
        taken = [port for port in PORTS if port_taken(port)]
        if taken:
            print(f"ports still answering: {taken}")
        return 1 if left or taken else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
