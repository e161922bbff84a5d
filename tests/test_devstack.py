"""`make run`'s orchestrator on a machine with nothing running: it starts everything and
Ctrl-C stops everything it started."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from devstack import services as svc
from devstack.services import free_port, port_is_open

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path: Path, **ports: int) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON", "REDIS", "CELERY", "DATABASE", "MODEL_REPOSITORY"))
    }
    env.update(
        VAR_DIR=str(tmp_path / "var"),
        WEB_PORT=str(ports["web"]),
        REDIS_URL=f"redis://127.0.0.1:{ports['redis']}/0",
        TRITON_URL=f"127.0.0.1:{ports['grpc']}",
        TRITON_HTTP_URL=f"127.0.0.1:{ports['http']}",
        TRITON_METRICS_URL=f"http://127.0.0.1:{ports['metrics']}/metrics",
        PYTHONUNBUFFERED="1",
    )
    return env


def _healthz(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _ready(triton, name: str) -> bool:  # type: ignore[no-untyped-def]
    from triton_api.client import TritonError

    try:
        return any(s.state == "READY" for s in triton.model_states(name))
    except TritonError:
        return False


def test_make_run_starts_every_component_and_ctrl_c_stops_them(tmp_path):
    ports = {name: free_port() for name in ("web", "redis", "http", "grpc", "metrics")}
    log = tmp_path / "run.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "devstack", "--tritons", "2"],  # and local-2
        cwd=ROOT,
        env=_env(tmp_path, **ports),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 150
        while "Dashboard: http://" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        output = log.read_text()
        assert "Redis: nothing answers" in output and "Redis: started" in output
        assert "Triton: starting tritonserver" in output and "Triton: started" in output
        # TRITONS=2: local-2 on its own copy of the demo repository, a registered server.
        local = re.search(r"Triton local-2: started on ports (\d+)/(\d+)/(\d+)", output)
        assert local, output
        http, grpc, metrics = map(int, local.groups())
        ports.update({"local-2 http": http, "local-2 grpc": grpc, "local-2 metrics": metrics})
        assert "Triton local-2: registered as the server local-2 (env=demo)" in output
        assert (tmp_path / "var" / "tritons" / "local-2" / "add_sub" / "config.pbtxt").exists()
        assert f"Dashboard: http://127.0.0.1:{ports['web']}/   (login: admin / " in output
        password = (tmp_path / "var" / "admin-password.txt").read_text().strip()
        assert password in output
        # The seeded demo repository is loaded, and the worker answers a ping.
        assert (tmp_path / "var" / "model_repository" / "add_sub" / "config.pbtxt").exists()
        url = f"http://127.0.0.1:{ports['web']}/healthz"
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                status, body = _healthz(url)
            except (urllib.error.URLError, TimeoutError) as exc:  # the log says why, if it stays
                status, body = 0, {"error": str(exc), "log": log.read_text()[-3000:]}
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert status == 200, body
        # /healthz tells anonymous callers only up/down; ask Triton itself for the rest.
        from triton_api.client import TritonClient

        triton = TritonClient(
            f"127.0.0.1:{ports['grpc']}", f"http://127.0.0.1:{ports['metrics']}/metrics"
        )
        assert triton.control_mode() == "explicit"
        # Every safe model folder is loaded by name at start (never --load-model=*).
        assert any(s.state == "READY" for s in triton.model_states("add_sub"))

        # A Triton crash does not stop the dashboard: make run restarts Triton (backoff),
        # says so, the web server keeps answering, and Triton comes back.
        tritons = subprocess.run(["pgrep", "-af", "tritonserver"], capture_output=True, text=True)
        ours = {
            key: next(line for line in tritons.stdout.splitlines() if f"--grpc-port={port}" in line)
            for key, port in ports.items()
            if key.endswith("grpc")
        }
        # Both with the latency summaries the server page's p50/p99 chart reads.
        assert all(svc.SUMMARY_LATENCIES in line.split() for line in ours.values()), ours
        pid = int(ours["grpc"].split()[0])
        os.kill(pid, signal.SIGKILL)
        while "Triton: restarted" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert port_is_open("127.0.0.1", ports["web"]), "the web server stopped"
            assert time.monotonic() < deadline + 120, log.read_text()
            time.sleep(0.5)
        assert "tritonserver exited with code -9; restarting in 1 s" in log.read_text()
        note = json.loads((tmp_path / "var" / "run" / "triton-supervisor.json").read_text())
        assert note["restarts"] == 1 and note["exit_code"] == -9
        # Back with the models loaded (the first call may find the old channel dead).
        while not _ready(triton, "add_sub"):
            assert time.monotonic() < deadline + 180, log.read_text()
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)
        # A second signal once the shutdown has begun (make passes SIGTERM on; a kill of the
        # process group reaches every process): it must not cut the shutdown short.
        stopping = time.monotonic() + 60
        while "stopping " not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < stopping, log.read_text()
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    output = log.read_text()
    assert "Ctrl-C: stopping" in output
    for name, port in ports.items():
        assert not port_is_open("127.0.0.1", port), f"{name} still listens on {port}"


def test_make_run_names_the_taken_port(tmp_path):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        ports = {name: free_port() for name in ("redis", "http", "grpc", "metrics")}
        result = subprocess.run(
            [sys.executable, "-m", "devstack"],
            cwd=ROOT,
            env=_env(tmp_path, web=taken, **ports),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"port {taken} is taken (web server)" in result.stderr
    assert "WEB_PORT=" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_private_redis_takes_the_password_of_redis_url_from_a_file_not_the_command_line(
    tmp_path,
):
    import redis

    from devstack import services as svc

    port = free_port()
    secret = 'p"a\\ss'  # quotes and backslashes survive the config file
    proc = svc.start_redis(tmp_path, port, tmp_path / "redis.log", password=secret)
    try:
        assert secret not in " ".join(proc.args)
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        assert redis.Redis(port=port, password=secret).ping()
        assert (tmp_path / "redis" / "auth.conf").stat().st_mode & 0o077 == 0
    finally:
        svc.stop(proc)


def test_free_ports_come_from_below_the_ephemeral_range():
    """An ephemeral port (what binding port 0 gives) can be taken by any outgoing connection
    before the server binds it: a load generator's thousands collided with test stacks."""
    from devstack import services as svc

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [svc.free_port() for _ in range(20)]
    assert all(svc.LISTEN_PORTS_FROM <= port < low for port in ports), ports
