"""docker-compose.yml parses (no Docker engine runs here) and the image's entry script runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import database_url

ROOT = Path(__file__).resolve().parent.parent
ENV = {
    **os.environ,
    "POSTGRES_PASSWORD": "check",
    "DJANGO_SECRET_KEY": "check",
    "TRITON_API_KEY": "check",
    "REDIS_PASSWORD": "check",
}


def _config() -> dict:
    result = subprocess.run(
        ["docker-compose", "-f", "docker-compose.yml", "config"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    return yaml.safe_load(result.stdout)


def test_compose_defines_the_production_services():
    services = _config()["services"]
    assert set(services) == {"web", "worker", "redis", "postgres", "triton"}
    assert services["web"]["image"] == services["worker"]["image"]
    triton = services["triton"]
    assert triton["image"].startswith("nvcr.io/nvidia/tritonserver:")
    assert "--model-control-mode=explicit" in triton["command"]
    assert "--model-repository=/models/repository" in triton["command"]
    assert services["web"]["environment"]["UPLOAD_STAGING_DIR"] == "/models/.staging"
    # Triton's management API answers only to the dashboard, which holds the key.
    # So do its trace settings; its traces go to a volume the dashboard reads.
    assert (
        "--grpc-restricted-protocol=model-repository,trace:dashboard-key=check" in triton["command"]
    )
    assert "--trace-config=triton,file=/traces/trace.json" in triton["command"]
    assert services["web"]["environment"]["TRITON_TRACE_ROOTS"] == "/traces"
    assert services["web"]["environment"]["TRITON_API_KEY"] == "check"
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert triton["ports"] == [f"127.0.0.1:{p}:{p}/tcp" for p in (8000, 8001, 8002)]
    # One model repository volume shared by the three that touch it.
    for name in ("web", "worker", "triton"):
        assert "model-repository:/models:rw" in services[name]["volumes"]
    # Redis (the broker) answers only with the password, on one host too.
    assert services["redis"]["command"][-2:] == ["--requirepass", "check"]
    for name in ("web", "worker"):
        assert services[name]["environment"]["REDIS_URL"] == "redis://:check@redis:6379/0"


@pytest.mark.parametrize("secret", ["DJANGO_SECRET_KEY", "REDIS_PASSWORD"])
def test_compose_refuses_to_start_without_its_secrets(secret):
    env = {k: v for k, v in ENV.items() if k != secret}
    result = subprocess.run(
        ["docker-compose", "-f", "docker-compose.yml", "config", "--quiet"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert f"set {secret} in .env" in result.stderr


@pytest.mark.django_db
def test_the_entry_script_waits_for_the_database_then_runs_the_command():
    result = subprocess.run(
        ["bash", "compose/entrypoint.sh", "python", "-c", "print('entry ok')"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        # In the image `python` is the project's interpreter; here it is the venv's.
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "DATABASE_URL": database_url(),
        },
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "entry ok"


# --- the multi-host layout: compose/main-host.yml over docker-compose.yml, compose/gpu-host.yml

GPU_ENV = {
    **ENV,
    "REDIS_PASSWORD": "redis-check",
    "MAIN_HOST": "10.0.0.10",
    "TRITON_SERVER_NAME": "gpu1",
    "GPU_HOSTNAME": "gpu1-host",
    "SERVER_REPOSITORY": "/srv/gpu1",
    "SERVER_API_KEY": "gpu1-key",
    "GPU_HOST_PRIVATE_IP": "10.0.0.11",
}
MAIN_ENV = {
    **ENV,
    "REDIS_PASSWORD": "redis-check",
    "FLEET_REPOSITORIES": "/srv/fleet",
    "MAIN_HOST_PRIVATE_IP": "10.0.0.10",
}


def _compose(env: dict[str, str], *files: str) -> subprocess.CompletedProcess[str]:
    args = [part for name in files for part in ("-f", name)]
    return subprocess.run(
        ["docker-compose", *args, "config"], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_a_gpu_host_runs_its_triton_and_a_worker_on_that_servers_queue_only():
    result = _compose(GPU_ENV, "compose/gpu-host.yml")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"worker", "triton"}
    worker, triton = services["worker"], services["triton"]
    env = worker["environment"]
    assert env["CELERY_QUEUES"] == "triton.gpu1"
    assert worker["hostname"] == "gpu1-host"
    # The main host's database and Redis; the `default` server as the main host defines it.
    assert env["DATABASE_URL"] == "postgres://dashboard:check@10.0.0.10:5432/dashboard"
    assert env["REDIS_URL"] == "redis://:redis-check@10.0.0.10:6379/0"
    assert env["TRITON_URL"] == "10.0.0.10:8001"
    # The repository at the path the dashboard registers (a root it may read), and the
    # same folder for Triton.
    assert env["MODEL_REPOSITORY_ROOTS"] == "/models,/fleet"
    assert "/srv/gpu1:/fleet/gpu1:rw" in worker["volumes"]
    assert "/srv/gpu1:/models/repository:rw" in triton["volumes"]
    key = "--grpc-restricted-protocol=model-repository:dashboard-key=gpu1-key"
    assert key in triton["command"]
    assert triton["ports"] == [f"10.0.0.11:{p}:{p}/tcp" for p in (8000, 8001, 8002)]


def test_a_gpu_host_refuses_to_start_without_its_servers_name():
    env = {k: v for k, v in GPU_ENV.items() if k != "TRITON_SERVER_NAME"}
    result = _compose(env, "compose/gpu-host.yml")
    assert result.returncode != 0
    assert "set TRITON_SERVER_NAME" in result.stderr


def test_the_main_host_publishes_redis_behind_a_password_and_postgres_on_its_private_address():
    result = _compose(MAIN_ENV, "docker-compose.yml", "compose/main-host.yml")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"web", "worker", "redis", "postgres", "triton"}
    assert services["redis"]["command"][-2:] == ["--requirepass", "redis-check"]
    assert "10.0.0.10:6379:6379/tcp" in services["redis"]["ports"]
    assert "10.0.0.10:5432:5432/tcp" in services["postgres"]["ports"]
    assert "10.0.0.10:8001:8001/tcp" in services["triton"]["ports"]
    for name in ("web", "worker"):
        assert services[name]["environment"]["REDIS_URL"] == "redis://:redis-check@redis:6379/0"
        assert "/srv/fleet:/fleet:rw" in services[name]["volumes"]
        # Servers registered at /fleet/<name> lie in the repository roots.
        assert services[name]["environment"]["MODEL_REPOSITORY_ROOTS"] == "/models,/fleet"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, ["--loglevel=INFO", "--concurrency=2"]),
        (
            {"CELERY_QUEUES": "triton.gpu1", "CELERY_HOSTNAME": "worker-gpu1@gpu1-host"},
            ["--loglevel=INFO", "--concurrency=2", "--queues=triton.gpu1",
             "--hostname=worker-gpu1@gpu1-host"],
        ),
    ],
)  # fmt: skip
def test_the_worker_role_consumes_the_queue_it_is_given(tmp_path, extra, expected):
    """The image's worker: the default queue, or (on a GPU host) its server's queue only."""
    fake = tmp_path / "celery"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_")}
    result = subprocess.run(
        ["bash", "compose/entrypoint.sh", "worker"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **env,
            "PATH": f"{tmp_path}:{Path(sys.executable).parent}:{os.environ['PATH']}",
            "DATABASE_URL": database_url(),
            **extra,
        },
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:-1] == ["-A", "dashboard", "worker", *expected]
