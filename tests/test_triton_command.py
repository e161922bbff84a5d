"""`manage.py triton status|load|unload` against the real tritonserver."""

import subprocess
import sys
from pathlib import Path

import pytest

# The commands run in subprocesses on the test database: commit for real.
pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def operator_account(django_user_model):
    from team.roles import OPERATOR, set_role

    user = django_user_model.objects.create_user("ops", password="pw-ops-123")
    set_role(user, OPERATOR)
    viewer = django_user_model.objects.create_user("watcher", password="pw-watch-123")
    return user, viewer


def run(service_env, *args, user="ops"):
    extra = ["--as-user", user] if args and args[0] in ("load", "unload") else []
    return subprocess.run(
        [sys.executable, "manage.py", "triton", *args, *extra],
        cwd=ROOT,
        env=service_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_status_load_and_unload(service_env):
    result = run(service_env, "load", "busy_compute")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "busy_compute loaded: READY"
    status = run(service_env, "status")
    assert status.returncode == 0
    lines = status.stdout.splitlines()
    assert lines[0].startswith("Triton 2.51.0 at 127.0.0.1:")
    assert lines[0].endswith("live, ready, model control explicit")
    assert "busy_compute\tREADY\tv1:READY" in lines
    result = run(service_env, "unload", "busy_compute")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "busy_compute unloaded"


def test_a_failing_load_exits_non_zero_with_tritons_reason(service_env, failing_model):
    result = run(service_env, "load", "fails_initialize")
    assert result.returncode == 1
    assert "deliberate failure in initialize for the tests" in result.stderr


def test_load_with_a_config_file_overrides_the_config(service_env, tmp_path, triton):
    config = (triton.repository / "add_sub" / "config.pbtxt").read_text()
    override = tmp_path / "config.pbtxt"
    override.write_text(config.replace("max_batch_size: 8", "max_batch_size: 2"))
    result = run(service_env, "load", "add_sub", "--config-file", str(override))
    assert result.returncode == 0, result.stderr
    from triton_api.client import TritonClient

    client = TritonClient(triton.grpc_url, triton.metrics_url)
    assert client.model_config("add_sub")["max_batch_size"] == 2
    assert run(service_env, "unload", "add_sub").returncode == 0


def test_commands_act_as_a_named_user_who_must_be_allowed(service_env):
    from team.models import AuditEvent

    result = run(service_env, "load", "add_sub", user="watcher")
    assert result.returncode == 1
    assert "user 'watcher' (role Viewer) is not allowed" in result.stderr
    result = run(service_env, "load", "add_sub", user="nobody")
    assert result.returncode == 1
    assert "no active dashboard user 'nobody'" in result.stderr
    assert run(service_env, "load", "add_sub").returncode == 0
    event = AuditEvent.objects.filter(action="load", model_name="add_sub").first()
    assert event is not None and event.username == "ops" and event.outcome == "ok"
    assert run(service_env, "unload", "add_sub").returncode == 0


def test_bad_arguments_fail_clearly(service_env, tmp_path):
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("max_batch_size: nope\n")
    result = run(service_env, "load", "add_sub", "--config-file", str(bad))
    assert result.returncode == 1
    assert f"{bad}:1:" in result.stderr
    result = run(service_env, "load", "../etc")
    assert result.returncode == 1 and "invalid model name" in result.stderr
    env = {**service_env, "TRITON_URL": "127.0.0.1:1"}
    result = run(env, "status")
    assert result.returncode == 1
    assert "Triton unreachable at 127.0.0.1:1" in result.stderr
    assert "Traceback" not in result.stderr
