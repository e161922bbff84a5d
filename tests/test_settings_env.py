"""A missing or wrong setting stops the process with one clear line naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

BAD_SETTINGS = [
    ("TRITON_TIMEOUT_S", "soon", "must be a number"),
    ("TRITON_TIMEOUT_S", "-1", "must be at least"),
    ("DJANGO_DEBUG", "maybe", "must be true or false"),
    ("REDIS_URL", "localhost:6379", "must start with redis://"),
    ("TRITON_URL", "no-port-here", "must be host:port"),
    ("TRITON_METRICS_URL", "ftp://x/metrics", "must start with http://"),
    ("DATABASE_URL", "nonsense", "database URL"),
    ("CELERY_VISIBILITY_TIMEOUT_S", "1.5", "must be at least 60"),
    ("MODEL_REPOSITORY_ROOTS", "relative/models", "must list absolute paths"),
]


@pytest.mark.parametrize(("name", "value", "expected"), BAD_SETTINGS)
def test_a_bad_setting_gives_one_line_naming_the_variable(name, value, expected):
    env = {**os.environ, name: value}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Configuration error: {name} ")
    assert expected in lines[0]


def test_production_mode_requires_a_secret_key():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SECRET_KEY"}
    env["DJANGO_DEBUG"] = "false"
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "Configuration error: DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false"
    )


def test_the_defaults_need_no_environment_at_all():
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON", "REDIS", "DJANGO_D", "DATABASE"))
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
