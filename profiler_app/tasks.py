"""Celery side of perf sweeps: one thin task, and the watchdog thread in each worker.

Celery choices (for the README):
- `acks_late` + `reject_on_worker_lost` + prefetch 1 (project settings): a sweep's message is
  acknowledged when the task ends; a task whose worker died is not silently lost.
- The task never waits for the server: when another sweep holds the server's slot it
  returns at once, and the sweep that finishes dispatches the next queued one (the
  watchdog re-dispatches a queued sweep whose task went missing). So a queued sweep never
  occupies a worker process.
- Redelivery is harmless: the claim is a conditional UPDATE (QUEUED -> RUNNING), so a
  second copy of the task, or one redelivered after the sweep was marked interrupted,
  does nothing. Resuming an interrupted sweep is a user decision ("Resume").
- Time limits are per sweep (`sweeps.time_limits`: levels x max windows x window length,
  plus margins), passed with `apply_async(soft_time_limit=..., time_limit=...)`; the soft
  limit ends the sweep as failed with its partial results kept.
- Cancel is a database flag the running sweep polls; never `revoke(terminate=True)`,
  which would kill the process without cleaning up its load workers.
"""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown

from . import sweeps, watchdog
from .search import runner as search_runner


@shared_task(name="profiler_app.run_sweep", ignore_result=True)
def run_sweep_task(sweep_id: int) -> str:
    """Claim the sweep's server and run the sweep; 'waiting' when the server is busy."""
    if search_runner.is_carrier(sweep_id):  # a config search: its own task and time limits
        return "search dispatched" if search_runner.dispatch(sweep_id) else "not queued"
    if not sweeps.claim(sweep_id):
        return "waiting"
    return sweeps.execute(sweep_id)


@shared_task(name="profiler_app.run_search", ignore_result=True)
def run_search_task(sweep_id: int) -> str:
    """Claim the server for a config search (its carrier sweep) and run the search."""
    if not sweeps.claim(sweep_id):
        return "waiting"
    return search_runner.execute(sweep_id)


@worker_ready.connect
def start_watchdog(**_: object) -> None:
    watchdog.start_in_background()


@worker_shutdown.connect
def stop_watchdog(**_: object) -> None:
    watchdog.stop_background()
