from django.apps import AppConfig


class RepositoryAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "repository_app"
    verbose_name = "Model repository"

    def ready(self) -> None:
        from team import audit

        from . import (
            control_job,  # noqa: F401 - an action started by a page is a job
            events,
        )
        from .uploads import publish_job  # noqa: F401 - an upload's publish is a kind of job

        # Every audit event goes to the overview's activity feed (best effort).
        audit.recorded.connect(events.announce_activity, dispatch_uid="repository_app.activity")
