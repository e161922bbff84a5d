"""Celery hooks of the repository app: the worker runs the one Triton poller."""

from celery.signals import worker_ready, worker_shutdown

from . import poller


@worker_ready.connect
def start_poller(**_: object) -> None:
    poller.start_in_background()


@worker_shutdown.connect
def stop_poller(**_: object) -> None:
    poller.stop_background()
