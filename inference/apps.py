from typing import Any

from django.apps import AppConfig


class InferenceConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "inference"
    verbose_name = "Try a model"

    def ready(self) -> None:
        from repository_app import control

        from . import (
            check_job,  # noqa: F401 - a check run is a kind of job
            trace_job,  # noqa: F401 - so is turning tracing on
        )

        control.served_changed.connect(_run_checks, dispatch_uid="inference.checks")


def _run_checks(sender: Any, *, server: Any, name: str, action: str, user_id: int | None,
                audit_target: str, **_: Any) -> None:  # fmt: skip
    """After a load or reload (a save & reload, a rollout's server, a page's action): the
    model's checks run on that server, as jobs, for the user who acted."""
    from django.contrib.auth import get_user_model

    from . import checks

    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    if user is not None:
        checks.queue_runs(server, name, user, audit_target or f"after {action}")
