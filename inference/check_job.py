"""One check run on one server, as a job of the one lifecycle (`jobs.lifecycle`): queued
on the server's queue, claimed by a worker near it, the role checked again, the request
sent, the answer compared; a failure says which output and by how much. The model page
hears each result (``check.result`` on the model's group)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.urls import reverse

from jobs import lifecycle
from jobs.lifecycle import Heartbeat, Outcome
from jobs.models import JobState
from jobs.queues import Route
from registry import servers
from registry.servers import UnknownServer, with_server
from repository_app import events
from repository_app.control import CONTROL_PERMISSION, NOT_PERMITTED
from team import audit

from . import checks
from .models import CheckRun


def result_json(run: CheckRun) -> dict[str, object]:
    return {
        "id": run.pk,
        "check": run.saved_check_id,
        "name": run.saved_check.name,
        "model": run.saved_check.model,
        "server": run.server,
        "state": run.state,
        "passed": run.passed,
        "worst": run.worst,
        "message": run.message or run.error,
        "trigger": run.trigger,
        "finished_at": lifecycle.iso(run.finished_at),
        # A failure offers the config before the last save, in the config history.
        "restore": {
            "number": run.restorable,
            "url": with_server(
                reverse("config_history", args=[run.saved_check.model])
                + f"#revision-{run.restorable}",
                run.server,
            ),
        }
        if run.passed is False and run.restorable
        else None,
    }


class CheckJob(lifecycle.BaseKind):
    name = checks.KIND
    noun = "check run"
    resume_hint = "runs the check again"
    model = CheckRun

    def rows(self) -> QuerySet[CheckRun]:
        return CheckRun.objects.all()

    def route(self, job: CheckRun) -> Route:
        return servers.job_route(job.server)

    def time_limits(self, job: CheckRun) -> tuple[int, int]:
        soft = int(settings.TRY_TIMEOUT_S) + 60
        return soft, soft + 30

    def run(self, job: CheckRun, heartbeat: Heartbeat) -> Outcome:
        return run_check(job)

    def ended(self, job: CheckRun, *, by_worker: bool) -> None:
        """Nothing waits on a check run's end (the page heard it through ``publish``)."""

    def publish(self, job: CheckRun) -> None:
        run = CheckRun.objects.select_related("saved_check").get(pk=job.pk)
        events.publish(
            events.model_group(run.server, run.saved_check.model), "check.result", result_json(run)
        )


KIND = lifecycle.register(CheckJob())


def _ended(run: CheckRun, passed: bool | None, worst: float | None, message: str) -> Outcome:
    CheckRun.objects.filter(pk=run.pk).update(passed=passed, worst=worst, message=message)
    return Outcome(
        JobState.SUCCEEDED if passed is not None else JobState.FAILED,
        "" if passed is not None else message,
    )


def run_check(job: CheckRun) -> Outcome:
    run = CheckRun.objects.select_related("saved_check").get(pk=job.pk)
    check = run.saved_check
    user = get_user_model().objects.filter(pk=run.user_id, is_active=True).first()

    def refuse(message: str, outcome: str = "failed") -> Outcome:
        audit.record(user or run.username, "check.run", model_name=check.model, server=run.server,
                     target=check.name, outcome=outcome, detail=message)  # fmt: skip
        return _ended(run, None, None, message)

    try:
        server = servers.get(run.server)
    except UnknownServer as exc:
        return refuse(f"{exc.message} (removed since the check was queued)")
    if user is None or not user.has_perm(CONTROL_PERMISSION, server):
        return refuse(NOT_PERMITTED.format(server=server.name) + " (checked when it ran)", "denied")
    verdict = checks.send_and_compare(
        server, check, settings.TRY_TIMEOUT_S,
        (settings.TRY_MAX_REQUEST_BYTES, settings.TRY_MAX_RESPONSE_BYTES),
    )  # fmt: skip
    audit.record(
        user, "check.run", model_name=check.model, server=server.name, target=check.name,
        outcome="ok" if verdict.passed else "failed",
        detail=f"{'passed' if verdict.passed else 'failed'} ({run.trigger}): {verdict.message}",
    )  # fmt: skip
    return _ended(run, verdict.passed, verdict.worst, verdict.message)
