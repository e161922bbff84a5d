"""Start the local services that development and tests use: tritonserver and Redis.

`make run` and the test fixtures share this module. tritonserver comes from the
nvidia-pytriton wheel (a real Triton 2.51 with the Python backend); Redis is
Debian's redis-server, with its data under var/.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class ServiceError(RuntimeError):
    """A local service could not be found or started; the message says why and what to do."""


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


LISTEN_PORTS_FROM = 20000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free port to listen on, below the kernel's ephemeral range: a port the kernel
    handed out for binding (port 0) comes from that range, where any outgoing connection (a
    load generator opens thousands) may take it before the server binds it."""
    top = _ephemeral_start()
    pick = random.SystemRandom()
    for _ in range(100):
        port = pick.randrange(LISTEN_PORTS_FROM, top) if top > LISTEN_PORTS_FROM else 0
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise ServiceError(f"{what} exited with code {proc.returncode}.\n{tail}")
        time.sleep(0.2)
    raise ServiceError(f"{what} did not become ready within {timeout:.0f} s")


def tied_to_parent(cmd: list[str]) -> list[str]:
    """`cmd` under `setpriv --pdeathsig TERM`: it gets SIGTERM when the process that starts it
    dies, however that dies (SIGKILL too), so a killed `make run` or test run leaves no
    service behind. Linux ties the signal to the starting *thread*, so only commands started
    from the main thread are tied (a worker thread's end would stop them)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return cmd
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd]


# --- tritonserver from the nvidia-pytriton wheel ---------------------------------------------


def _pytriton_root() -> Path:
    try:
        import pytriton
    except ImportError as exc:
        raise ServiceError(
            "nvidia-pytriton is not installed: `pip install nvidia-pytriton==0.7.0` "
            "(it carries tritonserver), or point TRITON_URL at a running Triton."
        ) from exc
    return Path(pytriton.__file__).parent


def tritonserver_binary() -> Path:
    return _pytriton_root() / "tritonserver" / "bin" / "tritonserver"


def prepare_backends(
    var_dir: Path, *, root: Path | None = None, python_version: str | None = None
) -> Path:
    """Lay out a backend directory with the Python backend and the stub for this interpreter
    (or for `python_version`, from the pytriton folder `root`: scripts/gpu_bundle.py).

    The wheel keeps one stub per Python version; Triton looks for the stub beside the
    backend library, so the matching one is copied into place once.
    """
    root = (root or _pytriton_root()) / "tritonserver"
    version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise ServiceError(f"nvidia-pytriton has no Python-backend stub for Python {version}")
    target = var_dir / "triton_backends"
    python_dir = target / "python"
    if not (python_dir / "triton_python_backend_stub").exists():
        if python_dir.exists():
            shutil.rmtree(python_dir)
        # Laid out aside and renamed into place: parallel test workers may do this at once.
        target.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".python-", dir=target))
        shutil.copytree(root / "backends" / "python", staging, dirs_exist_ok=True)
        shutil.copy2(stub, staging / "triton_python_backend_stub")
        try:
            staging.rename(python_dir)
        except OSError:  # another process put it there first
            shutil.rmtree(staging, ignore_errors=True)
    return target


@dataclass
class TritonPorts:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002


# Latency quantiles (nv_inference_request_summary_us, the server page's p50/p99 chart) are
# exported only with this flag; `make run` turns it on, the test fixtures only where needed.
SUMMARY_LATENCIES = "--metrics-config=summary_latencies=true"


def triton_environment() -> dict[str, str]:
    env = dict(os.environ)
    libs = _pytriton_root().parent / "nvidia_pytriton.libs"
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
    # The Python-backend stub runs model.py with this interpreter's packages (numpy).
    bin_dir = Path(sys.executable).parent
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [sysconfig.get_paths()["purelib"], env.get("PYTHONPATH")])
    )
    return env


def start_tritonserver(
    repository: Path,
    var_dir: Path,
    ports: TritonPorts,
    log_path: Path,
    *,
    control_mode: str = "explicit",
    load: tuple[str, ...] = (),
    extra_args: tuple[str, ...] = (),
    new_session: bool = True,
    trace_file: Path | None = None,
) -> subprocess.Popen:
    """Start tritonserver on 127.0.0.1 and wait until it is live. ``trace_file``: where
    Triton writes traces (one file per trace, ``<trace_file>.<n>``); tracing stays off
    until the dashboard turns it on for a model (Trace on the model page)."""
    for port in (ports.http, ports.grpc, ports.metrics):
        if port_is_open("127.0.0.1", port):
            raise ServiceError(f"port {port} is taken; set TRITON_*_PORT to free ports")
    backends = prepare_backends(var_dir)
    cmd = [
        str(tritonserver_binary()),
        f"--model-repository={repository}",
        f"--backend-directory={backends}",
        f"--model-control-mode={control_mode}",
        f"--http-port={ports.http}",
        f"--grpc-port={ports.grpc}",
        f"--metrics-port={ports.metrics}",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1",
        "--exit-timeout-secs=5",
        "--log-verbose=0",
        *(f"--load-model={name}" for name in load),
        *(
            (f"--trace-config=triton,file={trace_file}", "--trace-config=level=OFF")
            if trace_file is not None
            else ()
        ),
        *extra_args,
    ]
    if trace_file is not None:
        trace_file.parent.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    proc = subprocess.Popen(
        tied_to_parent(cmd),
        stdout=log,
        stderr=subprocess.STDOUT,
        env=triton_environment(),
        start_new_session=new_session,
    )
    url = f"http://127.0.0.1:{ports.http}/v2/health/live"
    # Triton opens its metrics port after HTTP and gRPC are live: wait for it too, unless
    # metrics are turned off (seen refused right after "live" on a slow machine).
    metrics = "--allow-metrics=false" not in extra_args

    def started() -> bool:
        return _http_ok(url) and (not metrics or port_is_open("127.0.0.1", ports.metrics))

    try:
        wait_until(started, 90, "tritonserver", proc, log_path)
    except BaseException:  # Ctrl-C or a timeout while it starts: never leave it running
        stop(proc)
        raise
    return proc


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


# --- Redis -----------------------------------------------------------------------------------


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        # A fresh Debian machine may lack it; root can install it non-interactively.
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=False, env=env)
        found = shutil.which("redis-server")
        if found:
            return found
    raise ServiceError(
        "redis-server is not installed and could not be installed; "
        "install it (apt-get install redis-server) or set REDIS_URL to a running Redis"
    )


def start_redis(
    var_dir: Path, port: int, log_path: Path, *, new_session: bool = True, password: str = ""
) -> subprocess.Popen:
    """A private redis-server on 127.0.0.1 only, with REDIS_URL's password when it has one
    (the application would otherwise fail to log in to it)."""
    if port_is_open("127.0.0.1", port):
        raise ServiceError(f"port {port} is taken; set REDIS_URL to another port")
    data_dir = var_dir / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        redis_server_binary(),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(data_dir),
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
    ]
    if password:  # in a file of its own, not on the command line (ps shows that to all)
        conf = data_dir / "auth.conf"
        conf.touch(mode=0o600)
        conf.chmod(0o600)
        quoted = password.replace("\\", "\\\\").replace('"', '\\"')
        conf.write_text(f'requirepass "{quoted}"\n')
        cmd.insert(1, str(conf))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        tied_to_parent(cmd),
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=new_session,
    )
    wait_until(lambda: port_is_open("127.0.0.1", port), 20, "redis-server", proc, log_path)
    return proc


def stop(proc: subprocess.Popen, timeout: float = 15) -> None:
    """Terminate a process started here (and its process group), then kill if it lingers."""
    stop_all([proc], timeout)


def stop_all(procs: list[subprocess.Popen], timeout: float = 15) -> None:
    """``stop`` for several processes at once: all are signalled before any is waited for,
    so their shutdowns overlap (a tritonserver can take seconds to stop)."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in running:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait(5)


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        proc.send_signal(sig)
