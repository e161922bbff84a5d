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
    assert "--grpc-restricted-protocol=model-repository:dashboard-key=check" in triton["command"]
    assert services["web"]["environment"]["TRITON_API_KEY"] == "check"
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert triton["ports"] == [f"127.0.0.1:{p}:{p}/tcp" for p in (8000, 8001, 8002)]
    # One model repository volume shared by the three that touch it.
    for name in ("web", "worker", "triton"):
        assert "model-repository:/models:rw" in services[name]["volumes"]


def test_compose_refuses_to_start_without_its_secrets():
    env = {k: v for k, v in ENV.items() if k != "DJANGO_SECRET_KEY"}
    result = subprocess.run(
        ["docker-compose", "-f", "docker-compose.yml", "config", "--quiet"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "set DJANGO_SECRET_KEY in .env" in result.stderr


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
