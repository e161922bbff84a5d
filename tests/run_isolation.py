"""How one test run keeps to itself and splits its work (scripts/test.sh starts it):

- each xdist worker has its own Redis database, so one worker's flush or queue never
  touches another's (pytest-django already gives each its own test database);
- an interrupted run tears its fixtures down: SIGTERM and SIGHUP end pytest as Ctrl-C
  does, and a pytest process whose parent died interrupts itself;
- which tests run in the five serial groups of real services (each group on one xdist
  worker at a time, with that worker's own tritonservers, Celery worker and Daphne), and
  which touch a database (the
  PostgreSQL pass of .ci/run runs those: `-m database`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

# A test whose fixtures reach any of these runs in a serial group: they start or share real
# processes (tritonserver, Celery, Daphne, Chromium), or measure against them.
SERVICE_FIXTURES = frozenset({
    "triton", "triton_shared", "triton_solo", "shared_server", "solo_server", "failing_model",
    "service_env", "celery_worker", "web_server", "browser",
})  # fmt: skip
SERVICE_MARKERS = ("integration", "browser")
# Five serial groups, beside each other (each xdist worker starts its own session services):
# the tests that measure through a load generator (sweeps, searches, the engine)...
SWEEPS_GROUP = "sweeps"
SWEEP_MODULES = frozenset({
    "test_distributed_sweep", "test_engine_gpu", "test_engine_grpc_h2", "test_engine_loadgen",
    "test_engine_perf_analyzer", "test_engine_sequences", "test_engine_streaming",
    "test_search_confirm_run", "test_search_kinds_run", "test_search_run", "test_sweep_cli",
    "test_sweep_kinds", "test_sweep_run", "test_sweep_steps", "test_sweep_unstable_levels",
})  # fmt: skip
# ...the other tests that start processes of their own (tritonservers, workers, whole
# stacks, other test runs)...
PROCESSES_GROUP = "processes"
PROCESS_MODULES = frozenset({
    "test_demo_kinds", "test_devstack", "test_faults", "test_faults_disk_upload",
    "test_faults_publish_kill", "test_faults_redis_websocket", "test_faults_triton_mid_load",
    "test_grafana_dashboard", "test_hardening", "test_health", "test_job_routing_workers",
    "test_run_guard", "test_triton_client", "test_triton_command", "test_triton_restart",
})  # fmt: skip
# ...every other test on the session's services (pages, the API, sockets)...
SERVICES_GROUP = "services"
# ...and those of them that drive Chromium, in two groups (their modules dealt out in turn),
# each run back to back so that one browser serves it. In one group with `services` they
# made that worker run ~560 s of the PostgreSQL pass while the others were done at ~340 s;
# in one group of their own (~300 s) the first worker done with its group still ran ~100 s
# past the others. xdist hands each to a worker once it is done with its own group.
BROWSER_GROUPS = ("browsers", "browsers-2")
GROUPS = (SWEEPS_GROUP, PROCESSES_GROUP, SERVICES_GROUP, *BROWSER_GROUPS)
GROUP_SUFFIXES = tuple("@" + group for group in GROUPS)


def worker_index() -> int | None:
    """0, 1, ... in an xdist worker; None in a run without workers."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else None


def own_redis_database() -> None:
    """Point this xdist worker at Redis database 1 + its index (scripts/test.sh gives the run
    database 0 of its private redis-server): the Django settings, the Celery app and the
    channel layer, and the environment the subprocesses inherit. Runs at conftest import,
    before anything has connected."""
    index = worker_index()
    if index is None:
        return
    from django.conf import settings

    parts = urlsplit(settings.REDIS_URL)
    url = urlunsplit(parts._replace(path=f"/{1 + index}"))
    for name in ("REDIS_URL", "CELERY_BROKER_URL"):
        os.environ[name] = url
    settings.REDIS_URL = settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = url
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [url]

    from channels.layers import channel_layers

    from dashboard.celery_app import app

    channel_layers.backends.clear()
    app.conf.update(broker_url=url, result_backend=url)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def interrupt_on_signals() -> None:
    """SIGTERM/SIGHUP end the run as Ctrl-C does: pytest then runs every fixture's teardown,
    which stops the services it started. And if this process's parent dies (scripts/test.sh
    or the xdist controller killed outright), it interrupts itself the same way."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def uses_services(item: pytest.Item) -> bool:
    return bool(SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ()))) or any(
        item.get_closest_marker(name) for name in SERVICE_MARKERS
    )


def touches_database(item: pytest.Item) -> bool:
    """Through the ORM (a django_db mark, or a fixture on pytest-django's database set-up:
    db, transactional_db, service_env...) or a subprocess told so with `database`."""
    return bool(
        item.get_closest_marker("django_db")
        or "django_db_setup" in getattr(item, "fixturenames", ())
        or item.get_closest_marker("database")
    )


def _module_name(item: pytest.Item) -> str:
    module = getattr(item, "module", None)
    return module.__name__.rpartition(".")[2] if module is not None else ""


def _drives_a_browser(item: pytest.Item) -> bool:
    return "browser" in getattr(item, "fixturenames", ())


def group_of(item: pytest.Item, browser_groups: dict[str, str]) -> str:
    """``browser_groups``: the browser group of each module whose browser tests go there."""
    name = _module_name(item)
    if name in SWEEP_MODULES:
        return SWEEPS_GROUP
    if name in PROCESS_MODULES:
        return PROCESSES_GROUP
    return browser_groups[name] if _drives_a_browser(item) else SERVICES_GROUP


def deal_browser_groups(items: list[pytest.Item]) -> dict[str, str]:
    """The modules whose browser tests go to the browser groups, dealt out to them in turn
    (in name order, so every xdist worker deals them alike)."""
    names = {_module_name(item) for item in items if _drives_a_browser(item)}
    names -= SWEEP_MODULES | PROCESS_MODULES
    return {name: BROWSER_GROUPS[i % len(BROWSER_GROUPS)] for i, name in enumerate(sorted(names))}


def mark(items: list[pytest.Item]) -> None:
    """Mark each test `database` where it touches one, and put every test that uses services
    in its serial group (before xdist reads the groups)."""
    browser_groups = deal_browser_groups(items)
    for item in items:
        if touches_database(item) and not item.get_closest_marker("database"):
            item.add_marker(pytest.mark.database)
        if uses_services(item):
            item.add_marker(pytest.mark.xdist_group(group_of(item, browser_groups)))


class BrowsersLast:
    """Moves the browser tests to the end, after every other plugin's ordering (pytest-django
    sorts by database use): a group then runs its browser tests back to back, so one Chromium
    serves them all, and no asyncio test of the group runs while its event loop is open."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items.sort(key=lambda item: "browser" in getattr(item, "fixturenames", ()))


def check_grouped(session: pytest.Session) -> None:
    """In an xdist worker with --dist loadgroup, every test of a serial group must carry the
    group in its node id (how xdist schedules it): otherwise a pytest/xdist upgrade has broken
    grouping and real-service tests would run at once on two workers. Fail the run instead."""
    if worker_index() is None or not session.config.getvalue("loadgroup"):
        return
    loose = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") and not item.nodeid.endswith(GROUP_SUFFIXES)
    ]
    if loose:
        raise pytest.UsageError(
            f"{len(loose)} tests of the serial groups are not grouped by xdist "
            f"(first: {loose[0]}): check the pytest and pytest-xdist versions in pyproject.toml"
        )
