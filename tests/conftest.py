"""Session fixtures for the real services: tritonserver, Redis, a Celery worker, Daphne.

Unit tests use none of them. Integration tests ask for `triton` (a real tritonserver on
free ports over a temporary copy of the demo repository plus the test-only models),
`celery_worker` and `web_server` (subprocesses sharing the test database).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings

from devstack import services as svc

from . import run_isolation

run_isolation.own_redis_database()

ROOT = Path(__file__).resolve().parent.parent
DEMO_REPOSITORY = ROOT / "examples" / "model_repository"
TEST_MODELS = Path(__file__).resolve().parent / "models"
# Upper bounds only, never targets: they keep a broken run from hanging, and are far above
# what a busy two-core CI machine takes (speed is measured by `make bench`, not here).
SERVICE_START_S = 120  # a Daphne or Celery subprocess up and answering
# The fields every "activity" event carries (repository_app.events.EVENT_FIELDS), for tests
# that flood the activity group.
ACTIVITY = {
    "id": 0, "at": "", "user": "test", "action": "test", "model": "", "server": "",
    "target": "", "outcome": "ok",
}  # fmt: skip
BROWSER_WAIT_MS = 120_000  # a page condition that waits on real services (poller ticks...)


@pytest.fixture(scope="session", autouse=True)
def collected_static() -> None:
    """Tests render pages with DEBUG off, where {% static %} names the content-hashed copies
    listed in collectstatic's manifest (under the test VAR_DIR). The first collect
    compresses every file with Brotli (about a minute on two cores), later ones only the
    changed files; it runs only when a static source is newer than the manifest."""
    import fcntl

    from django.contrib.staticfiles.finders import get_finders
    from django.core.management import call_command

    manifest = Path(settings.STATIC_ROOT) / "staticfiles.json"
    # One collect at a time: the parallel workers of a run (and runs of other checkouts
    # sharing this VAR_DIR) would otherwise write the same manifest at once.
    with (Path(settings.VAR_DIR) / "collectstatic.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if manifest.exists():
            sources = (
                os.stat(storage.path(path)).st_mtime
                for finder in get_finders()
                for path, storage in finder.list(["CVS", ".*", "*~"])
            )
            if max(sources, default=0) <= manifest.stat().st_mtime:
                return
        call_command("collectstatic", interactive=False, verbosity=0)


@pytest.fixture(scope="session", autouse=True)
def repository_roots(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Tests keep model repositories in tmp_path folders: MODEL_REPOSITORY_ROOTS holds them
    (and MODEL_REPOSITORY's parent, the default), in this process and in `service_env`'s."""
    roots = [tmp_path_factory.getbasetemp().resolve(), Path(settings.MODEL_REPOSITORY).parent]
    settings.MODEL_REPOSITORY_ROOTS = roots
    return roots


@dataclass
class TritonFixture:
    repository: Path
    ports: svc.TritonPorts
    process: subprocess.Popen
    log: Path
    traces: Path | None = None  # where its trace files go (Triton's --trace-config file=)

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports.http}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.metrics}/metrics"

    def env(self) -> dict[str, str]:
        found = {
            "TRITON_URL": self.grpc_url,
            "TRITON_HTTP_URL": self.http_url,
            "TRITON_METRICS_URL": self.metrics_url,
            "MODEL_REPOSITORY": str(self.repository),
        }
        if self.traces is not None:
            found["TRITON_TRACE_ROOTS"] = str(self.traces)
        return found


class SessionServices:
    """The session's service processes: tritonservers, the Celery worker, Daphne. The first of
    their fixtures to be torn down stops them all at once (the others find them stopped),
    after every test's own teardown, and this process's Triton clients are closed first: a
    tritonserver waits ~5 s for each of its services that still has a connection open.
    Stopped one after the other, with the connections open, they made the last test's
    teardown 19-27 s in CI."""

    def __init__(self) -> None:
        # How to reach each one's current process: a test may stop and restart a server.
        self._current: list[Callable[[], subprocess.Popen]] = []

    def add(self, current: Callable[[], subprocess.Popen]) -> None:
        self._current.append(current)

    def stop_all(self) -> None:
        from triton_api import client

        client.close_all()
        svc.stop_all([current() for current in self._current])
        self._current.clear()


SESSION_SERVICES = SessionServices()


@pytest.fixture(scope="session")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonFixture]:
    """A real tritonserver (explicit model control) over a temporary model repository."""
    work = tmp_path_factory.mktemp("triton")
    repository = work / "model_repository"
    shutil.copytree(DEMO_REPOSITORY, repository)
    for model in TEST_MODELS.iterdir():
        shutil.copytree(model, repository / model.name)
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    log = work / "tritonserver.log"
    # With Triton's default strict readiness, one failed load (tests make some on purpose)
    # leaves the whole server "not ready" for good, even after an unload: keep tests apart.
    traces = work / "traces"
    process = svc.start_tritonserver(
        repository, Path(settings.VAR_DIR), ports, log, extra_args=("--strict-readiness=false",),
        trace_file=traces / "trace.json",
    )  # fmt: skip
    fixture = TritonFixture(repository, ports, process, log, traces)
    SESSION_SERVICES.add(lambda: fixture.process)
    saved = {k: getattr(settings, k) for k in fixture.env()}
    settings.TRITON_URL = fixture.grpc_url
    settings.TRITON_HTTP_URL = fixture.http_url
    settings.TRITON_METRICS_URL = fixture.metrics_url
    settings.MODEL_REPOSITORY = repository
    settings.TRITON_TRACE_ROOTS = [traces]
    yield fixture
    for key, value in saved.items():
        setattr(settings, key, value)
    SESSION_SERVICES.stop_all()


# --- more Triton servers (registry.servers), started only for the tests that ask ---------

SOLO_ONLY = "solo_only"  # a model only the "solo" server's repository has


@dataclass
class ExtraTriton(TritonFixture):
    """A second or third tritonserver of the session, and how to register it as a
    TritonServer row (rows are per test; the process is per session)."""

    name: str = ""
    extra_args: tuple[str, ...] = ()

    def register(self) -> Any:
        """Its TritonServer row (through the model's checks); returns servers.get(name)."""
        from registry import servers
        from registry.models import TritonServer

        row = TritonServer(
            name=self.name,
            grpc_url=self.grpc_url,
            http_url=self.http_url,
            metrics_url=self.metrics_url,
            repository=str(self.repository),
            labels={"role": self.name},
        )
        row.full_clean()
        row.save()
        return servers.get(self.name)

    def stop(self) -> None:
        svc.stop(self.process)

    def restart(self) -> None:
        """Start it again on the same ports (after `stop`): nothing is loaded then."""
        self.process = svc.start_tritonserver(
            self.repository, Path(settings.VAR_DIR), self.ports, self.log,
            extra_args=self.extra_args,
        )  # fmt: skip


def _start_extra(name: str, repository: Path, work: Path) -> ExtraTriton:
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    log = work / f"tritonserver-{name}.log"
    extra = ("--strict-readiness=false",)
    process = svc.start_tritonserver(
        repository, Path(settings.VAR_DIR), ports, log, extra_args=extra
    )
    return ExtraTriton(repository, ports, process, log, name=name, extra_args=extra)


@pytest.fixture(scope="session")
def triton_shared(triton: TritonFixture, tmp_path_factory: pytest.TempPathFactory):
    """A second tritonserver on the SAME repository as `triton` (a shared volume)."""
    extra = _start_extra("shared", triton.repository, tmp_path_factory.mktemp("shared"))
    SESSION_SERVICES.add(lambda: extra.process)
    yield extra
    SESSION_SERVICES.stop_all()


@pytest.fixture(scope="session")
def triton_solo(tmp_path_factory: pytest.TempPathFactory):
    """A third tritonserver on a repository of its own: add_sub and SOLO_ONLY (a copy of
    add_sub under another name), which no other server has."""
    work = tmp_path_factory.mktemp("solo")
    repository = work / "model_repository"
    shutil.copytree(DEMO_REPOSITORY / "add_sub", repository / "add_sub")
    shutil.copytree(DEMO_REPOSITORY / "add_sub", repository / SOLO_ONLY)
    config = repository / SOLO_ONLY / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "add_sub"', f'name: "{SOLO_ONLY}"'))
    extra = _start_extra("solo", repository, work)
    SESSION_SERVICES.add(lambda: extra.process)
    yield extra
    SESSION_SERVICES.stop_all()


@pytest.fixture()
def shared_server(triton_shared: ExtraTriton):  # type: ignore[no-untyped-def]
    """The "shared" server registered for this test (the test needs a django_db mark)."""
    return triton_shared.register()


@pytest.fixture()
def solo_server(triton_solo: ExtraTriton):  # type: ignore[no-untyped-def]
    """The "solo" server registered for this test (the test needs a django_db mark)."""
    return triton_solo.register()


@pytest.fixture()
def failing_model(triton: TritonFixture) -> Iterator[str]:
    """The model whose initialize raises; unloaded afterwards so later tests start clean."""
    from triton_api.client import TritonClient

    yield "fails_initialize"
    TritonClient(triton.grpc_url, triton.metrics_url).unload("fails_initialize")


@pytest.fixture()
def redis_db() -> Iterator[redis.Redis]:
    """The test Redis database, flushed before and after the test."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


def on_repository(root: Path):  # type: ignore[no-untyped-def]
    """The default server with its model repository at ``root``: for tests of the disk side
    (saving, uploads) on a repository of their own."""
    import dataclasses

    from registry import servers

    return dataclasses.replace(servers.default(), repository=Path(root))


def database_url() -> str:
    """The URL of the test database that pytest-django created, for subprocesses."""
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's, whose drop of a PostgreSQL test database ends the sessions still on
    it (DROP DATABASE ... WITH (FORCE)). A plain DROP refuses while any session is on the
    database, and some are at the end of a run: a worker thread that ran an upload chunk in
    this process keeps its connection (common.kept_connection), and a service process may
    still be going away. The run then ended with a warning and left test_dashboard_gwN
    behind."""
    yield
    force_drops()


def force_drops() -> None:
    """On the backend's class: the connection that pytest-django drops with may not be the
    one ``connections`` gives here (a browser test's last context is Playwright's greenlet,
    whose context variables hold connections of their own)."""
    from django.db import connections

    for alias in connections:
        if connections[alias].vendor == "postgresql":
            type(connections[alias].creation)._destroy_test_db = _forced_drop  # type: ignore[method-assign]


def _forced_drop(self, test_database_name: str, verbosity: int) -> None:  # type: ignore[no-untyped-def]
    self.connection.close_pool()
    with self._nodb_cursor() as cursor:
        name = self.connection.ops.quote_name(test_database_name)
        cursor.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def service_env(
    django_db_setup: None, django_db_blocker, triton: TritonFixture, repository_roots: list[Path]
) -> dict[str, str]:
    """Environment for the web and worker subprocesses: same database, Redis and Triton.

    pytest-django creates the test database only when a collected test is marked for it,
    so tests that use these subprocesses carry a django_db mark."""
    with django_db_blocker.unblock():
        url = database_url()
    return {
        **os.environ,
        **triton.env(),
        "DATABASE_URL": url,
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "MODEL_REPOSITORY_ROOTS": os.pathsep.join(str(root) for root in repository_roots),
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        "PYTHONUNBUFFERED": "1",
        # One Daphne per test web server (three xdist workers share two cores); the front's
        # several workers have a test of their own (test_web_tier).
        "WEB_WORKERS": "1",
        # The session's workers would record the tests' own edits of the shared demo
        # repository as revisions at any moment; tests call record_outside_edits themselves.
        "RECORD_OUTSIDE_EDITS": "false",
    }


STARTED_WORKERS: set[str] = set()  # the Celery hostnames this process started


def foreign_workers() -> list[str]:
    """Workers answering on this process's broker that it did not start (scripts/test.sh
    gives each run a private Redis, and each xdist worker its own database in it)."""
    from dashboard.celery_app import app

    replies = app.control.ping(timeout=0.5) or []
    return sorted(name for reply in replies for name in reply if name not in STARTED_WORKERS)


def start_celery_worker(
    env: dict[str, str], log: Path, hostname: str, *extra: str, wait: bool = True
) -> subprocess.Popen:
    """A real Celery worker subprocess; with `wait`, returns once it answers a ping
    (through the broker this process's Celery app is configured with)."""
    from dashboard.celery_app import app

    # The worker's poller would write metrics history into the shared test database at
    # real times, under tests that count history rows: tests drive the recorder themselves.
    env = {"HISTORY_ENABLED": "false", **env}

    others = foreign_workers()
    assert not others, (
        f"workers this run did not start consume its broker ({env['CELERY_BROKER_URL']}): "
        f"{', '.join(others)}; they would take this run's jobs"
    )
    STARTED_WORKERS.add(hostname)
    proc = subprocess.Popen(
        svc.tied_to_parent(
            [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "--loglevel=INFO",
             "--concurrency=1", "--pool=prefork", f"--hostname={hostname}", "--without-gossip",
             "--without-mingle", *extra]
        ),
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    if wait:
        svc.wait_until(
            lambda: any(hostname in reply for reply in app.control.ping(timeout=0.5) or []),
            SERVICE_START_S, f"celery worker {hostname}", proc, log,
        )  # fmt: skip
    return proc


@pytest.fixture(scope="session")
def celery_worker(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    """A real Celery worker process against the real broker."""
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    proc = start_celery_worker(service_env, log, f"test-{os.getpid()}@localhost")
    SESSION_SERVICES.add(lambda: proc)
    yield proc
    SESSION_SERVICES.stop_all()


@dataclass
class WebServer:
    url: str
    process: subprocess.Popen


def wait_for(predicate, timeout: float, what: str, every: float = 0.2):  # type: ignore[no-untyped-def]
    """Poll `predicate` until it returns something true (returned), or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def _jobs_here(monkeypatch, kind_name: str):  # type: ignore[no-untyped-def]
    """Jobs of ``kind_name`` are not sent to Celery (a session worker would run them against
    the suite's Triton and repository): the test runs them here with the function returned."""
    from jobs import lifecycle

    send = lifecycle.dispatch
    monkeypatch.setattr(
        lifecycle, "dispatch", lambda kind, pk: kind.name != kind_name and send(kind, pk)
    )
    return lambda: run_queued_jobs(kind_name)


@pytest.fixture()
def actions_here(monkeypatch):  # type: ignore[no-untyped-def]
    """Loads, unloads and reloads a page starts run in this process (`_jobs_here`)."""
    return _jobs_here(monkeypatch, "control")


@pytest.fixture()
def publishes_here(monkeypatch):  # type: ignore[no-untyped-def]
    """Upload publishes started without ?wait run in this process (`_jobs_here`)."""
    return _jobs_here(monkeypatch, "publish")


@pytest.fixture()
def checks_here(monkeypatch):  # type: ignore[no-untyped-def]
    """Check runs run in this process (`_jobs_here`)."""
    return _jobs_here(monkeypatch, "check")


@pytest.fixture()
def traces_here(monkeypatch):  # type: ignore[no-untyped-def]
    """Turning tracing on runs in this process (`_jobs_here`)."""
    return _jobs_here(monkeypatch, "trace")


def run_queued_jobs(kind_name: str) -> list[str]:
    """Run every queued job of a kind in this process, through the one lifecycle, as a
    worker would: for tests whose Triton, repository or spies only this process knows."""
    from django.db import connections

    from jobs import lifecycle

    kind = lifecycle.KINDS[kind_name]
    queued = kind.rows().filter(state="queued").order_by("pk")
    try:
        return [
            lifecycle.run(kind, pk, {"worker": "this test"})
            for pk in queued.values_list("pk", flat=True)
        ]
    finally:
        if threading.current_thread() is not threading.main_thread():
            connections.close_all()


JOB_PICKUP_S = 30  # a queued job no worker of this run has claimed by then is a failure


def wait_for_job(  # type: ignore[no-untyped-def]
    pk: int,
    state: str | Callable[[Any], bool],
    bound: float,
    what: str,
    pickup_s: float = JOB_PICKUP_S,
):
    """Poll the job (a Sweep row) until it is in `state` (or `state(job)` is true), and
    return it. A job still queued after JOB_PICKUP_S with no job running fails at once,
    saying where it waits and which workers consume that queue: no worker of this run is
    taking it (a dead worker, or another run's worker on our broker), and waiting out
    `bound` would only cost time."""
    from jobs import queues
    from profiler_app.models import Sweep

    done = state if callable(state) else (lambda job: job.state == state)
    started = idle_since = time.monotonic()
    while True:
        job = Sweep.objects.get(pk=pk)
        if done(job):
            return job
        now = time.monotonic()
        if Sweep.objects.filter(state=Sweep.State.RUNNING).exists():
            idle_since = now  # queued behind a running job: that is waiting, not a stall
        waited = now - idle_since
        if job.state == Sweep.State.QUEUED and waited > pickup_s:
            queue = job.queue or "(not dispatched to a queue yet)"
            try:
                consumers = ", ".join(queues.ask_workers().get(job.queue, ())) or "none"
            except Exception as exc:  # the broker itself may be what is wrong
                consumers = f"unknown ({exc})"
            raise AssertionError(
                f"job {pk} queued on {queue} for {waited:.0f} s waiting for {what}; "
                f"workers consuming {queue}: {consumers}"
            )
        if now - started > bound:
            raise AssertionError(
                f"timed out after {bound:.0f} s waiting for {what}: job {pk} is {job.state}"
            )
        time.sleep(0.2)


def start_web(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    """The real ASGI server (`python -m dashboard.serve`: Daphne) on a free port."""
    port = svc.free_port()
    proc = subprocess.Popen(
        svc.tied_to_parent(
            [sys.executable, "-m", "dashboard.serve", "-b", "127.0.0.1", "-p", str(port),
             "dashboard.asgi:application"]
        ),
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    svc.wait_until(
        lambda: svc.port_is_open("127.0.0.1", port), SERVICE_START_S, "daphne", proc, log
    )
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def web_server(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    """The real ASGI server (Daphne: HTTP and websockets) on a free port."""
    proc, url = start_web(service_env, tmp_path_factory.mktemp("web") / "daphne.log")
    SESSION_SERVICES.add(lambda: proc)
    yield WebServer(url, proc)
    SESSION_SERVICES.stop_all()


CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class PatientBrowser:
    """The session's Chromium for one test: every context and page it opens waits up to
    BROWSER_WAIT_MS (not Playwright's 30 s) for a selector, a navigation or a click (a bound,
    not a target), and is closed when the test ends, so each test starts from fresh
    contexts (no cookies, storage or pages of another test)."""

    def __init__(self, browser) -> None:  # type: ignore[no-untyped-def]
        self._browser = browser
        self._contexts: list = []

    def new_context(self, **kwargs):  # type: ignore[no-untyped-def]
        context = self._browser.new_context(**kwargs)
        context.set_default_timeout(BROWSER_WAIT_MS)
        context.set_default_navigation_timeout(BROWSER_WAIT_MS)
        self._contexts.append(context)
        return context

    def new_page(self, **kwargs):  # type: ignore[no-untyped-def]
        return self.new_context(**kwargs).new_page()

    def close_contexts(self) -> None:
        for context in self._contexts:
            context.close()
        self._contexts.clear()

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._browser, name)


class SessionChromium:
    """One Playwright and one Debian Chromium (never `playwright install`) for the browser
    tests, which run back to back in the `browsers` group (run_isolation.BrowsersLast).

    Playwright's sync API runs an event loop in this thread while it is open, so it is closed
    before any other test runs (pytest_runtest_setup below): such a test must not find a
    running loop. Between page actions, browser tests use the ORM synchronously, which is
    safe here (DJANGO_ALLOW_ASYNC_UNSAFE while it is open)."""

    def __init__(self) -> None:
        self._playwright = None
        self._instance = None

    def get(self):  # type: ignore[no-untyped-def]
        if self._instance is None or not self._instance.is_connected():
            from playwright.sync_api import sync_playwright

            self.close()
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
            self._playwright = sync_playwright().start()
            self._instance = self._playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS
            )
        return self._instance

    def close(self) -> None:
        if self._playwright is None:
            return
        try:
            if self._instance is not None and self._instance.is_connected():
                self._instance.close()
        finally:
            self._playwright.stop()
            self._playwright = self._instance = None
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


CHROMIUM_SESSION = SessionChromium()


@pytest.fixture()
def browser() -> Iterator[PatientBrowser]:
    """The session's Chromium, with fresh contexts for this test."""
    patient = PatientBrowser(CHROMIUM_SESSION.get())
    yield patient
    patient.close_contexts()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if "browser" not in getattr(item, "fixturenames", ()):
        CHROMIUM_SESSION.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    CHROMIUM_SESSION.close()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    run_isolation.mark(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    run_isolation.check_grouped(session)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(run_isolation.BrowsersLast(), "browsers-last")
    run_isolation.interrupt_on_signals()


@pytest.fixture()
def admin_credentials(transactional_db) -> tuple[str, str]:
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("alice", "alice@example.com", "alice-password-1")
    return "alice", "alice-password-1"


def wait_js(page, expression: str, timeout: float = BROWSER_WAIT_MS) -> None:
    """Wait until a JS expression is true. Playwright's wait_for_function evaluates with
    eval(), which the dashboard's Content-Security-Policy (rightly) blocks; page.evaluate
    goes through the DevTools protocol and is not subject to it. `timeout` (ms) is only an
    upper bound that keeps a broken run from hanging: callers leave it at the default."""
    import time

    from playwright.sync_api import Error as PlaywrightError

    deadline = time.monotonic() + timeout / 1000
    last_error = ""
    while True:
        try:
            if page.evaluate(f"() => Boolean({expression})"):
                return
        except PlaywrightError as exc:
            # Not yet: an element the expression reads is not drawn yet (a Plotly chart
            # has no `data` before its first draw), or the page is navigating.
            last_error = f" (last error: {exc.message.splitlines()[0]})"
        if time.monotonic() > deadline:
            raise AssertionError(
                f"still false after {timeout / 1000:.0f} s: {expression}{last_error}"
            )
        page.wait_for_timeout(100)


def login(page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
