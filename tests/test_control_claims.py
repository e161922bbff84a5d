"""A load, unload or reload claims its (server, model) for every process: the web runs
several Daphnes, and the CLI and the workers act too."""

from __future__ import annotations

import pytest

from devstack.services import free_port
from repository_app import control, events


def test_a_claim_is_shared_through_redis_and_released_only_by_its_owner(redis_db):
    key = control._claim_key("default", "add_sub")
    redis_db.set(key, "another-process")  # another web process's claim
    assert not control._take("default", "add_sub")
    redis_db.delete(key)
    assert control._take("default", "add_sub")
    assert redis_db.ttl(key) > 0 and not control._take("default", "add_sub")
    # Expired and taken again by another process meanwhile: that claim is not ours to end.
    redis_db.set(key, "another-process")
    control._give_back("default", "add_sub")
    assert redis_db.get(key) == b"another-process"
    redis_db.delete(key)
    assert control._take("default", "add_sub")
    control._give_back("default", "add_sub")
    assert not redis_db.exists(key) and not control._inflight


def test_without_redis_a_claim_still_holds_in_its_own_process(settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    events._clients.clear()
    try:
        assert control._take("default", "add_sub")
        assert not control._take("default", "add_sub")
        control._give_back("default", "add_sub")
        assert not control._inflight
    finally:
        events._clients.clear()


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_cli_and_the_apis_wait_and_a_page_action_refuse_a_model_another_process_holds(
    triton, redis_db, django_user_model
):
    """Another process (a web worker, a CLI) holds add_sub's claim: every door refuses."""
    from django.core.management import call_command
    from django.core.management.base import CommandError
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from team.roles import OPERATOR, set_role

    redis_db.set(control._claim_key("default", "add_sub"), "another-process")
    user = django_user_model.objects.create_user("otto-ops")
    set_role(user, OPERATOR)
    with pytest.raises(CommandError, match="already running"):
        call_command("triton", "reload", "add_sub", "--as-user", "otto-ops")
    api = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    answer = api.post("/api/v1/models/add_sub/reload?wait=1")
    assert answer.status_code == 409 and "already running" in answer.json()["message"]
    page = Client()
    page.force_login(user)
    answer = page.post("/models/add_sub/reload", HTTP_ACCEPT="application/json")
    assert answer.status_code == 409 and "already running" in answer.content.decode()
    # Once it is released, the CLI acts.
    redis_db.delete(control._claim_key("default", "add_sub"))
    call_command("triton", "reload", "add_sub", "--as-user", "otto-ops")
    assert not redis_db.exists(control._claim_key("default", "add_sub"))


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_editors_save_and_reload_and_its_trial_load_refuse_a_model_another_process_holds(
    triton, redis_db, django_user_model
):
    from registry import servers
    from repository_app.editor.triton_actions import reload_saved, try_config
    from repository_app.modelconfig import parse_config
    from team.roles import ADMIN, set_role

    user = django_user_model.objects.create_user("ada-admin")
    set_role(user, ADMIN)
    server = servers.default()
    config = parse_config((triton.repository / "add_sub" / "config.pbtxt").read_bytes()).config
    redis_db.set(control._claim_key("default", "add_sub"), "another-process")
    tried = try_config(server, "add_sub", config, user)
    assert not tried.ok and "already running" in tried.message and tried.restored
    saved = reload_saved(server, "add_sub", user.get_username(), user.pk)
    assert not saved.ok and "already running" in saved.message
    redis_db.delete(control._claim_key("default", "add_sub"))
    assert try_config(server, "add_sub", config, user).ok
    assert not redis_db.exists(control._claim_key("default", "add_sub"))


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_searchs_loads_wait_for_the_claim_another_process_holds(triton, redis_db):
    """A search loads candidates and puts the saved config back through the same claim."""
    from django.utils import timezone

    from profiler_app.models import Search, Sweep
    from profiler_app.search import runner
    from profiler_app.search.objective import Constraints
    from profiler_app.search.space import Knobs, Space

    carrier = Sweep.objects.create(
        model="add_sub", server="default", state="succeeded", queued_at=timezone.now(),
        kind="search", params={"model": "add_sub", "start": 1, "end": 1, "step": 1},
    )  # fmt: skip
    search = Search.objects.create(
        sweep=carrier, model="add_sub", mode="grid", space=Space(counts=(1, 2)).to_json(),
        constraints=Constraints().to_json(), baseline=Knobs(1, "KIND_CPU", 8, True, 100).to_json(),
        was_loaded=True,
    )  # fmt: skip
    redis_db.set(control._claim_key("default", "add_sub"), "another-process")
    message = runner.restore(search)
    search.refresh_from_db()
    assert "already running" in message and search.restore_pending
    redis_db.delete(control._claim_key("default", "add_sub"))
    assert runner.restore(search) == "the saved config.pbtxt serves again"
    search.refresh_from_db()
    assert not search.restore_pending
    assert not redis_db.exists(control._claim_key("default", "add_sub"))


GATED_MODEL = """import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # Loads only once the test opens the gate: the action stays in flight meanwhile.
        gate = os.path.join(args["model_repository"], "gate")
        deadline = time.monotonic() + 300
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_two_web_processes_and_the_cli_exclude_each_other_on_one_model(
    triton, redis_db, django_user_model, service_env, tmp_path, celery_worker
):
    """Real processes: the web front with two Daphnes, a Celery worker and `manage.py
    triton`. A load whose model waits on a gate is in flight (a job the worker runs); until
    the gate opens, every other door refuses."""
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    from rest_framework.authtoken.models import Token

    from devstack import services as svc
    from team.roles import OPERATOR, set_role
    from triton_api.client import TritonClient

    from .conftest import ROOT, SERVICE_START_S, wait_for

    name = "gated_load"
    folder = triton.repository / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(GATED_MODEL)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    user = django_user_model.objects.create_user("olga-ops")
    set_role(user, OPERATOR)
    token = Token.objects.create(user=user).key
    port = svc.free_port()
    log = tmp_path / "web.log"
    front = subprocess.Popen(
        svc.tied_to_parent(
            [sys.executable, "-m", "dashboard.serve", "--workers", "2", "-b", "127.0.0.1",
             "-p", str(port), "dashboard.asgi:application"]
        ),
        cwd=ROOT, env=service_env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    client = TritonClient(triton.grpc_url, triton.metrics_url)

    def post(path: str) -> tuple[int, str]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", method="POST",
            headers={"Authorization": f"Token {token}"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as answer:
            return answer.code, answer.read().decode()

    def cli(action: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "triton", action, name, "--as-user", "olga-ops"],
            cwd=ROOT, env=service_env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    try:
        svc.wait_until(
            lambda: svc.port_is_open("127.0.0.1", port), SERVICE_START_S, "web", front, log
        )
        status, body = post(f"/api/v1/models/{name}/load")
        assert status == 202, body
        # In flight until the gate opens: the CLI and every web process refuse.
        refused = cli("load")
        assert refused.returncode != 0 and "already running" in refused.stderr, refused
        for _ in range(10):  # new connections, spread over both Daphnes by the kernel
            status, body = post(f"/api/v1/models/{name}/unload")
            assert status == 409 and "already running" in body, (status, body)
        (folder / "gate").touch()
        wait_for(
            lambda: not redis_db.exists(control._claim_key("default", name)),
            SERVICE_START_S, "the load to end and release its claim",
        )  # fmt: skip
        assert any(s.state == "READY" for s in client.model_states(name))
        from repository_app.models import ControlAction

        job = wait_for(
            lambda: ControlAction.objects.filter(model=name, state="succeeded").first(),
            SERVICE_START_S, "the load's job to end",
        )  # fmt: skip
        assert job.worker.startswith("test-"), job.worker  # the worker's, not a web thread's
        done = cli("unload")
        assert done.returncode == 0, done
    finally:
        (folder / "gate").touch()
        svc.stop(front)
        client.unload(name)
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.django_db
def test_a_queued_action_checks_the_role_again_when_it_runs(
    django_user_model, redis_db, actions_here
):
    """Roles are checked on every step of a long action: a load queued by an Operator who
    is a Viewer by the time a worker takes it does not reach Triton."""
    from django.utils import timezone

    from repository_app.models import ControlAction
    from team.models import AuditEvent
    from team.roles import OPERATOR, VIEWER, set_role

    user = django_user_model.objects.create_user("olga-demoted")
    set_role(user, OPERATOR)
    ControlAction.objects.create(
        server="default", model="add_sub", action="load", user=user, username=user.username,
        queued_at=timezone.now(),
    )  # fmt: skip
    set_role(user, VIEWER)
    assert actions_here() == ["failed"]
    job = ControlAction.objects.get()
    refused = "your role cannot load or unload models on default"
    assert (job.ok, job.message, job.error) == (False, refused, refused)
    denied = AuditEvent.objects.get(action="load")
    assert denied.outcome == "denied" and "checked again when the action ran" in denied.detail
