"""Celery side of the benchmark queue: the one task, and the watchdog thread in each worker.

Celery choices (for the README):
- One task, `jobs.run` (`jobs.lifecycle.run_task`, sent with the kind's name and the
  job's id), for every kind of job: sweeps, config searches, rollout targets. Its time limits are the job kind's, passed with
  `apply_async(soft_time_limit=..., time_limit=...)`; the soft limit ends the job as
  failed with its partial results kept.
- Routing (`jobs.queues`): each Triton server has a queue, `triton.<name>`; a job
  goes there when a live worker consumes it (one started on the server's GPU host with
  `-Q triton.<name>`), else to the default queue, and records where and why; a server
  with `require_local_worker` holds its jobs until such a worker appears.
- `acks_late` + `reject_on_worker_lost` + prefetch 1 (project settings): a job's message is
  acknowledged when the task ends; a task whose worker died is not silently lost.
- The task never waits for the server: when another job holds the server's slot it
  returns at once, and the job that finishes dispatches the next queued one (the
  watchdog re-dispatches a queued job whose task went missing). So a queued job never
  occupies a worker process.
- Redelivery is harmless: the claim is a conditional UPDATE (QUEUED -> RUNNING), so a
  second copy of the task, or one redelivered after the job was marked interrupted,
  does nothing. Resuming an interrupted job is a user decision ("Resume").
- A sweep with load hosts also sends `profiler_app.load_agent` tasks, one per extra host,
  to its own queue (`load_agents`): internal, they take only the job id.
- Cancel is a database flag the running job polls; never `revoke(terminate=True)`,
  which would kill the process without cleaning up its load workers.
"""

from __future__ import annotations

from celery.signals import worker_ready, worker_shutdown

from . import watchdog
from .jobs import run_job_task
from .load_agents import load_agent_task

__all__ = ["load_agent_task", "run_job_task"]


@worker_ready.connect
def start_watchdog(**_: object) -> None:
    watchdog.start_in_background()


@worker_shutdown.connect
def stop_watchdog(**_: object) -> None:
    watchdog.stop_background()
