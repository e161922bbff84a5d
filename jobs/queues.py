"""Which Celery queue a job goes to, and why: the load is generated next to its server.

Every Triton server has a queue of its own, ``triton.<name>`` (``queue_name``); a worker
started on the server's GPU host with ``celery -A dashboard worker -Q triton.<name>``
consumes it. A job (a sweep, a search, a rollout's target: `jobs.lifecycle`) goes to its server's
queue when a live worker consumes it, else to the default queue, saying so; a server that
requires its own worker (``require_local_worker``, an admin's choice) is never sent
elsewhere: its job waits, visibly, until such a worker appears (the watchdog routes it
again on each pass) or it is cancelled. ``queue_for`` is the one decision: the jobs'
dispatch and a distributed sweep's load agents both ask it. The default queue is no
detour for a server beside the dashboard's workers (``beside_the_workers``: `make run`'s
Tritons), so its note then just names the queue and its workers.

Who consumes what comes from Celery's ``inspect().active_queues()``, a broadcast whose
replies are awaited for INSPECT_TIMEOUT_S. It is asked from one background thread at a time
and its answer kept FRESH_S seconds; a caller waits at most WAIT_S for it, whatever the
broker does (down, slow, retrying), so a web request never hangs on it. An answer that does
not come, or an error, counts as "no worker seen", with the reason in the note.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from triton_api.address import split_host_port


class Server(Protocol):
    """What routing reads of a Triton server (`registry.servers.Server`)."""

    @property
    def name(self) -> str: ...
    @property
    def require_local_worker(self) -> bool: ...
    @property
    def is_default(self) -> bool: ...
    @property
    def grpc_url(self) -> str: ...


QUEUE_PREFIX = "triton."
INSPECT_TIMEOUT_S = 1.0  # how long Celery collects the workers' replies
WAIT_S = 2.5  # the most a caller waits for an answer (the broadcast, plus connecting)
FRESH_S = 5.0  # an answer is reused this long
ABANDON_S = 30.0  # a question still unanswered after this long is given up: ask anew


def queue_name(server: str) -> str:
    """The server's own queue (server names are [a-z0-9-]: server_rules.NAME_RULE)."""
    return f"{QUEUE_PREFIX}{server}"


def default_queue() -> str:
    from dashboard.celery_app import app

    return str(app.conf.task_default_queue or "celery")


def start_command(queue: str) -> str:
    return f"celery -A dashboard worker -Q {queue}"


@dataclass(frozen=True)
class Consumers:
    """Which workers consume which queue, as the workers last answered."""

    queues: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    error: str = ""  # why the answer is unknown; "" when the workers were asked

    def of(self, queue: str) -> tuple[str, ...]:
        return tuple(self.queues.get(queue, ()))


@dataclass(frozen=True)
class Route:
    """Where a job of ``server`` goes now: ``queue`` ("" = held, waiting for a worker on
    the server's own queue), the workers consuming it, and the reason in words."""

    server: str
    queue: str
    note: str
    workers: tuple[str, ...] = ()

    @property
    def waiting(self) -> bool:
        return not self.queue

    def as_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "queue": self.queue,
            "note": self.note,
            "workers": list(self.workers),
            "waiting": self.waiting,
        }


def queue_for(server: Server, consumers: Consumers | None = None) -> Route:
    """The one routing rule (see the module's docstring)."""
    own = queue_name(server.name)
    seen = consumers if consumers is not None else current()
    workers = seen.of(own)
    if workers:
        return Route(server.name, own, f"sent to {own}, consumed by {', '.join(workers)}", workers)
    why = seen.error or "none is consuming it"
    if server.require_local_worker:
        return Route(
            server.name,
            "",
            f"waiting for a worker on queue {own}: {why}; start one on the GPU host with "
            f"`{start_command(own)}`",
        )
    fallback = default_queue()
    spare = seen.of(fallback)
    if spare and beside_the_workers(server):
        # Its load would come from its own host anyway: nothing to warn about.
        note = f"sent to the default queue {fallback}, consumed by {', '.join(spare)}"
        return Route(server.name, fallback, note, spare)
    reason = f"no worker consumes {own}" if not seen.error else f"{own}: {seen.error}"
    note = (
        f"{reason}: sent to the default queue, so the load comes from the dashboard's worker host"
    )
    if not seen.error and not spare:
        note += f" (no worker consumes {fallback} either: the job waits for one)"
    return Route(server.name, fallback, note, spare)


def beside_the_workers(server: Server) -> bool:
    """Whether the dashboard's own workers run on ``server``'s host, so that the default
    queue generates its load next to it: ``default`` (the dashboard's own Triton: `make
    run`'s, docker-compose's ``triton`` beside the worker) or a server at a loopback address
    (a worker can reach that only on its own host: `make run TRITONS=N`'s local-N)."""
    if server.is_default:
        return True
    try:
        host = split_host_port(server.grpc_url)[0]
    except ValueError:  # a row saved around the checks: no host of ours
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: not resolved here (a page may ask this)
        return False


# --- asking the workers -------------------------------------------------------------------


def ask_workers() -> dict[str, tuple[str, ...]]:
    """Queue -> the names of the workers consuming it, from Celery's inspect (blocking up
    to INSPECT_TIMEOUT_S, more if the broker is slow: callers go through `current`)."""
    from dashboard.celery_app import app

    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1)
        inspect = app.control.inspect(timeout=INSPECT_TIMEOUT_S, connection=connection)
        reply = inspect.active_queues() or {}
    found: dict[str, list[str]] = {}
    for worker, queues in reply.items():
        for item in queues or []:
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and name:
                found.setdefault(name, []).append(str(worker))
    return {queue: tuple(sorted(workers)) for queue, workers in found.items()}


class _Question:
    """One inspect in flight: its answer once it comes."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: Consumers | None = None
        self.asked_at = time.monotonic()


class _State:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.value: Consumers | None = None
        self.at = 0.0
        self.pending: _Question | None = None


_lock = threading.Lock()
_state = _State()


def _fresh_state() -> _State:
    """The cache of this process: a forked worker child starts with none (the thread that
    was asking in its parent does not exist here)."""
    global _state
    if _state.pid != os.getpid():
        _state = _State()
    return _state


def _ask(question: _Question, state: _State) -> None:
    try:
        seen = Consumers(ask_workers())
    except Exception as exc:  # noqa: BLE001 - any failure is "no worker seen", said why
        seen = Consumers({}, f"the workers could not be asked ({type(exc).__name__}: {exc})")
    question.answer = seen
    with _lock:
        if state.pending is question:  # not forgotten nor given up on since it was asked
            state.value, state.at, state.pending = seen, time.monotonic(), None
    question.done.set()


def current(*, wait: bool = True) -> Consumers:
    """The workers' last answer when fresh, else a new one, waited for at most WAIT_S (with
    ``wait`` False: whatever is known now, asking in the background)."""
    with _lock:
        state = _fresh_state()
        if state.value is not None and time.monotonic() - state.at < FRESH_S:
            return state.value
        question = state.pending
        if question is None or time.monotonic() - question.asked_at > ABANDON_S:
            question = state.pending = _Question()
            threading.Thread(
                target=_ask, args=(question, state), name="celery-inspect", daemon=True
            ).start()
        known = state.value
    if not wait:
        return known or Consumers({}, "the workers have not answered yet")
    if question.done.wait(WAIT_S) and question.answer is not None:
        return question.answer
    silent = Consumers({}, f"the workers did not answer within {WAIT_S:g} s")
    with _lock:
        if state.pending is question:  # still asking: remember the silence for a while
            state.value, state.at = silent, time.monotonic()
    return silent


def forget() -> None:
    """Drop the cached answer and any question in flight (tests; a caller that knows the
    workers changed)."""
    with _lock:
        state = _fresh_state()
        state.value, state.at, state.pending = None, 0.0, None


# --- the worker that claims a job -----------------------------------------------------------


def claimed_by(request: Any) -> dict[str, str]:
    """What a job records of the task that claims it: the Celery worker's name, its host,
    and the queue the task was delivered from."""
    info = getattr(request, "delivery_info", None) or {}
    where = {
        "worker": str(getattr(request, "hostname", "") or ""),
        "worker_host": socket.gethostname(),
    }
    queue = info.get("routing_key") if isinstance(info, dict) else None
    if isinstance(queue, str) and queue:
        where["queue"] = queue
    return where


def in_process(command: str) -> dict[str, str]:
    """What a job records when a command runs it in its own process, through no queue."""
    return {
        "worker": f"{command} (pid {os.getpid()})",
        "worker_host": socket.gethostname(),
        "queue": "",
        "routing": f"run by {command} in its own process, through no queue",
    }
