"""`make run TRITONS=N` without starting Tritons: the count, the copies, the ports, and the
registration through the registry's own checks and audit (devstack/fleet.py); the flags
every tritonserver of `make run` gets and its perf_analyzer step (devstack/run.py)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings as django_settings

from devstack import fleet, run
from devstack import services as svc
from registry.models import TritonServer
from team.models import AuditEvent

pytestmark = pytest.mark.django_db
DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"


@pytest.fixture()
def admin(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_superuser("admin", "", "pw-admin-12345")


def _local(var_dir: Path, name: str = "local-2", **ports: int) -> fleet.LocalTriton:
    ports = {"http": svc.free_port(), "grpc": svc.free_port(), "metrics": svc.free_port(), **ports}
    repository = var_dir / fleet.FOLDER / name
    repository.mkdir(parents=True, exist_ok=True)
    return fleet.LocalTriton(name, repository, svc.TritonPorts(**ports), var_dir / "t.log")


# --- the count --------------------------------------------------------------------------------


def test_the_count_is_one_by_default_and_refused_outside_one_to_the_maximum():
    assert fleet.count_from(None) == fleet.count_from("") == 1
    assert fleet.count_from(" 3 ") == 3 and fleet.names(3) == ["local-2", "local-3"]
    assert fleet.names(1) == []
    for bad in ("0", "-2", "9", "three", "2.5"):
        with pytest.raises(ValueError, match=f"TRITONS must be a whole number from 1 to 8.*{bad}"):
            fleet.count_from(bad)


def test_make_run_takes_the_count_from_its_flag_or_demo_tritons(monkeypatch, capsys):
    monkeypatch.delenv(fleet.ENV, raising=False)
    assert run.parse_args([]).tritons == 1
    assert run.parse_args(["--tritons", "3"]).tritons == 3
    monkeypatch.setenv(fleet.ENV, "2")
    assert run.parse_args([]).tritons == 2
    with pytest.raises(SystemExit) as stopped:
        run.parse_args(["--tritons", "many"])
    assert stopped.value.code == 1
    assert "ERROR: TRITONS must be a whole number" in capsys.readouterr().err


def test_the_makefile_passes_tritons_on():
    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    dry = subprocess.run(
        ["make", "-n", "-f", "-", "run", "TRITONS=3"],
        input=makefile.replace("run: $(STAMP)", "run:"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert "-m devstack --tritons '3'" in dry.stdout


# --- the copies and the ports ---------------------------------------------------------------


def test_each_local_triton_gets_its_own_copy_made_once_and_kept(tmp_path):
    var = tmp_path / "var"
    (first,) = fleet.prepare(2, var, DEMO)
    assert first.name == "local-2" and first.seeded
    assert first.repository == var / "tritons" / "local-2"
    assert (first.repository / "add_sub" / "config.pbtxt").exists()
    edited = first.repository / "add_sub" / "config.pbtxt"
    edited.write_text(edited.read_text() + "\n# edited\n")
    second, third = fleet.prepare(3, var, DEMO)
    assert not second.seeded and third.seeded and "# edited" in edited.read_text()
    used = {p for t in (second, third) for p in (t.ports.http, t.ports.grpc, t.ports.metrics)}
    assert len(used) == 6  # no port twice


def test_a_restart_keeps_the_registered_ports_while_they_are_free(tmp_path, admin):
    var = tmp_path / "var"
    (planned,) = fleet.prepare(2, var, DEMO)
    fleet.register(admin, planned)
    (again,) = fleet.prepare(2, var, DEMO)
    assert again.ports == planned.ports
    with socket.socket() as taken:  # one of them is taken now: all three are picked anew
        taken.bind(("127.0.0.1", planned.ports.grpc))
        taken.listen()
        (moved,) = fleet.prepare(2, var, DEMO)
    assert planned.ports.grpc not in (moved.ports.http, moved.ports.grpc, moved.ports.metrics)


def test_new_ports_avoid_every_registered_address(tmp_path, admin, monkeypatch):
    """A down server's port is free, but the registry would refuse it as that server's."""
    var = tmp_path / "var"
    other = _local(tmp_path / "elsewhere", "edge-a")
    TritonServer.objects.create(
        name="edge-a", repository=str(other.repository), labels={}, **other.addresses()
    )
    offered = iter([other.ports.grpc, other.ports.http, 21001, 21002, 21003])
    monkeypatch.setattr(svc, "free_port", lambda: next(offered))
    (planned,) = fleet.prepare(2, var, DEMO)
    assert planned.ports == svc.TritonPorts(http=21001, grpc=21002, metrics=21003)


def test_a_server_of_that_name_on_another_repository_stops_make_run_untouched(tmp_path, admin):
    other = _local(tmp_path / "elsewhere")
    TritonServer.objects.create(
        name="local-2", repository=str(other.repository), labels={}, **other.addresses()
    )
    with pytest.raises(svc.ServiceError, match="a server named local-2 is registered with"):
        fleet.prepare(2, tmp_path / "var", DEMO)
    assert not (tmp_path / "var" / "tritons" / "local-2").exists()
    assert TritonServer.objects.get(name="local-2").repository == str(other.repository)


def test_copies_outside_model_repository_roots_are_refused_before_anything_starts(
    tmp_path, settings
):
    settings.MODEL_REPOSITORY_ROOTS = [tmp_path / "models"]
    with pytest.raises(svc.ServiceError) as refused:
        fleet.prepare(2, tmp_path / "var", DEMO)
    assert "MODEL_REPOSITORY_ROOTS" in str(refused.value)
    assert f"add {tmp_path / 'var' / 'tritons'} to MODEL_REPOSITORY_ROOTS" in str(refused.value)
    assert not (tmp_path / "var" / "tritons").exists()


# --- registration -----------------------------------------------------------------------------


def test_registration_adds_the_server_once_audited_and_is_idempotent(tmp_path, admin):
    local = _local(tmp_path / "var")
    assert fleet.register(admin, local) == "registered as the server local-2 (env=demo)"
    row = TritonServer.objects.get(name="local-2")
    assert (row.grpc_url, row.http_url, row.metrics_url) == (
        f"127.0.0.1:{local.ports.grpc}",
        f"127.0.0.1:{local.ports.http}",
        f"http://127.0.0.1:{local.ports.metrics}/metrics",
    )
    assert row.repository == str(local.repository) and row.labels == {"env": "demo"}
    (added,) = AuditEvent.objects.filter(action="server.add")
    assert (added.username, added.server, added.outcome) == ("admin", "local-2", "ok")

    assert fleet.register(admin, local) == "the server local-2 is registered already"
    assert TritonServer.objects.count() == 1
    assert AuditEvent.objects.filter(server="local-2").count() == 1  # nothing new audited


def test_registration_moves_the_addresses_to_new_ports_and_keeps_an_admins_labels(tmp_path, admin):
    local = _local(tmp_path / "var")
    fleet.register(admin, local)
    TritonServer.objects.filter(name="local-2").update(labels={"env": "demo", "gpu": "none"})
    moved = _local(tmp_path / "var", grpc=svc.free_port())
    said = fleet.register(admin, moved)
    assert said.startswith("the server local-2's grpc_url") and "http_url" in said
    row = TritonServer.objects.get(name="local-2")
    assert row.grpc_url == f"127.0.0.1:{moved.ports.grpc}"
    assert row.labels == {"env": "demo", "gpu": "none"}
    (changed,) = AuditEvent.objects.filter(action="server.change")
    assert f"grpc_url 127.0.0.1:{local.ports.grpc} -> 127.0.0.1:{moved.ports.grpc}" in (
        changed.detail
    )


def test_registration_goes_through_the_registrys_checks(tmp_path, admin, settings):
    """The address of `default` is refused as the CLI refuses it, and nothing is stored."""
    settings.TRITON_URL = "127.0.0.1:21005"
    local = _local(tmp_path / "var", grpc=21005)
    with pytest.raises(svc.ServiceError, match="grpc_url: 127.0.0.1:21005 is already the gRPC"):
        fleet.register(admin, local)
    assert not TritonServer.objects.exists()


def test_make_run_registers_as_its_admin_and_refuses_without_one(tmp_path, django_user_model):
    with pytest.raises(svc.ServiceError, match="no active dashboard user 'admin'"):
        run.acting_admin()
    django_user_model.objects.create_superuser("admin", "", "pw-admin-12345")
    assert run.acting_admin().get_username() == "admin"


def test_servers_of_an_earlier_larger_count_are_named_as_leftovers(tmp_path, admin):
    var = tmp_path / "var"
    for planned in fleet.prepare(3, var, DEMO):
        fleet.register(admin, planned)
    other = _local(tmp_path / "elsewhere", "local-7")
    TritonServer.objects.create(
        name="local-7", repository=str(other.repository), labels={}, **other.addresses()
    )
    assert fleet.leftovers(2, var) == ["local-3"]  # local-7 is not make run's
    assert fleet.leftovers(3, var) == []


# --- the flags of every tritonserver make run starts ------------------------------------------


def test_every_tritonserver_make_run_starts_exports_latency_summaries(tmp_path, monkeypatch):
    """The server page's p50/p99 chart reads nv_inference_request_summary_us, which Triton
    exports only with --metrics-config summary_latencies=true."""
    started: list[list[str]] = []

    def popen(cmd, **kwargs):  # type: ignore[no-untyped-def]
        started.append(cmd)
        return SimpleNamespace(poll=lambda: 1, returncode=1, pid=0)

    monkeypatch.setattr(svc, "subprocess", SimpleNamespace(**{**vars(subprocess), "Popen": popen}))
    repo = tmp_path / "repo"
    (repo / "add_sub").mkdir(parents=True)
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    with pytest.raises(svc.ServiceError, match="exited with code 1"):
        run.start_triton(repo, Path(django_settings.VAR_DIR), ports, tmp_path / "t.log")
    (cmd,) = started
    assert "--metrics-config=summary_latencies=true" in cmd
    assert "--model-control-mode=explicit" in cmd and "--load-model=add_sub" in cmd
    assert "--exit-on-error=false" in cmd


# --- perf_analyzer, installed by make run -----------------------------------------------------


@pytest.fixture()
def installer(monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """No perf_analyzer anywhere; make run's installer replaced: it fails with pip's error,
    or (``installer.works = True``) puts the binary where the sweep looks."""
    from profiler_app.engine import perf_analyzer_command

    binary = tmp_path / "tools" / "perf_analyzer"
    monkeypatch.delenv("PERF_ANALYZER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(perf_analyzer_command, "PROJECT_BINARY", binary)
    state = SimpleNamespace(works=False, calls=[])

    def fake_run(cmd, **kwargs):  # type: ignore[no-untyped-def]
        state.calls.append(cmd)
        if state.works:
            binary.parent.mkdir(parents=True, exist_ok=True)
            binary.write_text("#!/bin/sh\n")
            binary.chmod(0o755)
            return SimpleNamespace(returncode=0, stdout="perf_analyzer ready\n", stderr="")
        pip = "ERROR: No matching distribution found for tritonclient==2.48.0\n"
        return SimpleNamespace(returncode=1, stdout="", stderr=pip + "Traceback ...\nError\n")

    monkeypatch.setattr(run, "subprocess", SimpleNamespace(**{**vars(subprocess), "run": fake_run}))
    return state


def test_make_run_installs_perf_analyzer_when_missing(installer):
    installer.works = True
    said = run.install_perf_analyzer()
    assert said.startswith("installed at ") and said.endswith("tools/perf_analyzer")
    (cmd,) = installer.calls
    assert cmd[-1].endswith("scripts/install_perf_analyzer.py")
    assert run.install_perf_analyzer().startswith("found at ")  # not installed twice
    assert len(installer.calls) == 1


def test_make_run_goes_on_without_perf_analyzer_and_says_why(installer):
    said = run.install_perf_analyzer()
    assert said == (
        "not installed (ERROR: No matching distribution found for tritonclient==2.48.0); the "
        "Benchmark form offers the built-in engine only (retry: .venv/bin/python "
        "scripts/install_perf_analyzer.py)"
    )
