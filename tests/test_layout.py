"""The house rules of the code layout (issue "One house"), checked on the tree itself."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPS = (
    "dashboard",
    "common",
    "jobs",
    "registry",
    "repository_app",
    "profiler_app",
    "inference",
    "fleet",
    "team",
    "devstack",
    "triton_api",
)


def _sources() -> dict[Path, str]:
    return {
        p: p.read_text()
        for app in APPS
        for p in (ROOT / app).rglob("*.py")
        if "migrations" not in p.parts
    }


def test_no_import_circles_even_through_function_level_imports():
    done = subprocess.run(
        [sys.executable, "scripts/import_cycles.py", "--all"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _imports_a_triton_client(tree: ast.Module) -> bool:
    """An import of tritonclient's gRPC or HTTP client (its protobuf modules aside); text
    that only names one (a snippet to copy) is no client."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(
            re.match(r"tritonclient\.(grpc|http)\b", n)
            and not n.endswith((".model_config_pb2", ".service_pb2"))
            for n in names
        ):
            return True
    return False


def test_the_client_rule_sees_imports_and_not_text():
    assert _imports_a_triton_client(ast.parse("import tritonclient.grpc as g"))
    assert _imports_a_triton_client(ast.parse("def f():\n    from tritonclient.http.aio import X"))
    assert _imports_a_triton_client(ast.parse("from tritonclient import grpc"))
    assert not _imports_a_triton_client(ast.parse("from tritonclient.grpc import model_config_pb2"))
    assert not _imports_a_triton_client(ast.parse("s = 'import tritonclient.grpc as grpcclient'"))


def test_only_the_triton_package_holds_a_triton_client_and_knows_the_gpu_metrics():
    gpu = re.compile(r"nv_gpu_")
    holders, gpu_readers = set(), set()
    for path, text in _sources().items():
        rel = path.relative_to(ROOT).as_posix()
        if _imports_a_triton_client(ast.parse(text)):
            holders.add(rel)
        if gpu.search(text):
            gpu_readers.add(rel)
    # The engine's inference transports are its hot path; they take their URLs from the
    # package (connection) and call nothing but inference.
    assert holders <= {
        "triton_api/client.py",
        "triton_api/aio.py",
        "profiler_app/engine/load_workers.py",
        "profiler_app/engine/http_body.py",
    }, holders
    assert gpu_readers == {"triton_api/gpus.py"}, gpu_readers


def test_the_triton_package_runs_without_django():
    """triton_api takes its settings as parameters: every module imports in a fresh
    interpreter without DJANGO_SETTINGS_MODULE, and nothing of Django comes with it."""
    names = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "triton_api").rglob("*.py")
    )
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "      ('django', 'dashboard', 'common', 'repository_app', 'profiler_app', 'team')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


# What may still name the wiring package from below, and why (module -> dashboard modules).
_ARROWS_UP_ALLOWED = {
    # The Celery app is wiring (configured from the settings); the queue helpers ask it
    # for its default queue and its workers, at call time only. celery.current_app is
    # per thread and falls back to an unconfigured app outside the one that built it.
    "profiler_app/load_agents.py": {"dashboard.celery_app"},
    "jobs/queues.py": {"dashboard.celery_app"},
}


def _absolute_imports(tree: ast.Module) -> set[str]:
    """The modules a module imports by absolute name, at module or function level
    (relative imports stay in its own package)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def _dashboard_imports(tree: ast.Module) -> set[str]:
    """The ``dashboard`` modules a module imports, at module or function level."""
    return {n for n in _absolute_imports(tree) if n == "dashboard" or n.startswith("dashboard.")}


def test_no_arrow_climbs_from_the_apps_or_the_ground_floor_into_the_wiring():
    """``dashboard`` is wiring (settings, urls, asgi, routing, celery): the apps, the
    ground-floor ``common`` library, triton_api and devstack never import it."""
    climbing, allowed_seen = {}, {}
    for path, text in _sources().items():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("dashboard/"):
            continue
        imported = _dashboard_imports(ast.parse(text))
        allowed = _ARROWS_UP_ALLOWED.get(rel, set())
        if imported - allowed:
            climbing[rel] = sorted(imported - allowed)
        if imported & allowed:
            allowed_seen[rel] = imported & allowed
    assert climbing == {}, climbing
    assert allowed_seen == _ARROWS_UP_ALLOWED, "the allow-list names an arrow that is gone"


# The floors, lowest first: a package imports only from its own floor's package itself and
# from the floors below (at module or function level). The Triton client package and the
# shared library are the ground; jobs and team know no server; the registry knows which
# servers there are; the repository pages take a server; sweeps measure models; the fleet
# acts on many servers and models at once; the wiring and the dev stack hold it together.
FLOORS = (
    ("triton_api",),
    ("common",),
    ("jobs", "team"),
    ("registry",),
    ("repository_app",),
    ("profiler_app", "inference"),
    ("fleet",),
    ("dashboard", "devstack"),
)


def _app_imports(path: Path, tree: ast.Module) -> set[str]:
    """The application packages a module imports (relative imports stay in its own)."""
    return {n.split(".")[0] for n in _absolute_imports(tree) if n.split(".")[0] in APPS}


def test_every_arrow_points_down_the_floors():
    floor = {app: level for level, apps in enumerate(FLOORS) for app in apps}
    assert set(floor) == set(APPS)
    up = {}
    for path, text in _sources().items():
        rel = path.relative_to(ROOT).as_posix()
        app = rel.split("/")[0]
        for other in _app_imports(path, ast.parse(text)) - {app}:
            if floor[other] >= floor[app] and f"{other}.celery_app" not in _ARROWS_UP_ALLOWED.get(
                rel, set()
            ):
                up.setdefault(rel, set()).add(other)
    assert up == {}, up


def test_the_floor_rule_sees_an_arrow_up():
    code = "def f():\n    from fleet.rollouts import runner\nimport team.audit\n"
    assert _app_imports(ROOT / "registry" / "x.py", ast.parse(code)) == {"fleet", "team"}


def test_the_climbing_rule_sees_function_level_imports():
    code = "import os\ndef f():\n    from dashboard.settings import X\n    import dashboard\n"
    assert _dashboard_imports(ast.parse(code)) == {"dashboard.settings", "dashboard"}


def test_pages_and_api_reads_never_run_the_watchdog_or_restore_a_search():
    for path, text in _sources().items():
        if path.name in ("views.py", "api.py", "consumers.py") or path.name.endswith("_views.py"):
            for call in ("watchdog", "restore_pending", "lifecycle.check(", "finish_unfinished("):
                assert call not in text, (path, call)


# The thread pools the application may hold, and why none runs user work in a web process
# (a load, an unload, a rollout's server, an upload's publish: those are jobs,
# `jobs.lifecycle`, on Celery).
_POOLS = {
    "dashboard/health.py": "asks the components at once, for /healthz",
    "repository_app/events.py": "sends events off the request's thread",
    "fleet/overview.py": "asks each server at once, for the fleet page",
    "registry/server_rules.py": "resolves a new server's address, with a deadline",
    "repository_app/editor/reload_offer.py": "asks each server whether it serves the model",
    "fleet/rollouts/runner.py": "run_here: the CLI's own process runs its rollout",
    "profiler_app/sweep_recorder.py": "stores a sweep's levels, in the worker that runs it",
}


def test_no_thread_pool_in_the_application_but_the_known_ones():
    found = {
        path.relative_to(ROOT).as_posix()
        for path, text in _sources().items()
        if "ThreadPoolExecutor(" in text
    }
    assert found == set(_POOLS), found ^ set(_POOLS)


def test_a_rollout_snapshot_only_reads():
    """What the rollout page, its API and its socket show (runner.snapshot) ends nothing:
    the workers' watchdog does (jobs.lifecycle.check)."""
    import ast

    from fleet.rollouts import runner

    tree = ast.parse(Path(runner.__file__).read_text())
    snapshot = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "snapshot")
    called = {
        node.func.id
        for node in ast.walk(snapshot)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert not called & {"finish_if_done", "finish_unfinished", "cancel", "resume", "check"}, called


# --- permissions on a Triton server name the server (team.narrowing) -------------------------

# team.manage_servers: adding a server names none yet; changing or removing one passes it
# (server_admin), so a narrowing on that server holds there too.
_NOT_SERVER_SCOPED = {"team.manage_users", "auth.view_user", "auth.add_user", "auth.change_user",
                      "auth.view_group", "team.manage_servers"}  # fmt: skip


def _permission_constants(trees: dict[Path, ast.Module]) -> dict[str, set[str]]:
    """NAME -> the strings module-level ``NAME = "app.codename"`` assigns, in any module
    (``staging.UPLOAD_PERMISSION`` is looked up by its last name)."""
    found: dict[str, set[str]] = {}
    for tree in trees.values():
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found.setdefault(target.id, set()).add(node.value.value)
    return found


def _permissions_named(node: ast.expr, constants: dict[str, set[str]]) -> set[str] | None:
    """The permissions an argument may be; None when the code alone does not say."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.Attribute):
        return constants.get(node.attr)
    return None


def _server_scoped_checks_without_a_server(trees: dict[Path, ast.Module]) -> list[str]:
    from team.narrowing import SERVER_PERMISSIONS

    constants = _permission_constants(trees)
    missing = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            # has_perm(PERM, server); team.cli.acting_user(username, PERM, server)
            index = {"has_perm": 0, "acting_user": 1}.get(name)
            if index is None or len(node.args) <= index:
                continue
            server_args = node.args[index + 1 :] + [k.value for k in node.keywords]
            named = _permissions_named(node.args[index], constants)
            scoped = named is None or bool(named & SERVER_PERMISSIONS)
            has_server = any(
                not (isinstance(a, ast.Constant) and a.value is None) for a in server_args
            )
            if scoped and not has_server:
                rel = path.relative_to(ROOT).as_posix()
                missing.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return missing


def test_every_check_of_a_permission_on_a_server_names_the_server():
    """A role narrowed on a server (team.narrowing) holds only where the check passes the
    server: `user.has_perm(PERMISSION, server)`. A check of a server-scoped permission (or
    of one the code does not name) without it answers the global role: refused here."""
    trees = {path: ast.parse(text) for path, text in _sources().items()}
    assert _server_scoped_checks_without_a_server(trees) == []
    # Templates: `perms.<app>.<codename>` is global; `server_perms` is the page's server's.
    from team.narrowing import SERVER_PERMISSIONS

    global_in_templates = [
        f"{path.relative_to(ROOT).as_posix()}: perms.{permission}"
        for path in (ROOT / "templates").rglob("*.html")
        for permission in SERVER_PERMISSIONS
        if re.search(rf"(?<![\w.])perms\.{re.escape(permission)}\b", path.read_text())
    ]
    assert global_in_templates == []


def test_every_role_permission_is_known_as_a_server_action_or_not():
    """A permission added to a role must be classified: an action on a server (narrowed
    per server) or not (managing users)."""
    from team.narrowing import SERVER_PERMISSIONS
    from team.roles import ROLE_PERMISSIONS

    granted = set().union(*ROLE_PERMISSIONS.values())
    assert granted <= SERVER_PERMISSIONS | _NOT_SERVER_SCOPED, granted - SERVER_PERMISSIONS
    assert not SERVER_PERMISSIONS & _NOT_SERVER_SCOPED


def test_the_server_rule_catches_a_check_without_a_server():
    """The rule itself: a check without a server is found, with one it is not."""
    code = (
        'CONTROL = "repository_app.control_models"\n'
        "def view(request, server, perm):\n"
        "    request.user.has_perm(CONTROL)\n"
        "    request.user.has_perm('team.upload_models', None)\n"
        "    request.user.has_perm(perm)\n"
        "    acting_user('olga', CONTROL)\n"
        "    request.user.has_perm(CONTROL, server)\n"
        "    request.user.has_perm('team.manage_users')\n"
        "    acting_user('olga', CONTROL, server)\n"
    )
    found = _server_scoped_checks_without_a_server({ROOT / "x.py": ast.parse(code)})
    assert [line.split(":")[1] for line in found] == ["3", "4", "5", "6"], found
