"""Load agents: the Celery side of a sweep's load hosts (`engine.remote`, `engine.agent`).

A sweep with `load_hosts` N > 1 runs its job as usual (`jobs`: one task, one job per
server at a time); the worker that runs it is host 0, the coordinator. For each run of the
engine (one per round) `agents_for` opens a session in Redis and sends N - 1
`profiler_app.load_agent` tasks to the queue the job's own task came from (its delivery
info), so that agents follow jobs wherever they are routed. It waits for them to join at
most LOAD_AGENT_JOIN_TIMEOUT_S (settings), then ends the session whatever happened: the
agents stop their workers, the keys are deleted, and the tasks that never joined are
revoked (and would exit at once anyway: their job no longer runs).

An agent is internal: its task takes only the job id and reads the sweep's stored
parameters, so nothing a user typed reaches it but through `params.from_flags`. A job that
is not RUNNING (finished, cancelled, interrupted) makes it exit at once, and while it runs
a thread re-reads the state every JOB_POLL_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

from celery import current_task, shared_task
from django.conf import settings
from django.db import connections

from registry.triton_clients import connection

from . import jobs
from .engine import agent, agent_link, remote
from .models import Sweep
from .params import SweepError, SweepParams
from .sweep_plan import join_timeout_s, params_of, time_limits

log = logging.getLogger(__name__)

JOB_POLL_S = 2.0
DEFAULT_QUEUE = "celery"


def current_queue() -> str:
    """The queue the running task came from (the default queue outside a task)."""
    request = getattr(current_task, "request", None)
    info = getattr(request, "delivery_info", None) or {}
    if info.get("routing_key"):
        return str(info["routing_key"])
    from dashboard.celery_app import app

    return str(app.conf.task_default_queue or DEFAULT_QUEUE)


def host_name() -> str:
    """This host's name in a sweep's `load_hosts`: the Celery node, else the machine's."""
    request = getattr(current_task, "request", None)
    return str(getattr(request, "hostname", None) or socket.gethostname())


@contextlib.contextmanager
def agents_for(sweep: Sweep, params: SweepParams) -> Iterator[remote.RemoteHosts | None]:
    """The load agents of one run of the engine (None for a one-host sweep)."""
    if params.load_hosts <= 1:
        yield None
        return
    queue = current_queue()
    hosts = remote.RemoteHosts(
        settings.REDIS_URL,
        sweep.pk,
        params.load_hosts,
        name=host_name(),
        queue=queue,
        join_timeout_s=join_timeout_s(),
    )
    sent: list[str] = []
    try:
        try:
            hosts.open()
        except Exception as exc:  # noqa: BLE001 - Redis down: the sweep fails, saying so
            raise SweepError(f"the load agents' Redis does not answer: {exc}") from None
        soft, hard = time_limits(params)  # an agent lives as long as its sweep may
        for _ in range(hosts.wanted):
            try:
                task = load_agent_task.apply_async(
                    args=[sweep.pk], queue=queue, soft_time_limit=soft, time_limit=hard
                )
            except Exception as exc:  # noqa: BLE001 - any broker failure
                raise SweepError(f"the load agents could not be queued: {exc}") from None
            sent.append(task.id)
        yield hosts
    finally:
        hosts.close()
        _revoke(set(sent) - hosts.joined_tasks())


def _revoke(task_ids: set[str]) -> None:
    """Agents that never joined: discarded where a worker still holds them queued."""
    if not task_ids:
        return
    from dashboard.celery_app import app

    try:
        app.control.revoke(sorted(task_ids))
    except Exception as exc:  # noqa: BLE001 - they exit at once anyway (job not running)
        log.warning("revoking load agents %s: %s", sorted(task_ids), exc)


class _JobWatch(threading.Thread):
    """Re-reads the job's state every JOB_POLL_S: `stopped` once it no longer runs."""

    def __init__(self, job_id: int) -> None:
        super().__init__(name=f"load-agent-{job_id}-watch", daemon=True)
        self.job_id = job_id
        self.stopped = False
        self._done = threading.Event()

    def run(self) -> None:
        try:
            while not self._done.wait(JOB_POLL_S):
                try:
                    running = Sweep.objects.filter(
                        pk=self.job_id, state=Sweep.State.RUNNING
                    ).exists()
                except Exception as exc:  # noqa: BLE001 - a locked DB must not end the agent
                    log.warning("load agent of #%s: %s", self.job_id, exc)
                    continue
                if not running:
                    self.stopped = True
                    return
        finally:
            connections.close_all()

    def stop(self) -> None:
        self._done.set()
        self.join(5)


@shared_task(name="profiler_app.load_agent", bind=True, ignore_result=True)
def load_agent_task(self: Any, job_id: int) -> str:
    """One load agent of a running sweep (see the module's docstring); returns how it
    ended. Acknowledged when it ends, as jobs are (so a worker running an agent reserves
    no other task); a redelivered one finds every seat taken, or its job ended."""
    job = Sweep.objects.filter(
        pk=job_id, kind=Sweep.Kind.SWEEP, state=Sweep.State.RUNNING, engine=Sweep.Engine.BUILTIN
    ).first()
    if job is None:
        return "the sweep is not running"
    params = params_of(job)
    if params.load_hosts <= 1:
        return "the sweep has one load host"
    link = agent_link.AgentLink.take_seat(settings.REDIS_URL, job_id, params.load_hosts)
    if link is None:
        return "no seat: the sweep's load hosts are complete or it ended"
    watch = _JobWatch(job_id)
    watch.start()
    try:
        return asyncio.run(
            agent.serve(
                params,
                connection(jobs.server_of(job), params.protocol),
                link,
                host=str(self.request.hostname or socket.gethostname()),
                task=str(self.request.id or ""),
                should_stop=lambda: watch.stopped,
            )
        )
    finally:
        watch.stop()
        link.leave()
        connections.close_all()
